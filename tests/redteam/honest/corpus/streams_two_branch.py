"""Honest (several streams, joined): the two independent matrix products run on two streams; the side
stream first waits for the caller's stream (inputs ready), the caller's stream waits for the side stream
before the add, and the side result is marked as used on the caller's stream for the caching allocator.
REDTEAM = {"task": "tasks/hc_two_branch.py", "gate": null, "class": "streams", "backends": ["cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._side: torch.cuda.Stream | None = None

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        if not a.is_cuda:
            return torch.relu(a @ b) + torch.sigmoid(c @ d)
        main = torch.cuda.current_stream(a.device)
        if self._side is None:
            self._side = torch.cuda.Stream(device=a.device)
        side = self._side
        side.wait_stream(main)
        with torch.cuda.stream(side):
            right = torch.sigmoid(c @ d)
        left = torch.relu(a @ b)
        main.wait_stream(side)
        right.record_stream(main)
        return left.add_(right)
