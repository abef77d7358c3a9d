"""diag(d) @ B: a diagonal matrix, given by its diagonal d, times a dense fp32 matrix.

AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _n() -> int:
    return 4096 if torch.empty(0).device.type == "cuda" else 512


class Model(nn.Module):
    def forward(self, d: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.diag(d) @ b


def get_inputs() -> list[torch.Tensor]:
    n = _n()
    return [torch.randn(n), torch.randn(n, n)]


def get_init_inputs() -> list[int]:
    return []
