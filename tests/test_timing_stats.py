"""Correctness rules, ratio statistics, input generation and the CPU timer (in-process; no workers)."""

from __future__ import annotations

import math

import pytest
import torch

from harness.errors import IncomparableError
from harness.measure.correctness import compare_outputs
from harness.measure.device import roofline_fraction
from harness.measure.runner._inputs import buffer_seed, make_inputs
from harness.measure.timing import _cpu
from harness.records import DeviceCeilings
from harness.stats import median_ratio_ci, paired_ratios, require_comparable
from harness.tasks import ToleranceOverride
from protocol import load_protocol

P = load_protocol()


def test_strict_shape_dtype_and_structure() -> None:
    r = torch.ones(4, 4)
    assert compare_outputs(r, r.clone(), P).passed
    assert "shape" in compare_outputs(r, torch.ones(16), P).reason
    assert "dtype" in compare_outputs(r, r.double(), P).reason
    assert "tensors" in compare_outputs((r, r), r, P).reason
    assert not compare_outputs(torch.arange(3), torch.arange(3) + 1, P).passed


def test_nan_never_passes_and_infinities_must_match() -> None:
    r = torch.tensor([1.0, float("nan"), float("inf")])
    c = r.clone()
    out = compare_outputs(r, c, P)
    assert not out.passed and "NaN" in out.reason
    r2 = torch.tensor([1.0, float("inf")])
    assert compare_outputs(r2, r2.clone(), P).passed
    assert "infinities" in compare_outputs(r2, torch.tensor([1.0, 3.0]), P).reason
    assert "infinities" in compare_outputs(r2, torch.tensor([1.0, float("-inf")]), P).reason


def test_tolerances_come_from_the_protocol_or_the_task() -> None:
    tol = P.correctness.tolerances["float32"]
    r = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    assert compare_outputs(r, r + tol.atol / 10, P).passed
    elementwise = compare_outputs(r, r + 10 * (tol.atol + tol.rtol * r.abs().max()), P)
    assert not elementwise.passed and "outside" in elementwise.reason
    # every element within atol+rtol*|ref|, yet the whole is beyond rel_l2 when the reference is small
    small = torch.full((1000,), 1e-3)
    drift = compare_outputs(small, small + 0.9 * tol.atol, P)
    assert not drift.passed and "relative L2" in drift.reason
    loose = {"float32": ToleranceOverride(atol=1.0, rtol=1.0, rel_l2=1.0)}
    assert compare_outputs(small, small + 0.9 * tol.atol, P, loose).passed
    assert compare_outputs(r.half(), (r + 5e-4).half(), P).passed  # float16's own, looser, tolerance


def test_bootstrap_ci_is_seeded_and_contains_the_median() -> None:
    gen = torch.Generator().manual_seed(1)
    ratios = (1.5 + 0.05 * torch.randn(60, generator=gen)).tolist()
    a, b = median_ratio_ci(ratios, P), median_ratio_ci(ratios, P)
    assert a == b and a.n_pairs == 60
    assert a.ci_low <= a.ratio <= a.ci_high and a.ci_low < 1.5 < a.ci_high
    wide = median_ratio_ci(ratios[:6], P)
    assert (wide.ci_high - wide.ci_low) > (a.ci_high - a.ci_low)
    single = median_ratio_ci([2.0], P)
    assert single.ratio == single.ci_low == single.ci_high == 2.0
    with pytest.raises(ValueError):
        median_ratio_ci([], P)


def test_ratios_need_pairs_and_one_session() -> None:
    assert paired_ratios([2.0, 3.0], [1.0, 3.0]) == [2.0, 1.0]
    with pytest.raises(ValueError, match="unpaired"):
        paired_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        paired_ratios([0.0], [1.0])
    require_comparable("s1", "d" * 64, "s1", "d" * 64)
    with pytest.raises(IncomparableError, match="devices"):
        require_comparable("s1", "a" * 64, "s1", "b" * 64)
    with pytest.raises(IncomparableError, match="sessions"):
        require_comparable("s1", "a" * 64, "s2", "a" * 64)


