"""Why the CPU harness reads the sorted-row median at about 10x when an independent timer reads about 80x.

Found with the honest corpus on the CPU (2026-12-06). The harness reads the reference as the independent
timer does (about 580 us against 530 us) but the candidate about 8x slower (60 us against 7 us).

The task's ``get_inputs`` builds structure (sorted rows), so the CPU loop gets *exact* sets. Each timed
call gets a whole draw of its own. The draws are made just before each repetition, outside the timed
region (``harness.measure.backends.cpu``), and their cost shortens the inner loop to 3 calls. A draw
sorts 256 x 1024 floats. The calls timed right after it run several times slower than in a steady loop
(what they pay for was not isolated: not the input being new, see the regimes below), and a call that
itself takes a few microseconds pays that several times over.

This script times one call several ways, in this process, with the children's thread and malloc
settings: on fresh draws made just before (the harness's regime), on one reused input, on a pool of old
draws, on old draws with fresh draws made just before anyway (this separates "the input is new" from
"something heavy just ran"), on sets made earlier and copied into fresh buffers just before (what a child
would do with sets drawn elsewhere), on fresh draws with one untimed call on a spare set in between, on
sets drawn on demand by another process and copied in from shared memory (the relay design of
``benchmarks/results/honest_h200/STATUS_issue25.md``: the draw's work runs outside this process, only the
copy runs here), on old draws after a sort of an existing tensor (heavy work, no new input), on fresh draws
followed by small torch work of the harness's own (a warm-up that runs no candidate code), on fresh draws
whose inputs the harness then reads once or clones (is the excess the input's cache and page state?), and, where there
are two cores, on sets drawn by a process pinned to the other core and used where it wrote them (no draw
and no copy on this core).
The medians are per call, in microseconds. It measures no harness code: it shows the mechanism, and the
fix belongs in the CPU timing loop.

    python benchmarks/cpu_exact_set_cold_start.py --out benchmarks/results/cpu_exact_set_cold_start.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))   # benchmarks/ (_child_conditions)


def _reexec_with_child_settings() -> None:
    """Run under the measuring children's thread and glibc malloc settings (``_child_conditions``): malloc
    reads its settings at start-up, so the process starts again with them."""
    if os.environ.get("ATB_COLD_START_CHILD") == "1":
        return
    sys.path.insert(0, str(ROOT))
    from _child_conditions import measuring_child_env

    env = {**os.environ, "ATB_COLD_START_CHILD": "1", **measuring_child_env()}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


class _Drawer:
    """A forked process that draws one repetition's ``k`` sets when asked and writes them into shared memory;
    this process copies them into fresh buffers (:meth:`sets`) or uses them where they lie
    (:meth:`in_place`). One input tensor per set, as the task has. ``cores``: (this process's core, the
    drawer's core) to pin each to, where the machine has two."""

    def __init__(self, torch: Any, get_inputs: Callable[[], list[Any]], k: int,
                 cores: tuple[int, int] | None = None) -> None:
        import tempfile

        self.torch, self.k = torch, k
        self.shape = get_inputs()[0].shape
        self.n = int(torch.Size(self.shape).numel())
        fd, self.path = tempfile.mkstemp(prefix="atb_relay_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.close(fd)
        self.shm = torch.from_file(self.path, shared=True, size=k * self.n, dtype=torch.float32)
        r_req, self.w_req = os.pipe()
        self.r_ack, w_ack = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            if cores is not None:
                os.sched_setaffinity(0, {cores[1]})
            os.close(self.w_req)
            os.close(self.r_ack)
            while os.read(r_req, 1):
                for i in range(k):
                    self.shm[i * self.n:(i + 1) * self.n].copy_(get_inputs()[0].reshape(-1))
                os.write(w_ack, b"1")
            os._exit(0)
        self.home = os.sched_getaffinity(0)
        if cores is not None:
            os.sched_setaffinity(0, {cores[0]})
        os.close(r_req)
        os.close(w_ack)

    def _draw(self) -> list[Any]:
        os.write(self.w_req, b"1")
        os.read(self.r_ack, 1)
        return [self.shm[i * self.n:(i + 1) * self.n].view(self.shape) for i in range(self.k)]

    def sets(self) -> list[list[Any]]:
        return [[t.clone()] for t in self._draw()]

    def in_place(self) -> list[list[Any]]:
        return [[t] for t in self._draw()]

    def close(self) -> None:
        os.close(self.w_req)
        os.waitpid(self.pid, 0)
        os.unlink(self.path)
        os.sched_setaffinity(0, self.home)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--reps", type=int, default=300)
    p.add_argument("--inner", type=int, default=3, help="calls per repetition (the harness used 3 here)")
    args = p.parse_args(argv)
    _reexec_with_child_settings()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    def get_inputs() -> list[torch.Tensor]:   # tests/redteam/tasks/hc_sorted_median.py at its CPU size
        return [torch.sort(torch.randn(256, 1024), dim=-1).values]

    calls: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "candidate (gather the middle column)": lambda x: x[..., (x.shape[-1] - 1) // 2].clone(),
        "reference (torch.median)": lambda x: torch.median(x, dim=-1).values,
    }
    pool = [get_inputs() for _ in range(64)]

    def per_call(fn: Callable[[torch.Tensor], torch.Tensor], sets_for: Callable[[int], list[list[Any]]],
                 before: Callable[[], None] = lambda: None) -> float:
        times = []
        for rep in range(args.reps):
            sets = sets_for(rep)
            before()
            t0 = time.perf_counter_ns()
            for s in sets:
                fn(*s)
            times.append((time.perf_counter_ns() - t0) / len(sets))
        return statistics.median(times) / 1e3

    k = args.inner

    def _read_once(sets: list[list[Any]]) -> list[list[Any]]:
        """Read every element of every input once (harness code only): warms the inputs' cache lines and
        pages, and nothing of the calls' own code paths."""
        for s in sets:
            for t in s:
                float(t.sum())
        return sets

    def draw_and_drop() -> None:
        for _ in range(k):
            get_inputs()

    result: dict[str, Any] = {"torch": torch.__version__, "machine": platform.processor() or platform.machine(),
                              "threads": torch.get_num_threads(), "inner": k, "reps": args.reps,
                              "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"), "us_per_call": {}}
    relay = _Drawer(torch, get_inputs, k)
    spare, small = get_inputs()[0], torch.randn(16)

    with torch.no_grad():
        for name, fn in calls.items():
            for _ in range(20):
                fn(*pool[0])
            result["us_per_call"][name] = {
                "fresh draws just before (the harness's exact sets)": per_call(
                    fn, lambda rep: [get_inputs() for _ in range(k)]),
                "one input reused": per_call(fn, lambda rep: [pool[0]] * k),
                "a pool of old draws": per_call(fn, lambda rep: [pool[(rep * k + i) % 64] for i in range(k)]),
                "old draws, fresh draws made just before anyway": per_call(
                    fn, lambda rep: [pool[(rep * k + i) % 64] for i in range(k)],
                    before=draw_and_drop),
                "ready-made sets copied into fresh buffers just before": per_call(
                    fn, lambda rep: [[t.clone() for t in pool[(rep * k + i) % 64]] for i in range(k)]),
                "fresh draws just before, then one untimed call on a spare set": per_call(
                    fn, lambda rep: [get_inputs() for _ in range(k)], before=lambda: fn(*pool[-1])),
                "drawn by another process on demand, copied in from shared memory": per_call(
                    fn, lambda rep: relay.sets()),
                "old draws, a sort of an existing tensor just before": per_call(
                    fn, lambda rep: [pool[(rep * k + i) % 64] for i in range(k)],
                    before=lambda: [torch.sort(spare, dim=-1) for _ in range(k)]),
                "fresh draws just before, then 16 small adds of the harness's own (no candidate code)": per_call(
                    fn, lambda rep: [get_inputs() for _ in range(k)],
                    before=lambda: [small.add(small) for _ in range(16)]),
                "fresh draws just before, then every input read once by the harness (a sum)": per_call(
                    fn, lambda rep: _read_once([get_inputs() for _ in range(k)])),
                "fresh draws just before, each cloned into fresh buffers (the draws dropped)": per_call(
                    fn, lambda rep: [[t.clone() for t in get_inputs()] for _ in range(k)]),
            }
    relay.close()
    if len(os.sched_getaffinity(0)) >= 2:
        # the drawer on the other core, this process on its own, the sets used where the drawer wrote them:
        # neither the draw nor a copy runs on this core
        a, b = sorted(os.sched_getaffinity(0))[:2]
        pinned = _Drawer(torch, get_inputs, k, cores=(a, b))
        with torch.no_grad():
            for name, fn in calls.items():
                result["us_per_call"][name]["drawn by another process pinned to another core, used in place"] = \
                    per_call(fn, lambda rep: pinned.in_place())
        pinned.close()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
