"""One pydantic argument model per tool: the single source of the tools' JSON schemas and checks.

The model's arguments are validated against these before anything runs; a bad argument is a tool error
the model sees. Every ``path`` is relative to the workspace (``/workspace/...`` is accepted too); the
sandbox refuses anything that would leave it.
"""

from __future__ import annotations

from typing import Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

FlagArg = Union[bool, int, float, str]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListFilesArgs(_Args):
    path: str = Field(default=".", description="directory relative to the workspace")
    recursive: bool = Field(default=True, description="list subdirectories too")


class ReadFileArgs(_Args):
    path: str = Field(description="file relative to the workspace, e.g. 'candidate.py'")
    start_line: int = Field(default=1, ge=1, description="first line to return (1-based)")
    max_lines: int | None = Field(default=None, ge=1, description="how many lines to return (default: all that fit)")


class WriteFileArgs(_Args):
    path: str = Field(description="file relative to the workspace; parent directories are created")
    content: str = Field(description="the complete new content of the file")


class Replacement(_Args):
    old: str = Field(min_length=1, description="exact text to find; must occur exactly once unless replace_all")
    new: str = Field(description="text to put in its place")
    replace_all: bool = Field(default=False, description="replace every occurrence instead of exactly one")


class EditFileArgs(_Args):
    path: str = Field(description="existing file relative to the workspace")
    replacements: list[Replacement] | None = Field(
        default=None, description="exact-text replacements, applied in order")
    patch: str | None = Field(default=None, description="a unified diff (---/+++/@@ hunks) against this file")

    @model_validator(mode="after")
    def _one_mode(self) -> "EditFileArgs":
        if (self.replacements is None) == (self.patch is None):
            raise ValueError("give exactly one of 'replacements' or 'patch'")
        if self.replacements is not None and not self.replacements:
            raise ValueError("'replacements' is empty")
        return self


class RunInSandboxArgs(_Args):
    command: str = Field(min_length=1, description="shell command run in /workspace inside the sandbox")
    timeout_s: float | None = Field(default=None, gt=0, description="seconds before it is killed (capped by the protocol)")


class GetTaskArgs(_Args):
    pass


class SubmitArgs(_Args):
    note: str = Field(default="", max_length=2000, description="optional note on what this submission changes")


class SetFlagsArgs(_Args):
    flags: dict[str, FlagArg] = Field(description="flag name -> value; flags left out keep the engine's default")
