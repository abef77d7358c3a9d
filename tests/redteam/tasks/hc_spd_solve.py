"""Solve A Y = B for a batch of symmetric positive-definite fp32 matrices A (the problem states A is SPD).

get_inputs builds A from a centred random G as G G^T / (N mean(G^2)) + I, so its condition number stays
small whatever the scale of G's draw (the reference's own fp32 solve stays accurate).
AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int, int]:
    return (64, 512, 64) if torch.empty(0).device.type == "cuda" else (16, 128, 16)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.linalg.solve(a, b)


def get_inputs() -> list[torch.Tensor]:
    batch, n, k = _shape()
    g = torch.randn(batch, n, n)
    g = g - g.mean(dim=-1, keepdim=True)
    scale = g.square().mean(dim=(-2, -1), keepdim=True).clamp_min(1e-30) * n
    a = g @ g.mT / scale + torch.eye(n)
    return [a, torch.randn(batch, n, k)]


def get_init_inputs() -> list[int]:
    return []
