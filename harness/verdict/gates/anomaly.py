"""Anomaly breaker: a speedup too large to believe without a second look.

A speedup above ``protocol.gates.anomaly_speedup`` over the honest baseline is the signature of most
published benchmark exploits. This gate failing alone does not reject: :func:`harness.verdict.gates.decide_status`
then quarantines the verdict, which stays out of headlines until the extended pass
(:func:`harness.verdict.quarantine.review_quarantine`) clears it.

It also trips, at any speedup, when the candidate's time is below the time the reference's FLOPs take at
the device's measured peak (:func:`harness.verdict.gates.physical.flop_trigger`, protocol 1.6.0): fewer
operations than the reference may be an honest algebraic rewrite, so that is scrutiny, not a rejection;
and (1.7.0) when it is below the read time of inputs whose bytes were counted rather than declared
(:func:`harness.verdict.gates.physical.input_trigger`): a problem's stated structure may let a
candidate read part of them.
"""

from __future__ import annotations

from harness.measure.evidence import Evidence
from harness.verdict.gates._base import gate
from harness.verdict.gates.physical import flop_trigger, input_trigger
from protocol import Protocol

NAME = "anomaly"


@gate(NAME)
def anomaly_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    limit = protocol.gates.anomaly_speedup
    problems = [why for why in (flop_trigger(evidence, protocol), input_trigger(evidence, protocol)) if why]
    if evidence.ratio is None:
        return problems, "no speedup was measured, so none is anomalous"
    if evidence.ratio > limit:
        problems.append(
            f"speedup {evidence.ratio:.2f}x is above the anomaly threshold {limit:g}x "
            "(protocol gates.anomaly_speedup): quarantined until the extended verification pass "
            "(more seeds, adversarial inputs, physical limit) clears it")
    return problems, f"speedup {evidence.ratio:.2f}x is within the anomaly threshold {limit:g}x"
