"""Task-strength preflight: can a trivial candidate pass this task's correctness check?

Before a task is tuned, candidates that do no real work are run against it through the real
evaluation path (:func:`harness.verdict.evaluate.evaluate_candidate`: child processes, the task's inputs and
every adversarial distribution it allows, the protocol's tolerances):

* ``zeros``: every output replaced by zeros;
* ``passthrough``: the input returned (a copy of the first input shaped like the output);
* ``constant_mean``: every output element replaced by the mean of the reference output;
* ``lower_precision``: the reference itself computed one precision lower (float16 for a float32
  task, float32 for float64, bfloat16 for float16) and cast back.

A task where any of them passes correctness is **weak**: its inputs or tolerance cannot tell real
work from none, so it is excluded from headline comparisons (:func:`weak_tasks`) until fixed. The
report is stored (``store.add_report("preflight", task_id, ...)``) with the task's source digest, so
a fixed task file is judged afresh. Run ``python -m harness.verdict.preflight TASK`` for one task.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError
from harness.measure.session import MeasurementContext, open_measurement_session
from harness.records import Backend
from harness.store import ResultStore, open_store
from harness.tasks import Task, load_task
from harness.verdict.evaluate import evaluate_candidate

REPORT_KIND = "preflight"

_HELPERS = '''

import torch as _atb_torch


def _atb_map(fn, out):
    if isinstance(out, _atb_torch.Tensor):
        return fn(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_atb_map(fn, o) for o in out)
    return out
'''

_TRIVIAL_BODIES: dict[str, str] = {
    "zeros": '''
class ModelNew(Model):
    """Trivial candidate: all zeros."""

    def forward(self, *args):
        return _atb_map(_atb_torch.zeros_like, super().forward(*args))
''',
    "passthrough": '''
class ModelNew(Model):
    """Trivial candidate: the input passed through."""

    def forward(self, *args):
        out = super().forward(*args)
        first = out if isinstance(out, _atb_torch.Tensor) else None
        tensors = [a for a in args if isinstance(a, _atb_torch.Tensor)]
        for a in tensors:
            if first is not None and a.shape == first.shape and a.dtype == first.dtype:
                return a.clone()
        return tensors[0].clone() if tensors else out
''',
    "constant_mean": '''
class ModelNew(Model):
    """Trivial candidate: a constant, the reference output's mean."""

    def forward(self, *args):
        def const(t):
            m = float(t.double().mean()) if t.numel() else 0.0
            return _atb_torch.full_like(t, m)

        return _atb_map(const, super().forward(*args))
''',
    "lower_precision": '''
_ATB_LOWER = {_atb_torch.float32: _atb_torch.float16, _atb_torch.float64: _atb_torch.float32,
              _atb_torch.float16: _atb_torch.bfloat16}


class ModelNew(Model):
    """Trivial candidate: the reference computed one precision lower and cast back."""

    def forward(self, *args):
        floats = [a for a in args if isinstance(a, _atb_torch.Tensor) and a.is_floating_point()]
        dt = floats[0].dtype if floats else _atb_torch.float32
        low = _ATB_LOWER.get(dt)
        if low is None:
            raise TypeError(f"no lower precision than {dt} to try")
        if not getattr(self, "_atb_lowered", False):
            self.to(low)
            self._atb_lowered = True
        low_args = [a.to(low) if isinstance(a, _atb_torch.Tensor) and a.is_floating_point() else a for a in args]
        return _atb_map(lambda t: t.to(dt) if t.is_floating_point() else t, super().forward(*low_args))
