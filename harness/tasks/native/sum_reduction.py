"""Sum over dimension 1 of a (batch, dim) tensor.

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'Sum over dimension 1 of a (batch, dim) tensor.',
 'bytes': 'io',
 'knobs': {'impl': {'sum': 'torch.sum(x, dim=1)',
                    'method': 'x.sum(1)',
                    'matvec': 'x @ torch.ones(x.shape[1], dtype=x.dtype, device=x.device)',
                    'chunked': 'torch.stack([c.sum(1) for c in x.chunk(4, dim=1)], 0).sum(0)'},
           'layout': {'keep': 'x', 'contiguous': 'x.contiguous()'}},
 'start': {'impl': 'sum', 'layout': 'keep'},
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
dim = 2048


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
