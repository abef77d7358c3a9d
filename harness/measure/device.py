"""Device fingerprints, measured ceilings and the roofline fraction.

The fingerprint and the ceilings are measured inside the session's reference child (so the
harness's own process never initialises CUDA and the numbers come from a process pinned exactly like
the ones that time kernels). Ceilings are a large copy (bytes read + written per second) and a large
fp32 matrix product with TF32 off (floating-point operations per second); they are measured in every
session and stored with it (``add_ceilings``); a session uses the best reading stored for its device
fingerprint (``harness.measure.session.best_ceilings``), since a busy host only ever under-reads a ceiling.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from harness.errors import DeviceUnavailableError
from harness.records import Backend, DeviceCeilings, DeviceFingerprint
from harness.registry import Registry


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


def fingerprint_from_facts(facts: dict[str, Any]) -> DeviceFingerprint:
    """Validate a child's fingerprint facts into the record the store keys devices by."""
    keep = {k: v for k, v in facts.items() if k in DeviceFingerprint.model_fields}
    return DeviceFingerprint.model_validate(keep)


def ceilings_from_facts(facts: dict[str, Any]) -> DeviceCeilings:
    return DeviceCeilings(bytes_per_s=float(facts["bytes_per_s"]), flops_per_s=float(facts["flops_per_s"]),
                          method=str(facts["method"]))


def roofline_floor_ns(task_bytes: float | None, task_flops: float | None, ceilings: DeviceCeilings) -> float | None:
    """The least time the device could take: max(bytes / bandwidth, flops / rate), in ns."""
    terms = []
    if task_bytes:
        terms.append(task_bytes / ceilings.bytes_per_s)
    if task_flops:
        terms.append(task_flops / ceilings.flops_per_s)
    return max(terms) * 1e9 if terms else None


def roofline_fraction(task_bytes: float | None, task_flops: float | None, ceilings: DeviceCeilings | None,
                      time_ns: float | None) -> float | None:
    """The achieved fraction of the roofline floor (1.0 = at the ceiling), or None if undeclared."""
    if ceilings is None or time_ns is None or time_ns <= 0:
        return None
    floor = roofline_floor_ns(task_bytes, task_flops, ceilings)
    return None if floor is None else floor / time_ns


def cuda_driver_present() -> bool:
    """A cheap first check (no torch, no child): the NVIDIA driver's control node exists."""
    return os.path.exists("/dev/nvidiactl") or any(os.path.exists(f"/dev/nvidia{i}") for i in range(8))


BackendProbe = Callable[[], tuple[bool, str]]

BACKENDS: Registry[BackendProbe] = Registry("backend", error=DeviceUnavailableError)
"""Measuring backends by name, each with its availability probe (``@BACKENDS.register(NAME)``). Closed to
entry points: the runner's children measure by backend name (timers, device nodes, output transport),
and a stored device's ``backend`` is the :data:`harness.records.Backend` literal."""


@BACKENDS.register("cpu")
def _cpu_available() -> tuple[bool, str]:
    return True, ""


@BACKENDS.register("cuda")
def _cuda_available() -> tuple[bool, str]:
    import sys

    code = "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 3)"
    try:
        rc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, check=False).returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"could not probe CUDA: {exc}"
    return (rc == 0, "" if rc == 0 else "torch reports no CUDA device on this machine")


@BACKENDS.register("mlx")
def _mlx_available() -> tuple[bool, str]:
    return False, "kernel evaluation on MLX is served by `atb retest`, not by this harness path"


def available(backend: Backend) -> tuple[bool, str]:
    """Whether ``backend`` can run here, with a reason when it cannot (no torch import in the parent
    for CPU; CUDA is probed in a short child so the harness process never initialises it).

    Raises:
        DeviceUnavailableError: no backend has that name (the message lists the known ones).
    """
    return BACKENDS.get(backend)()


def device_fingerprint(backend: Backend, protocol: Any) -> DeviceFingerprint:
    """The local device's fingerprint, computed in this process with the same facts a session's
    reference worker reports (so the two hash equal).

    Raises:
        DeviceUnavailableError: ``backend`` is cuda and no CUDA device is visible, or mlx.
    """
    import torch

    if backend == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError("backend 'cuda' is not available: torch reports no CUDA device")
    if backend == "mlx":
        raise DeviceUnavailableError("MLX fingerprints come from the MLX runner, not harness.measure.device")
    return fingerprint_from_facts(local_fingerprint_facts(torch, backend, int(protocol.timing.cpu.threads)))
