"""relu(x + residual). In-place-prone: accumulating into an input is wrong.

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'relu(x + residual). In-place-prone: accumulating into an input is wrong.',
 'bytes': 'io',
 'knobs': {'impl': {'expr': 'torch.relu(x + residual)',
                    'clamp': 'torch.clamp_min(x + residual, 0.0)',
                    'temp_inplace': 'torch.relu_(x + residual)',
                    'input_inplace': 'torch.relu_(x.add_(residual))'},
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
             '    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:\n'
             '        x = ${layout}\n'
             '        return ${impl}\n'}

batch_size = 128
dim = 1024


class Model(nn.Module):
    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + residual)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
