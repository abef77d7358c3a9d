"""Honest (structure): the product of two lower-triangular matrices is lower triangular, so tril() of it
changes nothing: the candidate skips the masking pass. Every entry above the diagonal is a sum of
products with a zero factor, hence zero. Correct for every input the problem states (A, B lower triangular).
REDTEAM = {"task": "tasks/hc_tril_matmul.py", "gate": null, "class": "structure", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)
