"""Gates of an engine trial: pure functions of the trial's facts and the protocol, failing closed.

They keep a configuration from looking fast for the wrong reason: it must launch, stay up, fail no more
requests than the protocol allows, and at temperature 0 return the same completions as the default
launch, at least as long (an engine that truncates or empties its answers does less work). The default
arm's own failures also fail a gate: a comparison against a broken baseline says nothing. A ratio above
the protocol's anomaly threshold quarantines the verdict, as for kernels.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.engines.trial import ArmResult, EngineTrial
from harness.records import GateResult
from protocol import Protocol

GATE_NAMES = ("engine_launch", "engine_alive", "failed_requests", "baseline_requests", "output_match",
              "output_length", "anomaly")


def _failed(arm: ArmResult) -> tuple[int, int]:
    total = sum(m.requests for m in arm.metrics)
    return sum(m.failed for m in arm.metrics), total


def launch_gate(trial: EngineTrial, protocol: Protocol) -> GateResult:
    if trial.candidate is None:
        return GateResult(name="engine_launch", passed=False,
                          detail=f"{trial.launch_error}; engine log: {trial.launch_log[-500:]}")
    return GateResult(name="engine_launch", passed=True,
                      detail=f"both arms became ready (candidate in {trial.candidate.ready_s or 0:.2f} s)")


def alive_gate(trial: EngineTrial, protocol: Protocol) -> GateResult:
    assert trial.candidate is not None
    for arm in (trial.candidate, trial.baseline):
        if not arm.alive_at_end:
            return GateResult(name="engine_alive", passed=False,
                              detail=f"the {arm.arm} engine exited during the trial; log: {arm.log_excerpt[-400:]}")
    return GateResult(name="engine_alive", passed=True, detail="both engines were still running at the end")


def failed_requests_gate(trial: EngineTrial, protocol: Protocol) -> GateResult:
    assert trial.candidate is not None
    failed, total = _failed(trial.candidate)
    limit = protocol.engine.max_failed_fraction
    errors = sorted({r.error for run in trial.candidate.runs for r in run.results if not r.ok})[:3]
    ok = failed / total <= limit
    return GateResult(name="failed_requests", passed=ok,
                      detail=f"candidate failed {failed}/{total} requests (allowed fraction {limit:g})"
                             + (f"; errors: {errors}" if errors else ""))


def baseline_requests_gate(trial: EngineTrial, protocol: Protocol) -> GateResult:
    failed, total = _failed(trial.baseline)
    limit = protocol.engine.max_failed_fraction
    return GateResult(name="baseline_requests", passed=failed / total <= limit,
                      detail=f"default launch failed {failed}/{total} requests (allowed fraction {limit:g})")


def output_match_gate(trial: EngineTrial, protocol: Protocol) -> GateResult:
    assert trial.candidate is not None
    base = {(run.seed, run.rep, r.index): r for run in trial.baseline.runs for r in run.results}
    pairs = [(r, base.get((run.seed, run.rep, r.index))) for run in trial.candidate.runs for r in run.results]
    matched = sum(1 for c, b in pairs if b is not None and c.ok and b.ok and c.text == b.text)
    frac = matched / len(pairs) if pairs else 0.0
    need = protocol.engine.output_match_min_fraction
    return GateResult(name="output_match", passed=frac >= need,
                      detail=f"{matched}/{len(pairs)} temperature-0 completions equal the default's "
                             f"({frac:.3f}, need {need:g})")


def output_length_gate(trial: EngineTrial, protocol: Protocol) -> GateResult:
    assert trial.candidate is not None
    base = {(run.seed, run.rep, r.index): r for run in trial.baseline.runs for r in run.results}
    short = [(run.seed, r.index) for run in trial.candidate.runs for r in run.results
             if r.ok and (b := base.get((run.seed, run.rep, r.index))) is not None and b.ok
             and r.completion_tokens < b.completion_tokens]
    c_tok = sum(m.output_tokens for m in trial.candidate.metrics)
    b_tok = sum(m.output_tokens for m in trial.baseline.metrics)
    return GateResult(name="output_length", passed=not short,
                      detail=f"{len(short)} candidate completions shorter than the default's "
                             f"(output tokens: candidate {c_tok}, default {b_tok})")


def anomaly_gate(trial: EngineTrial, protocol: Protocol, ratio: float | None) -> GateResult:
    limit = protocol.gates.anomaly_speedup
    if ratio is None:
        return GateResult(name="anomaly", passed=True, detail="no ratio was measured, so none is anomalous")
    return GateResult(name="anomaly", passed=ratio <= limit,
                      detail=f"throughput ratio {ratio:.3f}x against the threshold {limit:g}x "
                             "(protocol gates.anomaly_speedup)")


def _safe(name: str, fn: Callable[[], GateResult]) -> GateResult:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a gate that errors fails (fail closed)
        return GateResult(name=name, passed=False, detail=f"gate errored: {type(exc).__name__}: {exc}")


def run_engine_gates(trial: EngineTrial, protocol: Protocol, ratio: float | None) -> list[GateResult]:
    """Every gate's result, in a fixed order; after a failed launch only the launch gate runs."""
    first = launch_gate(trial, protocol)
    if not first.passed:
        return [first]
    checks: list[tuple[str, Callable[[], GateResult]]] = [
        ("engine_alive", lambda: alive_gate(trial, protocol)),
        ("failed_requests", lambda: failed_requests_gate(trial, protocol)),
        ("baseline_requests", lambda: baseline_requests_gate(trial, protocol)),
        ("output_match", lambda: output_match_gate(trial, protocol)),
        ("output_length", lambda: output_length_gate(trial, protocol)),
        ("anomaly", lambda: anomaly_gate(trial, protocol, ratio)),
    ]
    return [first] + [_safe(n, f) for n, f in checks]
