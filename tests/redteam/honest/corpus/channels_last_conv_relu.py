"""Honest (channels_last): the same convolution (same weights under the harness's init seed) run in the
channels_last layout, which oneDNN and cuDNN convolve without layout transposes, and the ReLU in place on
the convolution's fresh output. The output has the reference's values; only its strides differ.
REDTEAM = {"task": "tasks/hc_conv_relu.py", "gate": null, "class": "channels_last_cudnn", "backends": ["cpu", "cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(32, 64, 3, padding=1).to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu_(self.conv(x.contiguous(memory_format=torch.channels_last)))
