"""Cheat: the input is used as scratch space: each row is shifted by its maximum in place.

Softmax does not change under that shift, and shifting again is a no-op, so every untimed output
stays right; but the caller's tensor has been rewritten. (Not exclusive: timed sets are windows of one
pool, so a row shifted in one window is misaligned in an overlapping one, and a timed output drifts.)
REDTEAM = {"task": "softmax", "gate": "input_mutation"}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.sub_(x.amax(dim=-1, keepdim=True))
        return torch.softmax(x, dim=-1)
