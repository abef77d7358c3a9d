"""Re-measure spread and harness overhead of ``evaluate_candidate`` on the native suite.

For every native task, the task's starting candidate is evaluated twice in one measurement session.
Reported per task: both speedups over eager (the starting candidates are eager-equivalent, so both
should sit near 1.0), their relative absolute deviation ``|r1 - r2| / (r1 + r2)`` (the deviation of
each from their mean, relative to the mean), the wall time of each evaluation, and the bare cost of
the timed repetitions inside it (the sum of every arm's timed regions); the overhead ratio is the
evaluation's wall time over that bare cost. The summary gives the median across tasks.

Usage: ``python benchmarks/bench_measure.py [--device cpu|cuda] [--out benchmarks/results/measure_cpu.json]``;
``--render FILE.json`` only rewrites the markdown summary beside an existing results file.
"""

from __future__ import annotations

import argparse
import json
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
from harness.measure.session import open_measurement_session  # noqa: E402
from harness.store import open_store  # noqa: E402
from harness.tasks import native_tasks  # noqa: E402
from protocol import load_protocol  # noqa: E402


def _load_average() -> str | None:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return None


def _bare_timed_ns(result: Any) -> float:
    ev = result.evidence
    if ev is None:
        return 0.0
    return float(sum(t.timed_total_ns for arm in (ev.candidate_timed, ev.baseline_timed, ev.start_timed) for t in arm))


