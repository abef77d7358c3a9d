"""Render KernelBench sweep results (``kernelbench_sweep.py`` JSON lines) as Markdown tables.

Usage::

    python benchmarks/render_kernelbench.py benchmarks/results/kernelbench/level1_h200.jsonl \\
        benchmarks/results/kernelbench/level2_h200.jsonl --write benchmarks/results/kernelbench/README.md

Prints, per level: verdict counts, accepted A/A with a CI containing 1.0, wall-time percentiles of
one whole ``atb eval`` (and its phases), the side-by-side ratio to KernelBench's own
``eval_kernel_against_ref`` on the sampled problems, and every exception (not accepted, or a CI that
excludes 1.0) for the README to explain. With ``--write``, the text between the README's
``<!-- kernelbench-results:begin -->`` and ``<!-- kernelbench-results:end -->`` markers is replaced;
the rest of the README (the explanations) is left alone. Figures come only from the files given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

BEGIN = "<!-- kernelbench-results:begin -->"
END = "<!-- kernelbench-results:end -->"
SETTLED = ("accepted", "rejected", "quarantined", "timeout")


def load_rows(paths: list[Path]) -> tuple[dict[tuple[int, str], dict[str, Any]], dict[tuple[int, str], dict[str, Any]]]:
    """The latest ``atb_eval`` row of each (level, problem) by ``started_utc``, and for each ``kb_anchor`` row the
    ``atb_eval`` row of the same device call it sits beside (same code revision, the last one that
    started before the anchor: the sweep runs a problem's anchor right after its ``atb eval``).
    An anchor with no such row is left out of the side-by-side table, so a later re-run of a problem
    is never set beside an anchor from another call."""
    evals: dict[tuple[int, str], dict[str, Any]] = {}
    anchors: dict[tuple[int, str], list[dict[str, Any]]] = {}
    history: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            key = (int(row.get("level", 0)), str(row.get("problem")))
            if row.get("kind") == "atb_eval":
                # the latest by start time, whichever file it is in (a side-by-side file is read after
                # the level's own file but may hold older rows)
                if key not in evals or str(row.get("started_utc", "")) >= str(evals[key].get("started_utc", "")):
                    evals[key] = row
                history.setdefault(key, []).append(row)
            elif row.get("kind") == "kb_anchor":
                if all(x.get("started_utc") != row.get("started_utc") for x in anchors.get(key, [])):
                    anchors.setdefault(key, []).append(row)   # a row copied into two files counts once
    paired: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for key, rows in anchors.items():
        for a in sorted(rows, key=lambda x: str(x.get("started_utc", ""))):
            same_call = [r for r in history.get(key, []) if r.get("code_rev") == a.get("code_rev")
                         and str(r.get("started_utc", "")) <= str(a.get("started_utc", ""))]
            if same_call:
                paired.setdefault(key, []).append({**a, "_atb_row": same_call[-1]})
    return evals, paired


def pct(xs: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear between order statistics."""
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _f(x: Any, nd: int = 3) -> str:
    return "–" if x is None else f"{x:.{nd}f}"


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, list) and len(ci) == 2 else "–"


def _mib(b: Any) -> str:
    return "–" if b is None else f"{b / 2**20:.0f}"


def _io_mib(r: dict[str, Any]) -> str:
    return _mib((r.get("input_bytes") or 0) + (r.get("output_bytes") or 0))


def is_clean(row: dict[str, Any]) -> bool:
    """An A/A result as it should be: accepted, with a CI that contains 1.0."""
    return row.get("verdict") == "accepted" and row.get("ci_contains_1") is True


_BEFORE_PROCESS_PAIR = ("1.0.0", "1.1.0", "1.2.0")