def test_inputs_are_a_function_of_seed_and_distribution() -> None:
    def get_inputs() -> list[torch.Tensor]:
        return [torch.rand(8, 6), torch.randint(0, 5, (3,))]

    large = P.correctness.large_magnitude
    a = make_inputs(torch, get_inputs, 42, "normal", large, "cpu")
    b = make_inputs(torch, get_inputs, 42, "normal", large, "cpu")
    c = make_inputs(torch, get_inputs, 43, "normal", large, "cpu")
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    assert torch.equal(a[1], b[1])  # integer inputs are kept as get_inputs made them under the seed
    assert bool((make_inputs(torch, get_inputs, 1, "negative", large, "cpu")[0] < 0).all())
    assert bool((make_inputs(torch, get_inputs, 1, "task", large, "cpu")[0] >= 0).all())
    assert float(make_inputs(torch, get_inputs, 1, "large", large, "cpu")[0].abs().max()) > large / 10
    zeros = make_inputs(torch, get_inputs, 1, "zeros_mixed", large, "cpu")[0]
    assert 0 < int((zeros == 0).sum()) < zeros.numel()
    nc = make_inputs(torch, get_inputs, 1, "noncontiguous", large, "cpu")[0]
    assert not nc.is_contiguous() and tuple(nc.shape) == (8, 6)
    with pytest.raises(ValueError, match="unknown input distribution"):
        make_inputs(torch, get_inputs, 1, "sorted", large, "cpu")
    seeds = {buffer_seed(7, k) for k in range(4)}
    assert len(seeds) == 4 and buffer_seed(7, 0) == 7 and all(0 <= s < 2 ** 62 for s in seeds)


def test_cpu_timer_batches_short_calls_to_min_timed_ns() -> None:
    x = torch.randn(256)
    inner, est = _cpu.calibrate_inner_loop(lambda: x * 2, warmup_reps=2, min_timed_ns=200_000)
    assert inner >= 2 and inner * est >= 200_000
    outs: list[int] = []
    bt = _cpu.time_block(lambda rep: outs.append(rep) or rep, reps=4, inner=inner, capture={2})
    assert len(bt.times_ns) == 4 and all(t > 0 for t in bt.times_ns)
    assert outs.count(0) == inner and bt.captured == {2: 2}
    assert bt.wall_ns >= bt.timed_total_ns > 0
    assert "inner=" in bt.method


def test_roofline_fraction() -> None:
    ceil = DeviceCeilings(bytes_per_s=1e9, flops_per_s=1e12, method="test")
    assert math.isclose(roofline_fraction(1e6, None, ceil, 2e6) or 0, 0.5)  # 1 ms floor over 2 ms
    assert math.isclose(roofline_fraction(1e3, 1e9, ceil, 1e6) or 0, 1.0)  # flop-bound: 1 ms floor
    assert roofline_fraction(None, None, ceil, 1e6) is None
    assert roofline_fraction(1e6, None, None, 1e6) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_timer_times_a_kernel_and_captures_a_graph() -> None:
    from harness.measure.timing._cuda import CudaTimer

    timer = CudaTimer(torch, 1 << 24)
    x = torch.randn(4096, device="cuda")
    reps, est = timer.calibrate(lambda: torch.relu(x), 1.0, 5.0, 10, 100, 2.0)
    assert 10 <= reps <= 100 and est > 0
    bt = timer.time_block(lambda r: torch.relu(x), reps=10, capture={3})
    assert len(bt.times_ns) == 10 and all(t > 0 for t in bt.times_ns) and 3 in bt.captured
    graphs = timer.capture_graphs(lambda b: torch.relu(x), 2, 8)
    assert graphs is not None
    gb = timer.time_block_graph(graphs, reps=6, replays=8, capture={1})
    assert len(gb.times_ns) == 6 and torch.equal(gb.captured[1], torch.relu(x))
    assert all(timer.intact().values())


