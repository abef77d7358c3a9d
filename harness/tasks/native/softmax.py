"""Softmax over the last dimension of a (batch, dim) tensor.

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'Softmax over the last dimension of a (batch, dim) tensor.',
 'bytes': 'io',
 'knobs': {'impl': {'softmax': 'torch.softmax(x, dim=-1)',
                    'stable': 'torch.exp(x - x.amax(-1, keepdim=True)) / torch.exp(x - x.amax(-1, '
                              'keepdim=True)).sum(-1, keepdim=True)',
                    'logexp': 'torch.log_softmax(x, dim=-1).exp()',
                    'naive': 'torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)'},
           'layout': {'keep': 'x', 'contiguous': 'x.contiguous()'}},
 'start': {'impl': 'softmax', 'layout': 'keep'},
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

batch_size = 64
dim = 1024


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
