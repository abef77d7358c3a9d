"""The result of one timed block of repetitions inside a measuring child."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class BlockTiming:
    """Per-repetition times of one block, with the outputs captured after chosen repetitions.

    ``times_ns`` are per call (a repetition batched into an inner loop is divided by its length);
    ``wall_ns`` runs from the first start to after the final device synchronisation; ``timed_total_ns``
    is the sum of the timed regions (per repetition, not per call).

    ``harness_ns`` is, per repetition, the host time the loop spent in its *own* work inside the wall
    window: outside the measured call and outside the refill (which ``wall_ns`` already leaves out),
    i.e. the cache flush's launch, the event records, keeping a captured output. Why (issue 25): on a
    fast candidate that work is exposed in the wall while on the slower reference it overlaps the
    reference's device time, so the escape gate must read it from the candidate's own loop rather than
    infer it from the baseline's excess (which read 0.000 ms on the H200 and rejected honest 2.7-6x).
    Empty: not recorded.
    """

    times_ns: list[float]
    wall_ns: float
    timed_total_ns: float
    method: str
    captured: dict[int, Any] = field(default_factory=dict)
    harness_ns: list[float] = field(default_factory=list)
