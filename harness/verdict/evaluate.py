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

from pydantic import Field

from harness.errors import CandidateError, IncomparableError
from harness.measure.collect import Collected, Collector
from harness.measure.backends import backend_named
from harness.measure.device import achieved_fraction, ceiling_defect, roofline_fraction
from harness.measure.evidence import Evidence
from harness.measure.session import MeasurementContext
from harness.redact import redact, redact_obj
from harness.records import Backend, GateResult, MeasurementSample, MeasurementSet, Verdict, sha256_text
from harness.stats import RatioEstimate, median, rounds_ratio
from harness.store import ResultStore
from harness.tasks import Task, begin_cost, load_task
from harness.verdict.gates import decide_status, run_gates
from harness.verdict.result import VerdictResult
from protocol import Protocol

BASELINE_LABEL = "eager-reference"
EAGER_START_LABEL = "start:eager-reference"


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
        "the measurement"))
    output_transport: str = Field(default="", description=(
        "how the candidate's outputs reached the comparing reference child: 'vmm-fd', 'cuda-ipc', "
        "'file' or a fallback with its reason"))
    confinement: dict[str, str] = Field(
        default_factory=dict,
        description="per arm, how its measuring child was confined: 'bwrap:...' or 'unconfined:<why>'")
    protocol_draft: bool = Field(default=False, description=(
        "measured under a draft protocol: its digest is not in protocol/_released.py (issue 27)"))
    evidence: Evidence | None = Field(default=None, exclude=True)


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
def _arm_rounds(col: Collected, arm: str) -> dict[int, list[list[float]]]:
    """One arm's timed samples per seed, one block per interleaved round, in measuring order."""
    return {t.facts.seed: t.rounds for t in col.timed[arm]}


def _estimate(col: Collected, num: str, den: str, protocol: Protocol, backend: Backend) -> RatioEstimate | None:
    """num/den time ratio: :func:`harness.stats.rounds_ratio` over the (seed, round) block medians,
    with the backend's process-pair component (each arm has its own measuring process)."""
    return rounds_ratio(_arm_rounds(col, num), _arm_rounds(col, den), protocol, "median_of_ratios",
                        process_pair_backend=backend)


