"""The MLX measuring backend: its own runner (``mlx_runner``), used by ``atb retest --device mlx``.

It is registered like the torch backends so that a name, a device row and the gates find it, but it does
not run the harness's torch children: ``atb eval`` refuses it and the held-out retest measures through
:mod:`harness.measure.backends.mlx_runner` (whose child has its own timing loop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.measure.backends._registry import BACKENDS
from harness.measure.backends.cpu import TorchBackend

if TYPE_CHECKING:
    from harness.records import DeviceFamily
    from protocol import Protocol as AtbProtocol


class MlxBackend(TorchBackend):
    """MLX arrays timed by ``mx.eval`` in the MLX runner's child (not a torch child)."""

    name = "mlx"
    device = "cpu"
    stored_as: DeviceFamily = "mlx"
    torch_children = False
    counts_input_sets = False
    default_transport = "file"

    def available(self) -> tuple[bool, str]:
        return False, "kernel evaluation on MLX is served by `atb retest`, not by this harness path"

    def cache_factor(self, protocol: AtbProtocol) -> float:
        return 1.0


MLX = BACKENDS.add("mlx", MlxBackend())

__all__ = ["MLX", "MlxBackend"]
