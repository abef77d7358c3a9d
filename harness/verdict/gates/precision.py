"""Precision downgrade: TF32 or half-precision arithmetic inside a float32 task must not pass.

Lower-precision arithmetic is a real speedup and a wrong answer for a float32 task: with a loose
(1e-2) tolerance TF32 alone gives 2x or more on about a third of KernelBench Level 1. The protocol's
float32 tolerance is tight and the reference runs with TF32 off; this gate names the downgrade
directly, from the run-time TF32 flag, the output dtype against the reference's, and the source
(casts to lower-precision dtypes, autocast, TF32 switches, ``set_float32_matmul_precision``).
"""

from __future__ import annotations

from harness.measure.evidence import Evidence
from harness.verdict.gates._base import gate, ok_calls, reference_call_for
from harness.verdict.gates._source import SourceRef, SourceScan, scan_source
from protocol import Protocol

NAME = "precision_downgrade"

# Mantissa precision rank: a dtype of lower rank than the task's is a downgrade.
RANK = {"float64": 5, "float32": 4, "tf32": 3, "float16": 2, "bfloat16": 1, "float8_e4m3fn": 0,
        "float8_e5m2": 0, "float8_e4m3fnuz": 0, "float8_e5m2fnuz": 0}
DTYPE_ALIASES = {"double": "float64", "float": "float32", "half": "float16"}
METHOD_CASTS = {"half": "float16", "bfloat16": "bfloat16", "float": "float32"}
AUTOCAST = frozenset({"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast"})
TF32_FLAG_SUFFIXES = ("allow_tf32", "fp32_precision", "allow_fp16_reduced_precision_reduction",
                      "allow_bf16_reduced_precision_reduction")


def _dtype(name: str) -> str:
    n = name.removeprefix("torch.")
    return DTYPE_ALIASES.get(n, n)


def _rank(name: str) -> int | None:
    return RANK.get(_dtype(name))


def _source_problems(scan: SourceScan, task_dtype: str, task_rank: int) -> list[str]:
    problems: list[str] = []
    low: list[SourceRef] = []
    for r in scan.references:
        if r.name.startswith("torch.") and r.name.count(".") == 1:
            rank = _rank(r.name)
            if rank is not None and rank < task_rank:
                low.append(r)
    for r in scan.calls:
        if r.name.startswith("?.") or "." in r.name:
            target = METHOD_CASTS.get(r.name.rsplit(".", 1)[-1])
            if target is not None and not r.name.startswith("torch.") and RANK[target] < task_rank:
                low.append(r)
    if low:
        problems.append(f"the candidate computes in a dtype below the task's {task_dtype} ({scan.where(low)})")
    auto = [r for r in scan.calls if r.name in AUTOCAST]
    if auto:
        problems.append(f"the candidate uses autocast ({scan.where(auto)}), which computes in half precision")
    if task_rank >= RANK["float32"]:
        flags = [r for r in scan.overwrites if r.name.endswith(TF32_FLAG_SUFFIXES)]
        if flags:
            problems.append(f"the candidate switches TF32 / reduced-precision flags ({scan.where(flags)})")
        for callee, consts, line in scan.call_args:
            if callee == "torch.set_float32_matmul_precision" and consts != ["highest"]:
                problems.append(f"the candidate lowers float32 matmul precision "
                                f"(set_float32_matmul_precision{tuple(consts)} at line {line})")
    return problems


@gate(NAME)
def precision_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    task_dtype = _dtype(evidence.input_dtype)
    task_rank = RANK.get(task_dtype)
    if task_rank is None:
        return [], f"the task's dtype {evidence.input_dtype} has no lower floating-point precision to check"
    problems: list[str] = []
    if task_dtype == "float32" and not protocol.correctness.allow_tf32:
        tf32 = sorted({c.seed for c in evidence.candidate_calls if c.tf32_enabled_after})
        if tf32:
            problems.append(f"TF32 was enabled after the candidate's calls (seeds {tf32}); the protocol "
                            "forbids it (correctness.allow_tf32: false)")
    for c in ok_calls(evidence.candidate_calls):
        ref = reference_call_for(evidence, c)
        if ref is None:
            continue
        for i, (mine, theirs) in enumerate(zip(c.outputs, ref.outputs)):
            r_mine, r_theirs = _rank(mine.dtype), _rank(theirs.dtype)
            if r_mine is not None and r_theirs is not None and r_mine < r_theirs:
                problems.append(f"output {i} on seed {c.seed} is {mine.dtype} where the reference's is "
                                f"{theirs.dtype}")
    scan = scan_source(evidence.candidate_source)
    if scan.parse_error:
        problems.append(f"the candidate source does not parse ({scan.parse_error}); it cannot be scanned")
    problems += _source_problems(scan, task_dtype, task_rank)
    return problems, f"computes in {task_dtype}: no TF32, half precision or autocast"
