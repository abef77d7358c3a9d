"""``atb anchor``, ``atb retest RUN``, ``atb remeasure RUN``: the evidence that a number holds up.

* ``atb anchor [--device cpu|cuda]`` measures the published reference figures of
  ``protocol/anchors.yaml`` that apply to this device and says, for each, agrees / explained
  divergence (registered before measurement) / unexplained divergence.
* ``atb retest RUN --backend mlx|cpu|cuda`` re-measures the run's certified best on a backend it was
  not tuned on, against a baseline re-derived there, and prints home and held-out ratios side by side.
* ``atb remeasure RUN`` re-measures every stored verdict of the run in a fresh measurement session:
  how many kept their direction, and the median absolute deviation of the ratio.

Every result is also stored in the results store as a report (kinds ``anchor``, ``retest``,
``remeasure``).
"""

from __future__ import annotations

import argparse

from atb_agent.cli._common import EXIT_OK, add_db, add_json, emit, progress


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("anchor", help="measure the published reference figures that apply to this device")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="which device to anchor (default cpu)")
    p.add_argument("--only", action="append", metavar="ANCHOR_ID", help="measure only this anchor (repeatable)")
    add_db(p)
    add_json(p)
    p.set_defaults(handler=run_anchor)

    p = sub.add_parser("retest", help="re-measure a run's certified best on a held-out backend")
    p.add_argument("run", metavar="RUN", help="the run (campaign) id")
    p.add_argument("--backend", choices=["mlx", "cpu", "cuda"], required=True,
                   help="where to re-measure: a backend (or device) the run was not tuned on")
    p.add_argument("--task", metavar="PATH", default=None,
                   help="the task file the run was tuned on (needed for a KernelBench file; checked by digest)")
    add_db(p)
    add_json(p)
    p.set_defaults(handler=run_retest)

    p = sub.add_parser("remeasure", help="re-measure every stored verdict of a run in a fresh session")
    p.add_argument("run", metavar="RUN", help="the run (campaign) id")
    p.add_argument("--task", metavar="PATH", default=None,
                   help="the task file the run was tuned on (needed for a KernelBench file; checked by digest)")
    add_db(p)
    add_json(p)
    p.set_defaults(handler=run_remeasure)


def _open_store(path: str, verified: bool = False):  # type: ignore[no-untyped-def]
    """``verified``: refuse (exit 2) a store that fails `atb store verify` (retest, remeasure read results)."""
    from harness.store import open_store

    if verified:
        from atb_agent.cli._common import open_verified_store
        from atb_agent.cli._run import _require_existing_store

        _require_existing_store(path)   # reading results never creates a store (issue 27, item 7)
        return open_verified_store(path)
    return open_store(path)


def run_anchor(args: argparse.Namespace) -> int:
    from harness.science.anchors import run_anchors

    with _open_store(args.db) as store:
        report = run_anchors(store, args.device, only=args.only)
    lines = [f"anchors {report.anchors_sha256[:12]}… on {report.device.summary()} "
             f"(protocol {report.protocol_version} {report.protocol_sha256[:12]}…)"]
    for r in report.results:
        lines.append(f"  {r.outcome:<23} {r.id}: {r.detail}")
    if report.not_applicable:
        lines.append(f"  not applicable to this device: {', '.join(report.not_applicable)}")
    if not report.results:
        lines.append("  no anchor applies to this device")
    lines.append(f"  stored as report {report.report_id}")
    emit(report, args, "\n".join(lines))
    return EXIT_OK


def run_retest(args: argparse.Namespace) -> int:
    from harness.science.retest import retest_run

    progress(f"retest of run {args.run} on {args.backend}")
    with _open_store(args.db, verified=True) as store:
        report = retest_run(store, args.run, args.backend, task_path=args.task)
    home_ci = f" [{report.home_ci[0]:.3f}, {report.home_ci[1]:.3f}]" if report.home_ci else ""
    if report.held_out_ratio is not None:
        ci = f" [{report.held_out_ci[0]:.3f}, {report.held_out_ci[1]:.3f}]" if report.held_out_ci else ""
        held = f"{report.held_out_ratio:.3f}x{ci} on {report.held_out_backend}"
    else:
        held = f"none ({report.leg.status}: {report.leg.reason[:200]})"
    text = "\n".join([
        f"run {report.run_id} task {report.task_id} candidate {report.candidate_sha256[:12]}…",
        f"  home      {report.home_ratio:.3f}x{home_ci} on {report.home_device}",
        f"  held-out  {held}" + ("" if report.held_out or report.held_out_ratio is None else "  (same device: NOT held out)"),
        f"  {report.label}",
        f"  stored as report {report.report_id}",
    ])
    emit(report, args, text)
    return EXIT_OK


def run_remeasure(args: argparse.Namespace) -> int:
    from harness.science.remeasure import remeasure_run

    progress(f"re-measuring every verdict of run {args.run} in a fresh session")
    with _open_store(args.db, verified=True) as store:
        report = remeasure_run(store, args.run, task_path=args.task)
    mad = f"{report.median_abs_deviation:.2%}" if report.median_abs_deviation is not None else "n/a"
    text = "\n".join([
        f"run {report.run_id}: {report.remeasured} verdicts re-measured in session {report.session_id}",
        f"  direction kept: {report.direction_kept} of {report.compared}",
        f"  median absolute deviation of the ratio: {mad}",
        f"  status kept: {report.status_kept} of {report.remeasured}",
        f"  stored as report {report.report_id}",
    ])
    emit(report, args, text)
    return EXIT_OK
