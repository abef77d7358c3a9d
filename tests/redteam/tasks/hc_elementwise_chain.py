"""tanh(1.7 x + 0.3) * 0.6 + x on a small fp32 tensor: five elementwise kernels in eager mode.

On the GPU the tensor is 1M elements (4 MiB): each eager kernel takes a few microseconds.
AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int]:
    return (256, 4096) if torch.empty(0).device.type == "cuda" else (64, 1024)


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * 1.7 + 0.3) * 0.6 + x


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(*_shape())]


def get_init_inputs() -> list[int]:
    return []
