"""Calibrate the between-process-pair component of a CUDA kernel verdict's interval, and check it held out.

An A/A verdict (the reference's own code as the candidate) times the same code in two processes. Its
bootstrap interval comes from the rounds of one evaluation, all inside one pair of processes, so an
offset that belongs to the pair (kernel choices, allocation layout) is invisible to it: on the H200,
KernelBench A/A intervals excluded 1.0 in about half the problems, by up to 2.4%. This script
estimates the standard deviation of that per-pair offset on the log scale from committed A/A rows
(method of moments: the variance of log(speedup) across evaluations, less the mean squared standard
error each interval implies), then widens each interval of a held-out set of rows by it, as
``harness.stats.rounds_ratio`` does, and counts how many contain 1.0.

Calibration rows: every Level-1 A/A row with a measured ratio (the five that the since-fixed
timer-tampering defect rejected included: their timing stands) under the revisions before ``7489134``. Held out:
the Level-1 rows under ``7489134`` and ``724dfff`` and every Level-2 row (other problems, other
device calls). Each row is one evaluation, i.e. one pair of processes; a problem evaluated in two
calls contributes two pairs.

    python benchmarks/process_pair_calibration.py [--write benchmarks/results/kernelbench/process_pair_calibration.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from statistics import NormalDist
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "kernelbench"
CALIBRATION_REVS = ("16b2ff0", "e535436", "af303aa")
HELD_OUT_REVS = ("7489134", "724dfff")
Z = NormalDist().inv_cdf(0.975)


def _rows(name: str) -> list[dict[str, Any]]:
    path = RESULTS / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _aa(rows: list[dict[str, Any]], revs: tuple[str, ...] | None) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("kind") == "atb_eval" and r.get("ci") and r.get("speedup")
            and (revs is None or r.get("code_rev") in revs)]


def log_se(row: dict[str, Any]) -> float:
    """The standard error on the log scale that a row's 95% interval implies."""
    lo, hi = row["ci"]
    return (math.log(hi) - math.log(lo)) / (2 * Z)


def between_pair_sd(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Method-of-moments estimate of the per-pair offset's SD on the log scale."""
    logs = [math.log(r["speedup"]) for r in rows]
    total = statistics.pvariance(logs)
    within = statistics.fmean(log_se(r) ** 2 for r in rows)
    return {"n": len(rows), "mean_log": statistics.fmean(logs), "sd_log": math.sqrt(total),
            "mean_within_se": statistics.fmean(log_se(r) for r in rows),
            "between_sd": math.sqrt(max(0.0, total - within))}


def widened(row: dict[str, Any], sd: float) -> tuple[float, float]:
    """The row's interval with the component added, by the estimator's own function."""
    from harness.stats import RatioEstimate, with_process_pair
    from protocol import load_protocol

    est = with_process_pair(RatioEstimate(ratio=row["speedup"], ci_low=row["ci"][0], ci_high=row["ci"][1], n_pairs=1),
                            sd, load_protocol())
    return est.ci_low, est.ci_high


def coverage(rows: list[dict[str, Any]], sd: float) -> dict[str, Any]:
    misses = []
    for r in rows:
        lo, hi = widened(r, sd)
        if not lo <= 1.0 <= hi:
            misses.append({"problem": r["problem"], "code_rev": r.get("code_rev"), "speedup": r["speedup"],
                           "ci": r["ci"], "widened": [lo, hi]})
    return {"n": len(rows), "contain_1": len(rows) - len(misses), "misses": misses}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    l1 = _rows("level1_h200.jsonl") + _rows("level1_h200_call1_raw.jsonl") + _rows("sidebyside_h200.jsonl")
    cal = _aa(l1, CALIBRATION_REVS)
    held = {"level1_later_revisions": _aa(_rows("level1_h200.jsonl"), HELD_OUT_REVS),
            "level2": _aa(_rows("level2_h200.jsonl"), None)}
    est = between_pair_sd(cal)
    declared = math.ceil(est["between_sd"] * 1000) / 1000   # rounded up to 0.1%
    out: dict[str, Any] = {"calibration": est, "declared_log_sd": declared, "z": Z, "held_out": {}}
    for name, rows in {"calibration": cal, **held}.items():
        out["held_out"][name] = {"without": coverage(rows, 0.0), "with": coverage(rows, declared),
                                 "estimate_on_these_rows": between_pair_sd(rows)["between_sd"]}
    for name, c in out["held_out"].items():
        print(f"{name}: CI contains 1.0 in {c['without']['contain_1']}/{c['without']['n']} as measured, "
              f"{c['with']['contain_1']}/{c['with']['n']} with the component {declared:.3f}; "
              f"these rows alone estimate {c['estimate_on_these_rows']:.4f}")
    print(f"calibration: n={est['n']}, SD of log speedup {est['sd_log']:.4f}, mean within-interval SE "
          f"{est['mean_within_se']:.4f}, between-pair SD {est['between_sd']:.4f} -> declared {declared:.3f}")
    if args.write:
        args.write.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
