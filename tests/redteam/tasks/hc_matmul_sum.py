"""A @ B + A @ C for three fp32 square matrices.

AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _n() -> int:
    return 4096 if torch.empty(0).device.type == "cuda" else 256


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a @ b + a @ c


def get_inputs() -> list[torch.Tensor]:
    n = _n()
    return [torch.randn(n, n), torch.randn(n, n), torch.randn(n, n)]


def get_init_inputs() -> list[int]:
    return []
