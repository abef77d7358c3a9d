"""``evaluate_candidate``: one candidate against its task's honest baseline, start to verdict.

The headline speedup is always against PyTorch eager of the task's reference (``eager-reference``),
timed interleaved with the candidate at the same seeds in the same session; the speedup over the
search's actual starting candidate is reported beside it, and a start materially slower than eager
(``protocol.gates.strawman_ratio``) is flagged as a strawman. Every verdict, including a rejection,
is ingested through the store with its measurement sets. A candidate that crashes, hangs, exits or
raises gives a rejected result, never an exception.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import CandidateError, IncomparableError
from harness.measure.collect import ArmProcesses, Collected, Collector
from harness.measure.cost import begin_cost
from harness.measure.backends import backend_named
from harness.measure.compile_cache import lend as lend_compile_cache
from harness.measure.device import achieved_fraction, ceiling_defect, roofline_fraction
from harness.measure.evidence import Evidence, WorkerFailure
from harness.measure.session import MeasurementContext
from harness.redact import redact, redact_obj
from harness.records import (Backend, DeviceCeilings, GateResult, Judgement, MeasurementSet, SessionStamp, Verdict,
                             sha256_text)
from harness.stats import RatioEstimate, rounds_ratio
from harness.store import ResultStore
from harness.tasks import Task, TaskCost, load_task
from harness.verdict.gates import decide_status, run_gates
from harness.verdict.result import VerdictResult
from protocol import Protocol

# one definition, in harness.tasks._model: atb eval reads it before it imports this module
from harness.tasks._model import EAGER_START_LABEL  # noqa: E402,F401

BASELINE_LABEL = "eager-reference"


class EvalResult(VerdictResult):
    """What ``atb eval`` prints: :class:`harness.verdict.result.VerdictResult` (``speedup`` is baseline time /
    candidate time against eager) plus the kernel's own fields."""

    speedup_vs_start_ci: tuple[float, float] | None = None
    start_over_eager: float | None = None
    device_sha256: str
    correctness_seeds: list[int] = Field(default_factory=list)
    init_seed: int = 0
    baseline_label: str = BASELINE_LABEL
    start_label: str = ""
    timing_method: str = ""
    candidate_median_ns: float | None = None
    baseline_median_ns: float | None = None
    phase_s: dict[str, float] = Field(default_factory=dict)
    timeline_s: dict[str, float] = Field(default_factory=dict, description=(
        "the caller's stages, seconds since its process started (atb eval: session open, measured, closed)"))
    op_s: dict[str, float] = Field(default_factory=dict, description=(
        "where the phases' time went: seconds the harness waited on each 'role.op' command, the steps a "
        "child timed inside one ('role.op.step'), and 'harness.cost_wait', the wait for the FLOP count after "
        "the measurement, 'harness.judge' (the gates) and 'harness.store' (storing the verdict)"))
    output_transport: str = Field(default="", description=(
        "how the candidate's outputs reached the comparing reference child: 'vmm-fd', 'cuda-ipc', "
        "'file' or a fallback with its reason"))
    confinement: dict[str, str] = Field(
        default_factory=dict,
        description="per arm, how its measuring child was confined: 'bwrap:...' or 'unconfined:<why>'")
    protocol_draft: bool = Field(default=False, description=(
        "measured under a draft protocol: its digest is not in protocol/_released.py (issue 27)"))
    evidence: Evidence | None = Field(default=None, exclude=True)

    @classmethod
    def from_verdict(cls, verdict: Verdict, detail: VerdictDetail, *, task: Task, ratios: Ratios, col: Collected,
                     session: MeasurementContext, evidence: Evidence) -> "EvalResult":
        """The answer to ``atb eval`` for a stored ``verdict``: its fields, the ratios' intervals and the
        measurement's own facts (seeds, medians, where the time went), from the same pieces it was built of.
        ``detail`` is the stored (redacted) detail; the task's start label and the timing method are given as
        measured."""
        speed, vs_start, start_over_eager = ratios.speed, ratios.vs_start, ratios.start_over_eager
        usable = bool(speed is not None and verdict.status == "accepted"
                      and speed.ci_relative_halfwidth <= session.protocol.usability.ci_relative_halfwidth_max)
        return cls(
            verdict=verdict.status, correct=verdict.correct, gates=verdict.gates,
            speedup=speed.ratio if speed else None, speedup_ci=(speed.ci_low, speed.ci_high) if speed else None,
            speedup_vs_start=vs_start.ratio if vs_start else None,
            speedup_vs_start_ci=(vs_start.ci_low, vs_start.ci_high) if vs_start else None,
            strawman=detail.strawman, start_over_eager=start_over_eager.ratio if start_over_eager else None,
            roofline_fraction=detail.roofline_fraction, device=session.fingerprint.summary(),
            device_sha256=verdict.device_sha256, seeds=verdict.seeds, correctness_seeds=detail.correctness_seeds,
            init_seed=detail.init_seed, protocol_sha256=verdict.protocol.sha256,
            candidate_sha256=verdict.candidate_sha256, verdict_id=verdict.id, reason=verdict.reason,
            usable_ci=usable, task_id=verdict.task_id, start_label=task.start_label, timing_method=col.method, candidate_median_ns=detail.candidate_median_ns,
            baseline_median_ns=detail.baseline_median_ns, phase_s=col.phase_s,
            op_s={k: round(v, 4) for k, v in sorted(col.op_s.items())}, output_transport=detail.output_transport,
            confinement=dict(detail.confinement), protocol_draft=detail.protocol_draft, evidence=evidence)


