"""The paper's table: search arms side by side on KernelBench problems, in Markdown.

Reads the rows of ``benchmarks/kernelbench_random.py`` (``kind: random_campaign``) and
``benchmarks/kernelbench_llm.py`` (``kind: llm_campaign``) from any number of files. An arm is (tuner,
seed, budget, device, level); each (arm, problem)'s latest row (by ``started_utc``) counts, so a problem
whose child broke and was retried is read from its retry. A row with ``outcome: error`` (a child that
broke without a result) is a problem without a correct or usable iteration, marked ``broke``.

Per arm: problems; usable iterations per problem out of the budget (median and mean: the paper's
"usable iterations per arm", random 3/20 against an LLM tuner's 11-14/20); the fraction of problems with
a correct iteration and the mean fraction of correct iterations; fast_1 (a usable iteration faster than
eager) and with its interval above 1; the median best speedup over problems with a usable iteration,
with a percentile-bootstrap interval; for a model arm, its truncated calls out of its model calls and the
campaigns the protocol set aside for truncation (``infrastructure_defect``). Then one row per problem,
the arms side by side: usable / budget, best speedup [interval], correct fraction (and, for a model
arm, truncated / model calls).

Usage::

    python benchmarks/render_kernelbench_arms.py RANDOM.jsonl LLM.jsonl [--out TABLE.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from render_kernelbench_random import BOOTSTRAP_RESAMPLES, _pct, _x, arm_of, arm_summary  # noqa: E402

KINDS = ("random_campaign", "llm_campaign")


def read_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """Each (arm, problem)'s latest campaign row from the files (torn lines ignored)."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("kind") not in KINDS:
                continue
            key = (*arm_of(row), row.get("problem"))
            if key not in latest or str(row.get("started_utc", "")) >= str(latest[key].get("started_utc", "")):
                latest[key] = row
    return list(latest.values())


def _is_model_arm(rows: list[dict[str, Any]]) -> bool:
    return any(r.get("kind") == "llm_campaign" for r in rows)


def arm_label(arm: tuple[Any, ...]) -> str:
    tuner, seed, budget, device, level = arm
    return f"{tuner} (seed {seed}, budget {budget}, {device}, level {level})"


def model_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r.get("outcome") != "error"]
    calls = sum(int(r.get("model_calls") or 0) for r in ok)
    truncated = sum(int(r.get("truncated_calls") or 0) for r in ok)
    return {"model_calls": calls, "truncated_calls": truncated,
            "set_aside": sum(1 for r in ok if r.get("outcome") == "infrastructure_defect"),
            "models": sorted({f"{(r.get('model') or {}).get('model')} gguf {str((r.get('model') or {}).get('gguf_sha256'))[:12]}"
                              for r in ok if r.get("model")})}


def _cell(r: dict[str, Any] | None, model: bool) -> list[str]:
    if r is None:
        return ["–", "–", "–"] + (["–"] if model else [])
    if r.get("outcome") == "error":
        return [f"0 / {r.get('budget')} (broke)", "–", "–"] + (["–"] if model else [])
    ci = r.get("best_ci")
    best = f"{_x(r.get('best_speedup'))} [{_x(ci[0])}, {_x(ci[1])}]" if ci else _x(r.get("best_speedup"))
    usable = f"{r.get('usable_iterations')} / {r.get('budget')}"
    if r.get("iterations_recorded") != r.get("budget"):
        usable += f" ({r.get('iterations_recorded')} run)"
    if r.get("outcome") == "infrastructure_defect":
        usable += " (set aside: truncated)"
    cells = [usable, best, _pct(r.get("correct_fraction"))]
    if model:
        cells.append(f"{r.get('truncated_calls')} / {r.get('model_calls')}")
    return cells


def render(rows: list[dict[str, Any]]) -> str:
    arms: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        arms.setdefault(arm_of(r), []).append(r)
    order = sorted(arms, key=lambda a: (a[0] != "random", str(a)))
    lines = ["## Search arms side by side on KernelBench", "",
             "Per arm: usable iterations per problem out of the budget (median, mean); problems with a correct "
             "iteration; mean fraction of correct iterations; fast_1 (a usable iteration faster than eager) and "
             "with its interval above 1; median best speedup over problems with a usable iteration, with a "
             f"{BOOTSTRAP_RESAMPLES}-resample percentile-bootstrap 95% interval; for a model arm, truncated "
             "model calls and campaigns the protocol set aside as truncated.", "",
             "| arm | problems | usable / budget: median (mean) | correct | mean correct fraction | fast_1 | "
             "fast_1 (CI > 1) | median best speedup [95% CI] (n) | model: truncated / calls, set aside | code |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for arm in order:
        rs = arms[arm]
        s = arm_summary(rs)
        usable = [int(r.get("usable_iterations") or 0) for r in rs]
        ci = s["median_best_ci"]
        best = f"{_x(s['median_best'])} [{_x(ci[0])}, {_x(ci[1])}]" if ci else _x(s["median_best"])
        broke = f" ({s['errors']} broke)" if s["errors"] else ""
        model = "–"
        if _is_model_arm(rs):
            m = model_summary(rs)
            model = f"{m['truncated_calls']} / {m['model_calls']}, {m['set_aside']} set aside"
        lines.append(f"| {arm_label(arm)} | {s['problems']}{broke} | {s['median_usable']:g} / {arm[2]} "
                     f"({statistics.mean(usable):.1f}) | {_pct(s['correct'])} | {_pct(s['mean_correct_fraction'])} | "
                     f"{_pct(s['fast_1'])} | {_pct(s['fast_1_ci'])} | {best} ({s['with_usable']}) | {model} | "
                     f"{', '.join(x for x in s['code_revs'] if x) or '–'} |")
    problems = sorted({(r.get("id") or 0, str(r.get("problem"))) for r in rows})
    header = ["problem"]
    rule = ["---"]
    for arm in order:
        model = _is_model_arm(arms[arm])
        name = f"{arm[0]} s{arm[1]}"
        header += [f"{name}: usable / budget", f"{name}: best speedup [CI]", f"{name}: correct"]
        rule += ["---", "---", "---"]
        if model:
            header.append(f"{name}: truncated / calls")
            rule.append("---")
    lines += ["", "### Per problem", "", "| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    by = {(arm_of(r), r.get("problem")): r for r in rows}
    for _, name in problems:
        cells = [name]
        for arm in order:
            cells += _cell(by.get((arm, name)), _is_model_arm(arms[arm]))
        lines.append("| " + " | ".join(cells) + " |")
    models = sorted({m for arm in order if _is_model_arm(arms[arm]) for m in model_summary(arms[arm])["models"]})
    if models:
        lines += ["", "Models: " + "; ".join(models)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, nargs="+",
                   help="JSON-lines files written by kernelbench_random.py and kernelbench_llm.py")
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
