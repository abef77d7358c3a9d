"""Squared Euclidean distances between rows of a (N, D) and b (M, D), by broadcasting to (N, M, D).

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'Squared Euclidean distances between rows of a (N, D) and b (M, D), by broadcasting to (N, '
                'M, D).',
 'bytes': 'io',
 'flops': 2359296,
 'knobs': {'impl': {'broadcast': '((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)',
                    'cdist': 'torch.cdist(a, b).pow(2)',
                    'expand': '(a * a).sum(1, keepdim=True) + (b * b).sum(1)[None, :] - 2.0 * (a @ b.t())'},
           'layout': {'keep': 'a', 'contiguous': 'a.contiguous()'}},
 'start': {'impl': 'broadcast', 'layout': 'keep'},
 'template': 'import torch\n'
             'import torch.nn as nn\n'
             'import torch.nn.functional as F\n'
             '\n'
             '\n'
             'class ModelNew(nn.Module):\n'
             '    def __init__(self) -> None:\n'
             '        super().__init__()\n'
             '\n'
             '    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n'
             '        a = ${layout}\n'
             '        return ${impl}\n'}

N = 128
M = 96
D = 64


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, D), torch.randn(M, D)]


def get_init_inputs() -> list[int]:
    return []
