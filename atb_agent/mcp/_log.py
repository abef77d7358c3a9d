"""The MCP call log: an append-only, hash-chained JSON Lines file of every tool call an external agent made.

An MCP run has no model transcript (the harness never sees the agent's model calls), so this log is
what is kept instead: who the client was, each call's arguments, its result, when it started and how
long it took, and the harness's verdict for each ``submit``. The chain is the transcripts' own
(``transcripts._records.record_hash`` over ``{seq, kind, prev, data}``, ``prev`` = previous line's hash,
64 zeros first), so an edited, dropped, inserted or reordered line is caught on read exactly as for a
transcript; only the record kinds differ, which is why this is a separate file format
(``atb-mcp-log/1``) rather than transcript records with fields left empty.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from transcripts._chain import TranscriptWriter
from transcripts._records import GENESIS, record_hash

from atb_agent.errors import AgentError
from atb_agent.mcp._workspace import WORKSPACE_CHANGERS

MCP_LOG_FORMAT: Literal["atb-mcp-log/1"] = "atb-mcp-log/1"

LogKind = Literal["header", "client", "tool_call", "resume", "end"]


class McpLogError(AgentError):
    """The call log cannot be read, or is not an MCP call log."""


class McpLogTampered(McpLogError):
    """The call log's hash chain is broken at ``line`` (an edited, dropped or inserted line)."""

    def __init__(self, path: str, line: int, detail: str) -> None:
        self.path, self.line, self.detail = path, line, detail
        super().__init__(f"{path}: line {line}: {detail}; the MCP call log was altered after it was written")


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LogHeader(_Data):
    """What the run was: the task, budget and seed, the campaign, the protocol and the tools offered."""

    format: Literal["atb-mcp-log/1"] = MCP_LOG_FORMAT
    task: str
    task_brief: str
    budget: int
    seed: int
    campaign_id: str
    tuner_spec: str = Field(description="mcp:<client name>/<client version>, from the client's initialize")
    protocol_version: str
    protocol_sha256: str
    tool_definitions_sha256: str
    sandbox_backend: str
    measure_backend: str
    created_at: str


class ClientRecord(_Data):
    """A client connection that claimed (or rejoined) the campaign."""

    name: str
    version: str
    protocol_version: str
    transport: str
    seen_at: str


class ToolCallRecord(_Data):
    """One ``tools/call``: what was asked, what was answered, and how long it took.

    ``ran`` is False for a call refused before it reached the tools (budget spent); replay skips those.
    ``iteration`` is the campaign iteration the call belongs to (the one its ``submit`` would record).
    ``verdict`` is the harness's summary for a ``submit`` that recorded an iteration.
    """

    call_index: int
    iteration: int
    client: str
    name: str
    arguments: Any
    content: list[str]
    is_error: bool
    ran: bool
    started_at: str
    duration_s: float
    submitted_files: dict[str, str] | None = None
    verdict: dict[str, Any] | None = None
    workspace_sha256: str | None = Field(
        default=None, description="for a call that can change the workspace and ran: the digest of the workspace's "
                                  "regular files after it (``manifest_sha256``), as kept in the workspace folder")


class ResumeRecord(_Data):
    """Another server process took the campaign up (``--resume``, a client passing ``campaign``, or a
    per-call client's next call). ``workspace`` says how its fresh sandbox got the workspace: ``kept``
    (loaded from the workspace folder, whose digest was the last one logged) or ``rebuilt`` (the
    ``write_file``/``edit_file``/``set_flags`` calls logged before this record, re-applied in order)."""

    resumed_at: str
    iterations_recorded: int
    restored_calls: int
    workspace: Literal["kept", "rebuilt"] = "rebuilt"
    workspace_sha256: str | None = None
    why_rebuilt: str = ""


class EndRecord(_Data):
    status: str
    iterations: int
    tool_calls: int
    reason: str = ""


_MODELS: dict[str, type[_Data]] = {"header": LogHeader, "client": ClientRecord, "tool_call": ToolCallRecord,
                                   "resume": ResumeRecord, "end": EndRecord}


