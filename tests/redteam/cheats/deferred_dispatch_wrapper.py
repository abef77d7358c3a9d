"""Cheat: forward returns a ``__torch_dispatch__`` wrapper tensor that holds only the input; the ReLU
kernel is launched the first time any aten op reads the output (on CUDA, long after the end event).

The GPU variant of the deferred-output cheat (``benchmarks/cuda_gates.py`` runs it on the H200); it
runs on the CPU corpus too. The wrapper has the output's shape, dtype and device but no values; the
child refuses an output whose type is not exactly ``torch.Tensor`` (or whose dispatch keys say its
values are pending) before reading it, and reports ``outputs.finished`` false.
REDTEAM = {"task": "relu", "gate": "timer_tampering"}
"""

import torch
import torch.nn as nn


class _LaunchedOnRead(torch.Tensor):
    @staticmethod
    def __new__(cls, src: torch.Tensor) -> "_LaunchedOnRead":
        return torch.Tensor._make_wrapper_subclass(cls, src.shape, strides=src.stride(), dtype=src.dtype,
                                                   device=src.device, requires_grad=False)

    def __init__(self, src: torch.Tensor) -> None:
        self.src = src
        self.value: torch.Tensor | None = None

    def materialise(self) -> torch.Tensor:
        if self.value is None:
            self.value = torch.relu(self.src)
        return self.value

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(a):
            return a.materialise() if isinstance(a, _LaunchedOnRead) else a

        return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _LaunchedOnRead(x)
