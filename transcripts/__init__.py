"""Recorded transcripts: append-only, hash-chained JSON Lines of every model call's exact bytes, the
tool calls and results, the submissions and the harness's verdicts; and the transports that record
them and serve them back byte-for-byte. See ``_normalise`` for which headers are normalised and why.
"""

from transcripts._chain import Transcript, TranscriptWriter, read_transcript, verify_transcript
from transcripts._errors import (
    RecordingExhausted,
    RequestMismatch,
    TranscriptError,
    TranscriptFormatError,
    TranscriptTampered,
)
from transcripts._normalise import (
    ENVIRONMENT_HEADERS,
    PER_ATTEMPT_HEADERS,
    SECRET_HEADERS,
    compared_headers,
    normalise_request_headers,
)
from transcripts._records import (
    FORMAT,
    EndData,
    Envelope,
    HeaderData,
    HttpRequestRecord,
    HttpResponseRecord,
    IterationStartData,
    ModelCallData,
    ModelServerData,
    ModelTurnData,
    ResumeData,
    StoreCheckpointRef,
    SubmissionData,
    TEXT_PROTOCOL_FENCED_PYTHON,
    ToolCallData,
    TruncationData,
    VerdictData,
)
from transcripts._transport import (
    ExchangeSink,
    ReplayCursor,
    compare_request,
    recording_transport,
    replay_transport,
)

__all__ = [
    "ENVIRONMENT_HEADERS", "FORMAT", "PER_ATTEMPT_HEADERS", "SECRET_HEADERS", "EndData", "Envelope", "ExchangeSink",
    "HeaderData", "HttpRequestRecord", "HttpResponseRecord", "IterationStartData", "ModelCallData", "ModelServerData", "ModelTurnData",
    "RecordingExhausted", "StoreCheckpointRef", "ReplayCursor", "RequestMismatch", "ResumeData", "SubmissionData", "TEXT_PROTOCOL_FENCED_PYTHON", "ToolCallData",
    "Transcript", "TranscriptError", "TranscriptFormatError", "TranscriptTampered", "TranscriptWriter",
    "TruncationData", "VerdictData", "compare_request", "compared_headers", "normalise_request_headers",
    "read_transcript", "recording_transport", "replay_transport", "verify_transcript",
]
