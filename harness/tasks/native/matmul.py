"""A (M, K) by (K, N) fp32 matrix product; lowering precision is forbidden.

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'A (M, K) by (K, N) fp32 matrix product; lowering precision is forbidden.',
 'bytes': 'io',
 'flops': 8388608,
 'forbidden_ops': ['half', 'bfloat16', 'float16'],
 'knobs': {'impl': {'matmul': 'torch.matmul(a, b)',
                    'mm': 'torch.mm(a, b)',
                    'einsum': "torch.einsum('ik,kj->ij', a, b)",
                    'transposed': '(b.t() @ a.t()).t()'},
           'layout': {'keep': 'a', 'contiguous': 'a.contiguous()'}},
 'start': {'impl': 'matmul', 'layout': 'keep'},
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

M = 128
K = 256
N = 128


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs() -> list[int]:
    return []
