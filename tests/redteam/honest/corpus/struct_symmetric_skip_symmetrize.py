"""Honest (structure): for a symmetric S, (S + S^T) / 2 is S exactly (s + s doubles exactly and halving
is exact in binary floating point), so the candidate multiplies S directly and skips three passes over it.
Correct for every input the problem states (S symmetric).
REDTEAM = {"task": "tasks/hc_sym_matmul.py", "gate": null, "class": "structure", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, s: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return s @ x
