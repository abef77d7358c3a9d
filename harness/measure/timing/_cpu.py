"""CPU timing: ``perf_counter_ns`` (bound before candidate import), warm-up, inner-loop batching.

A repetition shorter than ``min_timed_ns`` is repeated in an inner loop until it reaches that length,
so timer resolution and call overhead do not dominate tiny kernels; the reported time is per call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from harness.measure.timing._block import BlockTiming
from harness.measure.timing._clock import perf_counter_ns as _now


def calibrate_inner_loop(call: Callable[[], Any], warmup_reps: int, min_timed_ns: int) -> tuple[int, float]:
    """Warm ``call`` up and return (inner loop length, estimated ns per call).

    The estimate is the fastest of three calls after warm-up, so a one-off stall does not shrink
    the loop; the loop length makes one repetition last at least ``min_timed_ns``.
    """
    for _ in range(warmup_reps):
        call()
    best = math.inf
    for _ in range(3):
        t0 = _now()
        call()
        best = min(best, float(_now() - t0))
    best = max(best, 1.0)
    return max(1, math.ceil(min_timed_ns / best)), best


def time_block(call_rep: Callable[[int], Any], reps: int, inner: int, capture: set[int]) -> BlockTiming:
    """Time ``reps`` repetitions of ``call_rep(rep)``, each an inner loop of ``inner`` calls on one
    input (the measuring child uses :func:`time_block_sets`, whose calls never repeat an input)."""
    return time_block_sets(lambda rep, i: call_rep(rep), reps, inner, capture)


def time_block_sets(call: Callable[[int, int], Any], reps: int, inner: int, capture: set[int],
                    before_rep: Callable[[int], None] | None = None) -> BlockTiming:
    """Time ``reps`` repetitions, each an inner loop of ``call(rep, i)`` for ``i < inner``.

    ``before_rep(rep)`` runs outside the timed region before each repetition (it hands the loop that
    repetition's fresh input sets, so no call sees values an earlier call saw); its own time is left
    out of ``wall_ns`` too, so the escape gate's wall/timed ratio still measures only the candidate.
    The output of the last call of each repetition in ``capture`` is kept for checking. Each
    repetition's own bookkeeping outside the timed loop is recorded in ``harness_ns`` (see
    :class:`~harness.measure.timing._block.BlockTiming`).
    """
    times: list[float] = []
    harness: list[float] = []
    captured: dict[int, Any] = {}
    timed_total = 0
    refill = 0
    start = _now()
    for rep in range(reps):
        if before_rep is not None:
            r0 = _now()
            before_rep(rep)
            refill += _now() - r0
        h0 = _now()
        out = None
        t0 = _now()
        for i in range(inner):
            out = call(rep, i)
        t1 = _now()
        timed_total += t1 - t0
        times.append((t1 - t0) / inner)
        if rep in capture:
            captured[rep] = out
        harness.append(float((t0 - h0) + (_now() - t1)))
    wall = _now() - start - refill
    return BlockTiming(times_ns=times, wall_ns=float(wall), timed_total_ns=float(timed_total),
                       method=f"cpu-perf_counter(inner={inner})", captured=captured, harness_ns=harness)
