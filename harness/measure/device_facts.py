"""What a measuring child reports about its device: the fingerprint's facts and the measured ceilings.

These run inside the reference child, so this module imports nothing of the harness beyond the
bound clock (no pydantic, no protocol package): the child's start-up, and so every evaluation's
first measurement, does not wait for them. :mod:`harness.measure.device` turns the facts into the
stored records.
"""

from __future__ import annotations

import os
import platform
import re
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas(torch: Any) -> str:
    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def local_fingerprint_facts(torch: Any, backend: str, threads: int, smi: bool = True) -> dict[str, Any]:
    """The fingerprint fields of this process's device (run inside a measuring child).

    Only stable facts: clocks are the maximum clocks, not the current ones, so two sessions on the
    same machine share a fingerprint and a ceilings cache.
    """
    from harness.measure.backends._registry import backend_named

    spec = backend_named(backend)
    facts: dict[str, Any] = {"backend": spec.stored_as, "cpu_model": _cpu_model(), "cpu_count": os.cpu_count() or 1,
                             "torch_version": str(torch.__version__), "blas": _blas(torch),
                             "torch_threads": threads}
    return spec.fingerprint_facts(torch, facts, smi)   # CUDA: gpu_name, cuda_version, the driver's facts


def measure_ceilings_here(torch: Any, backend: str, params: dict[str, int] | None = None) -> dict[str, Any]:
    """Measure copy bandwidth and fp32 matmul rate in this process (run inside a measuring child).

    The best of ``params["reps"]`` repetitions is the ceiling (a ceiling is what the device can do,
    not what it usually does; on a shared host the best repetition is also the least disturbed).
    Sizes and repetitions come from ``protocol.timing.ceilings`` (``params``, or the verified
    protocol when not given).
    """
    if params is None:
        from protocol import load_protocol

        params = load_protocol().timing.ceilings.model_dump()
    from harness.measure.backends._registry import backend_named

    return backend_named(backend).measure_ceilings(torch, params)
