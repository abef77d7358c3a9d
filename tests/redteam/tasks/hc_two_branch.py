"""relu(a @ b) + sigmoid(c @ d): two independent fp32 matrix products joined by an add.

AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _n() -> int:
    return 768 if torch.empty(0).device.type == "cuda" else 192


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b) + torch.sigmoid(c @ d)


def get_inputs() -> list[torch.Tensor]:
    n = _n()
    return [torch.randn(n, n) for _ in range(4)]


def get_init_inputs() -> list[int]:
    return []
