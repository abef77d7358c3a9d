"""Conv2d(32, 64, 3, padding=1) followed by ReLU, fp32, NCHW input.

AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn


def _shape() -> tuple[int, int, int, int]:
    return (32, 32, 128, 128) if torch.empty(0).device.type == "cuda" else (4, 32, 32, 32)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(32, 64, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(*_shape())]


def get_init_inputs() -> list[int]:
    return []
