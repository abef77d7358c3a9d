"""The CPU measuring backend: ``perf_counter_ns`` (bound before candidate import), inner-loop batching.

Everything that is CPU-only in the harness lives here: the child's CPU timing loop (calibrate an inner
loop, lay out windowed input sets, time blocks of repetitions with :func:`harness.measure.timing._cpu.
time_block_sets`), the CPU ceilings, the anchors' CPU median, and the facts the session and the gates
read (RLIMIT_AS applies, caches are not flushed between repetitions, outputs travel as files).
The code of the timing loop moved here from ``harness/measure/runner/_child.py`` unchanged.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.measure.backends._registry import BACKENDS

if TYPE_CHECKING:
    from harness.measure.backends._base import ChildBackend
    from harness.measure.runner._messages import PrepareReply
    from harness.records import DeviceFamily
    from protocol import Protocol as AtbProtocol

# CPU exact timed sets (structured inputs, the extended pass): at most this many ns of get_inputs draws per
# repetition; the inner loop is shortened to fit (a harness cost bound, not a verdict parameter: the
# repetition is still timed whole, and the stale/mutation checks see every set)
_EXACT_DRAWS_PER_REP_NS = 50_000_000


class TorchBackend:
    """What the torch backends share (CPU, CUDA, and a plug-in built on them): the harness's torch
    measuring children, one timing method, no device memory plan. A subclass sets the facts."""

    name = ""
    device = "cpu"
    stored_as: DeviceFamily = "cpu"
    torch_children = True
    gpu_nodes = False
    gpus = 0
    overlaps_startup = False
    matmul_tf32 = False
    probes_late = False
    counts_input_sets = True
    judges_parent_wall = False
    default_transport = "file"

    def available(self) -> tuple[bool, str]:
        return True, ""

    def precheck(self) -> str | None:
        return None

    def driver_facts(self) -> dict[str, Any] | None:
        return None

    def memory_limit_bytes(self, candidate_memory_mb: int) -> int:
        return candidate_memory_mb << 20

    def interleave_rounds(self, protocol: AtbProtocol) -> int:
        return min(protocol.timing.cpu.interleave_rounds, protocol.timing.cpu.timed_reps)

    def cache_factor(self, protocol: AtbProtocol) -> float:
        return protocol.gates.physical_cpu_cache_factor

    def choose_method(self, ask_arms: Callable[[Any], dict[str, Any]], prep: dict[str, PrepareReply],
                      protocol: AtbProtocol, probe_errors: list[str]) -> None:
        return None

    def plan_memory(self) -> bool:
        return False

    def confinement_ro_paths(self) -> tuple[str, ...]:
        return ()

    def child(self, torch: Any, config: dict[str, Any]) -> ChildBackend:
        return CpuChild(torch, config)

    def fingerprint_facts(self, torch: Any, facts: dict[str, Any], smi: bool) -> dict[str, Any]:
        return facts

    def measure_ceilings(self, torch: Any, params: dict[str, int]) -> dict[str, Any]:
        """Copy bandwidth and fp32 matmul rate on the CPU, best of ``params["reps"]`` (see device_facts)."""
        from harness.measure.timing._clock import perf_counter_ns

        n_copy, n_mm, reps = params["cpu_copy_bytes"] // 4, params["cpu_matmul_n"], params["reps"]
        src = torch.randn(n_copy)
        dst = torch.empty_like(src)
        a, b = torch.randn(n_mm, n_mm), torch.randn(n_mm, n_mm)

        def t_cpu(fn: Any) -> float:
            fn()
            best = float("inf")
            for _ in range(reps):
                t0 = perf_counter_ns()
                fn()
                best = min(best, (perf_counter_ns() - t0) / 1e9)
            return best

        t_copy = t_cpu(lambda: dst.copy_(src))
        t_mm = t_cpu(lambda: torch.mm(a, b))
        method = (f"cpu ({torch.get_num_threads()} threads): copy of {n_copy * 4 >> 20} MiB fp32 (read+write), "
                  f"{n_mm}^3 fp32 mm, best of {reps}")
        return {"bytes_per_s": 2.0 * n_copy * 4 / t_copy, "flops_per_s": 2.0 * n_mm ** 3 / t_mm, "method": method}

    def median_seconds(self, fn: Any, protocol: AtbProtocol, reps: int | None = None, warm: bool = True) -> float:
        """The anchors' median seconds per call of ``fn`` (see :func:`harness.science.anchors._median_seconds`).

        Timed by the measuring child's own CPU loop (:func:`harness.measure.timing._cpu.time_block`, the
        loop under :meth:`CpuChild.block`) with an inner loop of one call: each repetition is one call
        between two reads of the harness's bound ``perf_counter_ns``. What the kernel path adds around that
        loop does not apply to an anchor's fixed workload on fixed buffers: fresh input sets per call (a
        2 GiB copy cannot draw a new buffer per call), output capture for the gates, inner-loop batching
        (an anchor's calls are milliseconds long, and a published figure is per call)."""
        from harness.measure.timing._cpu import time_block

        if warm:
            for _ in range(protocol.timing.cpu.warmup_reps):
                fn()
        block = time_block(lambda _rep: fn(), protocol.timing.cpu.timed_reps if reps is None else reps, 1, set())
        return float(statistics.median(block.times_ns)) / 1e9

    def paired_rounds(self, protocol: AtbProtocol) -> int:
        """How many A B pairs an anchor's paired ratio takes."""
        return protocol.timing.cpu.timed_reps

    def fingerprint_name(self, fp: Any) -> str:
        """The device name an anchor's ``name_regex`` is matched against."""
        return str(fp.cpu_model or "")


class CpuChild:
    """The CPU backend inside a measuring child: no device, the bound CPU clock."""

    device = "cpu"
    on_device = False
    device_total = 0
    timer: Any = None

    def __init__(self, torch: Any, config: dict[str, Any]) -> None:
        self.torch, self.config = torch, config

    def sync(self) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def mem_info(self) -> tuple[int, int] | None:
        return None

    def load_facts(self) -> dict[str, Any]:
        return {}

    def free_device(self, nbytes: int, large_bytes: int) -> None:
        return None

    def after_compare(self) -> None:
        return None

    def ipc_collect(self) -> None:
        return None

    def timer_globals(self) -> dict[str, Any]:
        return {}

    def timer_intact(self, same: Any) -> dict[str, bool]:
        return {}

    # ------------------------------------------------------------------ the timing loop
    def prepare(self, c: Any, seed: int, large: float, private_inputs: bool) -> dict[str, Any]:
        """Calibrate an inner loop on a set of its own (never timed) and lay out windowed timed sets."""
        S, torch, CONFIG, DEVICE, _cpu = c.S, c.torch, c.config, c.device, c.cpu_timing
        _now, make_inputs, TASK_DISTRIBUTION, TimedSets = c.now, c.make_inputs, c.TASK_DISTRIBUTION, c.TimedSets
        _nbytes, _note, _forward, _check_timed, fingerprints = c.nbytes, c.note, c.forward, c.check_timed, c.fingerprints
        p = CONFIG["cpu"]
        t_draw = _now()
        cal = make_inputs(torch, S.task.get_inputs, seed, TASK_DISTRIBUTION, large, DEVICE)
        draw_ns = max(1, _now() - t_draw)
        S.set_bytes = _nbytes(cal)
        S.inner, est_ns = _cpu.calibrate_inner_loop(lambda: _note(_forward(cal)), int(p["warmup_reps"]),
                                                    int(p["min_timed_ns"]))
        _check_timed()
        del cal
        force_exact = private_inputs
        S.sets = TimedSets(torch, S.task.get_inputs, seed, large, DEVICE, "window", S.inner, force_exact=force_exact)
        if S.sets.exact and S.inner * draw_ns > _EXACT_DRAWS_PER_REP_NS:
            # exact sets are one whole get_inputs draw per timed call: a 7 us candidate on a problem whose draw
            # takes 14 ms paid ~4 s of drawing per repetition (an honest sorted-input candidate's evaluation ran
            # past 900 s); the inner loop is shortened so a repetition's draws stay within the bound
            S.inner = max(1, _EXACT_DRAWS_PER_REP_NS // draw_ns)
            S.sets = TimedSets(torch, S.task.get_inputs, seed, large, DEVICE, "window", S.inner, force_exact=force_exact)
        S.sets.spec(0, 0)  # draws the pool now, outside any timed block
        S.method = "cpu-perf_counter"
        return {"reps": int(p["timed_reps"]), "inner": S.inner, "est_ns": est_ns, "method": S.method,
                "input_hashes_before": fingerprints(torch, S.sets.pool_tensors())}

    def capture(self, c: Any, graph: bool, seed: int, large: float) -> str:
        """One method on a CPU: nothing to capture."""
        c.check_timed()
        return ""

    def block(self, c: Any, reps: int, capture: set[int], rep_q: dict[int, int]) -> Any:
        """A block of ``reps`` repetitions, each an inner loop over fresh windows of the pool."""
        S, CONFIG, _cpu = c.S, c.config, c.cpu_timing
        _next_sets, _note_sets, _note, _forward = c.next_sets, c.note_sets, c.note, c.forward

        def before(rep: int) -> None:
            S.cur = _next_sets()
            rep_q[rep] = S.last_q
            S.timed_calls += len(S.cur)
            _note_sets(S.cur)

        for _ in range(int(CONFIG["cpu"]["block_warmup_calls"])):
            _note(_forward(_next_sets()[0]))   # a set of its own: a warm-up never previews a timed input
        return _cpu.time_block_sets(lambda r, i: _note(_forward(S.cur[i])), reps, S.inner, capture, before)

    def after_block(self, c: Any) -> None:
        return None


class CpuBackend(TorchBackend):
    """Measure on this machine's CPU (the default)."""

    name = "cpu"


CPU = BACKENDS.add("cpu", CpuBackend())

__all__ = ["CPU", "CpuBackend", "CpuChild", "TorchBackend"]
