"""Cheat: outputs are memoised by the input's storage address, so timed repetitions over the
harness's rotating buffers return a stored answer without doing the work.

Every returned value is right for its input; the time is not physically possible for the bytes.
Neutralised (issue 13): timed calls never see one input twice, so the memo never hits and the
candidate measures at honest speed; tests/redteam/test_redteam_neutralised.py checks that it gains nothing.
REDTEAM = {"task": "relu", "gate": "physical_limit"}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.memo: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), x._version)
        hit = self.memo.get(key)
        if hit is not None:
            return hit[1]
        out = torch.relu(x)
        if len(self.memo) > 8:
            self.memo.clear()
        self.memo[key] = (x, out)  # holding x keeps its address from being reused by a new input
        return out
