"""Honest (torch.compile, default mode): the same eight-layer MLP (built in the same order, so it holds the
reference's weights under the harness's init seed), compiled.
REDTEAM = {"task": "tasks/hc_tiny_mlp.py", "gate": null, "class": "compile_default", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn

WIDTH = 256
DEPTH = 8


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(DEPTH):
            layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
        self.net = nn.Sequential(*layers)
        self.fn = torch.compile(self.net)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)
