"""Kernel tasks: the native suite and KernelBench-format problem files."""

from harness.tasks._cost import CountedCost, PendingCost, TaskCost, begin_cost, count_task, needs_count, resolve_cost
from harness.tasks._loader import NATIVE_DIR, load_task, load_task_file, native_task_names, native_tasks
from harness.tasks._model import Task, TaskMeta, ToleranceOverride

__all__ = ["NATIVE_DIR", "CountedCost", "PendingCost", "Task", "TaskCost", "TaskMeta", "ToleranceOverride",
           "begin_cost", "count_task", "load_task", "load_task_file", "native_task_names", "native_tasks",
           "needs_count", "resolve_cost"]
