"""``atb sweep SPEC.yaml``: a grid of campaigns on Ray (or, with ``--local``, as processes of this machine),
all recorded in one store.

Exit status: 0 when every campaign of the sweep has finished (now or in an earlier run), 2 for a bad
spec, an unknown store scheme or an unreachable Ray cluster, 1 when a campaign failed (the JSON lists
which and why; running the same spec again resumes the unfinished ones and repeats none).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from atb_agent.cli._common import EXIT_INTERNAL, EXIT_OK, add_json, emit


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("sweep", help="run a (task x tuner x seed) grid of campaigns on Ray into one store")
    p.add_argument("spec", help="sweep spec YAML: tasks, tuners, seeds, budget, devices")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="Ray cluster address (ray://HOST:10001 or HOST:6379); default: a local Ray sized to this machine")
    p.add_argument("--local", action="store_true",
                   help="run the campaigns as processes of this machine, without Ray (a GPU host without Ray): "
                        "one per visible GPU on CUDA, cpu_count / cpus_per_campaign on CPU")
    p.add_argument("--db", default="atb.sqlite",
                   help="results store: a SQLite path or sqlite:///PATH (default ./atb.sqlite), or postgresql://...")
    p.add_argument("--no-live", action="store_true", help="print progress lines instead of a live table")
    add_json(p)
    p.set_defaults(handler=cmd_sweep)


def _human(r: object) -> str:
    from atb_agent.sweep import SweepResult

    assert isinstance(r, SweepResult)
    where = f"Ray {r.ray_address}" if r.executor == "ray" else r.ray_address
    lines = [f"sweep {r.sweep_id} ({'restarted' if r.restarted else 'new'}) on {where}, store {r.store}: "
             f"{r.done}/{len(r.campaigns)} campaigns done, {r.failed} not; usable iterations "
             f"{r.usable_iterations}/{r.iterations}; {r.wall_s:.1f} s"]
    for c in r.campaigns:
        lines.append(f"  {c.task_id:<24} {c.tuner:<24} seed {c.seed:<6} {c.status:<10} {c.campaign_id or '-':<24} "
                     f"{c.usable}/{c.iterations} usable, {c.attempts} attempt(s)" + (f"  {c.error}" if c.error else ""))
    return "\n".join(lines)


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (file descriptor 1) to stderr while Ray runs.

    Ray's driver prints worker and raylet messages ("(raylet) A worker died...") on stdout, from its
    own threads and native code; the CLI contract keeps stdout for the one JSON object.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_sweep(args: argparse.Namespace) -> int:
    from atb_agent.sweep import ProgressTable, load_spec, run_sweep
    from harness.store._open import store_kind

    store_kind(args.db)                                  # an unknown scheme is bad input before Ray starts
    sweep = load_spec(args.spec)
    table = ProgressTable(f"sweep {sweep.sweep_id}", live=False if args.no_live else None)
    with _stdout_to_stderr():
        result = run_sweep(sweep, db=args.db, ray_address=args.ray, local=args.local, progress=table)
    emit(result, args, _human(result))
    return EXIT_OK if result.failed == 0 else EXIT_INTERNAL


__all__ = ["cmd_sweep", "register"]
