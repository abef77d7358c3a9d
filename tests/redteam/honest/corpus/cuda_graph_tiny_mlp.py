"""Honest (CUDA graph): the launch-bound MLP captured once per input shape as a CUDA graph (a program, not
a result); every call copies its own input into the graph's static input, replays, and returns a clone of
the static output, so each output is computed from that call's input and stays the caller's own. Inside
someone else's capture (a harness timing by graph replay) it runs eagerly: graphs do not nest.
REDTEAM = {"task": "tasks/hc_tiny_mlp.py", "gate": null, "class": "cuda_graph", "backends": ["cuda"]}
"""

import torch
import torch.nn as nn

WIDTH = 256
DEPTH = 8


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(DEPTH):
            layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
        self.net = nn.Sequential(*layers)
        self._graphs: dict[tuple, tuple] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or torch.cuda.is_current_stream_capturing():
            return self.net(x)
        key = (tuple(x.shape), x.dtype, x.device)
        entry = self._graphs.get(key)
        if entry is None:
            static_in = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            static_in.copy_(x)
            warm = torch.cuda.Stream(device=x.device)
            warm.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(warm):
                for _ in range(2):
                    self.net(static_in)
            torch.cuda.current_stream().wait_stream(warm)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = self.net(static_in)
            entry = (graph, static_in, static_out)
            self._graphs[key] = entry
        graph, static_in, static_out = entry
        static_in.copy_(x)
        graph.replay()
        return static_out.clone()
