"""Honest (torch.compile, default mode): the five-kernel elementwise chain compiled into one kernel.
REDTEAM = {"task": "tasks/hc_elementwise_chain.py", "gate": null, "class": "compile_default", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn


def _chain(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * 1.7 + 0.3) * 0.6 + x


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fn = torch.compile(_chain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)
