"""Honest (Triton): tanh(1.7 x + 0.3) * 0.6 + x in one Triton kernel (tanh as 1 - 2 / (exp(2z) + 1), which
saturates to +-1 without overflow trouble: exp(2z) = inf gives 1, exp(2z) = 0 gives -1).
REDTEAM = {"task": "tasks/hc_elementwise_chain.py", "gate": null, "class": "triton", "backends": ["cuda"]}
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _chain(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    z = x * 1.7 + 0.3
    t = 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)
    tl.store(out_ptr + offs, t * 0.6 + x, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _chain[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
