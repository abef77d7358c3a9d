"""Forbidden shortcuts a task declares: calling the very op under test, seen at run time or in the source.

A task that asks for a fast softmax may forbid ``torch.softmax``: a candidate that calls it is
measuring PyTorch, not itself. Names are compared by their op key, the last component without
underscores or overload (``torch.nn.functional.relu``, ``Tensor.relu_`` and ``aten::relu.default`` are
all ``relu``), so a declared op is caught however it is spelled; ``@`` counts as ``matmul``.
"""

from __future__ import annotations

from harness.measure.evidence import Evidence
from harness.verdict.gates._base import gate
from harness.verdict.gates._source import scan_source
from protocol import Protocol

NAME = "forbidden_shortcut"


def op_key(name: str) -> str:
    """The comparable key of an op name: 'aten::relu_.default' -> 'relu', 'torch.Tensor.__matmul__' -> 'matmul'."""
    if "::" in name:
        last = name.split("::")[-1].split(".")[0]
    else:
        last = name.split(".")[-1]
    return last.strip("_")


@gate(NAME)
def shortcuts_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    if not evidence.forbidden_ops:
        return [], "the task declares no forbidden ops"
    forbidden = {op_key(o): o for o in evidence.forbidden_ops}
    problems: list[str] = []
    seen = sorted({o for c in evidence.candidate_calls for o in c.ops_called if op_key(o) in forbidden})
    if seen:
        problems.append(f"the candidate called op(s) the task forbids at run time: {seen}")
    scan = scan_source(evidence.candidate_source)
    if scan.parse_error:
        problems.append(f"the candidate source does not parse ({scan.parse_error}); it cannot be scanned")
    hits = [r for r in scan.calls if op_key(r.name) in forbidden]
    hits += [r for r in scan.references if r.name.startswith("torch.") and op_key(r.name) in forbidden]
    if hits:
        problems.append(f"the candidate's source uses op(s) the task forbids ({scan.where(hits)})")
    if "matmul" in forbidden and scan.matmul_lines:
        problems.append(f"the candidate uses the @ operator (matmul, forbidden by the task) at lines "
                        f"{scan.matmul_lines[:8]}")
    return problems, f"none of the forbidden ops {sorted(evidence.forbidden_ops)} is used"
