"""Gates of an engine trial: pure functions of the trial's facts and the protocol, failing closed.

They keep a configuration from looking fast for the wrong reason: it must launch, stay up, fail no more
requests than the protocol allows, and at temperature 0 return the same completions as the default
launch, at least as long (an engine that truncates or empties its answers does less work); a completion
that differs from every default completion counts when it is the default's greedy decode up to near ties
(a real model's batched decoding is not bit-reproducible; see :mod:`harness.engines.outputs`). The default
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
    """Each candidate completion must equal a default completion of the same request (any repetition), or
    be the default's greedy decode up to near ties: at every token where it leaves the default's greedy
    path, its token is within ``engine.output_tie_tolerance_nats`` of the best (facts gathered after the
    timed repetitions, :mod:`harness.engines.outputs`). A completion with neither is unmatched; a failed
    request is unmatched; the fraction matched must reach ``engine.output_match_min_fraction``."""
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
    return GateResult(name="output_match", passed=frac >= need, detail=detail[:1500])


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
