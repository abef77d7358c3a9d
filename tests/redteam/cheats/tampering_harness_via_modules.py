"""Cheat: the harness's own timing module is found through the module table and its bound clock
replaced, which the 'timers bound before import' defence alone does not stop.

REDTEAM = {"task": "relu", "gate": "timer_tampering"}
"""

import sys

import torch
import torch.nn as nn

for _name, _mod in list(sys.modules.items()):
    if _name.startswith("harness.measure.timing") and hasattr(_mod, "_now"):
        _orig = _mod._now
        setattr(_mod, "_now", lambda _o=_orig: _o() // 4)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
