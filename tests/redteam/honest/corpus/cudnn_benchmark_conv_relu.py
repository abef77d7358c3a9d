"""Honest (cudnn.benchmark): the same convolution with cuDNN's autotuner on, so cuDNN times its fp32
algorithms for this shape once and keeps the fastest (TF32 stays as the harness set it, off).
REDTEAM = {"task": "tasks/hc_conv_relu.py", "gate": null, "class": "channels_last_cudnn", "backends": ["cuda"]}
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(32, 64, 3, padding=1)
        torch.backends.cudnn.benchmark = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))
