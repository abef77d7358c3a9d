"""Comparing a candidate's output with the reference's for the same input seed.

Strict: the structure (tensor or tuple), every shape and every dtype must match exactly; any NaN in
the candidate's output fails (NaN never passes, even where the reference has one); infinities must
match the reference's element for element; finite values must be within ``atol * max(1, rms(ref)) + rtol * |ref|``
(the absolute term scales with the output's magnitude, so an honest reordered sum over large-magnitude
inputs is not failed on the elements that happen to land near zero) and the whole output within
``rel_l2`` relative L2 error, which is what catches lower-precision arithmetic. Tolerances come from the protocol, per
dtype, optionally overridden by the task's metadata. Outputs are read from files the children wrote
with ``torch.load(weights_only=True)``, which cannot execute code.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from protocol import Protocol, Tolerance


class OutputCheck(BaseModel):
    """The outcome of one comparison."""

    model_config = ConfigDict(frozen=True)
    passed: bool
    reason: str = ""
    max_abs_err: float | None = None
    rel_l2: float | None = None
    reference_finite: bool = True


def tolerance_for(protocol: Protocol, dtype: str, overrides: dict[str, Any] | None = None) -> Tolerance:
    """The tolerance for ``dtype``: the task's override if it declares one, else the protocol's.

    Raises:
        KeyError: the protocol has no tolerance for this dtype (an integer output, say) and the task
            declares none; such outputs are compared exactly by :func:`compare_outputs`.
    """
    if overrides and dtype in overrides:
        o = overrides[dtype]
        return Tolerance(atol=o.atol, rtol=o.rtol, rel_l2=o.rel_l2)
    return protocol.correctness.tolerances[dtype]  # type: ignore[index]


def load_output(path: str | Path) -> Any:
    """Load a saved output (tensor or tuple of tensors) without executing any code.

    The harness's own torch runs single-threaded: comparisons must not compete for cores with the
    measuring children (and OpenMP spin-waiting in this process would)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)

    return torch.load(str(path), map_location="cpu", weights_only=True)


def _flatten(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flatten(o)]
    return [out]


def compare_outputs(reference: Any, candidate: Any, protocol: Protocol,
                    overrides: dict[str, Any] | None = None) -> OutputCheck:
    """Compare two loaded outputs under the protocol's rules (see the module docstring)."""
    import torch

    refs, cands = _flatten(reference), _flatten(candidate)
    if len(refs) != len(cands):
        return OutputCheck(passed=False, reason=f"returned {len(cands)} tensors, the reference {len(refs)}")
    worst_abs, worst_l2 = 0.0, 0.0
    ref_finite = True
    for i, (r, c) in enumerate(zip(refs, cands)):
        if not isinstance(c, torch.Tensor) or not isinstance(r, torch.Tensor):
            return OutputCheck(passed=False, reason=f"output {i} is not a tensor")
        if tuple(c.shape) != tuple(r.shape):
            return OutputCheck(passed=False, reason=f"output {i} has shape {tuple(c.shape)}, expected {tuple(r.shape)}")
        if c.dtype != r.dtype:
            return OutputCheck(passed=False, reason=f"output {i} has dtype {c.dtype}, expected {r.dtype}")
        if not r.is_floating_point():
            if not torch.equal(r, c):
                return OutputCheck(passed=False, reason=f"output {i} ({r.dtype}) differs from the reference")
            continue
        if bool(torch.isnan(c).any()):
            return OutputCheck(passed=False, reason=f"output {i} contains NaN")
        rf, cf = r.double().reshape(-1), c.double().reshape(-1)
        if not (bool(torch.isfinite(rf).all()) and bool(torch.isfinite(cf).all())):
            r_inf, c_inf = torch.isinf(rf), torch.isinf(cf)
            ref_finite = ref_finite and not bool(r_inf.any())
            if not torch.equal(c_inf, r_inf) or not torch.equal(cf[r_inf], rf[r_inf]):
                return OutputCheck(passed=False, reason=f"output {i}: infinities differ from the reference's",
                                   reference_finite=ref_finite)
            both = ~r_inf
            rf, cf = rf[both], cf[both]
        tol = tolerance_for(protocol, str(r.dtype).replace("torch.", ""), overrides)
        diff = (cf - rf).abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        denom = float(torch.linalg.vector_norm(rf)) if diff.numel() else 0.0
        err_norm = float(torch.linalg.vector_norm(diff)) if diff.numel() else 0.0
        rel = err_norm / denom if denom > 0 else err_norm
        worst_abs, worst_l2 = max(worst_abs, max_abs), max(worst_l2, rel)
        scale = max(1.0, denom / math.sqrt(rf.numel())) if rf.numel() else 1.0
        bound = tol.atol * scale + tol.rtol * rf.abs()
        if diff.numel() and bool((diff > bound).any()):
            bad = int((diff > bound).sum())
            return OutputCheck(passed=False, reason=f"output {i}: {bad} elements outside atol={tol.atol:g}"
                               f"x{scale:.3g} (output RMS) + rtol={tol.rtol:g} (max abs error {max_abs:.3g})",
                               max_abs_err=max_abs, rel_l2=rel, reference_finite=ref_finite)
        if rel > tol.rel_l2:
            return OutputCheck(passed=False, reason=f"output {i}: relative L2 error {rel:.3g} above {tol.rel_l2:g}",
                               max_abs_err=max_abs, rel_l2=rel, reference_finite=ref_finite)
    return OutputCheck(passed=True, max_abs_err=worst_abs if math.isfinite(worst_abs) else None,
                       rel_l2=worst_l2 if math.isfinite(worst_l2) else None, reference_finite=ref_finite)
