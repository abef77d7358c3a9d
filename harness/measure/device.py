"""Device fingerprints, measured ceilings and the roofline fraction.

The fingerprint and the ceilings are measured inside the session's reference child (so the
harness's own process never initialises CUDA and the numbers come from a process pinned exactly like
the ones that time kernels). Ceilings are a large copy (bytes read + written per second) and a large
fp32 matrix product with TF32 off (floating-point operations per second); they are measured in every
session and stored with it (``add_ceilings``); a session uses the best reading stored for its device
fingerprint (``harness.measure.session.best_ceilings``), since a busy host only ever under-reads a ceiling.
"""

from __future__ import annotations

from typing import Any

from harness.errors import DeviceUnavailableError
from harness.measure.backends import backend_named
from harness.measure.device_facts import local_fingerprint_facts
from harness.records import Backend, DeviceCeilings, DeviceFingerprint


def fingerprint_from_facts(facts: dict[str, Any]) -> DeviceFingerprint:
    """Validate a child's fingerprint facts into the record the store keys devices by."""
    keep = {k: v for k, v in facts.items() if k in DeviceFingerprint.model_fields}
    return DeviceFingerprint.model_validate(keep)


def ceilings_from_facts(facts: dict[str, Any]) -> DeviceCeilings:
    return DeviceCeilings(bytes_per_s=float(facts["bytes_per_s"]), flops_per_s=float(facts["flops_per_s"]),
                          method=str(facts["method"]))


def roofline_floor_ns(task_bytes: float | None, task_flops: float | None, ceilings: DeviceCeilings,
                      cache_factor: float = 1.0) -> float | None:
    """The least time the device could take: max(bytes / bandwidth, flops / rate), in ns.

    ``cache_factor`` multiplies the bandwidth: on CPU, where repetitions run without a cache flush, a
    cache-resident working set moves faster than the large-copy ceiling (``gates.physical_cpu_cache_factor``,
    the same ceiling the physical-limit gate uses)."""
    terms = []
    if task_bytes:
        terms.append(task_bytes / (ceilings.bytes_per_s * cache_factor))
    if task_flops:
        terms.append(task_flops / ceilings.flops_per_s)
    return max(terms) * 1e9 if terms else None


def achieved_fraction(task_bytes: float | None, task_flops: float | None, ceilings: DeviceCeilings | None,
                      time_ns: float | None, *, cache_factor: float = 1.0) -> float | None:
    """floor / time as measured, unbounded: above 1.0 it says the ceiling is too low (a defect), or None."""
    if ceilings is None or time_ns is None or time_ns <= 0:
        return None
    floor = roofline_floor_ns(task_bytes, task_flops, ceilings, cache_factor)
    return None if floor is None else floor / time_ns


def roofline_fraction(task_bytes: float | None, task_flops: float | None, ceilings: DeviceCeilings | None,
                      time_ns: float | None, *, cache_factor: float = 1.0) -> float | None:
    """The achieved fraction of the roofline floor (1.0 = at the ceiling), or None if undeclared.

    Never above 1.0: a physical fraction over 100% means the ceiling it was taken against is wrong
    (an honest ReLU on CPU read 1.86 against the DRAM copy ceiling while its input sat in cache), not
    that the kernel saturated the device. Such a figure is None here; :func:`ceiling_defect` words it.
    """
    raw = achieved_fraction(task_bytes, task_flops, ceilings, time_ns, cache_factor=cache_factor)
    return None if raw is None or raw > 1.0 else raw


def ceiling_defect(raw_fraction: float | None, ceilings: DeviceCeilings | None) -> str | None:
    """One line saying why no roofline figure is given when the achieved fraction exceeds 1.0, else None."""
    if raw_fraction is None or raw_fraction <= 1.0 or ceilings is None:
        return None
    return (f"the measured time is {raw_fraction:.2f}x faster than the roofline floor on this session's ceilings "
            f"({ceilings.bytes_per_s / 1e9:.3g} GB/s, {ceilings.flops_per_s / 1e12:.3g} TFLOP/s, {ceilings.method}): "
            "a ceiling that is too low for this working set, not saturation; no roofline fraction is reported")


def available(backend: Backend) -> tuple[bool, str]:
    """Whether ``backend`` can run here, with a reason when it cannot (no torch import in the parent
    for CPU; CUDA is probed in a short child so the harness process never initialises it).

    Raises:
        DeviceUnavailableError: no backend has that name (the message lists the known ones).
    """
    return backend_named(backend).available()


def device_fingerprint(backend: Backend, protocol: Any) -> DeviceFingerprint:
    """The local device's fingerprint, computed in this process with the same facts a session's
    reference worker reports (so the two hash equal).

    Raises:
        DeviceUnavailableError: ``backend`` is cuda and no CUDA device is visible, or mlx.
    """
    import torch

    spec = backend_named(backend)
    if not spec.torch_children:
        raise DeviceUnavailableError(f"{backend!r} fingerprints come from its own runner, not harness.measure.device")
    if spec.gpus and not torch.cuda.is_available():
        raise DeviceUnavailableError(f"backend {backend!r} is not available: torch reports no CUDA device")
    return fingerprint_from_facts(local_fingerprint_facts(torch, backend, int(protocol.timing.cpu.threads)))