def ci_under_process_pair(row: dict[str, Any]) -> list[float] | None:
    """The row's interval as protocol 1.3.0 states it: a row measured under an earlier protocol (no
    ``protocol_sha256``, or one of those versions' digests) has its stored interval widened by the
    protocol's declared CUDA process-pair SD, with the estimator's own function; a 1.3.0 row already
    carries it. This is a restatement of a stored interval, not a re-measurement."""
    from harness.stats import RatioEstimate, with_process_pair
    from protocol import load_protocol
    from protocol._released import RELEASED

    ci, ratio = row.get("ci"), row.get("speedup")
    if not ci or not ratio:
        return None
    digest = row.get("protocol_sha256")
    if digest and digest not in {RELEASED[v] for v in _BEFORE_PROCESS_PAIR}:
        return [float(ci[0]), float(ci[1])]
    proto = load_protocol()
    sd = proto.statistics.process_pair_log_sd.get(str(row.get("device") or "cuda"), 0.0)
    est = with_process_pair(RatioEstimate(ratio=float(ratio), ci_low=float(ci[0]), ci_high=float(ci[1]), n_pairs=1),
                            sd, proto)
    return [est.ci_low, est.ci_high]


def level_section(level: int, evals: list[dict[str, Any]], anchors: dict[str, list[dict[str, Any]]]) -> list[str]:
    out: list[str] = [f"### Level {level}", ""]
    n = len(evals)
    counts: dict[str, int] = {}
    for r in evals:
        counts[str(r.get("verdict"))] = counts.get(str(r.get("verdict")), 0) + 1
    clean = sum(1 for r in evals if is_clean(r))
    devices = sorted({str(r.get("device_name") or r.get("device")) for r in evals})
    out += [f"- problems with a row: {n}; device: {', '.join(devices)}",
            "- verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
            f"- accepted A/A with a CI containing 1.0: **{clean} of {n}**"]
    restated = [(r, ci_under_process_pair(r)) for r in evals if r.get("verdict") == "accepted"]
    clean_pp = sum(1 for _, ci in restated if ci and ci[0] <= 1.0 <= ci[1])
    out.append(f"- the same with protocol 1.3.0's process-pair component (`protocol/JUSTIFICATION.md` section 7; rows "
               f"measured under earlier protocols have their stored interval widened, not re-measured): "
               f"**{clean_pp} of {n}**")
    walls = [float(r["wall_s"]) for r in evals if r.get("verdict") in SETTLED and r.get("wall_s") is not None]
    if walls:
        out.append(f"- wall time of one whole `atb eval` (s): median **{statistics.median(walls):.1f}**, "
                   f"p90 {pct(walls, 90):.1f}, max {max(walls):.1f} (n={len(walls)})")
    revs: dict[str, list[dict[str, Any]]] = {}
    for r in evals:
        revs.setdefault(str(r.get("code_rev") or "?"), []).append(r)
    if len(revs) > 1 or "?" not in revs:
        parts = []
        for rev, rs in revs.items():
            w = [float(r["wall_s"]) for r in rs if r.get("verdict") in SETTLED and r.get("wall_s") is not None]
            parts.append(f"`{rev}`: {len(rs)} problems, {sum(1 for r in rs if is_clean(r))} clean"
                         + (f", median wall {statistics.median(w):.1f} s" if w else ""))
        out.append("- by code revision (each row records the commit it ran): " + "; ".join(parts))
    phases: dict[str, list[float]] = {}
    for r in evals:
        for k, v in (r.get("phase_s") or {}).items():
            phases.setdefault(k, []).append(float(v))
    if phases:
        medians = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in sorted(phases.items()))
        out.append(f"- phase medians (s): {medians}")
    out.append("")
    side = [(a["_atb_row"], a) for r in evals for a in anchors.get(r["problem"], [])]
    if side:
        out += ["Side by side with KernelBench's own `eval_kernel_against_ref` (A/A, same problems, same device call; "
                "KernelBench's defaults: 5 correctness trials, 100 timed trials, CUDA events):", "",
                "| problem | code | in+out MiB | atb eval s | KB eval s | KB process s | atb / KB eval | atb / KB process "
                "| KB result |",
                "|---|---|---:|---:|---:|---:|---:|---:|---|"]
        by_rev: dict[str, list[float]] = {}
        ratios_eval: list[float] = []
        ratios_proc: list[float] = []
        for r, a in side:
            io = (r.get("input_bytes") or 0) + (r.get("output_bytes") or 0)
            kb_eval, kb_proc = a.get("kb_eval_wall_s"), a.get("process_wall_s")
            usable = r.get("verdict") in SETTLED and not a.get("error")
            re_ = r["wall_s"] / kb_eval if usable and kb_eval else None
            rp = r["wall_s"] / kb_proc if usable and kb_proc else None
            if re_ is not None:
                ratios_eval.append(re_)
                by_rev.setdefault(str(r.get("code_rev") or "?"), []).append(re_)
            if rp is not None:
                ratios_proc.append(rp)
            res = a.get("error") or (f"correct={a.get('correctness')}, speedup {_f(a.get('kb_speedup'))}")
            out.append(f"| {r['problem']} | {r.get('code_rev') or '?'} | {_mib(io)} | {_f(r['wall_s'], 1)} | {_f(kb_eval, 1)} | {_f(kb_proc, 1)} | "
                       f"{_f(re_, 2)} | {_f(rp, 2)} | {str(res)[:80]} |")
        out.append("")
        if ratios_eval:
            out.append(f"- atb eval / KernelBench eval: median **{statistics.median(ratios_eval):.2f}x**, "
                       f"max {max(ratios_eval):.2f}x (n={len(ratios_eval)}); against KernelBench's whole process "
                       f"(its imports included): median {statistics.median(ratios_proc):.2f}x")
            out.append("- atb eval / KernelBench eval by code revision: " + "; ".join(
                f"`{rev}` median {statistics.median(v):.2f}x (n={len(v)})" for rev, v in by_rev.items()))
        stubbed = sorted({m for _, a in side for m in (a.get("stubbed_import_only") or [])})
        if stubbed:
            out.append("- missing import-only modules given empty stand-ins for KernelBench's import: "
                       + ", ".join(stubbed))
        out.append("")
    exceptions = [r for r in evals if not is_clean(r)]
    out += [f"Exceptions (not accepted, or a CI excluding 1.0): {len(exceptions)}", ""]
    if exceptions:
        out += ["| problem | code | verdict | speedup | CI | wall s | in+out MiB | reason |",
                "|---|---|---|---:|---|---:|---:|---|"]
        for r in exceptions:
            reason = str(r.get("reason") or "").replace("|", "/").replace("\n", " ")
            out.append(f"| {r['problem']} | {r.get('code_rev') or '?'} | {r.get('verdict')} | {_f(r.get('speedup'))} | "
                       f"{_ci(r.get('ci'))} | {_f(r.get('wall_s'), 1)} | {_io_mib(r)} | {reason[:220]} |")
        out.append("")
    out += ["<details><summary>Every problem</summary>", "",
            "| problem | code | verdict | speedup | CI | wall s | in+out MiB | floor FLOPs | timing |",
            "|---|---|---|---:|---|---:|---:|---:|---|"]
    for r in evals:
        fl = r.get("flops")
        out.append(f"| {r['problem']} | {r.get('code_rev') or '?'} | {r.get('verdict')} | {_f(r.get('speedup'))} | "
                   f"{_ci(r.get('ci'))} | "
                   f"{_f(r.get('wall_s'), 1)} | {_mib((r.get('input_bytes') or 0) + (r.get('output_bytes') or 0))} | "
                   f"{'–' if not fl else f'{fl:.3g}'} | {r.get('timing_method') or '–'} |")
    out += ["", "</details>", ""]
    return out


def render(paths: list[Path]) -> str:
    evals, anchors = load_rows(paths)
    lines = [f"Rendered by `benchmarks/render_kernelbench.py` from {', '.join(f'`{p.name}`' for p in paths)}.", ""]
    for level in sorted({lv for lv, _ in evals}):
        rows = sorted((r for (lv, _), r in evals.items() if lv == level), key=lambda r: (r.get("id", 0), r["problem"]))
        anc = {p: a for (lv, p), a in anchors.items() if lv == level}
        lines += level_section(level, rows, anc)
    return "\n".join(lines).rstrip() + "\n"


def write_section(readme: Path, body: str) -> None:
    """Replace the marked section of ``readme`` with ``body`` (appending the markers if absent)."""
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    block = f"{BEGIN}\n{body}{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    readme.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--write", type=Path, default=None, help="README whose marked section is replaced")
    args = p.parse_args(argv)
    missing = [str(f) for f in args.files if not f.is_file()]
    if missing:
        print(f"no such results file: {', '.join(missing)}", file=sys.stderr)
        return 2
    body = render(args.files)
    print(body)
    if args.write is not None:
        write_section(args.write, body)
        print(f"wrote the results section of {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
