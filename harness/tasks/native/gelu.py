"""GELU (exact, erf form) over a (batch, dim) activation.

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'GELU (exact, erf form) over a (batch, dim) activation.',
 'bytes': 'io',
 'knobs': {'impl': {'gelu': 'F.gelu(x)',
                    'erf': '0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))',
                    'tanh': "F.gelu(x, approximate='tanh')"},
           'layout': {'keep': 'x', 'contiguous': 'x.contiguous()'}},
 'start': {'impl': 'gelu', 'layout': 'keep'},
 'template': 'import torch\n'
             'import torch.nn as nn\n'
             'import torch.nn.functional as F\n'
             '\n'
             '\n'
             'class ModelNew(nn.Module):\n'
             '    def __init__(self) -> None:\n'
             '        super().__init__()\n'
             '\n'
             '    def forward(self, x: torch.Tensor) -> torch.Tensor:\n'
             '        x = ${layout}\n'
             '        return ${impl}\n'}

batch_size = 128
dim = 1024


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
