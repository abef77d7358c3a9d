"""ReLU over a (batch, dim) activation.

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'ReLU over a (batch, dim) activation.',
 'bytes': 'io',
 'knobs': {'impl': {'relu': 'torch.relu(x)',
                    'clamp': 'torch.clamp_min(x, 0.0)',
                    'where': 'torch.where(x > 0, x, torch.zeros_like(x))',
                    'maximum': 'torch.maximum(x, x.new_zeros(()))'},
           'layout': {'keep': 'x', 'contiguous': 'x.contiguous()'}},
 'start': {'impl': 'relu', 'layout': 'keep'},
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
dim = 8192


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
