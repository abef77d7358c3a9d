"""Generate the README's results section from ``benchmarks/results/**/*.json``.

Usage::

    python benchmarks/render_results.py                 # print the section (Markdown) on stdout
    python benchmarks/render_results.py --write README.md

With ``--write`` the text between ``<!-- atb:results:start -->`` and ``<!-- atb:results:end -->`` in
that file is replaced (the markers are appended if absent); nothing else in the file changes. Only
ratios and relative figures are shown (speedups, measured/expected, deviations), never absolute times.
Every number comes from a JSON file under ``benchmarks/results/``; a file that is missing or holds a
failed step is listed as such, so a gap is visible instead of silently skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
START, END = "<!-- atb:results:start -->", "<!-- atb:results:end -->"


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _x(v: Any, digits: int = 3) -> str:
    return f"{v:.{digits}f}x" if isinstance(v, (int, float)) else "n/a"


def _pct(v: Any) -> str:
    return f"{100 * v:.2f}%" if isinstance(v, (int, float)) else "n/a"


def _ci(ci: Any) -> str:
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(c, (int, float)) for c in ci):
        return f"[{ci[0]:.3f}, {ci[1]:.3f}]"
    return ""


def _failed(doc: Any) -> str | None:
    if doc is None:
        return "missing"
    if isinstance(doc, dict) and doc.get("ok") is False:
        return f"step failed: {str(doc.get('error') or doc.get('stdout_tail', ''))[-200:].strip() or 'no output'}"
    return None


def section_device(d: Path) -> list[str]:
    fp = _load(d / "fingerprint.json")
    bad = _failed(fp)
    if bad:
        return [f"- device fingerprint: {bad}"]
    cuda = fp.get("fingerprints", {}).get("cuda", {})
    return [f"- device: **{cuda.get('gpu_name', 'unknown GPU')}**, driver {cuda.get('gpu_driver')}, CUDA "
            f"{cuda.get('cuda_version')}, torch {fp.get('torch')}; fingerprint `{str(cuda.get('sha256', ''))[:12]}`",
            f"- protocol {fp.get('protocol_version')} `{str(fp.get('protocol_sha256', ''))[:12]}`"]


def section_anchors(doc: Any, title: str) -> list[str]:
    bad = _failed(doc)
    if bad:
        return [f"**{title}**: {bad}", ""]
    out = [f"**{title}** (anchors file `{doc.get('anchors_sha256', '')[:12]}`, on {doc.get('device', {}).get('gpu_name') or doc.get('device', {}).get('cpu_model')})", "",
           "| anchor | measured / published | band | outcome | explanation |", "|---|---|---|---|---|"]
    for r in doc.get("results", []):
        out.append(f"| {r['id']} | {r['measured_over_expected']:.3f} | ±{100 * r['band']:.0f}% | {r['outcome']} | {r['explanation']} |")
    if not doc.get("results"):
        out.append("| (no anchor applies to this device) | | | | |")
    return out + [""]


def section_suite(doc: Any) -> list[str]:
    bad = _failed(doc)
    if bad:
        return [f"- native suite with starting candidates: {bad}", ""]
    rows = [r for r in doc.get("rows", []) if "task" in r]
    out = ["| task | start vs eager | 95% CI | verdict | timing |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['task']} | {_x(r.get('speedup'))} | {_ci(r.get('speedup_ci'))} | {r.get('verdict')} | {r.get('timing_method', '')} |")
    return out + [""]


def section_random(doc: Any) -> list[str]:
    bad = _failed(doc)
    if bad:
        return [f"- random search: {bad}", ""]
    out = ["| task | usable / budget | not usable, why | best speedup vs eager | 95% CI |", "|---|---|---|---|---|"]
    for r in doc.get("runs", []):
        if "run_id" not in r:
            out.append(f"| (error) | | | | {str(r.get('error', ''))[:120]} |")
            continue
        why = ", ".join(f"{k} {v}" for k, v in sorted((r.get("unusable_reasons") or {}).items())) or "-"
        out.append(f"| {r.get('task')} | {r.get('usable_iterations')} / {r.get('budget')} | {why} | "
                   f"{_x(r.get('best_speedup'))} | {_ci(r.get('best_ci'))} |")
    return out + [""]


def section_remeasure(doc: Any, label: str) -> list[str]:
    bad = _failed(doc)
    if bad:
        return [f"- remeasure ({label}): {bad}", ""]
    rows = doc.get("remeasures", [doc] if "run_id" in doc else [])
    out = ["| run (task) | re-measured | direction kept | flips within noise of 1.0 | median abs. deviation | max |",
           "|---|---|---|---|---|---|"]
    kept = total = flips = 0
    devs: list[float] = []
    for r in rows:
        if "run_id" not in r:
            continue
        kept += r["direction_kept"]
        total += r["compared"]
        devs += [i["relative_deviation"] for i in r["items"] if i.get("relative_deviation") is not None]
        flips += r.get("direction_flips_within_noise", 0)
        out.append(f"| {r['task_id']} | {r['remeasured']} | {r['direction_kept']} of {r['compared']} | "
                   f"{r.get('direction_flips_within_noise', 0)} | {_pct(r['median_abs_deviation'])} | "
                   f"{_pct(r['max_abs_deviation'])} |")
    if devs:
        devs.sort()
        mid = len(devs) // 2
        med = devs[mid] if len(devs) % 2 else (devs[mid - 1] + devs[mid]) / 2
        out.append(f"| **all** | {len(devs)} | {kept} of {total} | {flips} | {_pct(med)} | {_pct(devs[-1])} |")
    return out + [""]


def section_retest(doc: Any) -> list[str]:
    bad = _failed(doc)
    if bad:
        return [f"- held-out retest: {bad}", ""]
    out = ["| task | home | held-out backend | held-out ratio | held out? | status |", "|---|---|---|---|---|---|"]
    for r in doc.get("retests", []):
        if "run_id" not in r:
            out.append(f"| (error) | | | | | {str(r.get('error', ''))[:120]} |")
            continue
        leg = r.get("leg", {})
        held = "yes" if r.get("held_out") else ("no ratio" if r.get("held_out_ratio") is None else "same device")
        out.append(f"| {r['task_id']} | {_x(r['home_ratio'])} on {r['home_backend']} | {r['held_out_backend']} | "
                   f"{_x(r.get('held_out_ratio'))} {_ci(r.get('held_out_ci'))} | {held} | {leg.get('status')}"
                   f"{': ' + leg.get('reason', '')[:80] if leg.get('status') not in ('accepted',) else ''} |")
    return out + [""]


def section_retest_recorded(docs: list[Any]) -> list[str]:
    """``retest_recorded.py``: held-out legs measured later, on another machine, from a results file."""
    out: list[str] = []
    for d in docs:
        if not isinstance(d, dict) or "task_id" not in d:
            continue
        dev = (d.get("leg", {}).get("device") or {}).get("cpu_model", d.get("held_out_backend"))
        out.append(f"- {d['task_id']}: home {_x(d['home_ratio'])} {_ci(d.get('home_ci'))} on the H200, held-out "
                   f"{_x(d.get('held_out_ratio'))} {_ci(d.get('held_out_ci'))} on {d['held_out_backend']} ({dev}, "
                   f"the development machine; `benchmarks/retest_recorded.py`, candidate `{d['candidate_sha256'][:12]}` "
                   "re-rendered from the run's knobs and checked against the recorded sha256)")
    return out + [""] if out else []


def section_measure(doc: Any, title: str) -> list[str]:
    """``bench_measure.py``: every native task's starting candidate evaluated twice in one session."""
    if not isinstance(doc, dict) or "summary" not in doc:
        return [f"**{title}**: missing or failed", ""]
    sm = doc["summary"]
    dev = sm.get("device", {})
    out = [f"**{title}** (`bench_measure.py`, {dev.get('gpu_name') or dev.get('cpu_model')}, torch "
           f"{dev.get('torch_version')}, protocol `{str(sm.get('protocol_sha256', ''))[:12]}`, "
           f"load average {sm.get('load_average', 'n/a')})", "",
           f"- {sm.get('tasks')} tasks, verdicts {sm.get('verdicts')}; re-measure deviation |r1-r2|/(r1+r2): median "
           f"{sm.get('median_rel_abs_deviation_pct', float('nan')):.3f}%, max {sm.get('max_rel_abs_deviation_pct', float('nan')):.3f}%",
           f"- harness cost per evaluation over the bare timed repetitions inside it: {sm.get('median_overhead_ratio', float('nan')):.1f}x", "",
           "| task | speedup 1 | speedup 2 | deviation |", "|---|---|---|---|"]
    for row in doc.get("rows", []):
        runs = row.get("runs", [])
        sp = [r.get("speedup") for r in runs]
        out.append(f"| {row.get('task')} | {_x(sp[0] if sp else None, 4)} | {_x(sp[1] if len(sp) > 1 else None, 4)} | "
                   f"{_pct(row.get('rel_abs_deviation'))} |")
    return out + [""]


