"""Honest (fused library op): F.embedding followed by a sum over the bag as one F.embedding_bag(mode='sum'),
which never materialises the (bags, L, width) gathered tensor.
REDTEAM = {"task": "tasks/hc_gather_sum.py", "gate": null, "class": "fused_library_op", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return F.embedding_bag(idx, table, mode="sum")
