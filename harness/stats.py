"""Ratios and their confidence intervals: the only numbers a verdict reports.

One function forms every ratio: :func:`rounds_ratio`. Its input is two arms' samples per paired
seed, split into the blocks of the interleaved rounds they were measured in; each (seed, round)
gives one pair (the two arms' block medians, measured back to back), and the pairs are summarised
with a percentile bootstrap whose resample count, level and RNG seed come from
``protocol.statistics``, so a stored verdict recomputes exactly from its stored samples and round
boundaries (:func:`measurement_set_ratio`, ``atb verify-verdict``). Kernels, engines, the held-out
retest and the re-measurement all call it. Absolute times are stored but never compared across
sessions or devices.

A kernel verdict's two arms run in two measuring processes, and a pair of processes carries an offset
of its own (kernel choices, allocation layout) that no round inside that pair can see. Where the
protocol declares its size for the backend (``statistics.process_pair_log_sd``), the bootstrap
interval is widened by it: on the log scale, each side's half-width and ``z * sd`` are added in
quadrature (:func:`with_process_pair`). The point estimate is unchanged.
"""

from __future__ import annotations

import math
import statistics as _st
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from harness.errors import IncomparableError
from harness.records import Backend, MeasurementSet
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


Rounds = Sequence[Sequence[float]]
"""One arm at one paired seed: its samples, one block per interleaved round, in measuring order."""

Statistic = Literal["median_of_ratios", "ratio_of_means"]
"""How the (seed, round) pairs are summarised.

* ``median_of_ratios`` (kernels, times in ns): the median of the per-pair ratios ``num / den``; the
  bootstrap resamples the per-pair ratios.
* ``ratio_of_means`` (engines, requests per second): the mean of the ``num`` block medians over the
  mean of the ``den`` block medians; the bootstrap resamples pairs and recomputes that quotient. An
  engine measures one block (its repetitions) per seed, so its pairs are its seeds.
"""


def rounds_ratio(num: Mapping[int, Rounds], den: Mapping[int, Rounds], protocol: Protocol,
                 statistic: Statistic = "median_of_ratios", *,
                 process_pair_backend: Backend | None = None) -> RatioEstimate | None:
    """The ratio ``num / den`` of two arms with its seeded bootstrap interval: the one estimator.

    A pair is one round at one seed both arms measured: the median of ``num``'s block over the median
    of ``den``'s block of that round. Pairs are formed in ``num``'s seed order (the measuring order),
    round by round; a seed ``den`` lacks, or a round past the shorter arm's last, forms no pair. The
    order matters: the bootstrap's seeded draws index the pairs, so a recompute must keep it.

    ``process_pair_backend``: the backend of the two measuring processes of a kernel time ratio; its
    declared process-pair component, if any, widens the interval (:func:`with_process_pair`). None
    (engines, and callers whose arms share a process) adds nothing.

    Returns None when no pair can be formed.

    Raises:
        ValueError: a block is empty or a block median is not positive.
    """
    nums: list[float] = []
    dens: list[float] = []
    for seed, n_rounds in num.items():
        d_rounds = den.get(seed)
        if d_rounds is None:
            continue
        for nb, db in zip(n_rounds, d_rounds):
            nums.append(median(list(nb)))
            dens.append(median(list(db)))
    if not nums:
        return None
    if statistic == "median_of_ratios":
        est = median_ratio_ci(paired_ratios(nums, dens), protocol)
    else:
        est = _ratio_of_means_ci(nums, dens, protocol)
    if process_pair_backend is None:
        return est
    log_sd: dict[str, float] = {str(k): v for k, v in protocol.statistics.process_pair_log_sd.items()}   # none: 0
    return with_process_pair(est, log_sd.get(process_pair_backend, 0.0), protocol)


