"""``ToolBox``: the only things a tuner can do, each a pydantic-checked call on one sandbox.

Every tool's failure (a bad argument, a path outside the workspace, a command that times out, a
workspace over the copy-out cap, a harness that raised) comes back as ``ToolOutcome(is_error=True)``
with a message the model can act on; ``call`` never raises, so nothing a model sends can end the run.
``run_in_sandbox``'s timings are labelled advisory: verdicts come only from the harness, measuring the
files ``submit`` copied out, outside the sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from harness.redact import redact, redact_obj
from sandbox import CopyOutError, Sandbox, SandboxError
from tools._args import (
    EditFileArgs,
    GetTaskArgs,
    ListFilesArgs,
    ReadFileArgs,
    RunInSandboxArgs,
    SetFlagsArgs,
    SubmitArgs,
    WriteFileArgs,
)
from tools._models import TaskBrief, ToolOutcome
from tools._patch import EditError, apply_replacements, apply_unified_diff
from tools._schema import anthropic_definition, openai_definition

SubmitFn = Callable[[dict[str, bytes]], dict[str, Any]]


@dataclass(frozen=True)
class _Tool:
    name: str
    description: str
    args: type[BaseModel]
    run: Callable[[Any], ToolOutcome]


def _error(message: str) -> ToolOutcome:
    return ToolOutcome(content=f"error: {message}", is_error=True)


def _split_long_lines(lines: list[str], cap: int) -> list[str]:
    """``lines`` with every line over ``cap`` UTF-8 bytes cut into pieces of at most ``cap`` bytes.

    Why: ``read_file`` returns whole lines up to the output cap, so a single line over the cap (a
    64 KiB minified blob) could never be returned at all: each call answered "read on with
    start_line=N" for the same N (issue 27). A piece of a long line counts as a line for
    ``start_line``/``max_lines`` (files without such lines number as before); cuts fall on character
    boundaries, so the pieces concatenate to the original text.
    """
    out: list[str] = []
    for line in lines:
        raw = line.encode()
        if len(raw) <= cap:
            out.append(line)
            continue
        start = 0
        while start < len(raw):
            end = min(start + cap, len(raw))
            while end < len(raw) and end > start + 1 and (raw[end] & 0xC0) == 0x80:
                end -= 1            # never cut inside a character: back off to its first byte
            out.append(raw[start:end].decode())
            start = end
    return out


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class ToolBox:
    """The tools of one tuning run, bound to its sandbox, its task brief and the harness's ``submit``.

    ``submit(files)`` receives the workspace's copied-out files (path -> bytes) and returns the verdict
    summary the model sees. The list of tools is fixed at construction: ``set_flags`` is offered only
    for a task whose brief carries a flag space.
    """

    def __init__(self, sandbox: Sandbox, task_brief: TaskBrief | str, submit: SubmitFn) -> None:
        self.sandbox = sandbox
        self.brief = TaskBrief.coerce(task_brief)
        self._submit = submit
        self._read_cap = sandbox.limits.exec_output_cap_bytes
        tools = [
            _Tool("list_files", "List the files in the workspace (symbolic links are shown, never followed).",
                  ListFilesArgs, self._list_files),
            _Tool("read_file", "Read a text file from the workspace, optionally a range of lines.",
                  ReadFileArgs, self._read_file),
            _Tool("write_file", "Create or overwrite a file in the workspace with the given content.",
                  WriteFileArgs, self._write_file),
            _Tool("edit_file", "Edit a workspace file by exact text replacements or by a unified diff.",
                  EditFileArgs, self._edit_file),
            _Tool("run_in_sandbox",
                  "Run a shell command in the workspace inside the sandbox (no network) to smoke-test a "
                  "candidate. Any timing it prints is advisory: only the harness's measurement after "
                  "submit counts.",
                  RunInSandboxArgs, self._run_in_sandbox),
            _Tool("get_task", "Show the task: what to optimise, the reference, and what to deliver.",
                  GetTaskArgs, self._get_task),
            _Tool("submit",
                  f"Submit the workspace (it must contain {self.brief.candidate_file}) to the harness, which "
                  "checks and measures it outside the sandbox and returns the verdict.",
                  SubmitArgs, self._submit_tool),
        ]
        if self.brief.flag_space is not None:
            tools.append(_Tool(
                "set_flags",
                f"Set the {self.brief.flag_space.engine} launch flags to try: validated against the task's "
                f"flag space, then written to {self.brief.candidate_file}.",
                SetFlagsArgs, self._set_flags))
        self._tools = {t.name: t for t in tools}

    # -- definitions --------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def openai_tools(self) -> list[dict[str, Any]]:
        """Chat Completions ``tools=[{"type": "function", "function": {...}}]`` definitions."""
        return [openai_definition(t.name, t.description, t.args) for t in self._tools.values()]

    def anthropic_tools(self) -> list[dict[str, Any]]:
        """Messages API ``tools=[{"name", "description", "input_schema"}]`` definitions."""
        return [anthropic_definition(t.name, t.description, t.args) for t in self._tools.values()]

    # -- dispatch -----------------------------------------------------------------------------------
    def call(self, name: str, arguments: str | dict[str, Any] | None) -> ToolOutcome:
        """Run one tool call. Never raises: every failure is ``is_error=True`` with a message.

        What the model reads is redacted (:func:`harness.redact.redact`): a command's output, a file, an
        error or a verdict holding a URL's password or an API token is shown with ``<redacted>`` (issue 27).
        """
        outcome = self._call(name, arguments)
        return ToolOutcome(content=redact(outcome.content), is_error=outcome.is_error,
                           submitted=None if outcome.submitted is None else redact_obj(outcome.submitted))

    def _call(self, name: str, arguments: str | dict[str, Any] | None) -> ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            return _error(f"unknown tool {name!r}; the tools are: {', '.join(self._tools)}")
        if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            arguments = {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as exc:
                return _error(f"the arguments of {name} are not valid JSON ({exc.msg} at {exc.pos})")
        if not isinstance(arguments, dict):
            return _error(f"the arguments of {name} must be a JSON object, got {type(arguments).__name__}")
        try:
            args = tool.args.model_validate(arguments)
        except ValidationError as exc:
            return _error(f"bad arguments for {name}: {_validation_message(exc)}")
        try:
            return tool.run(args)
        except SandboxError as exc:
            return _error(str(exc))
        except Exception as exc:  # noqa: BLE001 - the contract: a tool call never kills the run
            return _error(f"{name} failed: {type(exc).__name__}: {exc}")

    # -- the tools ----------------------------------------------------------------------------------
    def _list_files(self, a: ListFilesArgs) -> ToolOutcome:
        entries, truncated = self.sandbox.list_files(a.path, a.recursive)
        if not entries:
            return ToolOutcome(content=f"{a.path}: empty")
        # e.shown: a name holding a newline is JSON-quoted, so one entry is always one line (issue 27)
        lines = [f"{e.shown}/" if e.kind == "dir" else
                 (f"{e.shown} (symbolic link, not followed)" if e.kind == "symlink" else
                  (f"{e.shown} ({e.size} bytes)" if e.kind == "file" else f"{e.shown} ({e.kind})"))
                 for e in entries]
        if truncated:
            lines.append(f"... listing truncated at {len(entries)} entries")
        return ToolOutcome(content="\n".join(lines))

    def _read_file(self, a: ReadFileArgs) -> ToolOutcome:
        data = self.sandbox.read_file(a.path)
        text = data.decode("utf-8", errors="replace")
        lines = _split_long_lines(text.splitlines(keepends=True), self._read_cap)
        if a.start_line > max(len(lines), 1):
            return _error(f"{a.path} has {len(lines)} lines; start_line {a.start_line} is past its end")
        chosen = lines[a.start_line - 1:] if a.max_lines is None else lines[a.start_line - 1:a.start_line - 1 + a.max_lines]
        out: list[str] = []
        used = 0
        for line in chosen:
            size = len(line.encode())
            if used + size > self._read_cap:
                last = a.start_line + len(out) - 1
                out.append(f"\n[... output capped at {self._read_cap} bytes after line {last}; "
                           f"read on with start_line={last + 1}]")
                break
            out.append(line)
            used += size
        return ToolOutcome(content="".join(out))

    def _write_file(self, a: WriteFileArgs) -> ToolOutcome:
        n = self.sandbox.write_file(a.path, a.content)
        return ToolOutcome(content=f"wrote {n} bytes to {a.path}")

    def _edit_file(self, a: EditFileArgs) -> ToolOutcome:
        raw = self.sandbox.read_file(a.path)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _error(f"{a.path} is not UTF-8 text; rewrite it with write_file")
        try:
            if a.replacements is not None:
                new, made = apply_replacements(text, a.replacements)
                what = f"{made} replacement(s)"
            else:
                assert a.patch is not None
                new, made = apply_unified_diff(text, a.patch)
                what = f"{made} hunk(s)"
        except EditError as exc:
            return _error(f"{a.path} unchanged: {exc}")
        self.sandbox.write_file(a.path, new)
        return ToolOutcome(content=f"edited {a.path}: {what}, now {len(new.encode())} bytes")

    def _run_in_sandbox(self, a: RunInSandboxArgs) -> ToolOutcome:
        r = self.sandbox.exec(a.command, timeout_s=a.timeout_s)
        head = "timed out" if r.timed_out else f"exit code {r.exit_code}"
        parts = [f"{head} (wall time {r.duration_s:.2f} s, advisory: it never enters a verdict)"]
        if r.note:
            parts.append(f"note: {r.note}")
        if r.stdout:
            parts.append("stdout:\n" + r.stdout)
        if r.stderr:
            parts.append("stderr:\n" + r.stderr)
        if r.truncated:
            parts.append(f"[output capped at {self.sandbox.limits.exec_output_cap_bytes} bytes per stream; "
                         f"{r.stdout_bytes} stdout / {r.stderr_bytes} stderr bytes were written]")
        return ToolOutcome(content="\n".join(parts), is_error=not r.ok)

    def _get_task(self, a: GetTaskArgs) -> ToolOutcome:
        parts = [self.brief.text]
        if self.brief.flag_space is not None:
            space = json.dumps(self.brief.flag_space.describe(), indent=1, sort_keys=True)
            parts.append(f"Tunable flags ({self.brief.flag_space.engine}); set them with set_flags:\n{space}")
        parts.append(f"Deliverable: {self.brief.candidate_file} in the workspace, then call submit.")
        return ToolOutcome(content="\n\n".join(parts))

    def _submit_tool(self, a: SubmitArgs) -> ToolOutcome:
        try:
            out = self.sandbox.copy_out()
        except CopyOutError as exc:
            return _error(f"nothing submitted: {exc}")
        if self.brief.candidate_file not in out.files:
            return _error(f"nothing submitted: the workspace has no regular file {self.brief.candidate_file!r} "
                          "(symbolic links are not copied out)")
        try:
            raw = self._submit(dict(out.files))
        except Exception as exc:  # noqa: BLE001 - a harness failure is reported, the run goes on
            return _error(f"the harness could not take the submission: {type(exc).__name__}: {exc}")
        summary = dict(raw) if isinstance(raw, dict) else {"result": raw}
        result = {"summary": summary, "workspace_sha256": out.sha256,
                  "files": {f.path: f.sha256 for f in out.manifest},
                  "skipped": [s.model_dump() for s in out.skipped]}
        return ToolOutcome(content=json.dumps(result, sort_keys=True, default=str), submitted=dict(summary))

    def _set_flags(self, a: SetFlagsArgs) -> ToolOutcome:
        from harness.engines._errors import FlagSpaceError
        from harness.engines.flags import render_config

        space = self.brief.flag_space
        assert space is not None
        try:
            config = space.validate_config(a.flags)
        except FlagSpaceError as exc:
            return _error(f"flags not set: {exc}")
        text = render_config(config)
        self.sandbox.write_file(self.brief.candidate_file, text)
        return ToolOutcome(content=f"wrote {self.brief.candidate_file}:\n{text}")
