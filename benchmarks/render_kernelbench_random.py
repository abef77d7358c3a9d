"""The per-arm table of KernelBench search campaigns (``benchmarks/kernelbench_random.py`` rows), in Markdown.

Why: the paper compares arms (the seeded random search over the module space, an LLM tuner) over the
same problems on the same budget. Per arm (tuner, seed, budget, device, level): the fraction of problems
with a correct iteration, the fraction with a usable iteration faster than eager (``fast_1``; and with
its whole interval above 1), the median best speedup over problems with a usable iteration and a
bootstrap interval for that median, the median number of usable iterations; then one row per problem.

Each problem's latest ``random_campaign`` row (by ``started_utc``) counts; a campaign child that broke
(``outcome: error``) counts as a problem without a correct or usable iteration, and is listed as such.

Usage::

    python benchmarks/render_kernelbench_random.py benchmarks/results/kernelbench/random_level1_h200.jsonl \\
        [--out benchmarks/results/kernelbench/random_level1_h200.md]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0          # fixed: the table is a function of the rows alone


def read_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """Each (arm, problem)'s latest ``random_campaign`` row from the files (torn lines ignored)."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("kind") != "random_campaign":
                continue
            key = (*arm_of(row), row.get("problem"))
            if key not in latest or str(row.get("started_utc", "")) >= str(latest[key].get("started_utc", "")):
                latest[key] = row
    return list(latest.values())


def arm_of(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row.get("tuner"), row.get("seed"), row.get("budget"), row.get("device"), row.get("level"))


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """A percentile-bootstrap interval for the median of ``values`` (None for fewer than two)."""
    if len(values) < 2:
        return None
    rng = random.Random(BOOTSTRAP_SEED)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP_RESAMPLES))
    lo = meds[int((1 - level) / 2 * BOOTSTRAP_RESAMPLES)]
    hi = meds[min(BOOTSTRAP_RESAMPLES - 1, int((1 + level) / 2 * BOOTSTRAP_RESAMPLES))]
    return lo, hi


def arm_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The arm's figures over its problems (see the module docstring)."""
    n = len(rows)
    ok = [r for r in rows if r.get("outcome") != "error"]
    bests = [float(r["best_speedup"]) for r in ok if r.get("best_speedup") is not None]
    usable = [int(r.get("usable_iterations") or 0) for r in rows]
    return {
        "problems": n, "errors": n - len(ok),
        "correct": sum(1 for r in ok if (r.get("correct_iterations") or 0) > 0) / n if n else None,
        "fast_1": sum(1 for r in ok if r.get("fast_1")) / n if n else None,
        "fast_1_ci": sum(1 for r in ok if r.get("fast_1_ci")) / n if n else None,
        "with_usable": len(bests),
        "median_best": statistics.median(bests) if bests else None,
        "median_best_ci": median_interval(bests),
        "median_usable": statistics.median(usable) if usable else None,
        "mean_correct_fraction": statistics.mean(float(r.get("correct_fraction") or 0.0) for r in ok) if ok else None,
        "code_revs": sorted({str(r.get("code_rev", "")) for r in rows}),
        "protocols": sorted({str(r.get("protocol_sha256", ""))[:12] for r in ok}),
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _x(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}x"


def _knobs(k: dict[str, Any] | None) -> str:
    if not k:
        return ""
    return ", ".join(f"{n}={v}" for n, v in k.items() if v not in (False, "off", "default") or n == "compile")


def render(rows: list[dict[str, Any]]) -> str:
    arms: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        arms.setdefault(arm_of(r), []).append(r)
    lines = ["## Search arms on KernelBench", "",
             "Per arm: problems; fraction with a correct iteration; fraction with a usable iteration faster than "
             "eager (fast_1) and with its interval above 1; median best speedup over problems with a usable "
             f"iteration, with a {BOOTSTRAP_RESAMPLES}-resample percentile-bootstrap 95% interval; median usable "
             "iterations per problem.", "",
             "| arm (tuner, seed, budget, device, level) | problems | correct | fast_1 | fast_1 (CI > 1) | "
             "median best speedup [95% CI] (n) | median usable iterations | code | protocol |",
             "|---|---|---|---|---|---|---|---|---|"]
    for arm, rs in sorted(arms.items(), key=lambda kv: str(kv[0])):
        s = arm_summary(rs)
        ci = s["median_best_ci"]
        best = f"{_x(s['median_best'])} [{_x(ci[0])}, {_x(ci[1])}]" if ci else _x(s["median_best"])
        err = f" ({s['errors']} broke)" if s["errors"] else ""
        lines.append(f"| {', '.join(str(a) for a in arm)} | {s['problems']}{err} | {_pct(s['correct'])} | "
                     f"{_pct(s['fast_1'])} | {_pct(s['fast_1_ci'])} | {best} ({s['with_usable']}) | "
                     f"{s['median_usable']} | {', '.join(s['code_revs'])} | {', '.join(s['protocols'])} |")
    for arm, rs in sorted(arms.items(), key=lambda kv: str(kv[0])):
        lines += ["", f"### {', '.join(str(a) for a in arm)}: per problem", "",
                  "| problem | outcome | usable / recorded | correct | best speedup [CI] | best point | fast_1 |",
                  "|---|---|---|---|---|---|---|"]
        for r in sorted(rs, key=lambda r: (r.get("id") or 0, str(r.get("problem")))):
            if r.get("outcome") == "error":
                lines.append(f"| {r.get('problem')} | error: {str(r.get('reason', ''))[:80]} | | | | | |")
                continue
            ci = r.get("best_ci")
            best = f"{_x(r.get('best_speedup'))} [{_x(ci[0])}, {_x(ci[1])}]" if ci else _x(r.get("best_speedup"))
            lines.append(f"| {r.get('problem')} | {r.get('outcome')} | {r.get('usable_iterations')} / "
                         f"{r.get('iterations_recorded')} | {_pct(r.get('correct_fraction'))} | {best} | "
                         f"{_knobs(r.get('best_knobs'))} | {'yes' if r.get('fast_1') else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, nargs="+", help="JSON-lines files written by kernelbench_random.py")
    p.add_argument("--out", type=Path, default=None, help="write the Markdown here (default: stdout)")
    args = p.parse_args(argv)
    text = render(read_rows(list(args.results)))
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
