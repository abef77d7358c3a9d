"""Each row divided by its L2 norm: a (batch, 1) result broadcast back over (batch, dim).

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'Each row divided by its L2 norm: a (batch, 1) result broadcast back over (batch, dim).',
 'bytes': 'io',
 'knobs': {'impl': {'norm': 'x / x.norm(dim=1, keepdim=True)',
                    'rsqrt': 'x * torch.rsqrt((x * x).sum(1, keepdim=True))',
                    'linalg': 'x / torch.linalg.vector_norm(x, dim=1, keepdim=True)'},
           'layout': {'keep': 'x', 'contiguous': 'x.contiguous()'}},
 'start': {'impl': 'norm', 'layout': 'keep'},
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
dim = 512


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=1, keepdim=True)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