''',
}
TRIVIAL_CANDIDATES: tuple[str, ...] = tuple(_TRIVIAL_BODIES)


class TrivialOutcome(BaseModel):
    """How one trivial candidate fared: ``passed`` means it passed correctness (the task is weak)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    passed: bool
    verdict: str
    verdict_id: str
    reason: str = ""


class PreflightReport(BaseModel):
    """The preflight's word on one task."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    task_id: str
    task_source_sha256: str
    weak: bool
    passed_by: list[str] = Field(default_factory=list)
    outcomes: list[TrivialOutcome]
    session_id: str
    protocol_sha256: str
    report_id: str = ""

    def summary(self) -> str:
        if self.weak:
            return (f"task {self.task_id} is WEAK: trivial candidate(s) {', '.join(self.passed_by)} pass its "
                    "correctness check; widen its input distributions or tighten its tolerance")
        return f"task {self.task_id} passed the preflight: no trivial candidate passes its correctness check"


def trivial_candidate_source(task: Task, name: str) -> str:
    """The KernelBench-format source of one trivial candidate for ``task`` (the task's own code plus a
    ``ModelNew`` subclass of its ``Model``).

    Raises:
        HarnessError: ``name`` is not one of :data:`TRIVIAL_CANDIDATES`.
    """
    if name not in _TRIVIAL_BODIES:
        raise HarnessError(f"unknown trivial candidate {name!r}; choose from {', '.join(TRIVIAL_CANDIDATES)}")
    return task.source.rstrip() + "\n" + _HELPERS + "\n" + _TRIVIAL_BODIES[name]


def preflight_task(task: str | Path | Task, store: ResultStore, session: MeasurementContext) -> PreflightReport:
    """Run every trivial candidate against ``task`` and store the report.

    Raises:
        TaskError: the task is unknown or malformed.
        IncomparableError: ``store`` is not the session's store.
    """
    t = task if isinstance(task, Task) else load_task(task)
    outcomes: list[TrivialOutcome] = []
    for name in TRIVIAL_CANDIDATES:
        r = evaluate_candidate(t, trivial_candidate_source(t, name), store=store, session=session)
        outcomes.append(TrivialOutcome(name=name, passed=r.correct, verdict=r.verdict, verdict_id=r.verdict_id,
                                       reason=r.reason[:500]))
    passed_by = [o.name for o in outcomes if o.passed]
    ref = session.protocol.ref()
    report = PreflightReport(task_id=t.id, task_source_sha256=t.source_sha256, weak=bool(passed_by),
                             passed_by=passed_by, outcomes=outcomes, session_id=session.session_id,
                             protocol_sha256=ref.sha256)
    rid = store.add_report(REPORT_KIND, t.id, report.model_dump(mode="json"), ref)
    return report.model_copy(update={"report_id": rid})


def latest_preflight(store: ResultStore, task: Task) -> PreflightReport | None:
    """The most recent stored preflight of this exact task file (same source digest), if any."""
    found: PreflightReport | None = None
    for row in store.reports(REPORT_KIND, task.id):
        rep = PreflightReport.model_validate({**row["body"], "report_id": row["id"]})
        if rep.task_source_sha256 == task.source_sha256:
            found = rep
    return found


def weak_tasks(store: ResultStore) -> set[str]:
    """Ids of tasks whose latest stored preflight (for their source digest at the time) found them weak:
    to be excluded from headline comparisons."""
    latest: dict[tuple[str, str], bool] = {}
    for row in store.reports(REPORT_KIND):
        body = row["body"]
        latest[(body["task_id"], body["task_source_sha256"])] = bool(body["weak"])
    return {tid for (tid, _), weak in latest.items() if weak}


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.verdict.preflight TASK [--db PATH] [--backend cpu|cuda] [--json]``; exit 0 when the
    preflight ran (a weak task is a result), 2 for bad input, 1 for an internal error."""
    ap = argparse.ArgumentParser(prog="python -m harness.verdict.preflight", description=__doc__.split("\n\n")[0])
    ap.add_argument("task", help="native task name or path of a KernelBench-format file")
    ap.add_argument("--db", default="atb.sqlite", help="results store (SQLite file)")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args(argv)
    try:
        backend: Backend = args.backend
        task = load_task(args.task)  # a bad name fails here, before any worker is started
        with open_store(args.db) as store, open_measurement_session(store, backend) as session:
            report = preflight_task(task, store, session)
    except HarnessError as exc:
        msg = " ".join(str(exc).split())
        print(json.dumps({"ok": False, "error": msg, "exit_code": 2}) if args.json
              else f"preflight: error: {msg}", file=sys.stdout if args.json else sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the CLI contract: internal errors exit 1 with a message
        msg = f"internal error ({type(exc).__name__}): {' '.join(str(exc).split())}"
        print(json.dumps({"ok": False, "error": msg, "exit_code": 1}) if args.json
              else f"preflight: error: {msg}", file=sys.stdout if args.json else sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), sort_keys=True))
    else:
        print(report.summary())
        for o in report.outcomes:
            print(f"  {o.name:16s} {'PASSES' if o.passed else 'fails '}  {o.verdict:11s} {o.reason[:120]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
