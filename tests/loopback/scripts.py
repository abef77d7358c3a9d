"""Scripted model turns used by the agent tests and by the fixture transcript."""

from __future__ import annotations

from .server import ScriptedCall, ScriptedTurn

GELU_V1 = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)
'''

GELU_V2 = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))
'''


def three_iterations() -> list[ScriptedTurn]:
    """Iteration 0: write, list, submit. Iteration 1: read, rewrite and submit in one turn.
    Iteration 2: the model ends its turn without submitting (the workspace is submitted as it stands)."""
    return [
        ScriptedTurn(text="I will start from F.gelu.", tool_calls=(
            ScriptedCall("write_file", {"path": "candidate.py", "content": GELU_V1}),
            ScriptedCall("list_files", {}))),
        ScriptedTurn(tool_calls=(ScriptedCall("submit", {}),)),
        ScriptedTurn(tool_calls=(ScriptedCall("read_file", {"path": "candidate.py"}),)),
        ScriptedTurn(text="Trying the erf form.", tool_calls=(
            ScriptedCall("write_file", {"path": "candidate.py", "content": GELU_V2}),
            ScriptedCall("submit", {}))),
        ScriptedTurn(text="I am done; the erf form is my best."),
    ]


def truncated_run(iterations: int) -> list[ScriptedTurn]:
    """Every turn is cut off at the cap (and calls no tool)."""
    return [ScriptedTurn(text="def forward(self, x):\n    return", truncate=True) for _ in range(iterations)]
