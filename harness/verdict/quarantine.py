"""The extended verification pass for a quarantined verdict.

A speedup above the anomaly threshold puts a verdict in quarantine (:mod:`harness.verdict.gates.anomaly`),
and so does a time below what the *reference's* FLOPs take at the device's peak (protocol 1.6.0:
:func:`harness.verdict.gates.physical.flop_trigger`; a candidate may honestly do less arithmetic, so
that is a reason for this pass, never a rejection on its own), and (1.7.0) a time below the read time
of a problem's counted inputs (:func:`harness.verdict.gates.physical.input_trigger`: a stated structure
may let it read part of them).
It stays there, out of every headline, until this pass clears it. The pass re-measures the same
candidate through the real evaluation path with:

* more seeds: ``ceil(seeds.extended_paired_seeds / seeds.paired_seeds)`` fresh evaluations, each with
  its own unpredictable correctness and paired timing seeds (so at least ``extended_paired_seeds``
  paired seeds in all);
* every adversarial distribution of the protocol, including any the task's metadata leaves out (a
  probe on which the reference is not finite is recorded as uninformative, not as a failure);
* every gate again, the physical-limit check included (the bytes the candidate must move);
* (1.6.0) every timed call on inputs of their own storage (``TaskMeta.private_timed_inputs``): on a CPU the
  ordinary timed sets are windows of one shared pool, which a candidate can reach through an input's
  storage and precompute over; here there is nothing beyond the input to read. A re-evaluation whose
  speedup falls below ``gates.extended_speedup_min_fraction`` of the quarantined verdict's did not earn
  that speedup from its inputs alone, and the verdict stays quarantined.

It clears the verdict only if every re-evaluation is correct and passes every gate other than the
anomaly breaker itself. The outcome, cleared or not, is stored as a quarantine review with its
reason (``store.add_quarantine_review``); ``store.effective_status`` then reads ``accepted`` only
after a clearing review.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError, IncomparableError
from harness.measure.session import MeasurementContext
from harness.records import sha256_text
from harness.store import SqliteStore
from harness.tasks import Task, load_task
from harness.verdict.evaluate import EvalResult, evaluate_candidate
from harness.verdict.gates.anomaly import NAME as ANOMALY


class QuarantineError(HarnessError):
    """The verdict cannot be reviewed: it is not quarantined, or the candidate or task given is not
    the one it judged."""


class QuarantineReview(BaseModel):
    """The outcome of one extended verification pass."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    verdict_id: str
    cleared: bool
    reason: str
    extended_verdict_ids: list[str] = Field(default_factory=list)
    speedups: list[float | None] = Field(default_factory=list)
    paired_seeds: int = 0
    distributions: list[str] = Field(default_factory=list)
    effective_status: str


def with_all_distributions(task: Task) -> Task:
    """The same task (same id, same source) probed with every adversarial distribution of the protocol,
    and every timed call on inputs of their own storage."""
    return task.model_copy(update={"meta": task.meta.model_copy(update={"distributions": None,
                                                                        "private_timed_inputs": True})})


def _kept_speedup(r: EvalResult, quarantined: float | None, min_fraction: float) -> str | None:
    """Why a re-evaluation's speedup does not bear out the quarantined one (None when it does)."""
    if not min_fraction or quarantined is None or r.speedup is None:
        return None
    if r.speedup < min_fraction * quarantined:
        return (f"on inputs of their own storage it read {r.speedup:.2f}x against the quarantined "
                f"{quarantined:.2f}x (below {min_fraction:g} of it, gates.extended_speedup_min_fraction): the "
                "speedup came from something beyond the inputs it was given")
    return None


def _problems(r: EvalResult) -> list[str]:
    out: list[str] = []
    if not r.correct:
        out.append(f"incorrect: {r.reason}")
    for g in r.gates:
        if not g.passed and g.name != ANOMALY:
            out.append(f"gate {g.name} failed: {g.detail}")
    if r.speedup is None and r.correct:
        out.append("no speedup was measured")
    return out


def review_quarantine(verdict_id: str, task: str | Path | Task, candidate_source: str, *, store: SqliteStore,
                      session: MeasurementContext) -> QuarantineReview:
    """Run the extended pass on a quarantined verdict and store the review.

    Raises:
        NotFound: no verdict ``verdict_id`` in the store.
        QuarantineError: the verdict is not quarantined, or ``task`` / ``candidate_source`` are not
            the ones it judged.
        IncomparableError: the session measures another device than the verdict's.
    """
    v = store.verdict(verdict_id)
    if v.status != "quarantined":
        raise QuarantineError(f"verdict {verdict_id} is {v.status}, not quarantined; only a quarantined "
                              "verdict has an extended pass")
    if sha256_text(candidate_source) != v.candidate_sha256:
        raise QuarantineError(f"the candidate given is not the one verdict {verdict_id} judged "
                              f"(sha256 {v.candidate_sha256[:12]}…); pass store.candidate_content(sha)")
    t = task if isinstance(task, Task) else load_task(task)
    if t.id != v.task_id:
        raise QuarantineError(f"verdict {verdict_id} is for task {v.task_id}, not {t.id}")
    if session.device_sha256 != v.device_sha256:
        raise IncomparableError(f"verdict {verdict_id} was measured on device {v.device_sha256[:12]}…; review it "
                                f"in a session on the same device, not {session.device_sha256[:12]}…")
    proto = session.protocol
    runs = math.ceil(proto.seeds.extended_paired_seeds / proto.seeds.paired_seeds)
    probe = with_all_distributions(t)
    results: list[EvalResult] = []
    problems: list[str] = []
    for _ in range(runs):
        r = evaluate_candidate(probe, candidate_source, store=store, session=session)
        results.append(r)
        problems += [f"re-evaluation {r.verdict_id}: {p}" for p in _problems(r)]
        kept = _kept_speedup(r, v.ratio, proto.gates.extended_speedup_min_fraction)
        if kept:
            problems.append(f"re-evaluation {r.verdict_id}: {kept}")
        if problems:
            break
    seeds = sum(len(r.seeds) for r in results)
    dists = ["task", *proto.correctness.distributions]
    speedups = [r.speedup for r in results]
    if problems:
        cleared = False
        reason = "extended pass failed; the verdict stays quarantined: " + "; ".join(problems)[:1800]
    else:
        shown = ", ".join(f"{s:.2f}x" for s in speedups if s is not None)
        cleared = True
        reason = (f"extended pass cleared it: {len(results)} re-evaluations, {seeds} paired seeds, distributions "
                  f"{', '.join(dists)}, timed on inputs of their own storage; correct, every gate but the anomaly "
                  f"breaker passed (physical limit included), and the speedup held; speedups {shown}")
    last = results[-1].verdict_id if results else None
    store.add_quarantine_review(verdict_id, cleared, reason, last, proto.ref())
    return QuarantineReview(verdict_id=verdict_id, cleared=cleared, reason=reason,
                            extended_verdict_ids=[r.verdict_id for r in results], speedups=speedups,
                            paired_seeds=seeds, distributions=dists,
                            effective_status=store.effective_status(verdict_id))
