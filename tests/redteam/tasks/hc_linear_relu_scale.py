"""relu(x @ w + b) * 0.5, fp32, weights given as inputs.

AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int, int]:
    return (4096, 4096, 4096) if torch.empty(0).device.type == "cuda" else (256, 512, 512)


class Model(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w + b) * 0.5


def get_inputs() -> list[torch.Tensor]:
    m, k, n = _shape()
    return [torch.randn(m, k), torch.randn(k, n), torch.randn(n)]


def get_init_inputs() -> list[int]:
    return []
