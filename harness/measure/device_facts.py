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
import shutil
import subprocess
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


def _nvidia_smi(fields: str) -> list[str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [x.strip() for x in out.strip().splitlines()[0].split(",")] if out.strip() else []


def local_fingerprint_facts(torch: Any, backend: str, threads: int, smi: bool = True) -> dict[str, Any]:
    """The fingerprint fields of this process's device (run inside a measuring child).

    Only stable facts: clocks are the maximum clocks, not the current ones, so two sessions on the
    same machine share a fingerprint and a ceilings cache.
    """
    facts: dict[str, Any] = {"backend": backend, "cpu_model": _cpu_model(), "cpu_count": os.cpu_count() or 1,
                             "torch_version": str(torch.__version__), "blas": _blas(torch),
                             "torch_threads": threads}
    if backend == "cuda":
        props = torch.cuda.get_device_properties(0)
        facts["gpu_name"] = str(props.name)
        facts["cuda_version"] = str(torch.version.cuda)
        if smi:
            facts.update(gpu_driver_facts())
    return facts


def gpu_driver_facts() -> dict[str, Any]:
    """The driver version and maximum clocks from ``nvidia-smi`` (a fingerprint's CUDA fields). The
    harness runs it itself, beside the reference child's start-up, rather than inside the child."""
    smi = _nvidia_smi(GPU_SMI_FIELDS)
    return {"gpu_driver": smi[0] if smi else "unknown",
            "clocks": {"max_sm_mhz": smi[1], "max_mem_mhz": smi[2]} if len(smi) >= 3 else {}}


GPU_SMI_FIELDS = "driver_version,clocks.max.sm,clocks.max.mem"


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
    from harness.measure.timing._clock import perf_counter_ns

    if backend == "cuda":
        n_copy, n_mm, reps = params["cuda_copy_bytes"] // 4, params["cuda_matmul_n"], params["reps"]
        src = torch.randn(n_copy, device="cuda")
        dst = torch.empty_like(src)
        a = torch.randn(n_mm, n_mm, device="cuda")
        b = torch.randn(n_mm, n_mm, device="cuda")

        def t_cuda(fn: Any) -> float:
            fn()
            torch.cuda.synchronize()
            best = float("inf")
            for _ in range(reps):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                torch.cuda.synchronize()
                best = min(best, s.elapsed_time(e) / 1e3)
            return best

        t_copy = t_cuda(lambda: dst.copy_(src))
        t_mm = t_cuda(lambda: torch.mm(a, b))
        method = f"cuda: copy of {n_copy * 4 >> 20} MiB fp32 (read+write), {n_mm}^3 fp32 mm (TF32 off), best of {reps}"
    else:
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