# ---------------------------------------------------------------------------------------- gates
def run_gates_fail_closed(evidence: Evidence, protocol: Protocol) -> list[GateResult]:
    """:func:`harness.verdict.gates.run_gates`, failing closed: a gate that raises, or no result at all, can
    never let a verdict be accepted."""
    try:
        results = list(run_gates(evidence, protocol))
    except Exception as exc:  # noqa: BLE001 - a broken gate must not accept anything
        return [GateResult(name="gates_error", passed=False, detail=f"run_gates raised {type(exc).__name__}: {exc}")]
    return results or [GateResult(name="gates_empty", passed=False, detail="run_gates returned no results")]


# ---------------------------------------------------------------------------------------- numbers
class Ratios(BaseModel):
    """The time ratios one evaluation forms from its arms' (seed, round) blocks (:func:`harness.stats.rounds_ratio`,
    with the backend's process-pair component: each arm has its own measuring process). None: not formed
    (an arm failed, or the start arm was not timed)."""

    model_config = ConfigDict(frozen=True)

    speed: RatioEstimate | None = None              # eager baseline / candidate: the headline speedup
    vs_start: RatioEstimate | None = None           # start / candidate
    start_over_eager: RatioEstimate | None = None   # start / eager baseline (the strawman check)

    @classmethod
    def of(cls, col: Collected, protocol: Protocol, backend: Backend, *, start_is_eager: bool) -> "Ratios":
        """The three ratios of ``col``; a start that is the eager reference itself has its speedup over the
        start equal to the headline and no ratio of its own to eager."""
        if col.failure is not None:
            return cls()

        def est(num: str, den: str) -> RatioEstimate | None:
            return rounds_ratio(col.arm_rounds(num), col.arm_rounds(den), protocol, "median_of_ratios",
                                process_pair_backend=backend)

        speed = est("baseline", "candidate")
        if start_is_eager:
            return cls(speed=speed, vs_start=speed)
        return cls(speed=speed, vs_start=est("start", "candidate"), start_over_eager=est("start", "baseline"))

    def strawman(self, protocol: Protocol) -> bool:
        """The start is materially slower than eager (``gates.strawman_ratio``)."""
        s = self.start_over_eager
        return bool(s is not None and s.ratio * protocol.gates.strawman_ratio <= 1.0)


