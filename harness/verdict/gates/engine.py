"""The gates of a serving-engine trial, registered in the one gate registry for subject kind ``engine``.

They keep a configuration from looking fast for the wrong reason: it must launch, stay up, fail no more
requests than the protocol allows, and at temperature 0 return the same completions as the default
launch, at least as long (an engine that truncates or empties its answers does less work); a completion
that differs from every default completion counts when it is the default's greedy decode up to near ties
(a real model's batched decoding is not bit-reproducible; see :mod:`harness.measure.serving.outputs`). The default
arm's own failures also fail a gate: a comparison against a broken baseline says nothing. A ratio above
the protocol's anomaly threshold quarantines the verdict, as for kernels.

Each gate is a pure function of :class:`EngineEvidence` (the trial's facts and the ratio verdict/ formed)
and the protocol. The launch gate is a *stop* gate: when it fails the other gates have no arms to judge,
so :func:`harness.verdict.gates.run_gates` runs nothing after it. A gate that raises fails with the
wording engine verdicts have always stored (``gate errored: ...``), so stored details do not change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from harness.records import GateResult, SubjectKind
from protocol import Protocol

if TYPE_CHECKING:  # types only: a kernel `atb eval` loads this module and must import no engine code
    from harness.measure.serving.trial import ArmResult, EngineTrial

KIND: Final[SubjectKind] = "engine"
LAUNCH: Final = "engine_launch"
ALIVE: Final = "engine_alive"
FAILED_REQUESTS: Final = "failed_requests"
BASELINE_REQUESTS: Final = "baseline_requests"
OUTPUT_MATCH: Final = "output_match"
OUTPUT_LENGTH: Final = "output_length"
ANOMALY: Final = "anomaly"
#: the gate of a configuration refused before any trial (outside its flag space): a rejection only, so
#: it is known to the store but not required on every engine verdict
FLAG_SPACE: Final = "flag_space"
#: the gates whose failure means the candidate's outputs are wrong (a verdict's ``correct`` reads them)
CORRECTNESS_GATES: Final = (OUTPUT_MATCH, OUTPUT_LENGTH, FAILED_REQUESTS)


@dataclass(frozen=True)
class EngineEvidence:
    """What the engine gates judge: the trial's facts and the throughput ratio verdict/ formed (None when
    none could be formed)."""

    trial: EngineTrial
    ratio: float | None


@dataclass(frozen=True)
class EngineGate:
    """A gate of subject kind ``engine``: ``check(evidence, protocol) -> GateResult``."""

    name: str
    check: Callable[[EngineEvidence, Protocol], GateResult]
    #: when this gate fails, no later gate runs (the launch gate: a candidate that never ran has no facts)
    stops_on_fail: bool = False
    kinds: frozenset[SubjectKind] = frozenset({KIND})

    def __call__(self, evidence: EngineEvidence, protocol: Protocol) -> GateResult:
        if self.stops_on_fail:
            return self.check(evidence, protocol)
        try:
            return self.check(evidence, protocol)
        except Exception as exc:  # noqa: BLE001 - a gate that errors fails (fail closed)
            return GateResult(name=self.name, passed=False, detail=f"gate errored: {type(exc).__name__}: {exc}")


def _failed(arm: ArmResult) -> tuple[int, int]:
    total = sum(m.requests for m in arm.metrics)
    return sum(m.failed for m in arm.metrics), total


def _launch(ev: EngineEvidence, protocol: Protocol) -> GateResult:
    trial = ev.trial
    if trial.candidate is None:
        return GateResult(name=LAUNCH, passed=False,
                          detail=f"{trial.launch_error}; engine log: {trial.launch_log[-500:]}")
    return GateResult(name=LAUNCH, passed=True,
                      detail=f"both arms became ready (candidate in {trial.candidate.ready_s or 0:.2f} s)")


def _alive(ev: EngineEvidence, protocol: Protocol) -> GateResult:
    trial = ev.trial
    assert trial.candidate is not None
    for arm in (trial.candidate, trial.baseline):
        if not arm.alive_at_end:
            return GateResult(name=ALIVE, passed=False,
                              detail=f"the {arm.arm} engine exited during the trial; log: {arm.log_excerpt[-400:]}")
    return GateResult(name=ALIVE, passed=True, detail="both engines were still running at the end")


def _failed_requests(ev: EngineEvidence, protocol: Protocol) -> GateResult:
    assert ev.trial.candidate is not None
    failed, total = _failed(ev.trial.candidate)
    limit = protocol.engine.max_failed_fraction
    errors = sorted({r.error for run in ev.trial.candidate.runs for r in run.results if not r.ok})[:3]
    ok = failed / total <= limit
    return GateResult(name=FAILED_REQUESTS, passed=ok,
                      detail=f"candidate failed {failed}/{total} requests (allowed fraction {limit:g})"
                             + (f"; errors: {errors}" if errors else ""))


def _baseline_requests(ev: EngineEvidence, protocol: Protocol) -> GateResult:
    failed, total = _failed(ev.trial.baseline)
    limit = protocol.engine.max_failed_fraction
    return GateResult(name=BASELINE_REQUESTS, passed=failed / total <= limit,
                      detail=f"default launch failed {failed}/{total} requests (allowed fraction {limit:g})")


def _output_match(ev: EngineEvidence, protocol: Protocol) -> GateResult:
    """Each candidate completion must equal a default completion of the same request (any repetition), or
    be the default's greedy decode up to near ties: at every token where it leaves the default's greedy
    path, its token is within ``engine.output_tie_tolerance_nats`` of the best (facts gathered after the
    timed repetitions, :mod:`harness.measure.serving.outputs`). A completion with neither is unmatched; a failed
    request is unmatched; the fraction matched must reach ``engine.output_match_min_fraction``."""
    trial = ev.trial
    assert trial.candidate is not None
    defaults: dict[tuple[int, int], set[str]] = {}
    for run in trial.baseline.runs:
        for r in run.results:
            if r.ok:
                defaults.setdefault((run.seed, r.index), set()).add(r.text)
    tol = protocol.engine.output_tie_tolerance_nats
    checks = {(c.seed, c.index, c.text): c for c in trial.output_checks}
    total = equal = near = 0
    worst: float | None = None
    unmatched: list[str] = []
    for run in trial.candidate.runs:
        for r in run.results:
            total += 1
            if not r.ok:
                continue
            if r.text in defaults.get((run.seed, r.index), set()):
                equal += 1
                continue
            check = checks.get((run.seed, r.index, r.text))
            if check is not None and check.consistent(tol):
                near += 1
                gap = check.max_gap()
                worst = gap if worst is None or (gap is not None and gap > worst) else worst
            elif len(unmatched) < 3:
                why = ("not checked" if check is None else check.error or
                       "; ".join(f"byte {d.at_byte}: {d.candidate_token!r} for the default's {d.reference_token!r}, "
                                 + ("not in its top tokens" if d.gap_nats is None else f"{d.gap_nats:.3f} nats below")
                                 for d in check.divergences
                                 if d.gap_nats is None or d.gap_nats > tol) or "incomplete")
                unmatched.append(f"seed {run.seed} request {r.index}: {why}")
    frac = (equal + near) / total if total else 0.0
    need = protocol.engine.output_match_min_fraction
    detail = (f"{equal + near}/{total} temperature-0 completions match the default's ({frac:.3f}, need {need:g}): "
              f"{equal} equal a default completion, {near} are its greedy decode up to near ties "
              f"(within {tol:g} nats" + (f", largest {worst:.3f}" if worst is not None else "") + ")")
    if unmatched:
        detail += "; unmatched, e.g. " + " | ".join(unmatched)
    return GateResult(name=OUTPUT_MATCH, passed=frac >= need, detail=detail[:1500])


def _output_length(ev: EngineEvidence, protocol: Protocol) -> GateResult:
    trial = ev.trial
    assert trial.candidate is not None
    base = {(run.seed, run.rep, r.index): r for run in trial.baseline.runs for r in run.results}
    short = [(run.seed, r.index) for run in trial.candidate.runs for r in run.results
             if r.ok and (b := base.get((run.seed, run.rep, r.index))) is not None and b.ok
             and r.completion_tokens < b.completion_tokens]
    c_tok = sum(m.output_tokens for m in trial.candidate.metrics)
    b_tok = sum(m.output_tokens for m in trial.baseline.metrics)
    return GateResult(name=OUTPUT_LENGTH, passed=not short,
                      detail=f"{len(short)} candidate completions shorter than the default's "
                             f"(output tokens: candidate {c_tok}, default {b_tok})")


def _anomaly(ev: EngineEvidence, protocol: Protocol) -> GateResult:
    limit = protocol.gates.anomaly_speedup
    if ev.ratio is None:
        return GateResult(name=ANOMALY, passed=True, detail="no ratio was measured, so none is anomalous")
    return GateResult(name=ANOMALY, passed=ev.ratio <= limit,
                      detail=f"throughput ratio {ev.ratio:.3f}x against the threshold {limit:g}x "
                             "(protocol gates.anomaly_speedup)")


#: every engine verdict carries these gates, in this order (the store requires them)
ENGINE_GATES: tuple[EngineGate, ...] = (
    EngineGate(LAUNCH, _launch, stops_on_fail=True),
    EngineGate(ALIVE, _alive),
    EngineGate(FAILED_REQUESTS, _failed_requests),
    EngineGate(BASELINE_REQUESTS, _baseline_requests),
    EngineGate(OUTPUT_MATCH, _output_match),
    EngineGate(OUTPUT_LENGTH, _output_length),
    EngineGate(ANOMALY, _anomaly),
)

__all__ = ["ANOMALY", "CORRECTNESS_GATES", "ENGINE_GATES", "FLAG_SPACE", "KIND", "EngineEvidence", "EngineGate"]
