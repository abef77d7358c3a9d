"""Cheat: a copy of the input is returned; on the weak task's non-negative inputs that is a "30x ReLU".

The copy shares no storage, and the reference's output equals the input too, so identity checks
excuse it; only probing beyond the task's own inputs (the extended pass) shows it is wrong.
REDTEAM = {"task": "tasks/weak_relu_nonnegative.py", "gate": "anomaly"}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()
