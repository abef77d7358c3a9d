"""The paired bootstrap of a throughput ratio over workload seeds.

Resampling is over *seeds* (pairs), not over requests: the pair is the unit that both arms saw, so the
interval reflects run-to-run spread of the comparison itself. The RNG is seeded from the protocol, so a
stored verdict recomputes exactly.
"""

from __future__ import annotations

import numpy as np

from protocol import Protocol


def ratio_of_means(candidate: np.ndarray, baseline: np.ndarray) -> float:
    return float(candidate.mean() / baseline.mean())


def paired_ratio_ci(candidate: list[float], baseline: list[float], protocol: Protocol) -> tuple[float, float, float]:
    """(ratio, low, high): candidate mean over baseline mean, with a percentile bootstrap interval.

    ``candidate[i]`` and ``baseline[i]`` are the two arms' throughputs at the same seed. The returned
    interval always contains the ratio (a degenerate resample cannot push it out).

    Raises:
        ValueError: the lists differ in length, are empty, or hold a non-positive throughput.
    """
    c = np.asarray(candidate, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if c.shape != b.shape or c.size == 0:
        raise ValueError("paired_ratio_ci needs two equally long, non-empty lists (one value per seed)")
    if (c <= 0).any() or (b <= 0).any():
        raise ValueError("throughputs must be positive to form a ratio")
    ratio = ratio_of_means(c, b)
    stats = protocol.statistics
    rng = np.random.default_rng(stats.bootstrap_seed)
    idx = rng.integers(0, c.size, size=(stats.bootstrap_resamples, c.size))
    boot = c[idx].mean(axis=1) / b[idx].mean(axis=1)
    alpha = (1.0 - stats.confidence_level) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return ratio, float(min(low, ratio)), float(max(high, ratio))
