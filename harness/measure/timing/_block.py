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
    """

    times_ns: list[float]
    wall_ns: float
    timed_total_ns: float
    method: str
    captured: dict[int, Any] = field(default_factory=dict)
