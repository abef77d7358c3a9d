"""When an iteration counts: built, correct, every gate passed, accepted, and a tight enough interval.

Best-so-far, compare and the reports use only usable iterations, so a lucky noisy reading or a
candidate that passed by failing a gate can never become a tuner's best. The reason strings start with
a fixed category (``category: detail``) so reports can group them.
"""

from __future__ import annotations

from harness.records import Verdict
from protocol import Protocol

REASON_CATEGORIES = (
    "no_submission", "not_built", "failed_to_run", "incorrect", "gate_failed", "quarantined",
    "rejected", "no_interval", "ci_too_wide",
)


def reason_category(reason: str) -> str:
    """The fixed category of an unusable reason ('' for a usable iteration)."""
    return reason.split(":", 1)[0].strip() if reason else ""


def assess_usability(verdict: Verdict | None, protocol: Protocol, *, built: bool = True,
                     no_verdict_reason: str = "") -> tuple[bool, str]:
    """Return ``(usable, reason)``; ``reason`` is empty exactly when usable.

    A quarantined verdict is not usable even if a later review clears it: the iteration is judged as it
    was recorded (the store's rule requires an accepted verdict for a usable row). ``built=False`` marks
    a candidate the tuner could not build (no verdict needed).
    """
    if not built:
        return False, "not_built: " + (no_verdict_reason or "the candidate did not build")
    if verdict is None:
        return False, "no_submission: " + (no_verdict_reason or "the iteration produced no candidate verdict")
    failure = verdict.detail.get("failure") if isinstance(verdict.detail, dict) else None
    if not verdict.correct:
        if failure:
            return False, f"failed_to_run: {verdict.reason or failure}"
        return False, f"incorrect: {verdict.reason or 'outputs did not match the reference'}"
    failed = [g.name for g in verdict.gates if not g.passed]
    if failed:
        return False, "gate_failed: " + ", ".join(failed)
    status = verdict.status
    if status == "quarantined":
        return False, f"quarantined: {verdict.reason}"
    if status != "accepted":
        return False, f"rejected: {verdict.reason or status}"
    half = verdict.ci_relative_halfwidth
    if half is None:
        return False, "no_interval: the verdict has no speedup interval"
    bar = protocol.usability.ci_relative_halfwidth_max
    if half > bar:
        return False, f"ci_too_wide: relative half-width {half:.4f} exceeds the usability bar {bar:.4f}"
    return True, ""