def _measurement_set(ctx: MeasurementContext, col: Collected, arm: str, task_id: str, subject: str) -> MeasurementSet:
    """One arm's stored samples, with the round boundaries the verdict's ratio was formed over."""
    name = "candidate" if arm == "candidate" else "baseline"
    return MeasurementSet(session_id=ctx.session_id, device_sha256=ctx.device_sha256, protocol=ctx.protocol.ref(),
                          task_id=task_id, subject_sha256=subject, arm=name,  # type: ignore[arg-type]
                          samples=[MeasurementSample.from_rounds(t.facts.seed, t.rounds) for t in col.timed[arm]])


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
    ref = proto.ref()
    start_src = t.start_source()
    start_sha = sha256_text(start_src)
    cand_path = srcdir / f"atb_candidate_{cand_sha[:12]}.py"
    cand_path.write_text(candidate_source, encoding="utf-8")
    start_path = srcdir / f"atb_start_{start_sha[:12]}.py"
    start_path.write_text(start_src, encoding="utf-8")

    pending_cost = begin_cost(t)   # bytes/FLOPs of the reference, counted in its own process meanwhile
    cand_worker = session.take_candidate_worker()
    ref_worker = session.reference_worker()
    ref_pid = ref_worker.pid
    # a start that is the eager reference itself (a KernelBench file's) is what the baseline arm
    # measures already: a third arm would time the same code again
    start_is_eager = t.start_label == EAGER_START_LABEL
    try:
        collector = Collector(t, proto, session.backend, evdir, cand_worker, ref_worker,
                              None if start_is_eager else session.start_worker())
        col = collector.run(cand_path, None if start_is_eager else start_path)
    finally:
        cand_worker.close()
        if prespawn_next:
            session.prespawn_candidate_worker()

    speed = _estimate(col, "baseline", "candidate", proto, session.backend) if col.failure is None else None
    vs_start = _estimate(col, "start", "candidate", proto, session.backend) if col.failure is None else None
    start_over_eager = _estimate(col, "start", "baseline", proto, session.backend) if col.failure is None else None
    if start_is_eager:
        vs_start, start_over_eager = speed, None
    cand_times = [x for tf in col.timed_facts("candidate") for x in tf.times_ns]
    base_times = [x for tf in col.timed_facts("baseline") for x in tf.times_ns]
    cand_med = median(cand_times) if cand_times else None
    t_cost = time.monotonic()
    cost = pending_cost.resolve(input_bytes=col.input_bytes, output_bytes=col.output_bytes)
    # how long the verdict waited for the FLOP count's process after the measurement (on the H200,
    # 1-5 s for short KernelBench matmul problems: the count, not the measurement, ended those)
    col.op_s["harness.cost_wait"] = time.monotonic() - t_cost
    task_bytes = cost.bytes
    evidence = Evidence(
        task_id=t.id, backend=session.backend, candidate_pid=cand_worker.pid,
        reference_pid=ref_pid,
        candidate_calls=col.candidate_calls, reference_calls=col.reference_calls, comparisons=col.comparisons,
        candidate_timed=col.timed_facts("candidate"), baseline_timed=col.timed_facts("baseline"),
        start_timed=col.timed_facts("start"),
        candidate_integrity=col.candidate_integrity, baseline_integrity=col.baseline_integrity,
        failure=col.failure, ratio=speed.ratio if speed else None, ci_low=speed.ci_low if speed else None,
        ci_high=speed.ci_high if speed else None, candidate_median_ns=cand_med, ceilings=session.ceilings,
        task_bytes=task_bytes, task_flops=cost.flops, task_bytes_source=cost.bytes_source,
        task_flops_source=cost.flops_source, forbidden_ops=list(t.meta.forbidden_ops),
        candidate_source=candidate_source, input_dtype=col.input_dtype)
    gates = run_gates_fail_closed(evidence, proto)
    status, reason = decide_status(gates, evidence, proto)
    correct = col.failure is None and col.correct and all(
        c.passed for c in col.comparisons if c.phase == "correctness")
    if status == "accepted" and not correct:
        status, reason = "rejected", "incorrect output"

    # issue 27: the figure uses the physical-limit gate's ceiling (on CPU the cache-resident bandwidth) and
    # is never above 1.0; a time beyond the floor is a ceiling defect, said in the detail, not a fraction
    cache_factor = backend_named(session.backend).cache_factor(proto)   # CPU: gates.physical_cpu_cache_factor
    roof = roofline_fraction(task_bytes, cost.flops, session.ceilings, cand_med, cache_factor=cache_factor)
    roof_defect = ceiling_defect(achieved_fraction(task_bytes, cost.flops, session.ceilings, cand_med,
                                                   cache_factor=cache_factor), session.ceilings)
    strawman = bool(start_over_eager is not None and start_over_eager.ratio * proto.gates.strawman_ratio <= 1.0)
    detail: dict[str, Any] = {
        "correctness_seeds": col.correctness_seeds, "init_seed": col.init_seed,
        "distributions": sorted({c.distribution for c in col.comparisons if c.phase != "skipped"}),
        # input classes the reference itself cannot take: skipped for this problem, never the candidate's
        # failure (issue 25); class -> the reference's error
        "skipped_classes": dict(col.skipped_classes),
        "capture_probe_errors": list(col.capture_probe_errors),   # why graph replay was not used (CUDA)
        "timing_method": col.method, "start_label": t.start_label, "start_sha256": start_sha,
        "speedup_vs_start": vs_start.model_dump() if vs_start else None,
        "start_over_eager": start_over_eager.model_dump() if start_over_eager else None,
        "strawman": strawman, "roofline_fraction": roof, "roofline_ceiling_defect": roof_defect,
        "task_bytes": task_bytes, "task_flops": cost.flops,
        "task_cost": cost.model_dump(),
        "candidate_median_ns": cand_med, "baseline_median_ns": median(base_times) if base_times else None,
        "failure": col.failure.model_dump() if col.failure else None,
        "start_failure": col.start_failure.model_dump() if col.start_failure else None,
        "n_pairs": speed.n_pairs if speed else 0,
        # issue 27: a verdict measured under an unreleased protocol says so in its own record
        "protocol_draft": proto.draft,
        "phase_s": col.phase_s,
        # issue 14: how each arm's child was confined ("bwrap:..." or "unconfined:<why>"), from the Worker
        "confinement": {"candidate": cand_worker.confinement, "reference": ref_worker.confinement},
        # issue 13: device memory plan, how candidate outputs reached the comparing reference child,
        # and how many distinct input sets each arm's timed calls received (per paired seed)
        "memory_plan": col.memory_plan,
        "output_transport": col.transport or backend_named(session.backend).default_transport,
        "timed_input_sets": {arm: [{"calls": tf.timed_calls, "distinct": tf.distinct_input_sets,
                                    "refill": tf.input_refill} for tf in col.timed_facts(arm)]
                             for arm in col.timed},
    }
    # issue 27: a candidate's output can carry a secret (a URL's password, a token) into the reason and the
    # gates' details; what is stored, and what a campaign later shows the model, is redacted here
    reason = redact(reason)
    gates = [g.model_copy(update={"detail": redact(g.detail)}) for g in gates]
    detail = redact_obj(detail)
    cset = bset = None
    if speed is not None:
        cset = _measurement_set(session, col, "candidate", t.id, cand_sha)
        bset = _measurement_set(session, col, "baseline", t.id, t.source_sha256)
    verdict = Verdict(session_id=session.session_id, device_sha256=session.device_sha256, protocol=ref,
                      task_id=t.id, candidate_sha256=cand_sha, baseline_sha256=t.source_sha256,
                      baseline_label=BASELINE_LABEL, status=status, correct=correct,
                      reason=reason if status != "accepted" or reason else "all gates passed",
                      ratio=speed.ratio if speed else None, ci_low=speed.ci_low if speed else None,
                      ci_high=speed.ci_high if speed else None, seeds=col.timing_seeds,
                      candidate_set_id=cset.id if cset else None, baseline_set_id=bset.id if bset else None,
                      gates=gates, detail=detail)
    store.add_verdict(verdict, cset, bset)
    usable = bool(speed is not None and status == "accepted"
                  and speed.ci_relative_halfwidth <= proto.usability.ci_relative_halfwidth_max)
    return EvalResult(
        verdict=status, correct=correct, gates=gates, speedup=speed.ratio if speed else None,
        speedup_ci=(speed.ci_low, speed.ci_high) if speed else None,
        speedup_vs_start=vs_start.ratio if vs_start else None,
        speedup_vs_start_ci=(vs_start.ci_low, vs_start.ci_high) if vs_start else None,
        strawman=strawman, start_over_eager=start_over_eager.ratio if start_over_eager else None,
        roofline_fraction=roof, device=session.fingerprint.summary(), device_sha256=session.device_sha256,
        seeds=col.timing_seeds, correctness_seeds=col.correctness_seeds, init_seed=col.init_seed,
        protocol_sha256=ref.sha256, candidate_sha256=cand_sha, verdict_id=verdict.id, reason=verdict.reason,
        usable_ci=usable, task_id=t.id, start_label=t.start_label, timing_method=col.method,
        candidate_median_ns=cand_med, baseline_median_ns=detail["baseline_median_ns"], phase_s=col.phase_s,
        op_s={k: round(v, 4) for k, v in sorted(col.op_s.items())}, output_transport=detail["output_transport"],
        confinement=dict(detail["confinement"]), protocol_draft=proto.draft, evidence=evidence)