class LogEntry(BaseModel):
    """One verified line of the log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int = Field(ge=0)
    kind: LogKind
    prev: str = Field(pattern=r"^[0-9a-f]{64}$")
    data: dict[str, Any]
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")

    def payload(self) -> _Data:
        return _MODELS[self.kind].model_validate(self.data)


def _parse(path: Path) -> list[LogEntry]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise McpLogError(f"cannot read the MCP call log {path}: {exc}") from exc
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out: list[LogEntry] = []
    prev = GENESIS
    for number, line in enumerate(lines, start=1):
        try:
            entry = LogEntry.model_validate(json.loads(line))
            entry.payload()
        except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
            raise McpLogTampered(str(path), number, f"not an MCP call log record ({type(exc).__name__})") from exc
        if entry.seq != number - 1:
            raise McpLogTampered(str(path), number, f"sequence number {entry.seq}, expected {number - 1}")
        if entry.prev != prev:
            raise McpLogTampered(str(path), number, "prev does not match the previous record's hash")
        if record_hash(entry.seq, entry.kind, entry.prev, entry.data) != entry.hash:
            raise McpLogTampered(str(path), number, "the record's content does not match its hash")
        out.append(entry)
        prev = entry.hash
    if out and out[0].kind != "header":
        raise McpLogError(f"{path}: the first record must be the header, found {out[0].kind}")
    return out


def is_mcp_log(path: Path | str) -> bool:
    """Whether ``path`` starts like an MCP call log (cheap: reads the first line only, verifies nothing)."""
    try:
        with Path(path).open("rb") as fh:
            first = json.loads(fh.readline())
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and first.get("kind") == "header" and \
        isinstance(first.get("data"), dict) and first["data"].get("format") == MCP_LOG_FORMAT


class CallLogWriter(TranscriptWriter):
    """Append-only writer: the transcript's writer (same envelope, same hash chain, flushed and fsynced
    per record) over the call log's own records. Opening an existing log verifies its chain and
    continues it (a resumed campaign appends to its own log)."""

    _read_existing = staticmethod(_parse)


class CallLog:
    """A verified MCP call log."""

    def __init__(self, path: Path, entries: list[LogEntry]) -> None:
        self.path = path
        self.entries = entries

    @property
    def header(self) -> LogHeader:
        if not self.entries:
            raise McpLogError(f"{self.path} is empty")
        return LogHeader.model_validate(self.entries[0].data)

    def tool_calls(self) -> list[ToolCallRecord]:
        return [ToolCallRecord.model_validate(e.data) for e in self.entries if e.kind == "tool_call"]

    def clients(self) -> list[ClientRecord]:
        return [ClientRecord.model_validate(e.data) for e in self.entries if e.kind == "client"]

    def segments(self) -> list[list[ToolCallRecord]]:
        """The tool calls split at each ``resume`` record: each segment ran in a workspace of its own."""
        return [calls for _, calls in self.resumed_segments()]

    def resumed_segments(self) -> list[tuple[ResumeRecord | None, list[ToolCallRecord]]]:
        """Like :meth:`segments`, each with the ``resume`` record that started it (None for the first)."""
        out: list[tuple[ResumeRecord | None, list[ToolCallRecord]]] = [(None, [])]
        for e in self.entries:
            if e.kind == "resume":
                out.append((ResumeRecord.model_validate(e.data), []))
            elif e.kind == "tool_call":
                out[-1][1].append(ToolCallRecord.model_validate(e.data))
        return out

    def last_workspace_sha256(self, empty: str) -> str | None:
        """The workspace digest after the last logged event that set it: ``empty`` (the digest of an empty
        workspace) while no call that can change it has run; None when the last such event did not say
        (a log written before workspaces were kept, or a workspace too large to keep)."""
        current: str | None = empty
        for e in self.entries:
            if e.kind == "resume":
                current = ResumeRecord.model_validate(e.data).workspace_sha256
            elif e.kind == "tool_call":
                c = ToolCallRecord.model_validate(e.data)
                if c.ran and c.name in WORKSPACE_CHANGERS:
                    current = c.workspace_sha256
        return current

    @property
    def end(self) -> EndRecord | None:
        ends = [EndRecord.model_validate(e.data) for e in self.entries if e.kind == "end"]
        return ends[-1] if ends else None


def read_call_log(path: Path | str) -> CallLog:
    """Read and verify an MCP call log.

    Raises:
        McpLogError: the file cannot be read, is empty or does not start with a header.
        McpLogTampered: the hash chain is broken, or a line is not a record of this format.
    """
    p = Path(path)
    entries = _parse(p)
    if not entries:
        raise McpLogError(f"{p} is empty: not an MCP call log")
    return CallLog(p, entries)


__all__ = ["MCP_LOG_FORMAT", "CallLog", "CallLogWriter", "ClientRecord", "EndRecord", "LogEntry", "LogHeader",
           "McpLogError", "McpLogTampered", "ResumeRecord", "ToolCallRecord", "is_mcp_log", "read_call_log"]
