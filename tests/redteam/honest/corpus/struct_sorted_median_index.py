"""Honest (structure): the rows are sorted, so the (lower) median is the element at index (n - 1) // 2:
one gather instead of a selection over every row. Correct for every input the problem states (rows
sorted ascending). The result is copied into a fresh tensor (never a view of the input).
REDTEAM = {"task": "tasks/hc_sorted_median.py", "gate": null, "class": "structure", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., (x.shape[-1] - 1) // 2].clone()
