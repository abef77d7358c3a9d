"""Physical limit: a measured time below what the bytes physically require on the measured device is impossible.

The floor is ``bytes / bandwidth`` on the ceilings measured in this session
(:class:`harness.records.DeviceCeilings`), relaxed by ``gates.physical_limit_slack``: the bytes any
correct candidate must move, its output written and its inputs read. On CPU, where repetitions are
not preceded by a cache flush, a cache-resident working set legitimately moves faster than the
large-copy ceiling, so the bandwidth is multiplied by ``gates.physical_cpu_cache_factor``; on CUDA the
L2 is flushed before every repetition and the DRAM ceiling applies as measured. The bytes come from
:mod:`harness.tasks._cost`: declared by a native task, or counted from a KernelBench file's reference
(inputs + outputs), with their source (``Evidence.task_bytes_source``), which the gate's detail repeats
so a reader knows what the floor rests on. A task with no byte figure still has a hard floor: its
output must be written, so the reference output's size is used. A time below that floor means the
work was skipped, cached, or done outside the timed region.

Why the reference's FLOPs are not in the floor (protocol 1.6.0, issue 25): they count the work the
*reference* does, which bounds nothing about a candidate that does less (``A@B + A@C`` computed as
``A@(B+C)`` does half the multiplications and was rejected at an honest 1.8x on the H200). A time
below the reference's FLOPs at the device's peak (:func:`flop_trigger`) is instead a reason for a
second look: the anomaly breaker (:mod:`harness.verdict.gates.anomaly`) quarantines such a verdict
and the quarantine's extended pass (:mod:`harness.verdict.quarantine`: more seeds, every adversarial
input, every gate, this byte floor included) decides it. It never rejects on its own.

Why the inputs' bytes are a hard floor only when the task declares them (protocol 1.7.0,
``gates.physical_counted_inputs: quarantine``; JUSTIFICATION 16): for a problem file the bytes are
counted as its inputs plus its outputs, which assumes every input byte must be read. A problem that
states structure in its inputs (rows sorted by ``get_inputs``) can be answered honestly from a part of
them: on the H200 a sorted-row median by one gather per row (about 5 us) was rejected below the
128 MB read floor. The output's bytes still must be written, so they stay the hard floor; a time below
the counted inputs' bytes is a reason for the extended pass (:func:`input_trigger`), like the FLOPs.
A task's author who declares its bytes states what any correct candidate must move: that stays hard.
"""

from __future__ import annotations

from harness.measure.backends import backend_named
from harness.measure.evidence import Evidence, TensorMeta
from harness.stats import median
from harness.verdict.gates._base import gate
from protocol import Protocol

NAME = "physical_limit"
COUNTED_IO = "io:"   # harness.tasks._cost: bytes counted as a problem's inputs + outputs ("io:meta", "io:measured")

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


def bandwidth(evidence: Evidence, protocol: Protocol) -> float | None:
    """The byte rate the floor uses: the session's copy ceiling, times the CPU cache factor on a CPU."""
    if evidence.ceilings is None:
        return None
    factor = backend_named(evidence.backend).cache_factor(protocol)   # CPU: gates.physical_cpu_cache_factor
    return evidence.ceilings.bytes_per_s * factor


def reference_median_ns(evidence: Evidence) -> float | None:
    """The median of every timed repetition of the reference (baseline) arm, or None if it was not timed
    (the same estimator as the candidate's ``candidate_median_ns``: :func:`harness.stats.median`)."""
    times = [x for tf in evidence.baseline_timed for x in tf.times_ns]
    return median(times) if times else None


def flop_trigger(evidence: Evidence, protocol: Protocol) -> str | None:
    """Why the candidate's time deserves the extended pass, or None: its median is below the time the
    *reference's* FLOPs take at the peak (relaxed by ``gates.physical_limit_slack``).

    A candidate may legitimately do fewer operations than the reference (an algebraic rewrite), so
    this is a trigger for scrutiny, never a rejection: the anomaly breaker reads it and quarantines.

    The peak is the session's measured FLOP ceiling or the rate the reference itself reached in this
    evaluation, whichever is higher (protocol 1.8.0). Why: under load the ceiling was once read at 0.054
    TFLOP/s, below what the reference's own matmul reached, and an honest 1.0x matmul candidate was
    quarantined for "doing less arithmetic" than a peak that the reference had already shown was wrong.
    A candidate as fast as the reference is never blamed for a ceiling read too low.
    """
    ceil, flops, t = evidence.ceilings, evidence.task_flops or 0.0, evidence.candidate_median_ns
    if ceil is None or not flops or t is None or t <= 0 or not evidence.candidate_timed:
        return None
    peak, peak_src = ceil.flops_per_s, "the measured peak"
    ref = reference_median_ns(evidence)
    if ref and flops / ref * 1e9 > peak:
        peak, peak_src = flops / ref * 1e9, "the reference's own rate (above the measured peak " \
            f"{ceil.flops_per_s / 1e12:.3g} TFLOP/s)"
    floor_ns = flops / peak * 1e9 / protocol.gates.physical_limit_slack
    if t >= floor_ns:
        return None
    _, fsrc = figure_sources(evidence)
    return (f"the candidate's median {t:.0f} ns is below the time the reference's {flops:.3g} flops ({fsrc}) take at "
            f"{peak_src} {peak / 1e12:.3g} TFLOP/s ({floor_ns:.0f} ns, slack "
            f"{protocol.gates.physical_limit_slack:g}): it does less arithmetic than the reference, which an "
            "algebraic rewrite may honestly do; quarantined for the extended pass")


