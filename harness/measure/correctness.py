"""Comparing a candidate's output with the reference's for the same input seed.

Strict: the structure (tensor or tuple), every shape and every dtype must match exactly; any NaN in
the candidate's output fails (NaN never passes, even where the reference has one); infinities must
match the reference's element for element; finite values must be within ``atol * max(1, rms(ref)) + rtol * |ref|``
(the absolute term scales with the output's magnitude, so an honest reordered sum over large-magnitude
inputs is not failed on the elements that happen to land near zero) and the whole output within
``rel_l2`` relative L2 error, which is what catches lower-precision arithmetic. Tolerances come from the protocol, per
dtype, optionally overridden by the task's metadata. The comparison runs in the reference child, on
the device where both outputs live (the candidate's reaches it by CUDA IPC, or on a CPU as a file read
with ``torch.load(weights_only=True)``, which cannot execute code); only scalars cross to the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from protocol import Protocol, Tolerance


@dataclass(frozen=True)
class OutputCheck:
    """The outcome of one comparison. A plain dataclass, not a pydantic model: this module runs in
    the reference child, which imports neither pydantic nor the protocol package (its start-up is on
    every evaluation's critical path); the child sends these fields on as a reply, which the parent
    validates into :class:`harness.measure.evidence.Comparison`."""

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
    from protocol import Tolerance

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


_CHUNK = 1 << 25   # elements per comparison chunk: bounds the float64 temporaries on a device
_SCREEN_MARGIN = 0.01   # the screen passes an output only this far (relatively) inside both bars


def _screen(torch: Any, rflat: Any, cflat: Any, tol: dict[str, float], extra_abs: float,
            extra_rel_l2: float) -> tuple[float, float] | None:
    """(max abs error, relative L2 error) when this output clearly passes, else None.

    Why: the exact pass below works in float64 and makes about 20 passes over each chunk (~335
    bytes of device traffic per element); on a 6 GiB output that is ~0.15 s, and an evaluation makes
    24 comparisons. Most comparisons are of correct outputs, and for those a cheaper question
    settles it: are both outputs entirely finite (a min/max reduction, which NaN and infinities
    reach), and is the largest difference and the relative L2 error at least ``_SCREEN_MARGIN``
    inside their bars (read as the exact pass reads them)? Since the element bar is ``atol * scale + rtol * |ref|``, a largest difference
    within ``atol * scale`` passes it everywhere. The screen reads each output about four times and
    writes one difference (in float32, float64 for float64 outputs, computed exactly for half
    types), and its norms accumulate in that dtype; anything non-finite (an overflowing norm
    included) or near a bar goes to the exact pass, which alone decides a failure and words its reason. The
    reported errors then carry float32 accumulation's rounding (relative ~1e-6)."""
    n = rflat.numel()
    if n == 0:
        return None
    work = torch.float64 if rflat.dtype == torch.float64 else torch.float32
    parts = []
    for s in range(0, n, _CHUNK):
        rc, cc = rflat[s:s + _CHUNK], cflat[s:s + _CHUNK]
        if rc.dtype != work:
            rc, cc = rc.to(work), cc.to(work)
        rmin, rmax = torch.aminmax(rc)
        cmin, cmax = torch.aminmax(cc)
        d = cc - rc
        parts.append(torch.stack([rmin, rmax, cmin, cmax, torch.linalg.vector_norm(rc),
                                  torch.linalg.vector_norm(d), torch.linalg.vector_norm(d, ord=math.inf)]))
        del d
    rows = torch.stack(parts).double().cpu().tolist()
    if not all(math.isfinite(x) for row in rows for x in row):
        return None
    ss = math.fsum(row[4] ** 2 for row in rows)
    esq = math.fsum(row[5] ** 2 for row in rows)
    max_abs = max(row[6] for row in rows)
    if not (math.isfinite(ss) and math.isfinite(esq)):
        return None
    denom = math.sqrt(ss)
    scale = max(1.0, denom / math.sqrt(n))
    if max_abs > (tol["atol"] * scale + extra_abs) * (1.0 - _SCREEN_MARGIN):
        return None
    rel = math.sqrt(esq) / denom if denom > 0 else math.sqrt(esq)   # as the exact pass reads it
    if rel > (tol["rel_l2"] + extra_rel_l2) * (1.0 - _SCREEN_MARGIN):
        return None
    return max_abs, rel


def compare_outputs(reference: Any, candidate: Any, protocol: Protocol,
                    overrides: dict[str, Any] | None = None) -> OutputCheck:
    """Compare two outputs under the protocol's rules (see the module docstring)."""
    tols: dict[str, dict[str, float]] = {name: t.model_dump() for name, t in protocol.correctness.tolerances.items()}
    if overrides:
        tols.update({name: {"atol": o.atol, "rtol": o.rtol, "rel_l2": o.rel_l2} for name, o in overrides.items()})
    return compare_tensors(reference, candidate, tols)


def _nan_site(torch: Any, rflat: Any, cflat: Any, n_nan: int) -> str:
    """Where a candidate's NaN are, for the verdict's reason: how many, the first index, and what the
    reference holds there (a NaN opposite an infinity or a zero points at a different operation
    order; opposite an ordinary number, at a wrong result). Runs only when a comparison has failed."""
    first = int(torch.isnan(cflat).nonzero()[0].item()) if n_nan else -1
    ref_at = float(rflat[first].item()) if first >= 0 else float("nan")
    return f"{n_nan} of {cflat.numel()} elements; the first at index {first}, where the reference has {ref_at:.6g}"


def compare_tensors(reference: Any, candidate: Any, tolerances: dict[str, dict[str, float]],
                    extra_abs: float = 0.0, extra_rel_l2: float = 0.0) -> OutputCheck:
    """The comparison itself, on whatever device the tensors live (the reference child runs it on
    the GPU with both outputs in place). ``tolerances`` maps a dtype name to atol/rtol/rel_l2 (the
    task's overrides already applied). Work is chunked, and each output's facts cross to the host
    as a handful of scalars, so a 4 GB output needs no 4 GB of float64 temporaries. ``extra_abs`` and
    ``extra_rel_l2`` widen the element bar and the relative-L2 bar (a nondeterministic reference's own
    spread, see :func:`reference_spread`)."""
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
        if c.device != r.device:
            c = c.to(r.device)
        if not r.is_floating_point():
            if not torch.equal(r, c):
                return OutputCheck(passed=False, reason=f"output {i} ({r.dtype}) differs from the reference")
            continue
        name = str(r.dtype).replace("torch.", "")
        if name not in tolerances:
            raise KeyError(name)
        tol = tolerances[name]
        rflat, cflat = r.reshape(-1), c.reshape(-1)
        screened = _screen(torch, rflat, cflat, tol, extra_abs, extra_rel_l2)
        if screened is not None:
            worst_abs, worst_l2 = max(worst_abs, screened[0]), max(worst_l2, screened[1])
            continue
        n = rflat.numel()
        dev = r.device
        # one pass: NaN in the candidate, infinities element for element, the reference's norm, and
        # the errors over the elements finite in the reference; whether any element is outside
        # atol*scale + rtol*|ref| needs the norm, so the pass keeps the largest diff - rtol*|ref| and
        # only a candidate near or past the bar is counted exactly in a second pass
        nan = torch.zeros((), dtype=torch.int64, device=dev)
        inf_bad = torch.zeros((), dtype=torch.int64, device=dev)
        r_inf_n = torch.zeros((), dtype=torch.int64, device=dev)
        sumsq = torch.zeros((), dtype=torch.float64, device=dev)
        mx = torch.zeros((), dtype=torch.float64, device=dev)
        esq = torch.zeros((), dtype=torch.float64, device=dev)
        excess = torch.full((), -math.inf, dtype=torch.float64, device=dev)
        for s in range(0, n, _CHUNK):
            rc, cc = rflat[s:s + _CHUNK].double(), cflat[s:s + _CHUNK].double()
            nan += torch.isnan(cc).sum()
            r_inf, c_inf = torch.isinf(rc), torch.isinf(cc)
            inf_bad += (r_inf != c_inf).sum() + (r_inf & (rc != cc)).sum()
            r_inf_n += r_inf.sum()
            sumsq += torch.where(r_inf, 0.0, rc).square().sum()
            diff = torch.where(r_inf, 0.0, (cc - rc).abs())
            if diff.numel():
                mx = torch.maximum(mx, diff.max())
                excess = torch.maximum(excess, torch.where(r_inf, -math.inf, diff - tol["rtol"] * rc.abs()).max())
            esq += diff.square().sum()
        n_nan, n_inf_bad, n_rinf, ss, max_abs, err_sq, max_excess = torch.stack(
            [nan.double(), inf_bad.double(), r_inf_n.double(), sumsq, mx, esq, excess]).tolist()
        if n_nan:
            return OutputCheck(passed=False, reason=f"output {i} contains NaN ({_nan_site(torch, rflat, cflat, int(n_nan))})")
        ref_finite = ref_finite and not n_rinf
        if n_inf_bad:
            return OutputCheck(passed=False, reason=f"output {i}: infinities differ from the reference's",
                               reference_finite=ref_finite)
        count = n - int(n_rinf)
        denom = math.sqrt(ss) if count else 0.0
        scale = max(1.0, denom / math.sqrt(count)) if count else 1.0
        n_bad = 0.0
        bar = tol["atol"] * scale + extra_abs
        if max_excess > bar * (1.0 - 1e-9) or not math.isfinite(max_excess) and max_excess > 0:
            bad = torch.zeros((), dtype=torch.int64, device=dev)
            for s in range(0, n, _CHUNK):
                rc, cc = rflat[s:s + _CHUNK].double(), cflat[s:s + _CHUNK].double()
                diff = torch.where(~torch.isinf(rc), (cc - rc).abs(), 0.0)
                bad += (diff > bar + tol["rtol"] * rc.abs()).sum()
            n_bad = float(bad)
        err_norm = math.sqrt(err_sq)
        rel = err_norm / denom if denom > 0 else err_norm
        worst_abs, worst_l2 = max(worst_abs, max_abs), max(worst_l2, rel)
        if n_bad:
            widened = f" + {extra_abs:.3g} (the reference's spread)" if extra_abs else ""
            return OutputCheck(passed=False, reason=f"output {i}: {int(n_bad)} elements outside atol={tol['atol']:g}"
                               f"x{scale:.3g} (output RMS){widened} + rtol={tol['rtol']:g} (max abs error {max_abs:.3g})",
                               max_abs_err=max_abs, rel_l2=rel, reference_finite=ref_finite)
        if rel > tol["rel_l2"] + extra_rel_l2:
            return OutputCheck(passed=False, reason=f"output {i}: relative L2 error {rel:.3g} above "
                               f"{tol['rel_l2'] + extra_rel_l2:g}",
                               max_abs_err=max_abs, rel_l2=rel, reference_finite=ref_finite)
    return OutputCheck(passed=True, max_abs_err=worst_abs if math.isfinite(worst_abs) else None,
                       rel_l2=worst_l2 if math.isfinite(worst_l2) else None, reference_finite=ref_finite)


def reference_spread(first: Any, second: Any) -> tuple[float, float] | None:
    """How far two runs of the reference on one input are apart: (largest absolute difference over
    the elements finite in the first, relative L2 of the difference), (0, 0) when they are equal, or
    None when they differ in a way no tolerance can bridge (shapes, NaN, where the infinities are).

    Why: some references are not deterministic (a transposed convolution's fp32 algorithm that sums
    in a different order from run to run: on the H200 one process gave two output digests for one
    input), and under the ``large`` draw their own spread exceeds the protocol's tolerance, so even
    the reference's own code would be rejected as its own candidate. The spread is measured by the
    reference child, which never imports candidate code."""
    import torch

    firsts = [t for t in _flatten(first) if isinstance(t, torch.Tensor)]
    loose = {str(t.dtype).replace("torch.", ""): {"atol": math.inf, "rtol": 0.0, "rel_l2": math.inf}
             for t in firsts}
    check = compare_tensors(first, second, loose)
    if not check.passed:
        return None
    return float(check.max_abs_err or 0.0), float(check.rel_l2 or 0.0)
