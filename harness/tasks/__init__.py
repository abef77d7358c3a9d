"""Kernel tasks: the native suite and KernelBench-format problem files."""

from harness.tasks._cost import CountedCost, TaskCost, needs_count, resolve_cost
from harness.tasks._loader import NATIVE_DIR, load_task, load_task_file, native_task_names, native_tasks
from harness.tasks._model import Task, TaskMeta, ToleranceOverride

# Counting a task in its own process (begin_cost, count_task) is harness.measure.cost's: it starts the
# process as a measuring child is started, and this package imports no layer (issue 29).
__all__ = ["NATIVE_DIR", "CountedCost", "Task", "TaskCost", "TaskMeta", "ToleranceOverride", "load_task",
           "load_task_file", "native_task_names", "native_tasks", "needs_count", "resolve_cost"]
