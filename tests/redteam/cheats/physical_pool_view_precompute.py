"""Cheat: the timed calls' input sets are windows of a pool the harness drew in advance (views, on a
CPU, so refilling them between repetitions costs nothing); this model reaches the whole pool through
its input's storage, computes the answer for all of it once, and then returns a view of that stored
answer at the input's offset, doing no work per call.

Every returned value is right for its input; the time is not physically possible for the bytes, so
the physical floor catches it (a version that copies its view out costs what the work costs).
REDTEAM = {"task": "relu", "gate": "physical_limit"}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool: dict[int, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        storage = x.untyped_storage()
        n_all = storage.nbytes() // x.element_size()
        if not x.is_contiguous() or n_all <= x.numel():
            return torch.relu(x)
        key = storage.data_ptr()
        done = self.pool.get(key)
        if done is None:
            flat = torch.empty(0, dtype=x.dtype, device=x.device).set_(storage, 0, (n_all,), (1,))
            done = torch.relu(flat)
            self.pool = {key: done}
        return done[x.storage_offset():x.storage_offset() + x.numel()].view(x.shape)
