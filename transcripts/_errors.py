"""Errors of the transcripts package (it imports nothing of the agent, so it has its own).

Every one names a transcript the user gave and what is wrong with it, so the base class carries the
CLI's ``user_fixable`` marker: one line, exit 2, no traceback.
"""

from __future__ import annotations

from typing import ClassVar


class TranscriptError(Exception):
    """Base class: a transcript cannot be read, written or trusted."""

    user_fixable: ClassVar[bool] = True


class TranscriptFormatError(TranscriptError):
    """A line is not a transcript record (bad JSON, unknown kind, wrong shape)."""


class TranscriptTampered(TranscriptError):
    """The hash chain is broken: a record was edited, removed, reordered or inserted.

    ``line`` is the 1-based line number of the first record that fails verification.
    """

    def __init__(self, path: str, line: int, detail: str) -> None:
        self.path = path
        self.line = line
        super().__init__(f"{path}: line {line}: {detail}; the transcript was modified after it was written "
                         "and cannot be replayed or trusted")


class RequestMismatch(TranscriptError):
    """During replay, a request differs from the recorded one (``field`` says which part)."""

    def __init__(self, call_index: int, field: str, detail: str) -> None:
        self.call_index = call_index
        self.field = field
        self.detail = detail
        super().__init__(f"model call #{call_index}: request field {field} differs from the recording: {detail}")


class RecordingExhausted(TranscriptError):
    """During replay, the run made more model calls than were recorded."""

    def __init__(self, call_index: int, recorded: int) -> None:
        self.call_index = call_index
        super().__init__(f"model call #{call_index} has no recording: the transcript holds {recorded} calls")
