"""Where the escape gate's shortfall comes from on a very fast candidate: the harness windows of each timed block.

Issue 25, seventeenth session: on an H100 the honest ``struct_sorted_median_index`` (219x, a 2.8 us graph
of 8 calls) was failed in its extended pass by ``timed_region_escape``: wall after sync 1.65x the timed
time (limit 1.5x) after the harness's own per-repetition work was credited as the median of
``TimedFacts.harness_rep_ns`` times the repetitions (46.9 ms of 75.4 ms wall, 17.2 ms timed). A reading
of the graph loop (``STATUS_issue25.md``) says the wall there is about the sum of the harness windows, so
the shortfall is repetitions x (mean - median) of those windows: a tail of slow host windows. This probe
checks that reading before any gate changes: it evaluates the candidate as ``atb eval`` does (and, for a
quarantined verdict, runs the extended pass as ``benchmarks/honest_corpus.py`` does), catches every
judged ``Evidence`` on its way to the gates, and writes one JSON line per timed block of each arm:

* the block's wall, timed total and repetitions; the harness windows' median, mean, p90, max and sum; the
  captured repetitions (``timed_outputs[].rep``: their windows hold a device-wide sync) and their windows;
* what the gate credits now (``harness_overhead_ns``) and the ratio it judges, and what it would credit
  if the uncaptured windows counted in full and the captured ones at the median, under the same cap;
* ``wall_minus_windows_ns``: the wall time outside every harness window (loop statements, the final sync):
  large means the excess is not in the windows and the reading above is wrong.

Nothing here changes a measurement: it imports the harness and reads what the gates read.

    python benchmarks/probe_escape_credit.py OUT.jsonl [--device cuda] [--evals 2] [--no-review]
        [--task tests/redteam/tasks/hc_sorted_median.py]
        [--candidate tests/redteam/honest/corpus/struct_sorted_median_index.py]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_TASK = "tests/redteam/tasks/hc_sorted_median.py"
DEFAULT_CANDIDATE = "tests/redteam/honest/corpus/struct_sorted_median_index.py"


def _p(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def block_row(evidence: Any, arm: str, t: Any, protocol: Any) -> dict[str, Any]:
    """One timed block's windows, and the gate's credit now and under the proposed rule."""
    from harness.verdict.gates import escape

    h = list(t.harness_rep_ns)
    reps = len(t.times_ns)
    row: dict[str, Any] = {"arm": arm, "seed": t.seed, "method": t.method, "reps": reps, "wall_ns": t.wall_ns,
                           "timed_total_ns": t.timed_total_ns, "windows": len(h)}
    if arm == "candidate":
        credit = escape.harness_overhead_ns(evidence, t, protocol)
        row["credit_now_ns"] = credit
        row["ratio_now"] = max(t.wall_ns - credit, t.timed_total_ns) / t.timed_total_ns if t.timed_total_ns else None
        row["limit"] = protocol.gates.escape_wall_over_timed_max
    if not h or len(h) != reps:
        return row
    captured = sorted({o.rep for o in t.timed_outputs if 0 <= o.rep < reps})
    med = statistics.median(h)
    uncaptured = [x for i, x in enumerate(h) if i not in set(captured)]
    row.update({
        "window_median_ns": med, "window_mean_ns": statistics.fmean(h), "window_p90_ns": _p(h, 0.9),
        "window_max_ns": max(h), "window_sum_ns": sum(h), "captured_reps": captured,
        "captured_windows_ns": [h[i] for i in captured],
        "wall_minus_windows_ns": t.wall_ns - sum(h),
    })
    if arm == "candidate":
        base = next((b for b in evidence.baseline_timed if b.seed == t.seed), None)
        base_med = statistics.median(base.harness_rep_ns) if base is not None and base.harness_rep_ns \
            and len(base.harness_rep_ns) == len(base.times_ns) else None
        proposed = sum(uncaptured) + med * len(captured)
        if base_med is not None:
            proposed = min(proposed, protocol.gates.escape_harness_over_baseline_max * base_med * reps)
        proposed = max(proposed, escape._baseline_excess_per_rep(evidence, t.seed) * reps)
        row["baseline_window_median_ns"] = base_med
        row["credit_proposed_ns"] = proposed
        row["ratio_proposed"] = max(t.wall_ns - proposed, t.timed_total_ns) / t.timed_total_ns \
            if t.timed_total_ns else None
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--task", default=DEFAULT_TASK)
    ap.add_argument("--candidate", default=DEFAULT_CANDIDATE)
    ap.add_argument("--evals", type=int, default=2, help="evaluations (each quarantined one also gets its extended pass)")
    ap.add_argument("--no-review", action="store_true", help="skip the extended pass")
    args = ap.parse_args(argv)

    import harness.verdict.evaluate as ev
    from harness.measure.session import open_measurement_session
    from harness.store import open_store
    from harness.verdict.quarantine import review_quarantine
    from protocol import load_protocol

    protocol = load_protocol()
    caught: list[Any] = []
    real_judge = ev.judge

    def spy(evidence: Any, col: Any, proto: Any) -> Any:   # the gates read exactly this Evidence
        caught.append(evidence)
        return real_judge(evidence, col, proto)

    ev.judge = spy
    task = str(ROOT / args.task) if not Path(args.task).is_absolute() else args.task
    source = (ROOT / args.candidate).read_text(encoding="utf-8")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="atb-escape-probe-") as tmp, open(args.out, "a", encoding="utf-8") as out:
        store = open_store(Path(tmp) / "atb.sqlite")
        try:
            for i in range(args.evals):
                jobs: list[tuple[str, Any]] = []
                with open_measurement_session(store, args.device, note="escape credit probe") as session:   # type: ignore[arg-type]
                    t0 = time.monotonic()
                    caught.clear()
                    res = ev.evaluate_candidate(task, source, store=store, session=session, prespawn_next=False)
                    jobs.append((f"eval{i}", (res, list(caught), time.monotonic() - t0)))
                if res.verdict == "quarantined" and not args.no_review:
                    with open_measurement_session(store, args.device, note="escape credit probe: extended pass") \
                            as session:   # type: ignore[arg-type]
                        caught.clear()
                        t0 = time.monotonic()
                        review = review_quarantine(res.verdict_id, task, source, store=store, session=session)
                        jobs.append((f"eval{i}.review", (review, list(caught), time.monotonic() - t0)))
                for label, (result, evidences, wall) in jobs:
                    status = getattr(result, "verdict", None) or getattr(result, "effective_status", None)
                    print(f"{label}: {status} ({wall:.1f} s, {len(evidences)} judged)", flush=True)
                    for k, evidence in enumerate(evidences):
                        for arm, blocks in (("baseline", evidence.baseline_timed), ("candidate", evidence.candidate_timed)):
                            for t in blocks:
                                row = {"run": label, "judged": k, "status": status, **block_row(evidence, arm, t, protocol)}
                                out.write(json.dumps(row) + "\n")
                                out.flush()
                                if arm == "candidate" and "ratio_now" in row:
                                    print(f"  judged {k} seed {t.seed}: wall/timed now {row['ratio_now']:.2f}"
                                          f" proposed {row.get('ratio_proposed') or float('nan'):.2f};"
                                          f" window median {row.get('window_median_ns', 0) / 1e3:.1f} us"
                                          f" mean {row.get('window_mean_ns', 0) / 1e3:.1f} us,"
                                          f" wall outside windows {row.get('wall_minus_windows_ns', 0) / 1e6:.3f} ms",
                                          flush=True)
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
