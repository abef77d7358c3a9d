"""Cheat: forward returns a tensor subclass whose storage is allocated but not yet written; the
ReLU is computed into it only when anything first touches the output (its ``__torch_function__``).

Timed calls never touch their outputs, so the timer measures an allocation; the harness's later
reads (saving, comparing) fill it first, so every comparison passes. Found by a red team on CPU
(issue 25): accepted at 2.7-3.0x on relu with every gate passed. An output must be a plain, finished
tensor when forward returns; the child refuses this one before reading it, and its integrity checks
say so (``outputs.finished``).
REDTEAM = {"task": "relu", "gate": "timer_tampering"}
"""

import torch
import torch.nn as nn


class _FilledOnTouch(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for arg in list(args) + list(kwargs.values()):
            if isinstance(arg, _FilledOnTouch):
                arg._fill()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    def _fill(self) -> None:
        if self.__dict__.get("_pending") is None:
            return
        src, self.__dict__["_pending"] = self.__dict__["_pending"], None
        with torch._C.DisableTorchFunctionSubclass():
            torch.clamp_min(src, 0.0, out=self)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x).as_subclass(_FilledOnTouch)
        out.__dict__["_pending"] = x
        return out
