"""For each bag of L indices into a table of fp32 rows, the sum of those rows (an embedding-bag sum).

On the GPU the table is 32 MiB (fits in an H200's L2) and is read 1M times at random rows.
AutoTuneBench's own problem in KernelBench format, written for the honest corpus (tests/redteam/honest/corpus);
sizes depend on the device get_inputs runs under: small on the CPU (and on meta, where the FLOP count runs),
GPU-sized on CUDA.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def _shape() -> tuple[int, int, int, int]:
    # rows, width, bags, bag length
    return (131072, 64, 16384, 64) if torch.empty(0).device.type == "cuda" else (4096, 64, 256, 32)


class Model(nn.Module):
    def forward(self, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return F.embedding(idx, table).sum(dim=1)


def get_inputs() -> list[torch.Tensor]:
    rows, width, bags, length = _shape()
    return [torch.randn(rows, width), torch.randint(0, rows, (bags, length))]


def get_init_inputs() -> list[int]:
    return []
