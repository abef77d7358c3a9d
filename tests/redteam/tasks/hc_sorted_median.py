"""The median of each row of x, whose rows are sorted ascending (the problem states they are sorted).

torch.median's convention: for an even row length, the lower of the two middle values.
AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int]:
    return (4096, 8192) if torch.empty(0).device.type == "cuda" else (256, 1024)


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.median(x, dim=-1).values


def get_inputs() -> list[torch.Tensor]:
    r, n = _shape()
    return [torch.sort(torch.randn(r, n), dim=-1).values]


def get_init_inputs() -> list[int]:
    return []
