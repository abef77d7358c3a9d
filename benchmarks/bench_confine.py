"""What confining the measuring children costs: ``evaluate_candidate`` wall time, confined vs unconfined.

Why: issue 14 asks for candidate code to run confined (bwrap: user, PID, network and IPC namespaces,
a read-only view, a seccomp filter) at no more than +10% per evaluation. Both modes run in this one
process, alternating (confined first in even rounds, unconfined first in odd ones), over the same
tasks, each round in a fresh measurement session, so drift in the machine's load hits both alike.
Unconfined is forced the only way the harness allows: its own environment's ``ATB_BWRAP`` pointing at
a missing binary (the verdict then records ``unconfined:...``).

Reported: per mode, the median evaluation wall time (the session's opening, which starts the
reference and start workers, is reported apart), the median per-pair ratio confined/unconfined, and
each evaluation's confinement descriptor as the harness recorded it.

Usage: ``python benchmarks/bench_confine.py [--rounds 3] [--tasks relu,gelu] [--device cpu]
[--out benchmarks/results/confine_cpu.json]``; ``--render FILE.json`` rewrites the markdown only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.verdict.evaluate import evaluate_candidate  # noqa: E402
from harness.measure.runner import _confine  # noqa: E402
from harness.measure.session import open_measurement_session  # noqa: E402
from harness.store import open_store  # noqa: E402
from harness.tasks import load_task  # noqa: E402
from protocol import load_protocol  # noqa: E402

MODES = ("confined", "unconfined")


def _load_average() -> str | None:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return None


def _set_mode(mode: str, real_bwrap: str | None) -> None:
    if mode == "unconfined":
        os.environ["ATB_BWRAP"] = "/nonexistent/bwrap-disabled-by-bench_confine"
    elif real_bwrap:
        os.environ["ATB_BWRAP"] = real_bwrap
    else:
        os.environ.pop("ATB_BWRAP", None)


def _descriptors(ctx: Any) -> list[str]:
    return sorted({w.confinement for w in (ctx._reference, ctx._start, ctx._spare) if w is not None})


def micro(rounds: int, real_bwrap: str | None) -> dict[str, Any]:
    """Spawn-to-ready and first ``load`` of one candidate worker, per mode, alternating: the part of
    an evaluation that confinement changes directly (bwrap's setup, namespaces, the filter)."""
    from harness.measure.runner import Worker
    from harness.measure.session import worker_config

    cfg = worker_config("cpu", load_protocol())
    task = load_task("relu")
    out: dict[str, dict[str, list[float]]] = {m: {"ready_s": [], "load_s": []} for m in MODES}
    with tempfile.TemporaryDirectory(prefix="atb-measure-bench-") as tmp:
        cand = Path(tmp) / "atb_candidate_bench.py"
        cand.write_text(task.start_source())
        for rnd in range(rounds):
            for mode in (MODES if rnd % 2 == 0 else MODES[::-1]):
                _set_mode(mode, real_bwrap)
                t0 = time.perf_counter()
                w = Worker("candidate", cfg, Path(tmp), 120.0).start()
                try:
                    w.wait_ready()
                    t1 = time.perf_counter()
                    w.request({"op": "load", "task_path": str(task.path), "task_module": "atb_task_relu",
                               "init_seed": 1, "candidate_path": str(cand), "candidate_module": "atb_candidate_bench"})
                    t2 = time.perf_counter()
                finally:
                    w.close()
                out[mode]["ready_s"].append(t1 - t0)
                out[mode]["load_s"].append(t2 - t1)
    return {m: {k: {"median": statistics.median(v), "all": v} for k, v in d.items()} for m, d in out.items()}


def render_markdown(data: dict[str, Any]) -> str:
    s = data["summary"]
    lines = [
        "# Cost of confining the measuring children",
        "",
        f"Device `{data['device']}`, {data['rounds']} rounds x {len(data['tasks'])} tasks ({', '.join(data['tasks'])}),",
        f"modes alternating within each round; load average before/after: {data['load_before']} / {data['load_after']}.",
        "Taken on a shared 2-core machine while other work ran: read the ratio, not the absolute times.",
        "",
        "| mode | confinement recorded | median eval wall (s) | median session open (s) |",
        "|---|---|---|---|",
    ]
    for mode in MODES:
        m = s[mode]
        lines.append(f"| {mode} | `{'; '.join(m['descriptors'])}` | {m['median_eval_s']:.2f} | {m['median_open_s']:.2f} |")
    lines += [
        "",
        f"Median per-pair ratio of evaluation wall time, confined / unconfined: **{s['median_pair_ratio']:.3f}** "
        f"({(s['median_pair_ratio'] - 1) * 100:+.1f}%; target at most +10%), over {s['pairs']} pairs; "
        f"ratio of medians {s['ratio_of_medians']:.3f}.",
        f"Session opening (three workers started), confined / unconfined: {s['open_ratio']:.3f}.",
        "",
        "Per evaluation: `benchmarks/results/confine_cpu.json` (`evals`).",
    ]
    for run in data.get("earlier_runs", []):
        lines.append(f"- earlier run ({run['when']}, load {run['load_before']} / {run['load_after']}): median pair ratio "
                     f"{run['median_pair_ratio']:.3f} over {run['pairs']} pairs, ratio of medians "
                     f"{run['ratio_of_medians']:.3f}")
    if data.get("micro"):
        mi = data["micro"]
        lines += ["", f"One candidate worker, spawn to ready and its first `load` ({data['micro_rounds']} alternating "
                  "rounds, medians):", "", "| mode | spawn to ready (s) | load (s) |", "|---|---|---|"]
        for mode in MODES:
            lines.append(f"| {mode} | {mi[mode]['ready_s']['median']:.3f} | {mi[mode]['load_s']['median']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", default="relu,gelu,scale_shift")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "confine_cpu.json"))
    ap.add_argument("--render", default=None)
    ap.add_argument("--micro", type=int, default=6, help="rounds of the spawn/load micro-benchmark (0: skip)")
    args = ap.parse_args()
    if args.render:
        data = json.loads(Path(args.render).read_text())
        Path(args.render).with_suffix(".md").write_text(render_markdown(data))
        return 0
    real_bwrap = os.environ.get("ATB_BWRAP")
    proto = load_protocol()
    tasks = [t for t in args.tasks.split(",") if t]
    evals: list[dict[str, Any]] = []
    opens: dict[str, list[float]] = {m: [] for m in MODES}
    descs: dict[str, set[str]] = {m: set() for m in MODES}
    load_before = _load_average()
    with tempfile.TemporaryDirectory(prefix="atb-bench-confine-") as tmp:
        store = open_store(Path(tmp) / "bench.sqlite")
        for rnd in range(args.rounds):
            order = MODES if rnd % 2 == 0 else MODES[::-1]
            for mode in order:
                _set_mode(mode, real_bwrap)
                _confine._PROBED.clear()
                t0 = time.perf_counter()
                with open_measurement_session(store, args.device, proto, note=f"bench_confine {mode}") as ctx:
                    opens[mode].append(time.perf_counter() - t0)
                    for name in tasks:
                        task = load_task(name)
                        t1 = time.perf_counter()
                        res = evaluate_candidate(task, task.start_source(), store=store, session=ctx, protocol=proto)
                        wall = time.perf_counter() - t1
                        d = _descriptors(ctx)
                        descs[mode].update(d)
                        evals.append({"round": rnd, "mode": mode, "task": name, "wall_s": wall,
                                      "verdict": res.verdict, "speedup": res.speedup, "confinement": d,
                                      "phase_s": res.phase_s})
                        print(f"round {rnd} {mode:10s} {name:12s} {wall:6.2f} s  {res.verdict}  {d}", flush=True)
    micro_res = micro(args.micro, real_bwrap) if args.micro > 0 else None
    _set_mode("confined", real_bwrap)
    pairs = []
    for rnd in range(args.rounds):
        for name in tasks:
            w = {e["mode"]: e["wall_s"] for e in evals if e["round"] == rnd and e["task"] == name}
            if len(w) == 2:
                pairs.append(w["confined"] / w["unconfined"])
    med = {m: statistics.median(e["wall_s"] for e in evals if e["mode"] == m) for m in MODES}
    summary = {m: {"median_eval_s": med[m], "median_open_s": statistics.median(opens[m]),
                   "descriptors": sorted(descs[m])} for m in MODES}
    summary.update(median_pair_ratio=statistics.median(pairs), pairs=len(pairs),
                   ratio_of_medians=med["confined"] / med["unconfined"],
                   open_ratio=statistics.median(opens["confined"]) / statistics.median(opens["unconfined"]))
    data = {"device": f"{args.device}:{platform.processor() or platform.machine()}", "rounds": args.rounds,
            "tasks": tasks, "load_before": load_before, "load_after": _load_average(),
            "python": sys.version.split()[0], "summary": summary, "evals": evals,
            "opens_s": opens, "micro": micro_res, "micro_rounds": args.micro}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    out.with_suffix(".md").write_text(render_markdown(data))
    print(render_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