def with_process_pair(est: RatioEstimate, log_sd: float, protocol: Protocol) -> RatioEstimate:
    """``est`` with a between-process-pair component of SD ``log_sd`` (log scale) in its interval.

    Each side's log half-width ``h`` becomes ``hypot(h, z * log_sd)``, ``z`` the normal quantile of
    the protocol's confidence level: the interval then covers the rounds' spread and the offset a
    fresh pair of processes would bring. ``log_sd == 0`` returns ``est`` unchanged.
    """
    if log_sd <= 0.0:
        return est
    z = NormalDist().inv_cdf(0.5 + protocol.statistics.confidence_level / 2.0)
    extra = z * log_sd
    low = est.ratio * math.exp(-math.hypot(math.log(est.ratio / est.ci_low), extra))
    high = est.ratio * math.exp(math.hypot(math.log(est.ci_high / est.ratio), extra))
    return RatioEstimate(ratio=est.ratio, ci_low=low, ci_high=high, n_pairs=est.n_pairs)


def _ratio_of_means_ci(num: list[float], den: list[float], protocol: Protocol) -> RatioEstimate:
    """mean(num) / mean(den) with a paired percentile bootstrap (pairs resampled together); the
    interval is widened to contain the point estimate, as :func:`median_ratio_ci`'s is.

    Raises:
        ValueError: a value is not positive.
    """
    n = np.asarray(num, dtype=float)
    d = np.asarray(den, dtype=float)
    if (n <= 0).any() or (d <= 0).any():
        raise ValueError("a measured value is not positive")
    ratio = float(n.mean() / d.mean())
    p = protocol.statistics
    rng = np.random.default_rng(p.bootstrap_seed)
    idx = rng.integers(0, n.size, size=(p.bootstrap_resamples, n.size))
    boot = n[idx].mean(axis=1) / d[idx].mean(axis=1)
    alpha = (1.0 - p.confidence_level) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return RatioEstimate(ratio=ratio, ci_low=float(min(low, ratio)), ci_high=float(max(high, ratio)),
                         n_pairs=int(n.size))


def set_rounds(ms: MeasurementSet) -> dict[int, list[list[float]]]:
    """A stored set's samples per seed, split at its stored round boundaries, in measuring order.

    A sample stored without boundaries (before they were recorded) is one block.
    """
    return {s.seed: s.blocks() for s in ms.samples}


def measurement_set_ratio(candidate: MeasurementSet, baseline: MeasurementSet, protocol: Protocol,
                          backend: Backend | None = None) -> RatioEstimate:
    """The verdict's ratio recomputed from its two stored sets with :func:`rounds_ratio`.

    Times (``ns``): baseline over candidate, median of the (seed, round) ratios of block medians,
    with the process-pair component of ``backend`` (the sets' device's backend) for a kernel verdict,
    as :func:`harness.verdict.evaluate.evaluate_candidate` formed it. Throughputs (``requests_per_s``):
    candidate over baseline, ratio of the means of the seeds' repetition medians. Pairs follow the
    numerator set's sample order (the measuring order).

    Raises:
        IncomparableError: the sets come from different sessions, devices, protocols, tasks or units,
            or share no seed (a ratio across any of these is refused, as the store refuses it).
    """
    require_comparable(candidate.session_id, candidate.device_sha256, baseline.session_id, baseline.device_sha256)
    if candidate.protocol != baseline.protocol:
        raise IncomparableError("the two measurement sets were made under different protocols")
    if candidate.task_id != baseline.task_id:
        raise IncomparableError(f"the sets measure different tasks ({candidate.task_id} vs {baseline.task_id})")
    if candidate.unit != baseline.unit:
        raise IncomparableError(f"the sets measure different units ({candidate.unit} vs {baseline.unit})")
    cand, base = set_rounds(candidate), set_rounds(baseline)
    if candidate.unit == "requests_per_s":
        est = rounds_ratio(cand, base, protocol, "ratio_of_means")
    else:
        est = rounds_ratio(base, cand, protocol, "median_of_ratios",
                           process_pair_backend=backend if candidate.kind == "kernel" else None)
    if est is None:
        raise IncomparableError("the two measurement sets share no paired seed")
    return est
