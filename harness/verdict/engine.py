"""The engine path of the one verdict pipeline: an engine trial's facts to a stored verdict.

The candidate is the configuration *text* (JSON or YAML mapping of flag -> value) exactly as the tuner
wrote it; its SHA-256 is the candidate's identity in the store. The honest baseline is the same engine's
default launch (the empty configuration) in the same measurement session: ``baseline_label`` is
``engine-default``, and ratios are never formed across engines or sessions. The throughput ratio is
candidate requests/s over default requests/s (higher is better, like a kernel speedup), formed here by
the project's one ratio estimator (:func:`harness.stats.rounds_ratio`, ``ratio_of_means``, one block per
paired seed), judged by the engine gates of the one registry and decided by
:func:`harness.verdict.gates.decide_engine_status`. The trial itself (:func:`harness.measure.serving.trial.run_engine_trial`)
only measures.

A configuration that does not fit the flag space, does not launch, crashes, fails requests or changes
the temperature-0 outputs gives a *rejected* result, stored with its gates, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.engines._errors import FlagSpaceError
from harness.engines.flags import FlagValue, parse_config_text, render_config
from harness.engines.task import EngineTask, load_engine_task
from harness.measure.serving.trial import ArmResult, EngineTrial, run_engine_trial
from harness.measure.serving.session import HasSessionId, session_id_of
from harness.records import GateResult, MeasurementSample, MeasurementSet, Verdict, VerdictStatus
from harness.stats import RatioEstimate, rounds_ratio
from harness.store import ResultStore
from harness.verdict.gates import FLAG_SPACE, EngineEvidence, decide_engine_status, run_gates
from harness.verdict.result import VerdictResult
from protocol import Protocol, ProtocolRef, load_protocol

BASELINE_LABEL = "engine-default"
UNIT: Literal["requests_per_s"] = "requests_per_s"


class EngineEvalResult(VerdictResult):
    """The ``atb engine eval`` fields: :class:`harness.verdict.result.VerdictResult` (``speedup`` is candidate /
    default requests per second) plus the engine's own."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    engine: str
    config: dict[str, Any] = Field(default_factory=dict)
    baseline_label: str = BASELINE_LABEL
    metrics: dict[str, Any] = Field(default_factory=dict, description="per arm: mean throughputs, latencies")
    engine_version: str = ""
    protocol_draft: bool = Field(default=False, description=(
        "measured under a draft protocol: its digest is not in protocol/_released.py (issue 27)"))


