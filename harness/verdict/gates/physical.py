"""Physical limit: a measured time below the task's roofline floor on the measured device is impossible.

The floor is ``max(bytes / bandwidth, flops / peak)`` on the ceilings measured in this session
(:class:`harness.records.DeviceCeilings`), relaxed by ``gates.physical_limit_slack``. On CPU, where repetitions are not preceded by a cache
flush, a cache-resident working set legitimately moves faster than the large-copy ceiling, so the
bandwidth is multiplied by ``gates.physical_cpu_cache_factor``; on CUDA the L2 is flushed before
every repetition and the DRAM ceiling applies as measured. The figures come from
:mod:`harness.tasks._cost`: declared by a native task, or counted from a KernelBench file's reference
(bytes = inputs + outputs; FLOPs from torch's FlopCounterMode on the meta device), each with its source
(``Evidence.task_bytes_source`` / ``task_flops_source``), which the gate's detail repeats so a reader
knows what the floor rests on. A task with no byte figure still has a hard floor: its output must be
written, so the reference output's size is used. A time below the floor means the work was skipped,
cached, or done outside the timed region.
"""

from __future__ import annotations

from harness.measure.evidence import Evidence, TensorMeta
from harness.verdict.gates._base import gate
from protocol import Protocol

NAME = "physical_limit"

_DTYPE_BYTES = {
    "float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
    "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16, "float8_e4m3fn": 1, "float8_e5m2": 1,
}


def tensor_bytes(meta: TensorMeta) -> float:
    """Bytes of one tensor from its recorded shape and dtype ('torch.float32' or 'float32')."""
    name = meta.dtype.removeprefix("torch.")
    if name not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {meta.dtype!r} in the recorded output facts")
    n = 1
    for d in meta.shape:
        n *= d
    return float(n * _DTYPE_BYTES[name])


def output_bytes(evidence: Evidence) -> float | None:
    """The reference output's size (the bytes any correct candidate must write), if recorded."""
    for call in evidence.reference_calls:
        if call.ok and call.outputs:
            return sum(tensor_bytes(m) for m in call.outputs)
    return None


def figure_sources(evidence: Evidence) -> tuple[str, str]:
    """How the floor's bytes and FLOPs were obtained (``declared``, ``io:measured``,
    ``flop_counter:meta``, ``bytes_only:<reason>``, ...), as recorded with the evidence."""
    bsrc, fsrc = evidence.task_bytes_source, evidence.task_flops_source
    if evidence.task_bytes is None:
        bsrc = "the reference output's size" + (f"; {bsrc}" if bsrc else "")
    elif not bsrc:
        bsrc = "given with the task"
    if not evidence.task_flops:
        fsrc = fsrc or "none declared or counted"
    elif not fsrc:
        fsrc = "given with the task"
    return bsrc, fsrc


@gate(NAME)
def physical_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    ceil = evidence.ceilings
    if ceil is None:
        return ["no device ceilings were measured in this session, so the physical limit cannot be checked "
                "(open the session with harness.measure.session.open_measurement_session, which measures them)"], ""
    if not evidence.candidate_timed:
        return [], "the candidate was not timed (it was rejected before timing), so no time is impossible"
    t = evidence.candidate_median_ns
    if t is None or t <= 0:
        return ["no positive candidate time was measured, so the physical limit cannot be checked"], ""
    nbytes = evidence.task_bytes if evidence.task_bytes is not None else output_bytes(evidence)
    flops = evidence.task_flops or 0.0
    bytes_src, flops_src = figure_sources(evidence)
    if nbytes is None and not flops:
        return ["the task declares neither bytes nor flops and no reference output size was recorded, so "
                "no floor can be computed"], ""
    slack = protocol.gates.physical_limit_slack
    bandwidth = ceil.bytes_per_s * (protocol.gates.physical_cpu_cache_factor if evidence.backend == "cpu" else 1.0)
    bytes_ns = (nbytes or 0.0) / bandwidth * 1e9
    flops_ns = flops / ceil.flops_per_s * 1e9
    floor_ns = max(bytes_ns, flops_ns) / slack
    what = f"{nbytes or 0:.3g} bytes ({bytes_src}) at {bandwidth / 1e9:.3g} GB/s, {flops:.3g} flops " \
           f"({flops_src}) at {ceil.flops_per_s / 1e12:.3g} TFLOP/s ({ceil.method})"
    if t < floor_ns:
        return [f"the candidate's median {t:.0f} ns is below the physical floor {floor_ns:.0f} ns "
                f"({what}, slack {slack:g}): impossible on this device, so the work was skipped, cached "
                "or done outside the timed region"], ""
    return [], f"median {t:.0f} ns is above the floor {floor_ns:.0f} ns ({what})"
