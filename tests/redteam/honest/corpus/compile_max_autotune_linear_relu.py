"""Honest (torch.compile, max-autotune): Inductor benchmarks GEMM templates (fp32; TF32 stays as the harness
set it, off) and fuses the bias, relu and scale into the chosen kernel's epilogue. Without CUDA graphs, so
every call returns a fresh output.
REDTEAM = {"task": "tasks/hc_linear_relu_scale.py", "gate": null, "class": "compile_max_autotune", "backends": ["cuda"]}
"""

import torch
import torch.nn as nn


def _linear_relu_scale(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w + b) * 0.5


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fn = torch.compile(_linear_relu_scale, mode="max-autotune-no-cudagraphs")

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.fn(x, w, b)
