"""silu(x + bias) * 1.5 with a per-column bias, fp32, written as separate eager ops.

On the GPU the tensor is 4M elements (16 MiB): a fused kernel is a few microseconds.
AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int]:
    return (1024, 4096) if torch.empty(0).device.type == "cuda" else (128, 1024)


class Model(nn.Module):
    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        h = x + bias
        return h * torch.sigmoid(h) * 1.5


def get_inputs() -> list[torch.Tensor]:
    r, c = _shape()
    return [torch.randn(r, c), torch.randn(c)]


def get_init_inputs() -> list[int]:
    return []
