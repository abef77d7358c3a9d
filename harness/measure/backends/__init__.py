"""Measuring backends, one module each behind one protocol, found by name in :data:`BACKENDS`.

* :mod:`.cpu`: the CPU (``perf_counter_ns``, inner-loop batching, outputs as files);
* :mod:`.cuda`: one CUDA device (events behind an L2 flush, CUDA-graph replay, device-memory sharing);
* :mod:`.mlx`: MLX, measured by its own runner (:mod:`.mlx_runner`) for the held-out retest.

A backend is an object implementing :class:`MeasuringBackend` (the harness's side) whose ``child()`` gives
the :class:`ChildBackend` a measuring child runs (device start, fingerprint facts, ceilings, the timing
loop). It is registered with ``BACKENDS.add(NAME, obj)`` (:class:`harness.registry.Registry`, the one
registry pattern of gates, tuners and engines). A backend defined outside this package (a plug-in, a
test's fake) is found by the measuring child through the module that defines it: the worker's
configuration names that module and its file (:func:`child_locator`), and the child imports it.

This package is imported inside the measuring child before ``import torch`` is done: it and its
backend modules import nothing of the harness beyond the registry at import time.
"""

from __future__ import annotations

from harness.measure.backends import cpu, cuda, mlx  # noqa: F401 - the built-ins register themselves
from harness.measure.backends._base import ChildBackend, MeasuringBackend
from harness.measure.backends._registry import BACKENDS, backend_named, child_locator, load_in_child

__all__ = ["BACKENDS", "ChildBackend", "MeasuringBackend", "backend_named", "child_locator", "load_in_child"]
