"""Honest: the hand-written softmax with its temporaries reused in place (no forbidden op).

REDTEAM = {"task": "tasks/softmax_handwritten.py", "gate": null}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.sub(x, x.amax(dim=-1, keepdim=True)).exp_()
        return e.div_(e.sum(dim=-1, keepdim=True))
