"""Issue 18: one ratio estimator. ``harness.stats.rounds_ratio`` gives, bit for bit, the figures the four
estimators it replaced gave (kept here verbatim as references): the kernel path's per-(seed, round)
ratios of block medians, the held-out retest's per-sample pairs, and the engine path's ratio of means
with its own paired bootstrap. Stored samples keep their round boundaries, so a stored verdict
recomputes from them (``measurement_set_ratio``) in measuring order."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from harness.records import MeasurementSample, MeasurementSet
from harness.stats import measurement_set_ratio, median, median_ratio_ci, paired_ratios, rounds_ratio
from protocol import Protocol, load_protocol

P = load_protocol()


# ------------------------------------------------------------------ the replaced estimators, verbatim
def _old_kernel_round_ratios(col: SimpleNamespace, num_arm: str, den_arm: str) -> list[float]:
    out: list[float] = []
    by_seed = {t.facts.seed: t for t in col.timed[den_arm]}
    for nt in col.timed[num_arm]:
        dt = by_seed.get(nt.facts.seed)
        if dt is None:
            continue
        for nb, db in zip(nt.rounds, dt.rounds):
            out.extend(paired_ratios([median(nb)], [median(db)]))
    return out


def _old_kernel_estimate(col: SimpleNamespace, num: str, den: str, protocol: Protocol):  # type: ignore[no-untyped-def]
    ratios = _old_kernel_round_ratios(col, num, den)
    return median_ratio_ci(ratios, protocol) if ratios else None


def _old_retest_paired_ratio(baseline: dict[int, list[float]], candidate: dict[int, list[float]],
                             protocol: Protocol) -> tuple[float, float, float]:
    ratios: list[float] = []
    for seed in sorted(baseline):
        ratios.extend(paired_ratios(baseline[seed], candidate[seed]))
    res = median_ratio_ci(ratios, protocol)
    return res.ratio, res.ci_low, res.ci_high


def _old_engine_paired_ratio_ci(candidate: list[float], baseline: list[float],
                                protocol: Protocol) -> tuple[float, float, float]:
    c = np.asarray(candidate, dtype=float)
    b = np.asarray(baseline, dtype=float)
    ratio = float(c.mean() / b.mean())
    stats = protocol.statistics
    rng = np.random.default_rng(stats.bootstrap_seed)
    idx = rng.integers(0, c.size, size=(stats.bootstrap_resamples, c.size))
    boot = c[idx].mean(axis=1) / b[idx].mean(axis=1)
    alpha = (1.0 - stats.confidence_level) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return ratio, float(min(low, ratio)), float(max(high, ratio))


# ------------------------------------------------------------------ fixtures of random measurements
def _arm(rng: random.Random, seeds: list[int], rounds: int, block: int, scale: float) -> list[SimpleNamespace]:
    return [SimpleNamespace(facts=SimpleNamespace(seed=s),
                            rounds=[[scale * rng.lognormvariate(0, 0.05) for _ in range(block)] for _ in range(rounds)])
            for s in seeds]


def _collected(seed: int) -> SimpleNamespace:
    rng = random.Random(seed)
    seeds = [rng.getrandbits(63) for _ in range(P.seeds.paired_seeds)]   # timing order, not sorted
    rounds = rng.randint(1, 6)
    start = _arm(rng, seeds, rounds, rng.randint(1, 5), 1.3)
    start[-1].rounds = start[-1].rounds[:max(1, rounds - 2)]            # a start arm dropped mid-seed
    return SimpleNamespace(timed={"candidate": _arm(rng, seeds, rounds, rng.randint(1, 9), 1.0),
                                  "baseline": _arm(rng, seeds, rounds, rng.randint(1, 9), 1.2),
                                  "start": start})


@pytest.mark.parametrize("case", range(12))
def test_kernel_path_is_bit_identical_to_the_replaced_round_ratios(case: int) -> None:
    from harness.measure.collect import Collected
    from harness.stats import with_process_pair
    from harness.verdict.evaluate import Ratios

    col = _collected(case)
    col.failure = None
    col.arm_rounds = lambda arm: Collected.arm_rounds(col, arm)  # type: ignore[arg-type]
    field = {("baseline", "candidate"): "speed", ("start", "candidate"): "vs_start",
             ("start", "baseline"): "start_over_eager"}
    for num, den in (("baseline", "candidate"), ("start", "candidate"), ("start", "baseline")):
        old = _old_kernel_estimate(col, num, den, P)
        for backend in ("cpu", "cuda"):    # the bootstrap is the old one; a declared process-pair SD widens it
            ratios = Ratios.of(col, P, backend, start_is_eager=False)  # type: ignore[arg-type]
            new = getattr(ratios, field[(num, den)])
            assert new is not None and old is not None
            want = with_process_pair(old, P.statistics.process_pair_log_sd.get(backend, 0.0), P)
            assert (new.ratio, new.ci_low, new.ci_high, new.n_pairs) == (want.ratio, want.ci_low, want.ci_high,
                                                                         want.n_pairs)


@pytest.mark.parametrize("case", range(6))
def test_stored_sets_recompute_the_kernel_figure_in_measuring_order(case: int) -> None:
    """What the store keeps (values plus round lengths, in measuring order) gives the verdict's figure
    exactly; sorting the seeds instead would change the interval (the bootstrap indexes the pairs)."""
    col = _collected(100 + case)
    old = _old_kernel_estimate(col, "baseline", "candidate", P)

    def mset(arm: str) -> MeasurementSet:
        return MeasurementSet(session_id="s", device_sha256="a" * 64, protocol=P.ref(), task_id="t",
                              subject_sha256="b" * 64, arm=arm,  # type: ignore[arg-type]
                              samples=[MeasurementSample.from_rounds(t.facts.seed, t.rounds) for t in col.timed[arm]])
    est = measurement_set_ratio(mset("candidate"), mset("baseline"), P)
    assert (est.ratio, est.ci_low, est.ci_high) == (old.ratio, old.ci_low, old.ci_high)


def test_retest_pairs_are_one_sample_rounds_bit_identical() -> None:
    from harness.science.retest import paired_ratio

    rng = random.Random(7)
    for _ in range(8):
        seeds = [rng.getrandbits(32) for _ in range(5)]
        n = rng.randint(1, 12)
        base = {s: [rng.uniform(1.0, 2.0) for _ in range(n)] for s in seeds}
        cand = {s: [rng.uniform(0.8, 1.5) for _ in range(n)] for s in seeds}
        assert paired_ratio(base, cand, P) == _old_retest_paired_ratio(base, cand, P)
    with pytest.raises(ValueError):
        paired_ratio({1: [1.0, 2.0]}, {1: [1.0]}, P)


def test_engine_ratio_of_means_bit_identical() -> None:
    rng = random.Random(11)
    for _ in range(8):
        n = rng.randint(3, 9)
        c = [rng.uniform(5, 15) for _ in range(n)]
        b = [rng.uniform(5, 15) for _ in range(n)]
        one = rounds_ratio({i: [[x]] for i, x in enumerate(c)}, {i: [[x]] for i, x in enumerate(b)}, P, "ratio_of_means")
        assert one is not None and (one.ratio, one.ci_low, one.ci_high) == _old_engine_paired_ratio_ci(c, b, P)
        # the engine verdict's own call: each seed's repetitions are one block, scored by its median
        reps_c = {i: [[x, x * 1.01, x * 0.97]] for i, x in enumerate(c)}
        reps_b = {i: [[x, x * 0.99, x * 1.02]] for i, x in enumerate(b)}
        est = rounds_ratio(reps_c, reps_b, P, "ratio_of_means")
        assert est is not None
        assert (est.ratio, est.ci_low, est.ci_high) == _old_engine_paired_ratio_ci(
            [median(r[0]) for r in reps_c.values()], [median(r[0]) for r in reps_b.values()], P)


def test_engine_judgement_uses_the_one_estimator() -> None:
    from test_engine_verdict import SEEDS, _arm, _trial  # noqa: E402 - the engine tests' trial builder

    from harness.verdict.engine import judge_engine_trial

    trial = _trial(_arm("candidate", {s: 11.0 + (s % 5) * 0.3 for s in SEEDS}))
    j = judge_engine_trial(trial, P)
    cs, bs = trial.candidate.throughput_by_seed(), trial.baseline.throughput_by_seed()  # type: ignore[union-attr]
    old = _old_engine_paired_ratio_ci([cs[s] for s in sorted(cs)], [bs[s] for s in sorted(cs)], P)
    assert j.ci is not None and (j.ratio, *j.ci) == old


def test_no_pair_is_none_and_rounds_must_split_the_values() -> None:
    assert rounds_ratio({1: [[1.0]]}, {2: [[1.0]]}, P) is None
    s = MeasurementSample.from_rounds(3, [[1.0, 2.0], [3.0], [4.0, 5.0, 6.0]])
    assert s.values == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and s.round_lengths == [2, 1, 3]
    assert s.blocks() == [[1.0, 2.0], [3.0], [4.0, 5.0, 6.0]]
    assert MeasurementSample(seed=1, values=[1.0, 2.0]).blocks() == [[1.0, 2.0]]  # stored before boundaries
    for bad in ([2, 2], [3, 0], [1]):
        with pytest.raises(ValueError, match="round_lengths"):
            MeasurementSample(seed=1, values=[1.0, 2.0, 3.0], round_lengths=bad)
    with pytest.raises(ValueError):
        rounds_ratio({1: [[1.0]]}, {1: [[-1.0]]}, P)


# ------------------------------------------------------------------ the process-pair component (protocol 1.3.0)
def test_process_pair_component_widens_each_side_in_quadrature_and_keeps_the_ratio() -> None:
    import math
    from statistics import NormalDist

    from harness.stats import with_process_pair

    col = _collected(7)
    bare = rounds_ratio({t.facts.seed: t.rounds for t in col.timed["baseline"]},
                        {t.facts.seed: t.rounds for t in col.timed["candidate"]}, P)
    assert bare is not None
    sd = 0.01
    wide = with_process_pair(bare, sd, P)
    z = NormalDist().inv_cdf(0.975)
    assert wide.ratio == bare.ratio and wide.n_pairs == bare.n_pairs
    assert math.log(wide.ratio / wide.ci_low) == pytest.approx(math.hypot(math.log(bare.ratio / bare.ci_low), z * sd))
    assert math.log(wide.ci_high / wide.ratio) == pytest.approx(math.hypot(math.log(bare.ci_high / bare.ratio), z * sd))
    assert wide.ci_low < bare.ci_low and wide.ci_high > bare.ci_high
    assert with_process_pair(bare, 0.0, P) == bare
    # an interval with no spread at all still gets the pair's +-z*sd
    point = with_process_pair(type(bare)(ratio=1.0, ci_low=1.0, ci_high=1.0, n_pairs=1), sd, P)
    assert (point.ci_low, point.ci_high) == pytest.approx((math.exp(-z * sd), math.exp(z * sd)))


def test_only_a_backend_the_protocol_declares_gets_the_component() -> None:
    declared = P.statistics.process_pair_log_sd
    col = _collected(3)
    num = {t.facts.seed: t.rounds for t in col.timed["baseline"]}
    den = {t.facts.seed: t.rounds for t in col.timed["candidate"]}
    bare = rounds_ratio(num, den, P)
    assert bare is not None
    for backend in ("cpu", "cuda", "mlx"):
        got = rounds_ratio(num, den, P, process_pair_backend=backend)
        assert got is not None
        if declared.get(backend, 0.0) > 0:
            assert got.ci_low < bare.ci_low and got.ci_high > bare.ci_high and got.ratio == bare.ratio
        else:
            assert got == bare


def test_stored_kernel_verdict_recomputes_with_its_backends_component_and_an_engine_set_without() -> None:
    from harness.stats import with_process_pair

    col = _collected(5)

    def mset(arm: str, kind: str) -> MeasurementSet:
        return MeasurementSet(session_id="s", device_sha256="a" * 64, protocol=P.ref(), task_id="t",
                              subject_sha256="b" * 64, arm=arm, kind=kind,  # type: ignore[arg-type]
                              samples=[MeasurementSample.from_rounds(t.facts.seed, t.rounds) for t in col.timed[arm]])
    bare = measurement_set_ratio(mset("candidate", "kernel"), mset("baseline", "kernel"), P)
    cuda = measurement_set_ratio(mset("candidate", "kernel"), mset("baseline", "kernel"), P, backend="cuda")
    assert cuda == with_process_pair(bare, P.statistics.process_pair_log_sd.get("cuda", 0.0), P)
    engine = measurement_set_ratio(mset("candidate", "engine"), mset("baseline", "engine"), P, backend="cuda")
    assert engine == bare
