"""Ending an iteration: take the submission (or submit the workspace as it stands), measure it.

Shared by the graph's ``submit`` node and by :class:`atb_agent.tuners.TuningEnvironment`, so a
third-party tuner's iterations end exactly as the built-in one's do.
"""

from __future__ import annotations

import base64
from typing import Any

from transcripts import SubmissionData, ToolCallData, TranscriptWriter, VerdictData

from atb_agent.evaluation import Evaluator, VerdictSummary, file_hashes

FORCED_CALL_ID = "forced-submit"


def encode_files(files: dict[str, bytes]) -> dict[str, str]:
    return {p: base64.b64encode(d).decode("ascii") for p, d in sorted(files.items())}


def decode_files(files_b64: dict[str, str]) -> dict[str, bytes]:
    return {p: base64.b64decode(d) for p, d in files_b64.items()}


def force_submission(toolbox: Any, inbox: Any, transcript: TranscriptWriter, iteration: int) -> dict[str, Any] | None:
    """Submit the workspace as it stands through the toolbox's own ``submit`` tool (recorded as a
    tool call with id ``forced-submit``). None when the toolbox could not submit."""
    outcome = toolbox.call("submit", {})
    transcript.append("tool_call", ToolCallData(
        iteration=iteration, call_id=FORCED_CALL_ID, name="submit", arguments="{}",
        content=outcome.content, is_error=outcome.is_error, submitted=outcome.submitted))
    files = inbox.take()
    return {"forced": True, "files_b64": encode_files(files)} if files is not None else None


def measure_submission(evaluator: Evaluator, transcript: TranscriptWriter, iteration: int,
                       submission: dict[str, Any] | None) -> VerdictSummary:
    """Record the submission's file hashes, have the evaluator judge it, record the verdict."""
    if submission is None:
        verdict = VerdictSummary(status="no_submission", reason="the iteration ended without a submission and "
                                 "the workspace could not be submitted")
    else:
        files = decode_files(submission["files_b64"])
        transcript.append("submission", SubmissionData(iteration=iteration, forced=submission["forced"],
                                                       files=file_hashes(files)))
        verdict = evaluator.evaluate(iteration, files)
    transcript.append("verdict", VerdictData(iteration=iteration, verdict=verdict.model_dump(mode="json")))
    return verdict
