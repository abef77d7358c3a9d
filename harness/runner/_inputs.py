"""Inputs made by harness code from a seed and a named distribution.

Both the reference and the candidate child call :func:`make_inputs` with the same (seed,
distribution), so a paired measurement sees identical inputs. The task's ``get_inputs()`` gives the
shapes and dtypes (and, for distribution ``task``, the values themselves, drawn under
``torch.manual_seed(seed)``); every other distribution redraws each floating-point tensor on the CPU
from a generator seeded with ``seed``, so values do not depend on the device.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

TASK_DISTRIBUTION = "task"
_SEED_MASK = (1 << 62) - 1


def buffer_seed(seed: int, buffer: int) -> int:
    """The input seed of rotating buffer ``buffer`` at paired seed ``seed`` (buffer 0 is ``seed``)."""
    if buffer == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:{buffer}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & _SEED_MASK


def _redraw(torch: Any, t: Any, distribution: str, gen: Any, large: float) -> Any:
    shape, dtype = tuple(t.shape), t.dtype
    if distribution == "normal":
        return torch.randn(shape, generator=gen).to(dtype)
    if distribution == "uniform":
        return torch.rand(shape, generator=gen).to(dtype)
    if distribution == "negative":
        return (-(torch.rand(shape, generator=gen) + 1e-3)).to(dtype)
    if distribution == "zeros_mixed":
        keep = torch.rand(shape, generator=gen) < 0.5
        return (torch.randn(shape, generator=gen) * keep).to(dtype)
    if distribution == "large":
        return (torch.randn(shape, generator=gen) * large).to(dtype)
    if distribution == "noncontiguous":
        if len(shape) == 0:
            return torch.randn(shape, generator=gen).to(dtype)
        wide = torch.randn(shape[:-1] + (2 * shape[-1],), generator=gen).to(dtype)
        return wide[..., ::2]
    raise ValueError(f"unknown input distribution {distribution!r}")


def make_inputs(torch: Any, get_inputs: Callable[[], list[Any]], seed: int, distribution: str,
                large: float, device: str) -> list[Any]:
    """Build one input list for ``seed`` and ``distribution`` on ``device``.

    Non-floating tensors and non-tensor values are kept as ``get_inputs()`` made them (under the
    seed). ``noncontiguous`` keeps the strided view on the device (the wide buffer is moved, then
    sliced), so the candidate really receives a non-contiguous tensor.

    Raises:
        ValueError: an unknown distribution name.
    """
    torch.manual_seed(seed)
    base = list(get_inputs())
    gen = torch.Generator().manual_seed(seed)
    out: list[Any] = []
    for t in base:
        if not isinstance(t, torch.Tensor):
            out.append(t)
            continue
        if distribution != TASK_DISTRIBUTION and t.is_floating_point():
            t = _redraw(torch, t, distribution, gen, large)
        if device != "cpu":
            if not t.is_contiguous() and t.dim() > 0:
                wide = t._base if t._base is not None else t
                step = t.stride(-1)
                t = wide.to(device)[..., ::step] if wide.dim() == t.dim() else t.to(device)
            else:
                t = t.to(device)
        out.append(t)
    return out


def tensor_sha256(torch: Any, t: Any) -> str:
    """SHA-256 of a tensor's values (as contiguous bytes, on the CPU) with its shape and dtype."""
    if not isinstance(t, torch.Tensor):
        return hashlib.sha256(repr(t).encode()).hexdigest()
    data = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
    h = hashlib.sha256(f"{tuple(t.shape)}|{t.dtype}|".encode())
    h.update(data)
    return h.hexdigest()
