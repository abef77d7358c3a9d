"""CUDA timing with ``triton.testing.do_bench``-like semantics.

* CUDA events around each repetition, read only after a device synchronisation;
* before every repetition a large buffer is written (``l2_flush_bytes``), which both evicts the L2
  cache and queues work ahead of the start event, so a small kernel is timed at its device time
  rather than at the launch overhead around it;
* warm-up and the number of repetitions are chosen from milliseconds, like ``do_bench``;
* kernels faster than ``graph_replay_below_us`` are timed by replaying a CUDA graph that holds
  ``graph_replays`` calls, each on its own static input set (refilled with fresh values before every
  replay, outside the events), divided by that count; a candidate that cannot be captured falls back
  to events behind the flush, and the method says which was used.

The event and synchronise functions are bound when the measuring child starts, before candidate
code is imported, so a candidate that replaces ``torch.cuda.Event.elapsed_time`` does not change
what the harness reads (the integrity check reports the replacement).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from harness.measure.timing._block import BlockTiming
from harness.measure.timing._clock import perf_counter_ns as _now


class CudaTimer:
    """Event-based timing on the current CUDA device; build it before candidate code is imported."""

    def __init__(self, torch: Any, flush_bytes: int) -> None:
        self._torch = torch
        self._event = torch.cuda.Event
        self._record = torch.cuda.Event.record
        self._elapsed = torch.cuda.Event.elapsed_time
        self._sync = torch.cuda.synchronize
        self._graph_cls = torch.cuda.CUDAGraph
        self._flush = torch.empty(max(1, flush_bytes // 4), dtype=torch.int32, device="cuda")
        self._replay = torch.cuda.CUDAGraph.replay
        self._current_stream = torch.cuda.current_stream
        self._stream_sync = torch.cuda.Stream.synchronize
        self.originals = {name: _lookup(torch, name) for name in _WATCHED}
        self.last_launch_ns = 0.0   # host ns inside one call during the last calibration (median of 5)
        self.last_warmup_calls = 0  # warm-up calls the last calibration made
        #: the last capture probe: why it took no graph ("" when it did), and whether this process's
        #: CUDA state (capture mode, current stream, RNG generator) was left as before the probe
        self.probe_error = ""
        self.probe_clean = True
        self._abandoned: list[Any] = []   # graphs of failed captures, kept alive (see _abandon)

    def intact(self, same: Callable[[Any, Any], bool] | None = None) -> dict[str, bool]:
        """Whether each CUDA timing function torch exposes is still the one bound at start-up
        (``same(now, bound)`` when given: the child's rule, which also accepts torch's own wrapper)."""
        check = same or (lambda now, bound: now is bound)
        return {name: check(_lookup(self._torch, name), fn) for name, fn in self.originals.items()}

    def sync(self) -> None:
        self._sync()

    def _refill(self, before_rep: Callable[[int], None], rep: int) -> int:
        """Run ``before_rep`` and wait for its work on this stream only; returns the host ns spent.

        The wait keeps the refill's device work (fresh draws, copies, fingerprints) out of the wall
        time the escape gate reads; it does not wait for other streams, so work a candidate left
        running elsewhere is still caught by the final device-wide synchronisation."""
        t0 = _now()
        before_rep(rep)
        self._stream_sync(self._current_stream())
        return _now() - t0

    def _events(self, n: int) -> list[Any]:
        return [self._event(enable_timing=True) for _ in range(n)]

    def calibrate(self, call: Callable[[], Any], warmup_ms: float, rep_ms: float,
                  min_reps: int, max_reps: int, warmup_wall_factor: float) -> tuple[int, float]:
        """Warm up for about ``warmup_ms`` and return (repetitions for ``rep_ms``, ns per call).

        As in ``do_bench``: five flushed calls estimate the time of one, the warm-up count follows
        from it, and the repetition count is clamped to [min_reps, max_reps]. The host time spent
        inside ``call()`` (launching, without waiting for the device) is kept in ``last_launch_ns``:
        when it is a large part of the event time the device was starved by the host, and an
        event-timed figure measures this host's launch speed, which on the H200 machine varied by
        15-40% between two identical processes (JUSTIFICATION, protocol 1.6.0).
        """
        call()
        self._sync()
        starts, ends = self._events(5), self._events(5)
        launch: list[int] = []
        for i in range(5):
            self._flush.zero_()
            self._record(starts[i])
            t0 = _now()
            call()
            launch.append(_now() - t0)
            self._record(ends[i])
        self._sync()
        est_ms = max(1e-6, sorted(self._elapsed(s, e) for s, e in zip(starts, ends))[2])
        self.last_launch_ns = float(sorted(launch)[2])
        self._warm_up(call, max(1, int(warmup_ms / est_ms)), warmup_ms * warmup_wall_factor)
        reps = int(min(max_reps, max(min_reps, math.ceil(rep_ms / est_ms))))
        return reps, est_ms * 1e6

    def _warm_up(self, call: Callable[[], Any], calls: int, wall_ms: float) -> None:
        """Make up to ``calls`` calls, stopping once the wall clock passes ``wall_ms`` (the protocol's
        ``timing.cuda.warmup_ms`` times ``warmup_wall_factor``, 1.8.0).

        Why the wall bound (issue 25): the count comes from the events' estimate, and a call whose work
        runs on a stream the events do not wait for reads a few microseconds there while each call
        really queues milliseconds: ``escape_side_stream_matmul`` got about 8,000 warm-up calls of a
        2.7 ms matmul per paired seed, and no verdict in 180 s. The calls go in doubling chunks with a
        device-wide wait after each, so the wall covers every stream; an honest call, whose estimate is
        its device time, makes its full count.
        """
        limit_ns = wall_ms * 1e6
        done, chunk, t0 = 0, 1, _now()
        while done < calls:
            n = min(chunk, calls - done)
            for _ in range(n):
                call()
            done += n
            self._sync()
            if _now() - t0 >= limit_ns:
                break
            chunk *= 2
        self.last_warmup_calls = done

    def time_block(self, call_rep: Callable[[int], Any], reps: int, capture: set[int],
                   before_rep: Callable[[int], None] | None = None,
                   after_rep: Callable[[int], None] | None = None) -> BlockTiming:
        """Time ``reps`` repetitions with events, each behind an L2 flush.

        ``before_rep(rep)`` makes that repetition's fresh inputs (and fingerprints the previous ones)
        before the flush, ``after_rep(reps)`` runs once after the block: both stay outside the events
        and, with their device work waited for on this stream, outside the wall time too.
        """
        starts, ends, flushes = self._events(reps), self._events(reps), self._events(reps)
        captured: dict[int, Any] = {}
        harness: list[float] = []   # per repetition: host ns of the loop's own work (BlockTiming.harness_ns)
        in_call: list[tuple[int, int]] = []   # per repetition: host ns (before the call, inside it)
        self._sync()
        refill = 0
        wall0 = _now()
        for rep in range(reps):
            if before_rep is not None:
                refill += self._refill(before_rep, rep)
            h0 = _now()
            self._record(flushes[rep])
            self._flush.zero_()
            self._record(starts[rep])
            c0 = _now()
            out = call_rep(rep)
            c1 = _now()
            self._record(ends[rep])
            if rep in capture:
                captured[rep] = out
            out = None
            harness.append(float((c0 - h0) + (_now() - c1)))
            in_call.append((c0 - h0, c1 - c0))
        self._sync()
        wall = _now() - wall0 - refill
        if after_rep is not None:
            after_rep(reps)
        times = [self._elapsed(s, e) * 1e6 for s, e in zip(starts, ends)]
        harness = _credit_flush_overlap(harness, in_call, [self._elapsed(f, s) * 1e6 for f, s in zip(flushes, starts)])
        return BlockTiming(times_ns=times, wall_ns=float(wall), timed_total_ns=float(sum(times)),
                           method="cuda-events+l2flush", captured=captured, harness_ns=harness)

    def capture_graphs(self, call_on: Callable[[int], Any], n_sets: int, replays: int) -> list[tuple[Any, Any]] | None:
        """Capture one graph of ``replays`` calls, call ``i`` on static input set ``i % n_sets``;
        None if capture fails. Returns [(graph, static outputs of every call)].

        Capture fails for candidates that synchronise, move data to the host or allocate in ways a
        graph cannot hold; they are then timed by events. A failed probe is the harness's fact, never
        the candidate's exception, so it must leave nothing behind (issue 25: on the H200 a failed
        capture left the default CUDA generator in capture mode, and the task's own ``get_inputs``
        then raised "Offset increment outside graph capture encountered unexpectedly"). On failure
        :meth:`_abandon` ends a capture still open, puts back the current stream and the generator's
        state as they were before the capture, and checks the device answers; ``probe_error`` says
        why no graph was taken, ``probe_clean`` whether that clean-up held.
        """
        torch = self._torch
        self.probe_error, self.probe_clean = "", True
        home = self._current_stream()
        try:
            side = torch.cuda.Stream()
            side.wait_stream(home)
            with torch.cuda.stream(side):
                for _ in range(2):
                    for b in range(n_sets):
                        call_on(b)
            home.wait_stream(side)
            self._sync()
        except Exception as exc:  # noqa: BLE001 - a warm-up failure means "time it with events instead"
            self.probe_error = f"warm-up on a side stream: {_short(exc)}"
            self._abandon(home, None, None, None)
            return None
        gen, clean = _clean_generator_state(torch)
        g = self._graph_cls()
        cap = torch.cuda.Stream()
        outs: list[Any] = []
        try:
            with torch.cuda.graph(g, stream=cap):
                for i in range(replays):
                    outs.append(call_on(i % n_sets))
            self._sync()
        except Exception as exc:  # noqa: BLE001 - any capture failure means "time it with events instead"
            self.probe_error = f"capture: {_short(exc)}"
            outs.clear()
            self._abandon(home, (g, cap), gen, clean)
            return None
        return [(g, outs)]

    def _abandon(self, home: Any, capture: tuple[Any, Any] | None, gen: Any, clean: Any) -> None:
        """Undo what a failed probe left behind, then check the device answers (``probe_clean``).

        * a capture still open on the capture stream is ended (``capture_end`` ends it even when it
          then reports the capture invalid);
        * the current stream is set back to the one before the probe (``torch.cuda.graph`` leaves its
          capture stream current when ``capture_end`` raises);
        * the default generator gets a copy of its state taken just before the capture (not in capture
          mode, same seed and offset): the state the failed capture registered may stay in capture mode;
        * the failed graph is kept alive, not destroyed: the caching allocator may still hold a filter
          that points at it (``capture_end`` raised before ending its pool).
        """
        torch = self._torch
        problems: list[str] = []
        if capture is not None:
            g, cap = capture
            self._abandoned.append(g)
            try:
                torch.cuda.set_stream(cap)
                if torch.cuda.is_current_stream_capturing():
                    try:
                        g.capture_end()
                    except Exception:  # noqa: BLE001 - ending an invalidated capture reports it; it is ended
                        pass
                if torch.cuda.is_current_stream_capturing():
                    problems.append("the capture stream is still capturing")
            except Exception as exc:  # noqa: BLE001
                problems.append(f"ending the capture: {_short(exc)}")
        try:
            torch.cuda.set_stream(home)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"restoring the current stream: {_short(exc)}")
        if gen is not None and clean is not None:
            try:
                gen.graphsafe_set_state(clean)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"restoring the RNG generator: {_short(exc)}")
        try:
            self._sync()
            if torch.cuda.is_current_stream_capturing():
                problems.append("the current stream is still capturing")
            torch.randn(4, device="cuda")   # what get_inputs does next: draw from the default generator
            self._sync()
        except Exception as exc:  # noqa: BLE001
            problems.append(f"the device after the probe: {_short(exc)}")
        if problems:
            self.probe_clean = False
            self.probe_error = f"{self.probe_error}; clean-up failed: {'; '.join(problems)}"

    def time_block_graph(self, graphs: Sequence[tuple[Any, Any]], reps: int, replays: int,
                         capture: set[int], before_rep: Callable[[int], None] | None = None) -> BlockTiming:
        """Time ``reps`` graph replays, each behind an L2 flush; ``before_rep(rep)`` refills the
        graph's static inputs with that repetition's sets (queued before the flush, untimed). A
        captured repetition keeps a copy of its last call's output.

        Every host nanosecond of a repetition (outside the refill) is the harness's own work here,
        the graph's launch included: replaying a graph runs no candidate code on the host, and the
        graph's device work is one unit on this stream, ended before the end event runs (capture
        refuses a side stream that does not join back). Why (issue 25): on an H100 an honest gather of
        2.8 us, 8 calls to a graph, read wall 1.96x its timed time with only the flush's launch and the
        event records credited; the graph's launch is of the same order as the calls it replays.
        """
        starts, ends = self._events(reps), self._events(reps)
        captured: dict[int, Any] = {}
        self._sync()
        refill = 0
        wall0 = _now()
        harness: list[float] = []   # per repetition: host ns of the loop's own work (BlockTiming.harness_ns)
        for rep in range(reps):
            g, outs = graphs[rep % len(graphs)]
            if before_rep is not None:
                refill += self._refill(before_rep, rep)
            h0 = _now()
            self._flush.zero_()
            self._record(starts[rep])
            self._replay(g)
            self._record(ends[rep])
            if rep in capture:
                self._sync()
                captured[rep] = _clone(outs[-1])
            harness.append(float(_now() - h0))
        self._sync()
        wall = _now() - wall0 - refill
        times = [self._elapsed(s, e) * 1e6 / replays for s, e in zip(starts, ends)]
        return BlockTiming(times_ns=times, wall_ns=float(wall), timed_total_ns=float(sum(times)) * replays,
                           method=f"cuda-graph(replays={replays})+l2flush", captured=captured, harness_ns=harness)


def graph_replays_fitting(set_bytes: int, cuda: dict[str, Any], budget: int) -> int:
    """Calls one graph holds: ``graph_replays``, or fewer so their static sets fit ``budget``; 0 (time by
    events) when fewer than ``graph_replays_min`` fit (before 1.7.0 the minimum was ``graph_replays``)."""
    most = int(cuda["graph_replays"])
    least = int(cuda.get("graph_replays_min") or most)
    fit = most if set_bytes <= 0 else min(most, budget // set_bytes)
    return fit if fit >= min(least, most) else 0


_WATCHED = ("torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time", "torch.cuda.synchronize",
            "torch.cuda.Stream", "torch.cuda.current_stream", "torch.cuda.default_stream", "torch.cuda.stream",
            "torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.CUDAGraph.replay")


def _credit_flush_overlap(harness: list[float], in_call: list[tuple[int, int]],
                          flush_ns: list[float]) -> list[float]:
    """Add to each repetition's harness time the part of the call's host time during which the device
    was still running the harness's own cache flush.

    The start event runs when the flush ends. A call whose host launch outlasts the flush (a
    launch-bound call: on the H200 an honest 5 us gather spent ~87 us on the host against 55 us of
    event time) spends the overlap inside the wall window but before the start event: neither timed
    nor counted as harness work, it read as escaped work (wall 1.56x timed; issue 25).

    ``in_call`` is, per repetition, (host ns from the flush's launch to the call, host ns inside the
    call). The flush is taken to start on the device when it was launched (the loop waits for the
    stream before each repetition, so the device is idle then; a later start would only make the true
    overlap longer), so the overlap is ``min(flush - lead, call)``, never negative. A call that returns
    at once (the shape of work left on another stream) earns nothing, and a candidate that burns host
    time to earn credit pays the same time in the wall window.
    """
    return [h + float(max(0.0, min(f - float(lead), float(c)))) for h, (lead, c), f in zip(harness, in_call, flush_ns)]


def _lookup(torch: Any, dotted: str) -> Any:
    obj: Any = torch
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part, None)
    return obj


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _clean_generator_state(torch: Any) -> tuple[Any, Any]:
    """(the current device's default CUDA generator, a copy of its state not in capture mode), or
    (None, None) where this torch has no graph-safe generator API (``Generator.clone_state``)."""
    try:
        gen = torch.cuda.default_generators[torch.cuda.current_device()]
        return gen, gen.clone_state()
    except Exception:  # noqa: BLE001 - older torch: nothing to restore with
        return None, None


def _clone(out: Any) -> Any:
    if isinstance(out, (tuple, list)):
        return type(out)(_clone(o) for o in out)
    return out.clone() if hasattr(out, "clone") else out
