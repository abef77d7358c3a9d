"""Run-to-run spread of the engine trial: llama-server's default launch measured against itself.

Each repeat is one full engine trial (``evaluate_engine_candidate`` with the empty configuration, i.e.
default vs default, on fresh unpredictable paired seeds, both arms launched, warmed and measured
interleaved). The true ratio is 1.0, so the measured ratios show the trial's noise: they should straddle
1.0 and their intervals should contain it about as often as the confidence level says. Reported per
repeat: ratio, interval, both arms' mean requests/s, the trial's wall time; and the summary: mean,
standard deviation, min and max of the ratios, how many intervals contain 1.0, and the median interval
half-width relative to the ratio (compare with ``usability.ci_relative_halfwidth_max``).

Usage: ``python benchmarks/bench_engine.py [--task llamacpp-tiny] [--repeats 6]
[--out benchmarks/results/engine.json]`` (needs ``atb engine build llama-cpp`` first).
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

from harness.engines import LlamaServerAdapter, load_engine_task, render_config  # noqa: E402
from harness.measure.serving.session import open_engine_session  # noqa: E402
from harness.store import open_store  # noqa: E402
from harness.verdict.engine import evaluate_engine_candidate  # noqa: E402
from protocol import load_protocol  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="llamacpp-tiny")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "engine.json")
    ap.add_argument("--db", type=Path, default=None, help="store path (default: a temporary file)")
    args = ap.parse_args()
    proto = load_protocol()
    task = load_engine_task(args.task)
    db = args.db or Path(tempfile.mkdtemp(prefix="atb-bench-engine-")) / "atb.sqlite"
    store = open_store(db)
    session = open_engine_session(store, proto, note="bench_engine: default vs default")
    probe = LlamaServerAdapter().probe() if task.engine == "llama-server" else task.adapter().probe()
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for i in range(args.repeats):
        t0 = time.monotonic()
        res = evaluate_engine_candidate(task, render_config({}), store=store, session=session, protocol=proto,
                                        progress=lambda m: print(f"  [{i + 1}/{args.repeats}] {m}", file=sys.stderr))
        wall = time.monotonic() - t0
        rows.append({
            "repeat": i, "verdict": res.verdict, "verdict_id": res.verdict_id, "ratio": res.speedup,
            "ci": list(res.speedup_ci) if res.speedup_ci else None, "seeds": res.seeds,
            "baseline_rps": res.metrics["baseline"].get("request_throughput"),
            "candidate_rps": res.metrics["candidate"].get("request_throughput"),
            "baseline_output_tok_s": res.metrics["baseline"].get("output_token_throughput"),
            "failed_gates": [g.name for g in res.gates if not g.passed], "wall_s": round(wall, 2),
        })
        print(f"repeat {i + 1}: ratio {res.speedup} ci {res.speedup_ci} ({res.verdict}) in {wall:.1f} s",
              file=sys.stderr)
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    cis = [r["ci"] for r in rows if r["ci"] is not None]
    halfw = [(c[1] - c[0]) / 2 / r for c, r in zip(cis, ratios)]
    summary = {
        "repeats": len(rows), "ratios_measured": len(ratios),
        "ratio_mean": statistics.fmean(ratios) if ratios else None,
        "ratio_stdev": statistics.stdev(ratios) if len(ratios) > 1 else None,
        "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
        "straddles_one": bool(ratios) and min(ratios) <= 1.0 <= max(ratios),
        "cis_containing_one": sum(1 for c in cis if c[0] <= 1.0 <= c[1]),
        "median_ci_relative_halfwidth": statistics.median(halfw) if halfw else None,
        "usability_bar": proto.usability.ci_relative_halfwidth_max,
        "accepted": sum(1 for r in rows if r["verdict"] == "accepted"),
        "median_trial_wall_s": statistics.median(r["wall_s"] for r in rows),
    }
    machine: dict[str, Any] = {
        "platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
        "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
        "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "note": "shared machine: other processes may run during the trials (see loadavg)"}
    doc: dict[str, Any] = {
        "benchmark": "engine default-vs-default ratio spread", "task": task.id, "engine": task.engine,
        "engine_version": probe.version_text.splitlines()[0] if probe.version_text else "",
        "protocol": {"version": proto.version, "sha256": proto.sha256,
                     "paired_seeds": proto.seeds.paired_seeds, "requests_per_trial": proto.engine.requests_per_trial,
                     "reps_per_seed": proto.engine.reps_per_seed,
                     "warmup_requests": proto.engine.warmup_requests,
                     "confidence_level": proto.statistics.confidence_level},
        "machine": machine,
        "summary": summary, "repeats": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    md = args.out.with_suffix(".md")
    lines = [
        f"# Engine trial: default vs default ({task.id}, {doc['engine_version']})", "",
        f"{summary['repeats']} trials, each {proto.seeds.paired_seeds} paired seeds x "
        f"{proto.engine.requests_per_trial} requests x {proto.engine.reps_per_seed} repetitions per arm, "
        f"{proto.engine.warmup_requests} warm-up requests; "
        f"protocol {proto.version} ({proto.sha256[:12]}). The true ratio is 1.0. Machine: "
        f"{machine['cpu_count']} CPUs, load average {machine['loadavg_1_5_15_before'][0]} before and "
        f"{machine['loadavg_1_5_15_after'][0]} after (other work shared the machine).", "",
        "| repeat | ratio | 95% CI | baseline req/s | candidate req/s | verdict | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f"{r['ci'][0]:.3f}-{r['ci'][1]:.3f}" if r["ci"] else "-"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        lines.append(f"| {r['repeat']} | {ratio} | {ci} | {r['baseline_rps'] or 0:.2f} | {r['candidate_rps'] or 0:.2f} "
                     f"| {r['verdict']} | {r['wall_s']} |")
    if ratios:
        lines += ["", f"Ratios: mean {summary['ratio_mean']:.4f}, stdev {summary['ratio_stdev'] or 0:.4f}, "
                      f"range {summary['ratio_min']:.3f}-{summary['ratio_max']:.3f} "
                      f"(straddles 1.0: {summary['straddles_one']}); intervals containing 1.0: "
                      f"{summary['cis_containing_one']}/{len(cis)}; median CI half-width "
                      f"{summary['median_ci_relative_halfwidth']:.4f} of the ratio (usability bar "
                      f"{summary['usability_bar']})."]
    md.write_text("\n".join(lines) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
