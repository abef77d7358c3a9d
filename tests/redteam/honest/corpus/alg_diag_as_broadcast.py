"""Honest (algebraic): diag(d) @ B as d[:, None] * B: scales B's rows instead of building an N x N matrix
and multiplying by it (O(N^2) instead of O(N^3)). The same products, each summed with zeros only.
REDTEAM = {"task": "tasks/hc_diag_matmul.py", "gate": null, "class": "algebraic", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, d: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return d.unsqueeze(1) * b
