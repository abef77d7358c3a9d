"""Softmax over the last dimension, to be written without calling torch's softmax.

A red-team task declaring forbidden ops: a candidate that calls the op under test measures PyTorch.
"""

import torch
import torch.nn as nn

ATB_META = {
    "description": "softmax over the last dimension without torch's softmax",
    "bytes": "io",
    "forbidden_ops": ["torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax",
                      "torch.log_softmax", "torch.special.softmax"],
}

batch_size = 64
dim = 1024


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
