"""Honest (in-place on intermediates): tanh(1.7 x + 0.3) * 0.6 + x with every step after the first done in
place on the first step's fresh buffer (x itself is only read).
REDTEAM = {"task": "tasks/hc_elementwise_chain.py", "gate": null, "class": "inplace", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mul(x, 1.7).add_(0.3).tanh_().mul_(0.6).add_(x)
