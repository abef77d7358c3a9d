"""Layer norm with learned affine parameters over the last dimension.

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'Layer norm with learned affine parameters over the last dimension.',
 'bytes': 'io',
 'knobs': {'impl': {'module': 'self.ln(x)',
                    'functional': 'F.layer_norm(x, (x.shape[-1],), self.ln.weight, self.ln.bias, '
                                  'self.ln.eps)',
                    'manual': '(x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, unbiased=False, '
                              'keepdim=True) + self.ln.eps) * self.ln.weight + self.ln.bias'},
           'layout': {'keep': 'x', 'contiguous': 'x.contiguous()'}},
 'start': {'impl': 'module', 'layout': 'keep'},
 'template': 'import torch\n'
             'import torch.nn as nn\n'
             'import torch.nn.functional as F\n'
             '\n'
             '\n'
             'class ModelNew(nn.Module):\n'
             '    def __init__(self, dim: int) -> None:\n'
             '        super().__init__()\n'
             '        self.ln = nn.LayerNorm(dim)\n'
             '\n'
             '    def forward(self, x: torch.Tensor) -> torch.Tensor:\n'
             '        x = ${layout}\n'
             '        return ${impl}\n'}

batch_size = 64
dim = 1024


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return [dim]
