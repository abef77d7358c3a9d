"""A small 3x3 convolution, 3 to 16 channels, padding 1, on 32x32 images.

A native AutoTuneBench task in KernelBench format; ``ATB_META`` is read with ast.literal_eval."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ATB_META = {'description': 'A small 3x3 convolution, 3 to 16 channels, padding 1, on 32x32 images.',
 'bytes': 'io',
 'flops': 7077888,
 'forbidden_ops': ['half', 'bfloat16', 'float16'],
 'knobs': {'impl': {'module': 'self.conv(x)',
                    'functional': 'F.conv2d(x, self.conv.weight, self.conv.bias, padding=1)'},
           'layout': {'keep': 'x',
                      'contiguous': 'x.contiguous()',
                      'channels_last': 'x.contiguous(memory_format=torch.channels_last)'}},
 'start': {'impl': 'module', 'layout': 'keep'},
 'template': 'import torch\n'
             'import torch.nn as nn\n'
             'import torch.nn.functional as F\n'
             '\n'
             '\n'
             'class ModelNew(nn.Module):\n'
             '    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:\n'
             '        super().__init__()\n'
             '        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // '
             '2)\n'
             '\n'
             '    def forward(self, x: torch.Tensor) -> torch.Tensor:\n'
             '        x = ${layout}\n'
             '        return ${impl}\n'}

batch_size = 8
in_channels = 3
out_channels = 16
kernel_size = 3
height = 32
width = 32


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs() -> list[int]:
    return [in_channels, out_channels, kernel_size]
