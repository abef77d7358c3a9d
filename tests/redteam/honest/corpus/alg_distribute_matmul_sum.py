"""Honest (algebraic): A @ B + A @ C computed as A @ (B + C): one matrix product instead of two.

Exact in real arithmetic for every input; in fp32 only the rounding order differs.
REDTEAM = {"task": "tasks/hc_matmul_sum.py", "gate": null, "class": "algebraic", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a @ (b + c)
