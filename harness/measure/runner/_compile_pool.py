"""Ending Inductor's compile workers in a measuring child before anything is timed (issue 26).

Why: the child lets Inductor compile a candidate's first call with several workers (a thread pool
that runs the C++ compiler on a CPU; on CUDA a sidecar process with its own process pool for Triton,
and a reader thread in this process). Those workers outlive the compile: an idle pool's threads
count in the thread facts the escape gate reads, and on the H200 the lazily started reader thread
appeared after the timed repetitions and rejected three honest compiled candidates (commit 5738211,
which forced one compile thread for that reason). So once the first call is done the child shuts every
pool down, waits for their threads to end, and sets Inductor's ``compile_threads`` to 1: a later
compile (a new input signature) runs in this process, as before, and no compile worker exists while
timed blocks run.

Imported lazily by the child: a candidate that never compiles never imports Inductor here.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

#: seconds to wait for one pool thread to end after its pool was shut down
JOIN_S = 10.0


def _threads_of(pool: Any) -> list[threading.Thread]:
    """The Python threads a pool object holds: a SubprocPool's reader thread and its quiesce timer's
    thread, a ThreadPoolExecutor's workers."""
    found: list[threading.Thread] = []
    for name in ("read_thread",):
        t = getattr(pool, name, None)
        if isinstance(t, threading.Thread):
            found.append(t)
    timer = getattr(pool, "timer", None)
    t = getattr(timer, "background_thread", None)
    if isinstance(t, threading.Thread):
        found.append(t)
    found.extend(t for t in getattr(pool, "_threads", ()) if isinstance(t, threading.Thread))
    return found


def end_compile_pools(join_s: float = JOIN_S) -> list[str]:
    """Shut down every compile pool Inductor started in this process, wait for their threads, and
    make later compiles run in this process. Returns what was ended (empty when Inductor was never
    imported or never started a pool); never raises."""
    mod = sys.modules.get("torch._inductor.async_compile")
    if mod is None:
        return []
    ended: list[str] = []
    try:
        async_compile: Any = mod.AsyncCompile
        threads: list[threading.Thread] = []
        # the process pools (SubprocPool on CUDA: a sidecar process and a reader thread here)
        for pool in list(getattr(mod, "_pool_set", ())):
            threads += _threads_of(pool)
            ended.append(type(pool).__name__)
        mod.shutdown_compile_workers()
        # the thread pool that runs the C++ compiler (not in _pool_set; functools.lru_cache'd)
        pool_fn = getattr(async_compile, "pool", None)
        if pool_fn is not None and getattr(pool_fn, "cache_info", None) and pool_fn.cache_info().currsize:
            executor = pool_fn()
            threads += _threads_of(executor)
            executor.shutdown(wait=True)
            pool_fn.cache_clear()
            ended.append(type(executor).__name__)
        from torch._inductor import config

        config.compile_threads = 1
        for t in threads:
            if t is not threading.current_thread():
                t.join(join_s)
    except Exception as exc:  # noqa: BLE001 - a failure here leaves the facts to the gates
        ended.append(f"error: {type(exc).__name__}: {str(exc)[:200]}")
    return ended


def compile_threads_alive() -> list[str]:
    """Names of live threads that belong to Inductor's compile pools (for tests and diagnostics)."""
    names = ("InductorSubproc", "subproc_worker_timer", "ThreadPoolExecutor")
    return [t.name for t in threading.enumerate() if t.is_alive() and t.name.startswith(names)]


__all__ = ["JOIN_S", "compile_threads_alive", "end_compile_pools"]
