"""Issue 29: one timing loop per backend, reused by the anchors and the retest.

The anchors' probes (``median_seconds`` of a backend) go through the measuring child's own loop for that
backend (:mod:`harness.measure.timing._cpu`); the science modules read no clock of their own.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from harness.measure.backends import backend_named
from harness.measure.timing import _cpu
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
