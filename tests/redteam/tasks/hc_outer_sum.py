"""Per row, the sum of every entry of the outer product of x and y (fp32).

AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int]:
    return (256, 1024) if torch.empty(0).device.type == "cuda" else (64, 256)


class Model(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x.unsqueeze(2) * y.unsqueeze(1)).sum(dim=(1, 2))


def get_inputs() -> list[torch.Tensor]:
    b, n = _shape()
    return [torch.randn(b, n), torch.randn(b, n)]


def get_init_inputs() -> list[int]:
    return []
