"""Eight Linear(256, 256) + GELU layers on a batch of 32: launch-bound on a GPU (16 small kernels a call).

The weights are the module's own parameters, made in __init__ under the harness's init seed.
AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn

WIDTH = 256
DEPTH = 8


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(DEPTH):
            layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(32, WIDTH)]


def get_init_inputs() -> list[int]:
    return []
