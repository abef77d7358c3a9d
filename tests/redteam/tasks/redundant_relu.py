"""ReLU whose reference recomputes its result 32 times: a stand-in for a naive reference.

A red-team task for the quarantine path: an honest candidate that computes the ReLU once is about
30x faster, which the anomaly breaker must quarantine and the extended pass must then clear.
"""

import torch
import torch.nn as nn

batch_size = 128
dim = 1024
REPEATS = 32


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        for _ in range(REPEATS - 1):
            y = torch.relu(x)
        return y


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
