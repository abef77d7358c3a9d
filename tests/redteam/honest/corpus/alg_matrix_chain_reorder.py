"""Honest (algebraic): (A @ B) @ X as A @ (B @ X): matrix products associate, and with a thin X the
right-to-left order costs 2 N^2 k instead of N^3 + N^2 k multiply-adds.
REDTEAM = {"task": "tasks/hc_matrix_chain.py", "gate": null, "class": "algebraic", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return a @ (b @ x)
