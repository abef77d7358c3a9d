"""tril(A @ B) for lower-triangular fp32 matrices A and B (the problem states they are lower triangular).

AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _n() -> int:
    return 4096 if torch.empty(0).device.type == "cuda" else 256


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.tril(torch.matmul(a, b))


def get_inputs() -> list[torch.Tensor]:
    n = _n()
    return [torch.tril(torch.randn(n, n)), torch.tril(torch.randn(n, n))]


def get_init_inputs() -> list[int]:
    return []
