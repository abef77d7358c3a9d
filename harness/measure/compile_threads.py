"""How many workers Inductor may use for a measuring child's first-call compile (issue 26).

Why a knob: a compiled random-search point spends most of its evaluation in Inductor's first-call
compile (C++ on a CPU, Triton on CUDA), and one compile thread leaves every other core idle while the
child waits. Inductor compiles kernels side by side when its ``compile_threads`` is above 1. The child
shuts those workers down before anything is measured (``harness.measure.runner._compile_pool``), so the
count changes only how long the untimed first call takes, never what is timed; it is therefore not a
protocol value. ``ATB_COMPILE_THREADS`` sets it (1 gives the old in-process compile); the default is the
harness's CPU count, and it is capped at :data:`MAX_COMPILE_THREADS` (each worker is a compiler process
with its own memory, and beyond a few the compile is bound by its serial parts).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: the most compile workers a child gets, whatever the knob says
MAX_COMPILE_THREADS = 8
#: the environment variable that sets the count (read by the harness, never by a child)
ENV = "ATB_COMPILE_THREADS"


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def compile_threads(env: Mapping[str, str] | None = None) -> int:
    """The compile worker count for a measuring child: ``ATB_COMPILE_THREADS`` if set, else the CPU
    count, clamped to 1..:data:`MAX_COMPILE_THREADS`.

    Raises:
        ValueError: the variable is set but is not an integer.
    """
    given = (os.environ if env is None else env).get(ENV, "").strip()
    if given:
        try:
            n = int(given)
        except ValueError:
            raise ValueError(f"{ENV} must be an integer, not {given!r}") from None
    else:
        n = cpu_count()
    return max(1, min(MAX_COMPILE_THREADS, n))


__all__ = ["ENV", "MAX_COMPILE_THREADS", "compile_threads", "cpu_count"]
