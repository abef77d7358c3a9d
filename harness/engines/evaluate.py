"""Evaluate one engine configuration: trial, gates, verdict, store. The engine twin of
``harness.verdict.evaluate.evaluate_candidate``.

The candidate is the configuration *text* (JSON or YAML mapping of flag -> value) exactly as the tuner
wrote it; its SHA-256 is the candidate's identity in the store. The honest baseline is the same engine's
default launch (the empty configuration) in the same measurement session: ``baseline_label`` is
``engine-default``, and ratios are never formed across engines or sessions. Throughput ratios are
candidate requests/s over default requests/s, higher is better, like a kernel speedup.

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
from harness.engines.session import HasSessionId, session_id_of
from harness.engines.task import EngineTask, load_engine_task
from harness.engines.trial import ArmResult, EngineTrial, run_engine_trial
from harness.records import GateResult, MeasurementSample, MeasurementSet, Verdict, sha256_text
from harness.stats import rounds_ratio
from harness.store import SqliteStore
from harness.verdict.gates import run_gates
from harness.verdict.gates.engine import CORRECTNESS_GATES, FLAG_SPACE, EngineEvidence
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


class Judgement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["accepted", "rejected", "quarantined"]
    correct: bool
    ratio: float | None
    ci: tuple[float, float] | None
    gates: list[GateResult]
    reason: str


def judge_trial(trial: EngineTrial, protocol: Protocol) -> Judgement:
    """Ratio, interval, gates and status of a trial (pure: no I/O)."""
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    if trial.candidate is not None:
        c = trial.candidate.throughput_by_seed()
        b = trial.baseline.throughput_by_seed()
        seeds = sorted(set(c) & set(b))
        cv, bv = [c[s] for s in seeds], [b[s] for s in seeds]
        if seeds and min(cv) > 0 and min(bv) > 0:
            # one block (the seed's repetitions) per seed; the seed's score is the block's median
            creps, breps = trial.candidate.throughputs_by_seed(), trial.baseline.throughputs_by_seed()
            est = rounds_ratio({s: [creps[s]] for s in seeds}, {s: [breps[s]] for s in seeds}, protocol,
                               "ratio_of_means")
            if est is not None:
                ratio, ci = est.ratio, (est.ci_low, est.ci_high)
    gates = run_gates(EngineEvidence(trial=trial, ratio=ratio), protocol)
    failed = [g for g in gates if not g.passed]
    correct = all(g.passed for g in gates if g.name in CORRECTNESS_GATES) \
        and trial.candidate is not None
    if not failed and ratio is not None:
        return Judgement(status="accepted", correct=True, ratio=ratio, ci=ci, gates=gates, reason="")
    if ratio is not None and [g.name for g in failed] == ["anomaly"]:
        return Judgement(status="quarantined", correct=correct, ratio=ratio, ci=ci, gates=gates,
                         reason=f"anomaly: {failed[0].detail}")
    reason = "; ".join(f"{g.name}: {g.detail}" for g in failed) or "no throughput ratio could be formed"
    return Judgement(status="rejected", correct=correct, ratio=ratio, ci=ci, gates=gates, reason=reason[:2000])


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _arm_summary(trial: EngineTrial, arm: str) -> dict[str, Any]:
    res = trial.baseline if arm == "baseline" else trial.candidate
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


def _rejected_config(task: EngineTask, text: str, exc: FlagSpaceError, store: SqliteStore, session_id: str,
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


def evaluate_engine_candidate(task: str | Path | EngineTask, config_text: str, *, store: SqliteStore,
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
    ref = protocol.ref()
    task = task if isinstance(task, EngineTask) else load_engine_task(task)
    sid = session_id_of(session)
    sess = store.session(sid)
    try:
        config: dict[str, FlagValue] = task.flag_space().validate_config(parse_config_text(config_text))
    except FlagSpaceError as exc:
        return _rejected_config(task, config_text, exc, store, sid, protocol)

    trial = run_engine_trial(task, config, protocol, seeds=seeds, log_dir=log_dir, progress=progress)
    return record_engine_trial(task, config_text, config, trial, store=store, session=sid, protocol=protocol)


def record_engine_trial(task: EngineTask, config_text: str, config: dict[str, FlagValue], trial: EngineTrial, *,
                        store: SqliteStore, session: HasSessionId | str, protocol: Protocol) -> EngineEvalResult:
    """Judge a finished trial and store its verdict with both measurement sets (one transaction).

    Raises:
        IngestRejected: the store refused the verdict (unpaired or too few seeds, cross-session, ...).
    """
    ref = protocol.ref()
    sid = session_id_of(session)
    sess = store.session(sid)
    j = judge_trial(trial, protocol)

    store.add_task(task.id, "engine", task.sha256, {"engine": task.engine, "served_model": task.served_model_name,
                                                      "workload": task.workload.model_dump(mode="json")}, ref)
    cand_sha = store.add_candidate(config_text, "engine", ref)
    base_sha = store.add_candidate(render_config({}), "engine", ref)
    device = str(sess["device_sha256"])
    cset = bset = None
    if j.ratio is not None and trial.candidate is not None:
        cset = _measurement_set(sid, device, ref, task.id, cand_sha, "candidate", trial.candidate)
        bset = _measurement_set(sid, device, ref, task.id, base_sha, "baseline", trial.baseline)
    detail: dict[str, Any] = {
        "engine": task.engine, "config": config, "model_sha256": trial.model_sha256,
        "engine_version": trial.probe.version_text, "engine_help_sha256": trial.probe.help_sha256,
        "engine_binary_sha256": trial.probe.binary_sha256,
        "space_flags_missing_from_help": trial.probe.space_flags_missing,
        "argv": {"baseline": trial.baseline.argv, "candidate": trial.candidate.argv if trial.candidate else None},
        "metrics": {"baseline": [m.model_dump(mode="json") for m in trial.baseline.metrics],
                    "candidate": [m.model_dump(mode="json") for m in trial.candidate.metrics]
                    if trial.candidate else []},
        "summary": {"baseline": _arm_summary(trial, "baseline"), "candidate": _arm_summary(trial, "candidate")},
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
    usable = bool(j.ratio and j.ci and (j.ci[1] - j.ci[0]) / 2 / j.ratio <= protocol.usability.ci_relative_halfwidth_max)
    return EngineEvalResult(
        verdict=j.status, correct=j.correct, gates=j.gates, speedup=j.ratio, speedup_ci=j.ci,
        device=store.device(device).summary(),
        seeds=trial.seeds, protocol_sha256=ref.sha256, candidate_sha256=cand_sha, verdict_id=v.id, reason=j.reason,
        usable_ci=usable, task_id=task.id, engine=task.engine, config=config,
        metrics=detail["summary"], engine_version=trial.probe.version_text.splitlines()[0] if trial.probe.version_text else "",
        protocol_draft=protocol.draft)


def render_candidate(config: dict[str, FlagValue]) -> str:
    """The candidate text of a configuration (what a tuner submits and the store hashes)."""
    return render_config(config)


def candidate_sha256(config_text: str) -> str:
    return sha256_text(config_text)
