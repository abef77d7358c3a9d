"""A deliberately weak task: ReLU checked only on non-negative inputs (KernelBench's own ReLU draws
``torch.rand``), where returning the input is indistinguishable from computing the ReLU.

The preflight must flag it (``passthrough`` passes), and the quarantine's extended pass, which probes
every adversarial distribution, must not clear a passthrough that looked 30x fast on it.
"""

import torch
import torch.nn as nn

ATB_META = {
    "description": "ReLU on non-negative inputs only (weak on purpose)",
    "bytes": "io",
    "distributions": ["uniform"],
}

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
    return [torch.rand(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
