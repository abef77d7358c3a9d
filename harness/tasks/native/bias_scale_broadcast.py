"""x * scale + bias with per-channel (C, 1, 1) parameters broadcast over (N, C, H, W).

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'x * scale + bias with per-channel (C, 1, 1) parameters broadcast over (N, C, H, W).',
 'bytes': 'io',
 'knobs': {'impl': {'expr': 'x * self.scale + self.bias',
                    'addcmul': 'torch.addcmul(self.bias, x, self.scale)',
                    'nhwc': '(x.permute(0, 2, 3, 1) * self.scale.view(-1) + self.bias.view(-1)).permute(0, '
                            '3, 1, 2)'},
           'layout': {'keep': 'x',
                      'contiguous': 'x.contiguous()',
                      'channels_last': 'x.contiguous(memory_format=torch.channels_last)'}},
 'start': {'impl': 'expr', 'layout': 'keep'},
 'template': 'import torch\n'
             'import torch.nn as nn\n'
             'import torch.nn.functional as F\n'
             '\n'
             '\n'
             'class ModelNew(nn.Module):\n'
             '    def __init__(self, channels: int) -> None:\n'
             '        super().__init__()\n'
             '        self.scale = nn.Parameter(torch.randn(channels, 1, 1))\n'
             '        self.bias = nn.Parameter(torch.randn(channels, 1, 1))\n'
             '\n'
             '    def forward(self, x: torch.Tensor) -> torch.Tensor:\n'
             '        x = ${layout}\n'
             '        return ${impl}\n'}

batch_size = 16
channels = 32
height = 16
width = 16


class Model(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(channels, 1, 1))
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.bias


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs() -> list[int]:
    return [channels]
