"""A red-team task whose reference is not deterministic: ``2x`` plus noise of at most 5e-4 from an
unseeded generator, as a GPU kernel that sums in a different order from run to run would give.

On the H200 KernelBench's transposed convolutions behave this way in fp32 (two output digests from one
input in one process), and under the ``large`` draw their own spread exceeds the protocol's float32
tolerance. The harness judges a failed comparison again against the reference's own spread on a second
run (protocol ``correctness.reference_spread_factor``): the reference's code as its own candidate must
pass, and an error well beyond that spread must still fail.
"""

import torch
import torch.nn as nn

N = 256
D = 64


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.Generator()
        g.seed()   # a fresh, unseeded stream on every call: no two runs agree
        return x * 2.0 + (torch.rand(x.shape, generator=g) - 0.5) * 1e-3


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, D)]


def get_init_inputs() -> list[int]:
    return []
