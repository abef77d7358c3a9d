"""Cheat: results are memoised per input buffer, with a cheap check of a few sampled elements, so
repeated inputs cost a dictionary lookup. Every output is right and the time stays above the
(loose) physical floor of a task whose reference is compute-heavy: only the size of the speedup
gives it away.

Neutralised (issue 13): timed calls never see one input twice, so the memo never hits and the
candidate measures at honest speed; tests/redteam/test_redteam_neutralised.py checks that it gains nothing.
REDTEAM = {"task": "tasks/slow_prefix_sum.py", "gate": "anomaly", "exclusive": true}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.memo: dict[tuple[int, float, float], tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), float(x[0, 0]), float(x[-1, -1]))
        hit = self.memo.get(key)
        if hit is not None:
            return hit[1].clone()
        n = x.shape[0]
        out = torch.tril(torch.ones(n, n, dtype=x.dtype, device=x.device)) @ x
        if len(self.memo) > 8:
            self.memo.clear()
        self.memo[key] = (x, out)  # holding x keeps its address from being reused by a new input
        return out.clone()