def test_measurement_set_ratio_refuses_other_sessions_and_devices() -> None:
    from harness.records import MeasurementSample, MeasurementSet
    from harness.stats import measurement_set_ratio

    def ms(session: str, device: str, arm: str, scale: float, task: str = "relu") -> MeasurementSet:
        return MeasurementSet(session_id=session, device_sha256=device, protocol=P.ref(), task_id=task,
                              subject_sha256="e" * 64, arm=arm,  # type: ignore[arg-type]
                              samples=[MeasurementSample(seed=s, values=[scale * (1 + 0.01 * s)]) for s in range(5)])

    est = measurement_set_ratio(ms("s", "a" * 64, "candidate", 1.0), ms("s", "a" * 64, "baseline", 2.0), P)
    assert math.isclose(est.ratio, 2.0) and est.n_pairs == 5
    with pytest.raises(IncomparableError):
        measurement_set_ratio(ms("s", "a" * 64, "candidate", 1.0), ms("t", "a" * 64, "baseline", 2.0), P)
    with pytest.raises(IncomparableError):
        measurement_set_ratio(ms("s", "a" * 64, "candidate", 1.0), ms("s", "b" * 64, "baseline", 2.0), P)
    with pytest.raises(IncomparableError):
        measurement_set_ratio(ms("s", "a" * 64, "candidate", 1.0), ms("s", "a" * 64, "baseline", 2.0, "gelu"), P)


def test_ceilings_keep_the_best_reading_per_device(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from harness.measure.session import best_ceilings
    from harness.records import DeviceFingerprint
    from harness.store import open_store

    with open_store(tmp_path / "c.sqlite") as store:
        fp = DeviceFingerprint(backend="cpu", cpu_model="test", cpu_count=2, torch_version="x")
        first = DeviceCeilings(bytes_per_s=10.0, flops_per_s=100.0, method="m1")
        assert best_ceilings(store, fp.sha256, first) == first
        store.add_ceilings(store.open_session(fp, P.ref()), first, P.ref())
        busy = DeviceCeilings(bytes_per_s=5.0, flops_per_s=200.0, method="m2")
        best = best_ceilings(store, fp.sha256, busy)
        assert (best.bytes_per_s, best.flops_per_s) == (10.0, 200.0) and "earlier session" in best.method


def test_ceilings_are_measured_until_the_store_holds_enough_sessions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Protocol 1.4.0: the first ``reuse_after_sessions`` sessions on a device measure; later ones take
    the stored maximum without asking the reference child."""
    from harness.measure.session import session_ceilings
    from harness.records import DeviceFingerprint
    from harness.store import open_store

    reuse_after = P.timing.ceilings.reuse_after_sessions
    assert reuse_after >= 1
    readings = iter([{"bytes_per_s": 10.0 + i, "flops_per_s": 100.0 - i, "method": f"m{i}"} for i in range(reuse_after)])
    asked: list[int] = []

    def measure() -> dict[str, object]:
        asked.append(1)
        return next(readings)

    with open_store(tmp_path / "c.sqlite") as store:
        fp = DeviceFingerprint(backend="cpu", cpu_model="test", cpu_count=2, torch_version="x")
        for _ in range(reuse_after):
            c = session_ceilings(store, fp.sha256, P, measure)
            store.add_ceilings(store.open_session(fp, P.ref()), c, P.ref())
        assert len(asked) == reuse_after
        reused = session_ceilings(store, fp.sha256, P, measure)
        assert len(asked) == reuse_after, "a session past the threshold must not measure"
        assert (reused.bytes_per_s, reused.flops_per_s) == (10.0 + reuse_after - 1, 100.0)
        assert "not re-measured" in reused.method
        other = DeviceFingerprint(backend="cpu", cpu_model="other", cpu_count=2, torch_version="x")
        with pytest.raises(StopIteration):   # another device measures afresh (the readings are spent)
            session_ceilings(store, other.sha256, P, measure)
