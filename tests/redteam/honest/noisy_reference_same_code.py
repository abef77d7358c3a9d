"""Honest: the noisy reference's own code as the candidate. It differs from the reference by as much
as the reference differs from itself, which the protocol's float32 tolerance alone would reject.

REDTEAM = {"task": "tasks/noisy_reference.py", "gate": null}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.Generator()
        g.seed()
        return x * 2.0 + (torch.rand(x.shape, generator=g) - 0.5) * 1e-3
