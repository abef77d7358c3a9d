"""S @ X for a symmetric fp32 matrix S; the reference symmetrises S first, (S + S^T) / 2, as a defence.

The problem states S is symmetric (get_inputs builds it so).
AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int]:
    return (4096, 1024) if torch.empty(0).device.type == "cuda" else (512, 64)


class Model(nn.Module):
    def forward(self, s: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return (0.5 * (s + s.mT)) @ x


def get_inputs() -> list[torch.Tensor]:
    n, k = _shape()
    g = torch.randn(n, n)
    return [(g + g.mT) * 0.5, torch.randn(n, k)]


def get_init_inputs() -> list[int]:
    return []
