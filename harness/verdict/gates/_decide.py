"""From gate results and evidence to a status: accepted, rejected or quarantined, with the reason.

Order of judgement: a worker failure rejects; an incorrect output rejects; any failed gate other than
the anomaly breaker rejects; no measured speedup rejects; the anomaly breaker alone quarantines; only
then is a verdict accepted, and only with every gate passed (the store refuses anything else).
"""

from __future__ import annotations

from harness.measure.evidence import Evidence
from harness.records import GateResult, VerdictStatus
from harness.verdict.gates.anomaly import NAME as ANOMALY
from harness.verdict.gates.engine import ANOMALY as ENGINE_ANOMALY
from harness.verdict.gates.engine import CORRECTNESS_GATES
from protocol import Protocol

CORRECTNESS_PHASES = ("correctness", "extended", "preflight")


def is_correct(evidence: Evidence) -> tuple[bool, str]:
    """Whether every untimed comparison passed; the reason names the first failure.

    Timed-output comparisons are the stale-output gate's business, not correctness's.
    """
    if evidence.failure is not None:
        f = evidence.failure
        return False, f"{f.role} {f.kind}: {f.detail}"
    comps = [c for c in evidence.comparisons if c.phase in CORRECTNESS_PHASES]
    if not comps:
        return False, "no correctness comparison was recorded"
    bad = [c for c in comps if not c.passed]
    if bad:
        c = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return False, (f"incorrect on seed {c.seed} ({c.distribution}, {c.phase}): "
                       f"{c.reason or 'output differs from the reference'}{more}")
    return True, f"{len(comps)} comparisons with the reference passed"


def decide_status(gates: list[GateResult], evidence: Evidence, protocol: Protocol) -> tuple[VerdictStatus, str]:
    """The verdict status and its reason (never empty for rejected or quarantined)."""
    if not gates:
        return "rejected", "no gate results were recorded (fail closed)"
    if evidence.failure is not None:
        f = evidence.failure
        return "rejected", f"{f.role} {f.kind}: {f.detail}"
    correct, why = is_correct(evidence)
    if not correct:
        return "rejected", why
    failed = [g for g in gates if not g.passed]
    hard = [g for g in failed if g.name != ANOMALY]
    if hard:
        return "rejected", "; ".join(f"gate {g.name} failed: {g.detail}" for g in hard)
    if evidence.ratio is None or evidence.ratio <= 0:
        return "rejected", "no speedup was measured"
    if failed:
        return "quarantined", f"gate {ANOMALY}: {failed[0].detail}"
    return "accepted", f"all {len(gates)} gates passed; speedup {evidence.ratio:.3f}x"


def decide_engine_status(gates: list[GateResult], ratio: float | None,
                         launched: bool) -> tuple[VerdictStatus, bool, str]:
    """An engine verdict's status, correctness and reason (empty when accepted), from its gates and ratio.

    Accepted needs every gate passed and a ratio; the anomaly gate failing alone quarantines; anything
    else rejects, naming each failed gate. Correct means the candidate launched and its outputs held (the
    gates of :data:`harness.verdict.gates.engine.CORRECTNESS_GATES`).
    """
    failed = [g for g in gates if not g.passed]
    correct = launched and all(g.passed for g in gates if g.name in CORRECTNESS_GATES)
    if not failed and ratio is not None:
        return "accepted", True, ""
    if ratio is not None and [g.name for g in failed] == [ENGINE_ANOMALY]:
        return "quarantined", correct, f"anomaly: {failed[0].detail}"
    reason = "; ".join(f"{g.name}: {g.detail}" for g in failed) or "no throughput ratio could be formed"
    return "rejected", correct, reason[:2000]