class EngineJudgement(BaseModel):
    """What verdict/ makes of a trial before anything is stored: ratio, interval, gates, status."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: VerdictStatus
    correct: bool
    estimate: RatioEstimate | None
    gates: list[GateResult]
    reason: str

    @property
    def ratio(self) -> float | None:
        return self.estimate.ratio if self.estimate is not None else None

    @property
    def ci(self) -> tuple[float, float] | None:
        return (self.estimate.ci_low, self.estimate.ci_high) if self.estimate is not None else None

    def usable(self, protocol: Protocol) -> bool:
        """The interval is tight enough to act on (the estimator's own relative half-width)."""
        est = self.estimate
        return bool(est is not None and est.ratio and est.ci_relative_halfwidth
                    <= protocol.usability.ci_relative_halfwidth_max)


def engine_ratio(trial: EngineTrial, protocol: Protocol) -> RatioEstimate | None:
    """Candidate over default requests/s with its paired interval; None when either arm lacks a positive
    throughput at a shared seed (or the candidate never launched). One block per seed: its repetitions."""
    if trial.candidate is None:
        return None
    c, b = trial.candidate.throughput_by_seed(), trial.baseline.throughput_by_seed()
    seeds = sorted(set(c) & set(b))
    if not seeds or min(c[s] for s in seeds) <= 0 or min(b[s] for s in seeds) <= 0:
        return None
    creps, breps = trial.candidate.throughputs_by_seed(), trial.baseline.throughputs_by_seed()
    return rounds_ratio({s: [creps[s]] for s in seeds}, {s: [breps[s]] for s in seeds}, protocol, "ratio_of_means")


def judge_engine_trial(trial: EngineTrial, protocol: Protocol) -> EngineJudgement:
    """Ratio, interval, gates and status of a trial (pure: no I/O)."""
    est = engine_ratio(trial, protocol)
    ratio = est.ratio if est is not None else None
    gates = run_gates(EngineEvidence(trial=trial, ratio=ratio), protocol)
    status, correct, reason = decide_engine_status(gates, ratio, launched=trial.candidate is not None)
    return EngineJudgement(status=status, correct=correct, estimate=est, gates=gates, reason=reason)


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _arm_summary(res: ArmResult | None) -> dict[str, Any]:
    if res is None or not res.metrics:
        return {}
    ms = res.metrics
    return {
        "request_throughput": _mean([m.request_throughput for m in ms]),
        "output_token_throughput": _mean([m.output_token_throughput for m in ms]),
        "ttft_p50_s": _mean([m.ttft_s.p50 for m in ms]), "ttft_p99_s": _mean([m.ttft_s.p99 for m in ms]),
        "tpot_p50_s": _mean([m.tpot_s.p50 for m in ms]), "tpot_p99_s": _mean([m.tpot_s.p99 for m in ms]),
        "e2e_p50_s": _mean([m.e2e_s.p50 for m in ms]), "e2e_p99_s": _mean([m.e2e_s.p99 for m in ms]),
        "failed": sum(m.failed for m in ms), "requests": sum(m.requests for m in ms),
    }


def _checks_summary(trial: EngineTrial, protocol: Protocol) -> dict[str, Any]:
    """The near-tie checks in brief: how many, how many consistent, the largest gap, and the failing ones."""
    tol = protocol.engine.output_tie_tolerance_nats
    ok = [c for c in trial.output_checks if c.consistent(tol)]
    bad = [c for c in trial.output_checks if not c.consistent(tol)]
    gaps = [g for c in ok if (g := c.max_gap()) is not None]
    return {"checked": len(trial.output_checks), "consistent": len(ok), "tolerance_nats": tol,
            "largest_consistent_gap_nats": max(gaps) if gaps else None,
            "reference_requests": sum(c.reference_requests for c in trial.output_checks),
            "inconsistent": [c.model_dump(mode="json") for c in bad[:20]]}


def _measurement_set(session_id: str, device: str, ref: ProtocolRef, task_id: str, subject: str,
                     arm: Literal["candidate", "baseline"], res: ArmResult) -> MeasurementSet:
    """One arm's requests/s: per paired seed, every repetition's value."""
    return MeasurementSet(session_id=session_id, device_sha256=device, protocol=ref, task_id=task_id,
                          subject_sha256=subject, arm=arm, kind="engine", unit=UNIT,
                          samples=[MeasurementSample(seed=seed, values=values)
                                   for seed, values in sorted(res.throughputs_by_seed().items())])


def _rejected_config(task: EngineTask, text: str, exc: FlagSpaceError, store: ResultStore, session_id: str,
                     protocol: Protocol) -> EngineEvalResult:
    ref = protocol.ref()
    sess = store.session(session_id)
    cand = store.add_candidate(text, "engine", ref)
    base = store.add_candidate(render_config({}), "engine", ref)
    gate = GateResult(name=FLAG_SPACE, passed=False, detail=str(exc))
    v = Verdict(session_id=session_id, device_sha256=sess["device_sha256"], protocol=ref, task_id=task.id,
                kind="engine", candidate_sha256=cand, baseline_sha256=base, baseline_label=BASELINE_LABEL,
                status="rejected", correct=False, reason=f"{FLAG_SPACE}: {exc}", gates=[gate],
                detail={"engine": task.engine, "config_text": text, "protocol_draft": protocol.draft})
    store.add_verdict(v)
    return EngineEvalResult(verdict="rejected", correct=False, gates=[gate],
                            device=store.device(sess["device_sha256"]).summary(),
                            seeds=[], protocol_sha256=ref.sha256, candidate_sha256=cand, verdict_id=v.id,
                            reason=v.reason, task_id=task.id, engine=task.engine, protocol_draft=protocol.draft)


def evaluate_engine_candidate(task: str | Path | EngineTask, config_text: str, *, store: ResultStore,
                              session: HasSessionId | str, protocol: Protocol | None = None,
                              seeds: list[int] | None = None, log_dir: Path | None = None,
                              progress: Callable[[str], None] | None = None) -> EngineEvalResult:
    """Measure ``config_text`` against the engine's default on paired seeds and store the verdict.

    Raises:
        EngineTaskError: the task does not exist or is malformed.
        EngineNotBuilt: the engine is not installed on this machine.
        EngineLaunchFailed: the engine's *default* launch failed (the machine or task is broken).
        IngestRejected: the store refused the verdict (for example too few paired seeds).
    """
    protocol = protocol or load_protocol()
    task = task if isinstance(task, EngineTask) else load_engine_task(task)
    sid = session_id_of(session)
    try:
        config: dict[str, FlagValue] = task.flag_space().validate_config(parse_config_text(config_text))
    except FlagSpaceError as exc:
        return _rejected_config(task, config_text, exc, store, sid, protocol)

    trial = run_engine_trial(task, config, protocol, seeds=seeds, log_dir=log_dir, progress=progress)
    return record_engine_trial(task, config_text, config, trial, store=store, session=sid, protocol=protocol)


def record_engine_trial(task: EngineTask, config_text: str, config: dict[str, FlagValue], trial: EngineTrial, *,
                        store: ResultStore, session: HasSessionId | str, protocol: Protocol) -> EngineEvalResult:
    """Judge a finished trial and store its verdict with both measurement sets (one transaction).

    Raises:
        IngestRejected: the store refused the verdict (unpaired or too few seeds, cross-session, ...).
    """
    ref = protocol.ref()
    sid = session_id_of(session)
    sess = store.session(sid)
    j = judge_engine_trial(trial, protocol)

    store.add_task(task.id, "engine", task.sha256, {"engine": task.engine, "served_model": task.served_model_name,
                                                      "workload": task.workload.model_dump(mode="json")}, ref)
    cand_sha = store.add_candidate(config_text, "engine", ref)
    base_sha = store.add_candidate(render_config({}), "engine", ref)
    device = str(sess["device_sha256"])
    cset = bset = None
    if j.ratio is not None and trial.candidate is not None:
        cset = _measurement_set(sid, device, ref, task.id, cand_sha, "candidate", trial.candidate)
        bset = _measurement_set(sid, device, ref, task.id, base_sha, "baseline", trial.baseline)
    summary = {"baseline": _arm_summary(trial.baseline), "candidate": _arm_summary(trial.candidate)}
    detail: dict[str, Any] = {
        "engine": task.engine, "config": config, "model_sha256": trial.model_sha256,
        "engine_version": trial.probe.version_text, "engine_help_sha256": trial.probe.help_sha256,
        "engine_binary_sha256": trial.probe.binary_sha256,
        "space_flags_missing_from_help": trial.probe.space_flags_missing,
        "argv": {"baseline": trial.baseline.argv, "candidate": trial.candidate.argv if trial.candidate else None},
        "metrics": {"baseline": [m.model_dump(mode="json") for m in trial.baseline.metrics],
                    "candidate": [m.model_dump(mode="json") for m in trial.candidate.metrics]
                    if trial.candidate else []},
        "summary": summary,
        "launch_log": trial.launch_log,
        "output_checks": _checks_summary(trial, protocol),
        # issue 27: a verdict measured under an unreleased protocol says so in its own record (as kernels do)
        "protocol_draft": protocol.draft,
    }
    v = Verdict(session_id=sid, device_sha256=device, protocol=ref, task_id=task.id, kind="engine",
                candidate_sha256=cand_sha, baseline_sha256=base_sha, baseline_label=BASELINE_LABEL,
                status=j.status, correct=j.correct, reason=j.reason, ratio=j.ratio,
                ci_low=j.ci[0] if j.ci else None, ci_high=j.ci[1] if j.ci else None,
                seeds=trial.seeds if cset else [], candidate_set_id=cset.id if cset else None,
                baseline_set_id=bset.id if bset else None, gates=j.gates, detail=detail)
    store.add_verdict(v, cset, bset)
    return EngineEvalResult(
        verdict=j.status, correct=j.correct, gates=j.gates, speedup=j.ratio, speedup_ci=j.ci,
        device=store.device(device).summary(),
        seeds=trial.seeds, protocol_sha256=ref.sha256, candidate_sha256=cand_sha, verdict_id=v.id, reason=j.reason,
        usable_ci=j.usable(protocol), task_id=task.id, engine=task.engine, config=config,
        metrics=summary, engine_version=trial.probe.version_text.splitlines()[0] if trial.probe.version_text else "",
        protocol_draft=protocol.draft)


__all__ = ["BASELINE_LABEL", "UNIT", "EngineEvalResult", "EngineJudgement", "engine_ratio", "evaluate_engine_candidate",
           "judge_engine_trial", "record_engine_trial"]
