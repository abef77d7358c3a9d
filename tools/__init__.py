"""The tools a tuner may call, on top of one sandbox: ``ToolBox(sandbox, task_brief, submit)``.

Definitions for OpenAI and Anthropic come from each tool's pydantic argument model; ``ToolBox.call``
never raises. ``submit`` copies the workspace out by content and hands it to the injected callable
(the harness), which returns the verdict summary.
"""

from tools._args import (
    EditFileArgs,
    GetTaskArgs,
    ListFilesArgs,
    ReadFileArgs,
    Replacement,
    RunInSandboxArgs,
    SetFlagsArgs,
    SubmitArgs,
    WriteFileArgs,
)
from tools._models import TaskBrief, ToolOutcome
from tools._patch import EditError, apply_replacements, apply_unified_diff
from tools._schema import json_schema
from tools._toolbox import SubmitFn, ToolBox

__all__ = [
    "EditError",
    "EditFileArgs",
    "GetTaskArgs",
    "ListFilesArgs",
    "ReadFileArgs",
    "Replacement",
    "RunInSandboxArgs",
    "SetFlagsArgs",
    "SubmitArgs",
    "SubmitFn",
    "TaskBrief",
    "ToolBox",
    "ToolOutcome",
    "WriteFileArgs",
    "apply_replacements",
    "apply_unified_diff",
    "json_schema",
]
