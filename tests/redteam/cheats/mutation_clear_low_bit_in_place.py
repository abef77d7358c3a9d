"""Cheat: uses its input as scratch space, clearing the lowest mantissa bit of every element in place
(an idempotent write: a second pass changes nothing). Softmax moves by about one part in 10^7, well
inside the tolerance, so every output (timed repetitions included) stays right; but the caller's
tensor has been rewritten, in the untimed checks and in every timed set alike.
REDTEAM = {"task": "softmax", "gate": "input_mutation", "exclusive": true}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.view(torch.int32).bitwise_and_(-2)
        return torch.softmax(x, dim=-1)
