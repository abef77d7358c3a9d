"""Ratios and their confidence intervals: the only numbers a verdict reports.

The verdict's speedup is the median of paired ratios (baseline time / candidate time, each pair
measured back to back at the same input seed), with a percentile bootstrap confidence interval
whose resample count, level and RNG seed come from ``protocol.statistics``, so a stored verdict
recomputes exactly. Absolute times are stored but never compared across sessions or devices.
"""

from __future__ import annotations

import statistics as _st

import numpy as np
from pydantic import BaseModel, ConfigDict

from harness.errors import IncomparableError
from harness.records import MeasurementSet
from protocol import Protocol


class RatioEstimate(BaseModel):
    """A median ratio with its bootstrap interval and the number of pairs behind it."""

    model_config = ConfigDict(frozen=True)
    ratio: float
    ci_low: float
    ci_high: float
    n_pairs: int

    @property
    def ci_relative_halfwidth(self) -> float:
        return (self.ci_high - self.ci_low) / 2.0 / self.ratio


def paired_ratios(baseline: list[float], candidate: list[float]) -> list[float]:
    """Element-wise baseline / candidate for pairs measured back to back.

    Raises:
        ValueError: the lists differ in length or hold a non-positive time.
    """
    if len(baseline) != len(candidate):
        raise ValueError(f"unpaired samples: {len(baseline)} baseline vs {len(candidate)} candidate")
    if any(b <= 0 for b in baseline) or any(c <= 0 for c in candidate):
        raise ValueError("a measured time is not positive")
    return [b / c for b, c in zip(baseline, candidate)]


def median_ratio_ci(ratios: list[float], protocol: Protocol) -> RatioEstimate:
    """Median of ``ratios`` with a seeded percentile-bootstrap CI of the median.

    The interval is widened to contain the point estimate when the percentile interval of a very
    small sample misses it (the store requires ratio within [ci_low, ci_high]).

    Raises:
        ValueError: no ratios.
    """
    if not ratios:
        raise ValueError("no paired ratios to summarise")
    arr = np.asarray(ratios, dtype=np.float64)
    med = float(np.median(arr))
    p = protocol.statistics
    rng = np.random.default_rng(p.bootstrap_seed)
    idx = rng.integers(0, arr.size, size=(p.bootstrap_resamples, arr.size))
    meds = np.median(arr[idx], axis=1)
    alpha = (1.0 - p.confidence_level) / 2.0
    lo, hi = float(np.quantile(meds, alpha)), float(np.quantile(meds, 1.0 - alpha))
    return RatioEstimate(ratio=med, ci_low=min(lo, med), ci_high=max(hi, med), n_pairs=int(arr.size))


def median(values: list[float]) -> float:
    return float(_st.median(values))


def require_comparable(a_session: str, a_device: str, b_session: str, b_device: str) -> None:
    """Refuse to form a ratio across measurement sessions or device fingerprints.

    Raises:
        IncomparableError: the two measurements come from different sessions or devices.
    """
    if a_device != b_device:
        raise IncomparableError(f"measurements on different devices ({a_device[:12]}… vs {b_device[:12]}…) "
                                "cannot be compared; re-measure both in one session")
    if a_session != b_session:
        raise IncomparableError(f"measurements from different sessions ({a_session} vs {b_session}) cannot "
                                "be compared; re-measure both in one session")


def measurement_set_ratio(candidate: MeasurementSet, baseline: MeasurementSet, protocol: Protocol) -> RatioEstimate:
    """Speedup of ``candidate`` over ``baseline`` from stored sets: per shared seed, the ratio of the
    arms' median times; then the median over seeds with the bootstrap CI.

    Raises:
        IncomparableError: the sets come from different sessions, devices, protocols or tasks, or
            share no seed (a ratio across any of these is refused, as the store refuses it).
    """
    require_comparable(candidate.session_id, candidate.device_sha256, baseline.session_id, baseline.device_sha256)
    if candidate.protocol != baseline.protocol:
        raise IncomparableError("the two measurement sets were made under different protocols")
    if candidate.task_id != baseline.task_id:
        raise IncomparableError(f"the sets measure different tasks ({candidate.task_id} vs {baseline.task_id})")
    cand = {s.seed: s.values for s in candidate.samples}
    base = {s.seed: s.values for s in baseline.samples}
    shared = sorted(set(cand) & set(base))
    if not shared:
        raise IncomparableError("the two measurement sets share no paired seed")
    ratios = paired_ratios([median(base[s]) for s in shared], [median(cand[s]) for s in shared])
    return median_ratio_ci(ratios, protocol)
