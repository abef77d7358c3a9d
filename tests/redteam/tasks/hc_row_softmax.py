"""Softmax over the last dimension of an fp32 matrix.

AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int]:
    return (8192, 4096) if torch.empty(0).device.type == "cuda" else (128, 1024)


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(*_shape())]


def get_init_inputs() -> list[int]:
    return []