def section_cuda_gates(docs: list[Any]) -> list[str]:
    """``cuda_gates.py``: cheats and honest candidates through the CUDA path."""
    out = ["**CUDA-specific gates on the H200** (`benchmarks/cuda_gates.py`)", "",
           "| case | meant for | verdict | speedup | gates failed |", "|---|---|---|---|---|"]
    seen: set[str] = set()
    for doc in docs:
        for c in (doc or {}).get("cases", []) if isinstance(doc, dict) else []:
            if "error" in c or c.get("name") in seen:
                continue
            seen.add(c["name"])
            failed = ", ".join(sorted(c.get("failed_gates") or {})) or "none"
            out.append(f"| {c['name']} | {c.get('expected_gate') or 'honest'} | {c.get('verdict')} | "
                       f"{_x(c.get('speedup'))} | {failed} |")
    return out + ["", "`benchmarks/results/h200/cuda_gates.md` explains each case, including what was not run.", ""]


def section_sandbox(doc: Any) -> list[str]:
    if not isinstance(doc, dict):
        return []
    out = ["**Sandbox** (`bench_sandbox.py`)", "", "| backend | start, median | `run_in_sandbox` round trip, median |",
           "|---|---|---|"]
    for name, b in sorted(doc.get("backends", {}).items()):
        start = (b.get("start") or {}).get("median_s")
        run = ((b.get("tool_call_round_trip") or {}).get("run_in_sandbox(true)") or {}).get("median_s")
        out.append(f"| {name} | {start:.2f} s | {run * 1e3:.0f} ms |" if start and run else f"| {name} | n/a | n/a |")
    return out + [""]


