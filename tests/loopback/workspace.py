"""An in-memory workspace implementing the ToolBox interface (docs/contracts.md), for agent tests
that must not need Docker. Files live in a dict; ``submit`` hands all of them to the callback."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadFile(_Args):
    path: str = Field(description="workspace-relative path")


class WriteFile(_Args):
    path: str = Field(description="workspace-relative path")
    content: str


class ListFiles(_Args):
    pass


class Submit(_Args):
    pass


_TOOLS: dict[str, tuple[type[_Args], str]] = {
    "read_file": (ReadFile, "Read a workspace file."),
    "write_file": (WriteFile, "Write a workspace file."),
    "list_files": (ListFiles, "List the workspace files."),
    "submit": (Submit, "Hand the workspace to the harness for measurement."),
}


@dataclass(frozen=True)
class Outcome:
    content: str
    is_error: bool
    submitted: dict[str, Any] | None = None


class MemoryToolBox:
    def __init__(self, task_brief: str, submit: Callable[[dict[str, bytes]], dict[str, Any]]) -> None:
        self.task_brief = task_brief
        self.submit = submit
        self.files: dict[str, bytes] = {}
        self.calls: list[tuple[str, str]] = []

    def openai_tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": n, "description": d, "parameters": m.model_json_schema()}}
                for n, (m, d) in _TOOLS.items()]

    def anthropic_tools(self) -> list[dict[str, Any]]:
        return [{"name": n, "description": d, "input_schema": m.model_json_schema()} for n, (m, d) in _TOOLS.items()]

    def call(self, name: str, arguments: str | dict[str, Any]) -> Outcome:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        self.calls.append((name, text))
        if name not in _TOOLS:
            return Outcome(f"unknown tool {name!r}", True)
        try:
            raw = json.loads(text) if text else {}
            args = _TOOLS[name][0].model_validate(raw)
        except (json.JSONDecodeError, ValidationError) as exc:
            return Outcome(f"bad arguments for {name}: {exc}", True)
        if isinstance(args, ReadFile):
            if args.path not in self.files:
                return Outcome(f"no such file: {args.path}", True)
            return Outcome(self.files[args.path].decode(), False)
        if isinstance(args, WriteFile):
            self.files[args.path] = args.content.encode()
            return Outcome(f"wrote {len(args.content)} bytes to {args.path}", False)
        if isinstance(args, ListFiles):
            return Outcome("\n".join(sorted(self.files)) or "(empty)", False)
        if not self.files:
            return Outcome("nothing to submit: the workspace is empty", True)
        receipt = self.submit(dict(self.files))
        return Outcome(json.dumps(receipt, sort_keys=True), False, receipt)
