"""Writing, reading and verifying the append-only hash-chained transcript file."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from transcripts._errors import TranscriptError, TranscriptFormatError, TranscriptTampered
from transcripts._records import (
    GENESIS,
    EndData,
    Envelope,
    HeaderData,
    ModelCallData,
    ResumeData,
    SubmissionData,
    ToolCallData,
    VerdictData,
    canonical,
    record_hash,
)

_D = TypeVar("_D", bound=BaseModel)


class _Chained(Protocol):
    """A verified record of a hash-chained log: all the writer needs of it is its hash."""

    @property
    def hash(self) -> str: ...


def _parse_lines(path: Path) -> list[Envelope]:
    """Read and verify every line; raises TranscriptTampered at the first broken link."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TranscriptError(f"cannot read transcript {path}: {exc}") from exc
    records: list[Envelope] = []
    prev = GENESIS
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        try:
            env = Envelope.model_validate(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
            raise TranscriptTampered(str(path), number, f"not a transcript record ({type(exc).__name__})") from exc
        if env.seq != number - 1:
            raise TranscriptTampered(str(path), number, f"sequence number {env.seq}, expected {number - 1}")
        if env.prev != prev:
            raise TranscriptTampered(str(path), number, "prev does not match the previous record's hash")
        if record_hash(env.seq, env.kind, env.prev, env.data) != env.hash:
            raise TranscriptTampered(str(path), number, "the record's content does not match its hash")
        try:
            env.payload()
        except ValidationError as exc:
            raise TranscriptFormatError(f"{path}: line {number}: malformed {env.kind} record: {exc}") from exc
        records.append(env)
        prev = env.hash
    if records and records[0].kind != "header":
        raise TranscriptFormatError(f"{path}: the first record must be the header, found {records[0].kind}")
    return records


class TranscriptWriter:
    """Append-only writer. Each record is flushed and fsynced before ``append`` returns.

    Opening an existing file verifies its chain and continues it (a resumed run appends to the
    transcript of the run it resumes). Another hash-chained log of the same envelope (the MCP call log)
    reuses it by naming its own reader in ``_read_existing``, which must verify the chain it reads.
    """

    _read_existing: Callable[[Path], Sequence[_Chained]] = staticmethod(_parse_lines)

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = self._read_existing(self.path) if self.path.exists() and self.path.stat().st_size else []
        self.existing = existing
        self._seq = len(existing)
        self._prev = existing[-1].hash if existing else GENESIS

    @property
    def next_seq(self) -> int:
        return self._seq

    def append(self, kind: str, data: BaseModel) -> int:
        """Append one record and return its sequence number."""
        payload = data.model_dump(mode="json")
        with self._lock:
            seq = self._seq
            digest = record_hash(seq, kind, self._prev, payload)
            line = canonical({"seq": seq, "kind": kind, "prev": self._prev, "data": payload, "hash": digest})
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            self._seq = seq + 1
            self._prev = digest
        return seq


class Transcript:
    """A verified transcript. Records voided by a ``resume`` record are excluded from ``live``."""

    def __init__(self, path: Path, records: list[Envelope]) -> None:
        self.path = path
        self.records = records
        void: set[int] = set()
        for env in records:
            if env.kind == "resume":
                r = ResumeData.model_validate(env.data)
                void.update(range(r.abandoned_from, r.abandoned_to + 1))
        self.voided = void
        self.live = [e for e in records if e.seq not in void and e.kind != "resume"]

    @property
    def header(self) -> HeaderData:
        if not self.records:
            raise TranscriptFormatError(f"{self.path} is empty")
        return HeaderData.model_validate(self.records[0].data)

    def of_kind(self, kind: str, model: type[_D]) -> list[_D]:
        return [model.model_validate(e.data) for e in self.live if e.kind == kind]

    def model_calls(self) -> list[ModelCallData]:
        return self.of_kind("model_call", ModelCallData)

    def tool_calls(self) -> list[ToolCallData]:
        return self.of_kind("tool_call", ToolCallData)

    def submissions(self) -> list[SubmissionData]:
        return self.of_kind("submission", SubmissionData)

    def verdicts(self) -> list[VerdictData]:
        return self.of_kind("verdict", VerdictData)

    @property
    def end(self) -> EndData | None:
        ends = self.of_kind("end", EndData)
        return ends[-1] if ends else None


def read_transcript(path: Path | str) -> Transcript:
    """Read and verify a transcript.

    Raises:
        TranscriptError: the file cannot be read.
        TranscriptTampered: the hash chain is broken (an edited, dropped or inserted line).
        TranscriptFormatError: a record is well chained but malformed, or the header is missing.
    """
    p = Path(path)
    return Transcript(p, _parse_lines(p))


def verify_transcript(path: Path | str) -> int:
    """Verify the chain and return the number of records; raises like :func:`read_transcript`."""
    return len(read_transcript(path).records)


__all__ = ["Transcript", "TranscriptWriter", "read_transcript", "verify_transcript"]
