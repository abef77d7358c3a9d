"""The harness's one wall clock, bound at import time.

The measuring child imports this module before any task or candidate code runs, so the names below
refer to the original functions even if candidate code later replaces ``time.perf_counter_ns``.
The integrity check compares the module attributes against these bound originals.
"""

from __future__ import annotations

import time

perf_counter_ns = time.perf_counter_ns
process_time_ns = time.process_time_ns
thread_time_ns = time.thread_time_ns
_ORIGINAL_TIME_FUNCTIONS = {
    "time.perf_counter_ns": time.perf_counter_ns,
    "time.perf_counter": time.perf_counter,
    "time.monotonic_ns": time.monotonic_ns,
    "time.time_ns": time.time_ns,
    "time.process_time_ns": time.process_time_ns,
    "time.thread_time_ns": time.thread_time_ns,
}


def time_functions_intact() -> dict[str, bool]:
    """Whether each bound time function is still the one ``time`` exposes (False: it was replaced)."""
    return {name: getattr(time, name.split(".", 1)[1]) is fn for name, fn in _ORIGINAL_TIME_FUNCTIONS.items()}
