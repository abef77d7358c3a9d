"""The tools' boundary models: what a tool call returns, and what the ToolBox knows of the task."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.engines.flags import FlagSpace


class ToolOutcome(BaseModel):
    """What the model sees of one tool call. ``submitted`` is the harness's summary after ``submit``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str
    is_error: bool = False
    submitted: dict[str, Any] | None = None


class TaskBrief(BaseModel):
    """What the tools know of the task: the text the model is given, and for engine tasks the flag space.

    ``candidate_file`` is the workspace file the harness measures (``candidate.py`` for kernel tasks; the
    flag configuration ``set_flags`` writes for engine tasks). ``submit`` refuses a workspace without it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    task_id: str = ""
    kind: Literal["kernel", "engine"] = "kernel"
    candidate_file: str = Field(default="candidate.py", min_length=1)
    flag_space: FlagSpace | None = None

    @classmethod
    def coerce(cls, brief: "TaskBrief | str") -> "TaskBrief":
        return brief if isinstance(brief, TaskBrief) else cls(text=str(brief))
