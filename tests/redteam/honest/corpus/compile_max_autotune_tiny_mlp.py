"""Honest (torch.compile, max-autotune with CUDA graphs): the launch-bound MLP compiled and replayed as a
CUDA graph. A CUDA-graph output lives in a static buffer that the next replay overwrites, so each call
marks a new step and returns a clone: every output stays the caller's own.
REDTEAM = {"task": "tasks/hc_tiny_mlp.py", "gate": null, "class": "compile_max_autotune", "backends": ["cuda"]}
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
        self.fn = torch.compile(self.net, mode="max-autotune")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()
        return self.fn(x).clone()
