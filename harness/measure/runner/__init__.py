"""Child processes that run task and candidate code, and the parent's handle on them.

The names are loaded on first use: a measuring child imports ``harness.measure.runner._inputs`` and
its siblings, and must not pay for the parent's side (:mod:`._worker` imports the evidence models,
pydantic and the protocol) before its ``import torch`` is done and it can say it is ready.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.measure.runner._inputs import TASK_DISTRIBUTION, buffer_seed
    from harness.measure.runner._reaper import reap_stale
    from harness.measure.runner._worker import Role, Worker, WorkerDied

_EXPORTS = {"TASK_DISTRIBUTION": "_inputs", "buffer_seed": "_inputs", "reap_stale": "_reaper",
            "Role": "_worker", "Worker": "_worker", "WorkerDied": "_worker"}

__all__ = ["TASK_DISTRIBUTION", "Role", "Worker", "WorkerDied", "buffer_seed", "reap_stale"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