def render_markdown(data: dict[str, Any]) -> str:
    """A short human summary of one results file."""
    s = data["summary"]
    dev = s["device"]
    where = dev.get("gpu_name") or dev.get("cpu_model")

    def f(x: Any, nd: int = 4) -> str:
        return "n/a" if x is None else f"{x:.{nd}f}"

    lines = [
        f"# Re-measure spread and harness overhead: {dev['backend']} ({where})", "",
        f"Protocol {s['protocol_version']} `{s['protocol_sha256'][:12]}`, device `{s['device_sha256'][:12]}`, "
        f"torch {dev['torch_version']}, {dev.get('torch_threads')} torch thread(s); {s['created_at']}."
        + (f" Host load average at start: {s['load_average']}." if s.get("load_average") else ""), "",
        "Each native task's starting candidate was evaluated twice in one session (speedup over eager; the",
        "starting candidates are eager-equivalent, so ~1.0 is expected). Deviation is |r1 - r2| / (r1 + r2).", "",
        f"- median re-measure deviation: **{f(s['median_rel_abs_deviation_pct'], 3)}%** "
        f"(max {f(s['max_rel_abs_deviation_pct'], 3)}%)",
        f"- median evaluation wall time {f(s['median_eval_wall_s'], 2)} s; bare timed repetitions "
        f"{f(s['median_bare_timed_s'], 3)} s; overhead ratio {f(s['median_overhead_ratio'], 1)}x",
        f"- verdicts: {s['verdicts']}", "",
        "| task | speedup 1 | speedup 2 | deviation % | method | wall s | bare s | verdicts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["rows"]:
        a, b = r["runs"]
        dv = None if r["rel_abs_deviation"] is None else 100 * r["rel_abs_deviation"]
        lines.append(f"| {r['task']} | {f(a['speedup'])} | {f(b['speedup'])} | {f(dv, 3)} | {a['timing_method']} | "
                     f"{a['eval_wall_s']:.2f} | {a['bare_timed_s']:.3f} | {a['verdict']}, {b['verdict']} |")
    rejected = [(r["task"], run["failed_gates"]) for r in data["rows"] for run in r["runs"] if run["verdict"] != "accepted"]
    if rejected:
        lines += ["", "Not accepted (failed gates): " + "; ".join(f"{t} {g}" for t, g in rejected)]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--render", type=Path, default=None, help="only write the .md for an existing results JSON")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--tasks", nargs="*", default=None, help="a subset of native task names")
    ap.add_argument("--db", type=Path, default=None, help="store path (default: a temporary file)")
    args = ap.parse_args()
    if args.render is not None:
        args.render.with_suffix(".md").write_text(render_markdown(json.loads(args.render.read_text())))
        return 0
    load = _load_average()
    out = args.out or ROOT / "benchmarks" / "results" / f"measure_{args.device}.json"
    proto = load_protocol()
    db = args.db or Path(tempfile.mkdtemp(prefix="atb-bench-")) / "bench.sqlite"
    store = open_store(db)
    tasks = [t for t in native_tasks() if not args.tasks or t.id in args.tasks]
    rows: list[dict[str, Any]] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".rows.jsonl")
    partial.write_text("")
    t_session = time.perf_counter()
    with open_measurement_session(store, args.device, proto, note="bench_measure") as ctx:
        session_s = time.perf_counter() - t_session
        for task in tasks:
            src = task.start_source()
            runs = []
            for _ in range(2):
                t0 = time.perf_counter()
                res = evaluate_candidate(task, src, store=store, session=ctx, protocol=proto)
                wall = time.perf_counter() - t0
                runs.append({"verdict": res.verdict, "reason": res.reason[:300], "speedup": res.speedup,
                             "speedup_ci": res.speedup_ci, "speedup_vs_start": res.speedup_vs_start,
                             "strawman": res.strawman, "roofline_fraction": res.roofline_fraction,
                             "timing_method": res.timing_method, "candidate_median_ns": res.candidate_median_ns,
                             "baseline_median_ns": res.baseline_median_ns, "eval_wall_s": wall,
                             "bare_timed_s": _bare_timed_ns(res) / 1e9,
                             "failed_gates": [g.name for g in res.gates if not g.passed]})
            r1, r2 = runs[0]["speedup"], runs[1]["speedup"]
            dev = abs(r1 - r2) / (r1 + r2) if r1 and r2 else None
            rows.append({"task": task.id, "runs": runs, "rel_abs_deviation": dev})
            with partial.open("a") as f:  # a run cut short keeps the tasks it finished
                f.write(json.dumps(rows[-1], sort_keys=True) + "\n")
            print(f"{task.id:<22} {r1 if r1 is None else round(r1, 4)} {r2 if r2 is None else round(r2, 4)} "
                  f"dev={dev if dev is None else round(100 * dev, 2)}% wall={runs[0]['eval_wall_s']:.2f}s/"
                  f"{runs[1]['eval_wall_s']:.2f}s bare={runs[0]['bare_timed_s']:.3f}s {runs[0]['verdict']}",
                  flush=True)
        fp = ctx.fingerprint
        ceilings = ctx.ceilings
    devs = [r["rel_abs_deviation"] for r in rows if r["rel_abs_deviation"] is not None]
    walls = [run["eval_wall_s"] for r in rows for run in r["runs"]]
    bares = [run["bare_timed_s"] for r in rows for run in r["runs"] if run["bare_timed_s"] > 0]
    overheads = [run["eval_wall_s"] / run["bare_timed_s"] for r in rows for run in r["runs"] if run["bare_timed_s"] > 0]
    summary = {
        "device": fp.model_dump(mode="json"), "device_sha256": fp.sha256,
        "ceilings": ceilings.model_dump() if ceilings else None,
        "protocol_version": proto.version, "protocol_sha256": proto.sha256,
        "host": platform.node(), "python": platform.python_version(),
        "session_open_s": session_s, "tasks": len(rows),
        "median_rel_abs_deviation_pct": 100 * statistics.median(devs) if devs else None,
        "max_rel_abs_deviation_pct": 100 * max(devs) if devs else None,
        "median_eval_wall_s": statistics.median(walls) if walls else None,
        "median_bare_timed_s": statistics.median(bares) if bares else None,
        "median_overhead_ratio": statistics.median(overheads) if overheads else None,
        "verdicts": {v: sum(1 for r in rows for run in r["runs"] if run["verdict"] == v)
                     for v in ("accepted", "rejected", "quarantined")},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": load,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"summary": summary, "rows": rows}
    out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    out.with_suffix(".md").write_text(render_markdown(data))
    partial.unlink()
    print(json.dumps(summary, indent=2, sort_keys=True))
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
