"""``atb tasks`` and ``atb eval``: list the kernel tasks; evaluate one candidate against one task."""

from __future__ import annotations

import argparse
from pathlib import Path
import time as _time
from typing import Any

from atb_agent.cli._common import EXIT_OK, BadInput, add_db, add_json, emit, progress

_T0 = _time.monotonic()


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("tasks", help="list the native kernel tasks")
    add_json(p)
    p.set_defaults(handler=run_tasks)

    e = sub.add_parser("eval", help="evaluate one candidate (defines ModelNew) against a task or KernelBench file")
    e.add_argument("task", metavar="TASK_OR_FILE", help="a native task name (see `atb tasks`) or a KernelBench-format .py file")
    e.add_argument("candidate", metavar="CANDIDATE", help="the candidate .py file (defines class ModelNew); "
                   "'start' evaluates the task's own starting candidate")
    from harness.measure.backends import BACKENDS

    # the measuring backends' registry (cpu, cuda, mlx and any registered plug-in), read when parsing
    e.add_argument("--device", choices=BACKENDS, default="cpu", help="backend to measure on (default cpu)")
    add_db(e)
    add_json(e)
    e.set_defaults(handler=run_eval)


def run_tasks(args: argparse.Namespace) -> int:
    from harness.tasks import native_tasks

    rows = [{"id": t.id, "description": t.meta.description, "knobs": t.knob_space, "start": t.start_label,
             "flops": t.meta.flops, "bytes": t.meta.bytes, "forbidden_ops": t.meta.forbidden_ops,
             "path": str(t.path)} for t in native_tasks()]
    human = "\n".join(f"{r['id']:<22} {r['description']}" for r in rows)
    emit({"tasks": rows, "count": len(rows)}, args, human)
    return EXIT_OK


def _read_candidate(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"no candidate file at {path}; give a .py file that defines class ModelNew")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read the candidate {path} as UTF-8 text: {exc}") from exc


def _since_process_start() -> float:
    """Seconds since this process started (interpreter start-up and imports included), from /proc;
    the monotonic clock since import where /proc is missing."""
    import os
    import time

    try:
        ticks = os.sysconf("SC_CLK_TCK")
        with open("/proc/self/stat", encoding="ascii") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19]) / ticks
        with open("/proc/uptime", encoding="ascii") as f:
            return float(f.read().split()[0]) - start
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _T0


def _worker_marks(workers: list[Any]) -> dict[str, float]:
    """When each early measuring child was spawned and said it was ready, on the timeline's clock (seconds
    since this process started), and its own ``import torch`` (seconds, from its ready reply)."""
    offset = _since_process_start() - _time.monotonic()
    marks: dict[str, float] = {}
    for w in workers:
        if w is None or w.spawned_at is None:
            continue
        marks[f"{w.role}.spawned"] = w.spawned_at + offset
        if w.ready_at is not None:
            marks[f"{w.role}.ready"] = w.ready_at + offset
            if "import_torch" in w.startup_stages():
                marks[f"{w.role}.import_torch_s"] = w.startup_stages()["import_torch"]
    return marks


def run_eval(args: argparse.Namespace) -> int:
    from harness.measure.backends import backend_named

    if not backend_named(args.device).torch_children:   # MLX: its own runner, for the held-out retest
        raise BadInput(f"kernel evaluation on {args.device.upper()} is served by `atb retest --device {args.device}`; "
                       "`atb eval` measures on cpu or cuda")
    from harness.measure.cost import begin_cost
    from harness.measure.session import open_measurement_session, spawn_early
    from harness.tasks import load_task
    from protocol import load_protocol

    from harness.tasks._model import EAGER_START_LABEL   # is there a start arm (before the verdict modules)

    timeline: dict[str, float] = {"cli_start": _since_process_start()}
    task = load_task(args.task)
    source = task.start_source() if args.candidate == "start" and not Path("start").exists() else _read_candidate(args.candidate)
    # once the input is known to be readable, the helper processes start, slowest first: the FLOP
    # count (import torch, then torch's first meta kernels: ~5 s) must be done by the verdict; the
    # measuring children's `import torch` is the longest step of the session's open, and the rest
    # of this start-up (the store, the harness's other modules) overlaps both
    begin_cost(task)
    proto = load_protocol()
    start_arm = task.start_label != EAGER_START_LABEL   # a KernelBench file's start is its eager reference
    early = spawn_early(args.device, proto, start_arm=start_arm)
    timeline["workers_spawned"] = _since_process_start()
    try:
        from harness.store import open_store
        from harness.verdict.evaluate import evaluate_candidate

        store = open_store(args.db)
        try:
            progress(f"atb eval: opening a {args.device} measurement session")
            timeline["session_begin"] = _since_process_start()
            with open_measurement_session(store, args.device, proto, note=f"atb eval {task.id}",
                                          start_arm=start_arm, early=early) as ctx:
                timeline["session_open"] = _since_process_start()
                timeline.update({f"open.{k}": v for k, v in ctx.open_stages.items()})
                progress(f"atb eval: measuring {Path(args.candidate).name} on {task.id}")
                result = evaluate_candidate(task, source, store=store, session=ctx, protocol=proto, prespawn_next=False)
                timeline["measured"] = _since_process_start()
        finally:
            store.close()
    finally:
        early.close()   # no-op once the session took the workers
    timeline["closed"] = _since_process_start()
    timeline.update(_worker_marks([early.reference, early.candidate, early.start]))
    result = result.model_copy(update={"timeline_s": {k: round(v, 3) for k, v in timeline.items()}})
    ci = f"[{result.speedup_ci[0]:.3f}, {result.speedup_ci[1]:.3f}]" if result.speedup_ci else "n/a"
    sp = f"{result.speedup:.3f}x" if result.speedup is not None else "n/a"
    vs = f"{result.speedup_vs_start:.3f}x" if result.speedup_vs_start is not None else "n/a"
    failed = [g for g in result.gates if not g.passed]
    human = "\n".join([
        f"verdict   {result.verdict}  ({result.reason})",
        f"correct   {result.correct}",
        f"speedup   {sp} vs {result.baseline_label}, 95% CI {ci}",
        f"vs start  {vs} ({result.start_label}){'  STRAWMAN start' if result.strawman else ''}",
        f"roofline  {result.roofline_fraction:.3f}" if result.roofline_fraction is not None else "roofline  n/a",
        f"gates     {len(result.gates) - len(failed)}/{len(result.gates)} passed"
        + "".join(f"\n  FAILED {g.name}: {g.detail}" for g in failed),
        f"device    {result.device} ({result.device_sha256[:12]})",
        f"verdict   id {result.verdict_id}; candidate {result.candidate_sha256[:12]}; protocol {result.protocol_sha256[:12]}",
    ])
    emit(result, args, human)
    return EXIT_OK