class Floor(BaseModel):
    """The candidate's time against the physical floor (issue 27): the roofline fraction, never above 1.0, and
    why none is given when the time is beyond the floor (a ceiling defect)."""

    model_config = ConfigDict(frozen=True)

    fraction: float | None
    ceiling_defect: str | None

    @classmethod
    def of(cls, cost: TaskCost, ceilings: DeviceCeilings | None, candidate_median_ns: float | None,
           cache_factor: float) -> "Floor":
        """``cache_factor``: the backend's multiplier of the copy ceiling (CPU: ``gates.physical_cpu_cache_factor``,
        the ceiling the physical-limit gate uses)."""
        frac = roofline_fraction(cost.bytes, cost.flops, ceilings, candidate_median_ns, cache_factor=cache_factor)
        defect = ceiling_defect(achieved_fraction(cost.bytes, cost.flops, ceilings, candidate_median_ns,
                                                  cache_factor=cache_factor), ceilings)
        return cls(fraction=frac, ceiling_defect=defect)


class VerdictDetail(BaseModel):
    """A kernel verdict's ``detail``: what the verdict row keeps beyond its columns (the field order is the
    stored key order)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    correctness_seeds: list[int]
    init_seed: int
    distributions: list[str]
    # input classes the reference itself cannot take: skipped for this problem, never the candidate's
    # failure (issue 25); class -> the reference's error
    skipped_classes: dict[str, str]
    capture_probe_errors: list[str]   # why graph replay was not used (CUDA)
    timing_method: str
    start_label: str
    start_sha256: str
    speedup_vs_start: RatioEstimate | None
    start_over_eager: RatioEstimate | None
    strawman: bool
    roofline_fraction: float | None
    roofline_ceiling_defect: str | None
    task_bytes: float | None
    task_flops: float | None
    task_cost: TaskCost
    candidate_median_ns: float | None
    baseline_median_ns: float | None
    failure: WorkerFailure | None
    start_failure: WorkerFailure | None
    n_pairs: int
    # issue 27: a verdict measured under an unreleased protocol says so in its own record
    protocol_draft: bool
    phase_s: dict[str, float]
    # issue 14: how each arm's child was confined ("bwrap:..." or "unconfined:<why>"), from the Worker
    confinement: dict[str, str]
    # issue 13: device memory plan, how candidate outputs reached the comparing reference child,
    # and how many distinct input sets each arm's timed calls received (per paired seed)
    memory_plan: dict[str, int]
    output_transport: str
    timed_input_sets: dict[str, list[dict[str, Any]]]

    @classmethod
    def of(cls, col: Collected, task: Task, *, ratios: Ratios, floor: Floor, cost: TaskCost,
           processes: ArmProcesses, protocol: Protocol, default_transport: str) -> "VerdictDetail":
        """The detail of one evaluation from its pieces; ``default_transport``: the backend's, when the
        collector recorded none."""
        return cls(
            correctness_seeds=col.correctness_seeds, init_seed=col.init_seed, distributions=col.distributions,
            skipped_classes=dict(col.skipped_classes), capture_probe_errors=list(col.capture_probe_errors),
            timing_method=col.method, start_label=task.start_label, start_sha256=sha256_text(task.start_source()),
            speedup_vs_start=ratios.vs_start, start_over_eager=ratios.start_over_eager,
            strawman=ratios.strawman(protocol), roofline_fraction=floor.fraction,
            roofline_ceiling_defect=floor.ceiling_defect, task_bytes=cost.bytes, task_flops=cost.flops,
            task_cost=cost, candidate_median_ns=col.arm_median_ns("candidate"),
            baseline_median_ns=col.arm_median_ns("baseline"), failure=col.failure, start_failure=col.start_failure,
            n_pairs=ratios.speed.n_pairs if ratios.speed else 0, protocol_draft=protocol.draft, phase_s=col.phase_s,
            confinement=processes.confinement, memory_plan=col.memory_plan,
            output_transport=col.transport or default_transport, timed_input_sets=col.timed_input_sets())

    def redacted(self) -> "VerdictDetail":
        """Every string redacted (issue 27: a candidate's output can carry a secret, a URL's password or a
        token, into what is stored and what a campaign later shows the model)."""
        return type(self).model_validate(redact_obj(self.model_dump()))


# ---------------------------------------------------------------------------------------- evaluate
def evaluate_candidate(task: str | Path | Task, candidate_source: str, *, store: ResultStore,
                       session: MeasurementContext, protocol: Protocol | None = None,
                       prespawn_next: bool = True) -> EvalResult:
    """Measure one candidate against the task's eager reference and starting candidate.

    ``prespawn_next`` starts the next evaluation's candidate worker afterwards (a campaign's next
    iteration then finds torch imported); a one-off evaluation passes False. A task whose start is
    the eager reference itself (``start:eager-reference``, a KernelBench file) is timed in two arms:
    its speedup over the start is its speedup over eager.

    Raises:
        TaskError: the task name or file is unknown or malformed.
        CandidateError: the candidate source is larger than ``limits.candidate_source_max_bytes``.
        IncomparableError: ``protocol`` is not the session's protocol, or ``store`` is not the
            session's store (a ratio across sessions is refused).
    """
    proto = protocol or session.protocol
    if proto.sha256 != session.protocol.sha256:
        raise IncomparableError("the protocol given differs from the measurement session's; open a new session")
    if Path(store.path).resolve() != Path(session.store.path).resolve():
        raise IncomparableError(f"the session {session.session_id} belongs to {session.store.path}, not {store.path}")
    t = task if isinstance(task, Task) else load_task(task)
    size = len(candidate_source.encode("utf-8"))
    if size > proto.limits.candidate_source_max_bytes:
        raise CandidateError(f"the candidate is {size} bytes; the protocol allows at most "
                             f"{proto.limits.candidate_source_max_bytes} (limits.candidate_source_max_bytes)")
    ref = proto.ref()
    cand_sha = store.add_candidate(candidate_source, "kernel", ref)
    store.add_task(t.id, "kernel", t.source_sha256, t.meta.model_dump(mode="json", exclude={"template"}), ref)

    # the arms' saved outputs go to a fresh folder of the session's work directory (which the children
    # may write), named unpredictably so nothing an earlier candidate left there can pre-empt it
    evdir = Path(tempfile.mkdtemp(prefix=f"eval-{cand_sha[:12]}-", dir=session.workdir))
    # the code the arms import (candidate, start) goes to a folder no child can see or write (issue 27:
    # a candidate rewrote the start arm's file in its own eval folder); each confined child imports a
    # read-only copy staged into its own inbox (harness.measure.runner._worker.Worker._stage)
    srcdir = private_source_dir()
    try:
        return _measure_and_judge(t, candidate_source, cand_sha, evdir, srcdir, store=store, session=session,
                                  proto=proto, prespawn_next=prespawn_next)
    finally:
        # the saved outputs were needed only for the comparisons and gates; a campaign of hundreds of
        # evaluations must not fill the disk, and an evaluation that raises must not leave them behind
        shutil.rmtree(evdir, ignore_errors=True)
        shutil.rmtree(srcdir, ignore_errors=True)


def private_source_dir() -> Path:
    """A folder for one evaluation's candidate and start files, outside every child's view.

    Confined children bind only the session's work directory and their own scratch, so a file here is
    reached by a child only as the read-only copy the parent stages into that child's inbox. Named with
    the reaper's ``atb-measure-`` prefix and claimed, so a killed harness's leftover is removed at the
    next start.
    """
    from harness.measure.runner._reaper import claim

    d = Path(tempfile.mkdtemp(prefix="atb-measure-src-"))
    os.chmod(d, 0o700)
    claim(d)
    return d


def _measure_and_judge(t: Task, candidate_source: str, cand_sha: str, evdir: Path, srcdir: Path, *,
                       store: ResultStore, session: MeasurementContext, proto: Protocol,
                       prespawn_next: bool) -> EvalResult:
    """Everything :func:`evaluate_candidate` does inside its scratch folder ``evdir`` (outputs) with the
    arms' code in ``srcdir`` (no child can write it): measure the arms, form the ratios, run the gates,
    store the verdict and answer with the result."""
    start_src = t.start_source()
    start_sha = sha256_text(start_src)
    cand_path = srcdir / f"atb_candidate_{cand_sha[:12]}.py"
    cand_path.write_text(candidate_source, encoding="utf-8")
    start_path = srcdir / f"atb_start_{start_sha[:12]}.py"
    start_path.write_text(start_src, encoding="utf-8")

    pending_cost = begin_cost(t)   # bytes/FLOPs of the reference, counted in its own process meanwhile
    cand_worker = session.take_candidate_worker()
    ref_worker = session.reference_worker()
    # a start that is the eager reference itself (a KernelBench file's) is what the baseline arm
    # measures already: a third arm would time the same code again
    start_is_eager = t.start_label == EAGER_START_LABEL
    try:
        collector = Collector(t, proto, session.backend, evdir, cand_worker, ref_worker,
                              None if start_is_eager else session.start_worker())
        # an exact rendering of a compiled point gets the compile cache of earlier identical renderings;
        # any other candidate gets nothing of it (harness.measure.compile_cache says why)
        with lend_compile_cache(t, candidate_source, cand_worker, session.backend, session.device_sha256):
            col = collector.run(cand_path, None if start_is_eager else start_path)
    finally:
        cand_worker.close()
        if prespawn_next:
            session.prespawn_candidate_worker()
    processes = ArmProcesses.of(cand_worker, ref_worker)

    ratios = Ratios.of(col, proto, session.backend, start_is_eager=start_is_eager)
    t_cost = time.monotonic()
    cost = pending_cost.resolve(input_bytes=col.input_bytes, output_bytes=col.output_bytes)
    # how long the verdict waited for the FLOP count's process after the measurement (on the H200,
    # 1-5 s for short KernelBench matmul problems: the count, not the measurement, ended those)
    col.op_s["harness.cost_wait"] = time.monotonic() - t_cost
    evidence = Evidence.from_collected(col, task=t, candidate_source=candidate_source, backend=session.backend,
                                       processes=processes, speed=ratios.speed, ceilings=session.ceilings, cost=cost)
    t_judge = time.monotonic()
    judgement = judge(evidence, col, proto)
    col.op_s["harness.judge"] = time.monotonic() - t_judge   # the gates and their decision

    spec = backend_named(session.backend)
    floor = Floor.of(cost, session.ceilings, evidence.candidate_median_ns, spec.cache_factor(proto))
    detail = VerdictDetail.of(col, t, ratios=ratios, floor=floor, cost=cost, processes=processes, protocol=proto,
                              default_transport=spec.default_transport).redacted()
    stamp = SessionStamp(session_id=session.session_id, device_sha256=session.device_sha256, protocol=proto.ref())
    sets = None
    if ratios.speed is not None:
        sets = (MeasurementSet.of_arm(stamp, t.id, cand_sha, "candidate", col.arm_samples("candidate")),
                MeasurementSet.of_arm(stamp, t.id, t.source_sha256, "baseline", col.arm_samples("baseline")))
    verdict = Verdict.judged(stamp, judgement, task_id=t.id, candidate_sha256=cand_sha,
                             baseline_sha256=t.source_sha256, baseline_label=BASELINE_LABEL, estimate=ratios.speed,
                             seeds=col.timing_seeds, sets=sets, detail=detail.model_dump())
    t_store = time.monotonic()
    store.add_verdict(verdict, *(sets or (None, None)))
    col.op_s["harness.store"] = time.monotonic() - t_store
    return EvalResult.from_verdict(verdict, detail, task=t, ratios=ratios, col=col, session=session,
                                   evidence=evidence)


def judge(evidence: Evidence, col: Collected, protocol: Protocol) -> Judgement:
    """The gates' decision (failing closed), overruled to a rejection when the outputs were not correct; its
    texts redacted (issue 27: a candidate's output can carry a secret into the reason and the gates' details)."""
    gates = run_gates_fail_closed(evidence, protocol)
    status, reason = decide_status(gates, evidence, protocol)
    correct = col.outputs_correct
    if status == "accepted" and not correct:
        status, reason = "rejected", "incorrect output"
    return Judgement(status=status, correct=correct, reason=redact(reason),
                     gates=[g.model_copy(update={"detail": redact(g.detail)}) for g in gates])
