"""Issue 29: one timing loop per backend, reused by the anchors and the retest.

The anchors' probes (``median_seconds`` of a backend) go through the measuring child's own loop for that
backend (:mod:`harness.measure.timing._cpu`, :class:`harness.measure.timing._cuda.CudaTimer`); the science
modules read no clock of their own. The CUDA wiring is checked without a GPU by standing a recording timer
in for ``CudaTimer`` (its own loop is the kernel path's, exercised on a GPU by the CUDA tests).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, ClassVar

import pytest

from harness.measure.backends import backend_named
from harness.measure.timing import _cpu, _cuda
from harness.measure.timing._block import BlockTiming
from protocol import load_protocol

ROOT = Path(__file__).resolve().parents[1]
P = load_protocol()


def test_the_cpu_anchor_median_is_the_cpu_loops_median(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every timed call goes through ``_cpu.time_block`` (one call per repetition); the result is the
    median of that block's per-call times, and the warm-up calls are outside it."""
    blocks: list[BlockTiming] = []
    real = _cpu.time_block

    def recording(call_rep: Any, reps: int, inner: int, capture: set[int]) -> BlockTiming:
        assert inner == 1 and capture == set()
        blocks.append(real(call_rep, reps, inner, capture))
        return blocks[-1]

    monkeypatch.setattr(_cpu, "time_block", recording)
    calls: list[int] = []
    cpu = backend_named("cpu")
    seconds = cpu.median_seconds(lambda: calls.append(1), P)
    assert len(blocks) == 1 and len(blocks[0].times_ns) == P.timing.cpu.timed_reps
    assert len(calls) == P.timing.cpu.warmup_reps + P.timing.cpu.timed_reps
    times = sorted(blocks[0].times_ns)
    n = len(times)
    median_ns = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    assert seconds == pytest.approx(median_ns / 1e9, rel=1e-12)
    # the single calls of a paired ratio: no warm-up, one timed call, still the loop's
    calls.clear()
    cpu.median_seconds(lambda: calls.append(1), P, reps=1, warm=False)
    assert len(calls) == 1 and len(blocks) == 2 and len(blocks[1].times_ns) == 1


class _RecordingTimer:
    """Stands in for ``CudaTimer`` where no GPU is: records what the backend asks of its loop."""

    made: ClassVar[list[_RecordingTimer]] = []

    def __init__(self, torch: Any, flush_bytes: int) -> None:
        self.flush_bytes = flush_bytes
        self.calibrated: list[tuple[float, float, int, int]] = []
        self.blocks: list[int] = []
        _RecordingTimer.made.append(self)

    def calibrate(self, call: Any, warmup_ms: float, rep_ms: float, min_reps: int, max_reps: int,
                  warmup_wall_factor: float) -> tuple[int, float]:
        call()
        self.calibrated.append((warmup_ms, rep_ms, min_reps, max_reps))
        return 7, 1e6

    def time_block(self, call_rep: Any, reps: int, capture: set[int]) -> BlockTiming:
        for rep in range(reps):
            call_rep(rep)
        self.blocks.append(reps)
        return BlockTiming(times_ns=[float(1000 * (i + 1)) for i in range(reps)], wall_ns=0.0, timed_total_ns=0.0,
                           method="cuda-events+l2flush")


def test_the_cuda_anchor_median_is_the_cuda_timers(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.measure.backends import cuda as cuda_backend

    monkeypatch.setattr(_cuda, "CudaTimer", _RecordingTimer)
    monkeypatch.setattr(cuda_backend, "_ANCHOR_TIMERS", {})
    _RecordingTimer.made.clear()
    cu = P.timing.cuda
    calls: list[int] = []
    backend = backend_named("cuda")
    seconds = backend.median_seconds(lambda: calls.append(1), P)
    [timer] = _RecordingTimer.made
    assert timer.flush_bytes == cu.l2_flush_bytes
    assert timer.calibrated == [(cu.warmup_ms, cu.rep_ms, cu.min_reps, cu.max_reps)]
    assert timer.blocks == [7] and seconds == pytest.approx(4000 / 1e9)     # median of 1..7 us
    # a paired ratio's single call: the CPU warm-up count, no calibration, one repetition, the same timer
    calls.clear()
    backend.median_seconds(lambda: calls.append(1), P, reps=1)
    assert len(_RecordingTimer.made) == 1 and timer.blocks == [7, 1] and len(timer.calibrated) == 1
    assert len(calls) == P.timing.cpu.warmup_reps + 1


_CLOCKS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time_ns", "process_time",
           "process_time_ns", "elapsed_time", "Event"}


@pytest.mark.parametrize("module", ["anchors", "retest"])
def test_the_science_modules_read_no_clock(module: str) -> None:
    """What they time, they time through a backend (``median_seconds``) or the harness's evaluation and
    the MLX runner's child; a clock read here would be a second timing loop."""
    tree = ast.parse((ROOT / "harness" / "science" / f"{module}.py").read_text(encoding="utf-8"))
    found = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in _CLOCKS}
                   | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in _CLOCKS})
    assert found == [], f"harness/science/{module}.py reads a clock: {found}"
