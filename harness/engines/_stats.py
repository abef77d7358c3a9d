"""The engine's paired throughput ratio, as a thin view of the one estimator.

Kept for callers that hold one throughput per seed: :func:`paired_ratio_ci` is
:func:`harness.stats.rounds_ratio` with statistic ``ratio_of_means`` and one one-value block per seed
(the engine verdict itself calls ``rounds_ratio`` with each seed's repetitions as its block). Resampling
is over *seeds* (pairs), not over requests: the pair is the unit that both arms saw.
"""

from __future__ import annotations

from harness.stats import rounds_ratio
from protocol import Protocol


def paired_ratio_ci(candidate: list[float], baseline: list[float], protocol: Protocol) -> tuple[float, float, float]:
    """(ratio, low, high): candidate mean over baseline mean, with a percentile bootstrap interval.

    ``candidate[i]`` and ``baseline[i]`` are the two arms' throughputs at the same seed. The returned
    interval always contains the ratio (a degenerate resample cannot push it out).

    Raises:
        ValueError: the lists differ in length, are empty, or hold a non-positive throughput.
    """
    if len(candidate) != len(baseline) or not candidate:
        raise ValueError("paired_ratio_ci needs two equally long, non-empty lists (one value per seed)")
    if min(candidate) <= 0 or min(baseline) <= 0:
        raise ValueError("throughputs must be positive to form a ratio")
    est = rounds_ratio({i: [[c]] for i, c in enumerate(candidate)}, {i: [[b]] for i, b in enumerate(baseline)},
                       protocol, "ratio_of_means")
    assert est is not None  # non-empty and paired index by index
    return est.ratio, est.ci_low, est.ci_high
