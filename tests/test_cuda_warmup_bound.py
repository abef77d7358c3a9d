"""The CUDA timer's warm-up is bounded by the wall clock, not only by the events' estimate (issue 25).

A candidate whose work runs on a stream the timing events never wait for reads a few microseconds per
call in the calibration, while each call really costs milliseconds: with a count taken from that
estimate alone, ``escape_side_stream_matmul`` spent minutes warming up and got no verdict. These tests
drive :class:`CudaTimer` through a stand-in for the few ``torch.cuda`` entry points it binds: events
that report a chosen device time, and a call whose real cost falls on the host clock.
"""
from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from harness.measure.timing._cuda import CudaTimer


class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.enable_timing = enable_timing

    def record(self, stream: Any = None) -> None:
        pass

    def elapsed_time(self, end: "_Event") -> float:
        return _FakeCuda.event_ms


class _Flush:
    def zero_(self) -> "_Flush":
        return self


class _FakeCuda:
    """What the timer binds from ``torch.cuda``; events read ``event_ms`` whatever the call cost."""

    event_ms = 0.001
    Event = _Event
    CUDAGraph = SimpleNamespace(replay=lambda self: None)
    Stream = SimpleNamespace(synchronize=lambda self: None)

    @staticmethod
    def synchronize() -> None:
        pass

    @staticmethod
    def current_stream() -> None:
        return None


def _timer(event_ms: float) -> CudaTimer:
    _FakeCuda.event_ms = event_ms
    fake_torch = SimpleNamespace(cuda=_FakeCuda, empty=lambda *a, **k: _Flush(), int32="int32")
    return CudaTimer(fake_torch, 1 << 20)


def test_a_call_whose_cost_the_events_miss_is_warmed_up_for_a_bounded_wall_time() -> None:
    timer = _timer(event_ms=0.001)      # the events read 1 us a call ...
    calls = 0

    def hidden_cost() -> None:          # ... while each call really takes 2 ms
        nonlocal calls
        calls += 1
        time.sleep(0.002)

    t0 = time.perf_counter()
    reps, est_ns = timer.calibrate(hidden_cost, warmup_ms=25.0, rep_ms=100.0, min_reps=10, max_reps=500, warmup_wall_factor=2.0)
    wall_s = time.perf_counter() - t0
    # the estimate alone asks for 25,000 warm-up calls (50 s); the wall bound (2 x 25 ms) stops it after
    # the chunk that crosses 50 ms: at most about twice that much wall time
    assert timer.last_warmup_calls < 100, timer.last_warmup_calls
    assert wall_s < 1.0, wall_s
    assert reps == 500 and est_ns == 1000.0


def test_an_honest_call_still_gets_its_whole_warm_up_count() -> None:
    timer = _timer(event_ms=0.5)        # the events read what the call really costs
    calls = 0

    def honest() -> None:               # host cost far under the 0.5 ms device time: the device is the bound
        nonlocal calls
        calls += 1

    timer.calibrate(honest, warmup_ms=25.0, rep_ms=100.0, min_reps=10, max_reps=500, warmup_wall_factor=2.0)
    assert timer.last_warmup_calls == 50     # 25 ms / 0.5 ms, not cut by the wall bound
    assert calls == 1 + 5 + 50