def section_engine(doc: Any, title: str) -> list[str]:
    if not isinstance(doc, dict) or "summary" not in doc:
        return []
    sm = doc["summary"]
    return [f"**{title}** (`bench_engine.py`: the default configuration against itself)", "",
            f"- {sm.get('ratios_measured')} trials: ratio {sm.get('ratio_min', 0):.3f}-{sm.get('ratio_max', 0):.3f}, "
            f"{sm.get('cis_containing_one')} of {sm.get('ratios_measured')} intervals contain 1.0; median CI half-width "
            f"{_pct(sm.get('median_ci_relative_halfwidth'))} against the usability bar {_pct(sm.get('usability_bar'))}", ""]


def render(results: Path = RESULTS) -> str:
    lines = ["## Results", "",
             "Generated by `python benchmarks/render_results.py --write README.md` from `benchmarks/results/`. "
             "Ratios only: a speedup is baseline time / candidate time within one measurement session.", ""]
    h200 = results / "h200"
    if h200.is_dir():
        lines += ["### H200", ""] + section_device(h200) + [""]
        anchors = _load(h200 / "anchors.json")
        if anchors and not _failed(anchors):
            lines += section_anchors(anchors.get("cuda"), "Anchors on the GPU")
            lines += section_anchors(anchors.get("cpu"), "Anchors on the host CPU")
        else:
            lines += section_anchors(anchors, "Anchors")
        if (h200 / "suite_cuda.json").exists():
            lines += ["**Native suite, starting candidates (vs eager)**", ""] + section_suite(_load(h200 / "suite_cuda.json"))
        if (h200 / "measure_cuda.json").exists():
            lines += section_measure(_load(h200 / "measure_cuda.json"),
                                     "Native suite, starting candidates, each verdict twice in one session")
        lines += ["**Seeded random search**", ""] + section_random(_load(h200 / "random_cuda.json"))
        lines += ["**Re-measurement in a fresh session** (same device)", ""]
        lines += section_remeasure(_load(h200 / "remeasure_cuda.json"), "H200")
        lines += ["**Held-out retest of the H200's certified best**", ""] + section_retest(_load(h200 / "retest.json"))
        lines += section_retest_recorded([_load(p) for p in sorted(h200.glob("retest_*_on_*.json"))])
        gate_docs = [_load(p) for p in sorted(h200.glob("cuda_gates*.json"))]
        if gate_docs:
            lines += section_cuda_gates(gate_docs)
    else:
        lines += ["No H200 results yet: run `bash benchmarks/gpu_evidence.sh` on the GPU machine and copy its "
                  "JSON files to `benchmarks/results/h200/`.", ""]
    if (results / "h200_draft").is_dir():
        lines += ["(`benchmarks/results/h200_draft/` keeps earlier H200 runs taken under draft digests of the "
                  "protocol; they are not shown here.)", ""]
    cpu_re = results / "remeasure_cpu.json"
    if cpu_re.exists():
        lines += ["### This CPU", "", "**Re-measurement in a fresh session** (basis of protocol/JUSTIFICATION.md)", ""]
        lines += section_remeasure(_load(cpu_re), "CPU")
    cpu_anchor = results / "anchors_cpu.json"
    if cpu_anchor.exists():
        lines += section_anchors(_load(cpu_anchor), "Anchors on this CPU")
    if (results / "measure_cpu.json").exists():
        lines += section_measure(_load(results / "measure_cpu.json"), "Native suite on this CPU, each verdict twice")
    lines += section_sandbox(_load(results / "sandbox.json"))
    lines += section_engine(_load(results / "engine.json"), "llama-server, full default")
    lines += section_engine(_load(results / "engine_1t.json"), "llama-server, one thread fixed for both arms")
    return "\n".join(lines).rstrip() + "\n"


def write_into(path: Path, text: str) -> None:
    """Replace the marked section of ``path`` (or append it with its markers)."""
    old = path.read_text() if path.exists() else ""
    block = f"{START}\n{text}{END}\n"
    if START in old and END in old:
        head, rest = old.split(START, 1)
        tail = rest.split(END, 1)[1]
        new = head + block + tail.lstrip("\n")
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + block
    path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--write", type=Path, default=None, help="a Markdown file whose marked section is replaced")
    args = ap.parse_args(argv)
    text = render(args.results)
    if args.write:
        write_into(args.write, text)
        print(f"wrote the results section into {args.write}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