def hard_floor_bytes(evidence: Evidence, protocol: Protocol) -> tuple[float | None, str]:
    """The bytes no correct candidate can avoid moving, and what they are: the task's declared or counted
    bytes, or (1.7.0) only the output's when the inputs' bytes were counted, not declared."""
    nbytes = evidence.task_bytes if evidence.task_bytes is not None else output_bytes(evidence)
    bytes_src, _ = figure_sources(evidence)
    out = output_bytes(evidence)
    if (protocol.gates.physical_counted_inputs == "quarantine" and evidence.task_bytes is not None
            and evidence.task_bytes_source.startswith(COUNTED_IO) and out is not None and out < evidence.task_bytes):
        return out, f"the reference output's size; the inputs' {evidence.task_bytes - out:.3g} bytes ({bytes_src}) " \
                    "were counted, not declared, and are a quarantine trigger"
    return nbytes, bytes_src


def input_trigger(evidence: Evidence, protocol: Protocol) -> str | None:
    """Why the candidate's time deserves the extended pass, or None: (1.7.0) its median is below the
    time its counted inputs and outputs take at the measured bandwidth, though above the output's.

    A problem may state structure that lets a candidate read part of its inputs (a gather from sorted
    rows), so this is scrutiny, never a rejection: the anomaly breaker reads it and quarantines.
    """
    rate, t = bandwidth(evidence, protocol), evidence.candidate_median_ns
    if rate is None or t is None or t <= 0 or not evidence.candidate_timed or evidence.task_bytes is None:
        return None
    hard, _ = hard_floor_bytes(evidence, protocol)
    if hard is None or hard >= evidence.task_bytes:
        return None
    slack = protocol.gates.physical_limit_slack
    floor_ns = evidence.task_bytes / rate * 1e9 / slack
    if t >= floor_ns:
        return None
    bsrc, _ = figure_sources(evidence)
    return (f"the candidate's median {t:.0f} ns is below the time its counted inputs and outputs "
            f"({evidence.task_bytes:.3g} bytes, {bsrc}) take at {rate / 1e9:.3g} GB/s ({floor_ns:.0f} ns, slack "
            f"{slack:g}): it reads less than every input, which a problem's stated structure may honestly "
            "allow; quarantined for the extended pass")


@gate(NAME)
def physical_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    ceil = evidence.ceilings
    rate = bandwidth(evidence, protocol)
    if ceil is None or rate is None:
        return ["no device ceilings were measured in this session, so the physical limit cannot be checked "
                "(open the session with harness.measure.session.open_measurement_session, which measures them)"], ""
    if not evidence.candidate_timed:
        return [], "the candidate was not timed (it was rejected before timing), so no time is impossible"
    t = evidence.candidate_median_ns
    if t is None or t <= 0:
        return ["no positive candidate time was measured, so the physical limit cannot be checked"], ""
    nbytes, bytes_src = hard_floor_bytes(evidence, protocol)
    if nbytes is None:
        return ["the task declares no bytes and no reference output size was recorded, so no floor can be "
                "computed"], ""
    slack = protocol.gates.physical_limit_slack
    floor_ns = nbytes / rate * 1e9 / slack
    what = f"{nbytes:.3g} bytes ({bytes_src}) at {rate / 1e9:.3g} GB/s ({ceil.method})"
    if t < floor_ns:
        return [f"the candidate's median {t:.0f} ns is below the physical floor {floor_ns:.0f} ns "
                f"({what}, slack {slack:g}): impossible on this device, so the work was skipped, cached "
                "or done outside the timed region"], ""
    note = "; below the reference's FLOP time: quarantined for the extended pass" \
        if flop_trigger(evidence, protocol) else ""
    if input_trigger(evidence, protocol):
        note += "; below its counted inputs' read time: quarantined for the extended pass"
    return [], f"median {t:.0f} ns is above the floor {floor_ns:.0f} ns ({what}){note}"
