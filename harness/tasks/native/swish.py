"""Swish / SiLU: x * sigmoid(x).

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'Swish / SiLU: x * sigmoid(x).',
 'bytes': 'io',
 'knobs': {'impl': {'expr': 'x * torch.sigmoid(x)', 'silu': 'F.silu(x)', 'exp': 'x / (1.0 + torch.exp(-x))'},
           'layout': {'keep': 'x', 'contiguous': 'x.contiguous()'}},
 'start': {'impl': 'expr', 'layout': 'keep'},
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
        return x * torch.sigmoid(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
