"""x * w + y on small fp32 tensors (two eager kernels).

AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int]:
    return (256, 4096) if torch.empty(0).device.type == "cuda" else (64, 1024)


class Model(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * w + y


def get_inputs() -> list[torch.Tensor]:
    s = _shape()
    return [torch.randn(*s), torch.randn(*s), torch.randn(*s)]


def get_init_inputs() -> list[int]:
    return []
