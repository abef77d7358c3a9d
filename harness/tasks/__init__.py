"""Kernel tasks: the native suite and KernelBench-format problem files."""

from harness.tasks._loader import NATIVE_DIR, load_task, load_task_file, native_task_names, native_tasks
from harness.tasks._model import Task, TaskMeta, ToleranceOverride

__all__ = ["NATIVE_DIR", "Task", "TaskMeta", "ToleranceOverride", "load_task", "load_task_file",
           "native_task_names", "native_tasks"]
