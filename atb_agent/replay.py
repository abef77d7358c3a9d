"""Replaying a transcript: the same SDK code path, fed the recorded bytes, checked at every step.

What replay checks, in order of the run:

* every model request is byte-identical to the recorded one after header normalisation
  (``transcripts._normalise``); the first difference raises :class:`ReplayDivergence` naming the call
  index and the field (``body.messages[3].content``, ``url``, ``header:NAME``...);
* the model's tool calls (which come from the recorded responses) are the recorded ones, and they are
  executed again in a fresh workspace; the recorded tool results are what the model is shown (so the
  requests stay identical) and any difference in a re-executed result is reported, not fatal;
* the files submitted at each iteration hash-equal the recorded ones (a difference is a divergence);
* with recorded measurement the recorded verdicts are served and must be reproduced exactly; with
  fresh measurement the harness measures each submission again and the report says how verdicts moved
  (the model is still shown the recorded verdicts, so its requests stay byte-identical);
* the run makes exactly as many model calls as were recorded.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from transcripts import (
    RecordingExhausted,
    ReplayCursor,
    RequestMismatch,
    SubmissionData,
    ToolCallData,
    Transcript,
    TranscriptWriter,
    read_transcript,
)

from atb_agent.errors import ReplayDivergence
from atb_agent.evaluation import Evaluator, MemoryIterationSink, VerdictSummary, file_hashes
from atb_agent.graph import SubmissionInbox, ToolBoxLike
from atb_agent.tuners import TuningEnvironment, graph_tuner_from_header

ToolBoxFactory = Callable[[SubmissionInbox, str], ToolBoxLike]  # (submit callback, task brief) -> toolbox


class ReplayedOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str
    is_error: bool
    submitted: dict[str, Any] | None = None


def _arguments_text(arguments: str | dict[str, Any]) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True)


class ReplayToolBox:
    """Runs each tool call for real (to rebuild the workspace) but answers with the recorded result."""

    def __init__(self, inner: ToolBoxLike, recorded: list[ToolCallData]) -> None:
        self.inner = inner
        self.recorded = recorded
        self.position = 0
        self.output_differences: list[str] = []

    def openai_tools(self) -> list[dict[str, Any]]:
        return self.inner.openai_tools()

    def anthropic_tools(self) -> list[dict[str, Any]]:
        return self.inner.anthropic_tools()

    def call(self, name: str, arguments: str | dict[str, Any]) -> ReplayedOutcome:
        """Raises ReplayDivergence when the call is not the next recorded one."""
        index = self.position
        if index >= len(self.recorded):
            raise ReplayDivergence(-1, f"tool call #{index}", f"the replay made a tool call {name!r} beyond the "
                                   f"{len(self.recorded)} recorded")
        want = self.recorded[index]
        args = _arguments_text(arguments)
        if (want.name, want.arguments) != (name, args):
            raise ReplayDivergence(-1, f"tool call #{index}", f"recorded {want.name}({want.arguments[:120]}), "
                                   f"replayed {name}({args[:120]})")
        self.position = index + 1
        real = self.inner.call(name, arguments)
        if (real.content, real.is_error) != (want.content, want.is_error):
            self.output_differences.append(f"tool call #{index} ({name}, iteration {want.iteration}): the re-executed "
                                           "result differs from the recorded one")
        return ReplayedOutcome(content=want.content, is_error=want.is_error, submitted=real.submitted)


class RecordedEvaluator:
    """Serves the recorded verdicts ("replay with recorded measurement")."""

    def __init__(self, transcript: Transcript) -> None:
        self.by_iteration = {v.iteration: VerdictSummary.model_validate(v.verdict) for v in transcript.verdicts()}

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        if iteration not in self.by_iteration:
            raise ReplayDivergence(-1, f"verdict of iteration {iteration}", "the transcript records no verdict for it")
        return self.by_iteration[iteration]


class FreshEvaluator:
    """Re-measures each submission with the harness ("replay with fresh measurement") but answers the
    graph with the recorded verdict: the model must be shown what it was shown, or every later request
    would differ. The fresh verdicts are kept for the report."""

    def __init__(self, harness: Evaluator, recorded: RecordedEvaluator) -> None:
        self.harness = harness
        self.recorded = recorded
        self.fresh: dict[int, VerdictSummary] = {}

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        self.fresh[iteration] = self.harness.evaluate(iteration, files)
        return self.recorded.evaluate(iteration, files)


class ReplayTunerEvaluator:
    """``replay:PATH`` as a tuner: every submission is measured afresh by the harness (that verdict is
    what the campaign stores), but the model is shown the verdict text it was shown when the transcript
    was recorded, so its next request stays byte-identical to the recording."""

    def __init__(self, harness: Evaluator, recorded: RecordedEvaluator) -> None:
        self.harness = harness
        self.recorded = recorded

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        fresh = self.harness.evaluate(iteration, files)
        shown = self.recorded.evaluate(iteration, files).for_model()
        return fresh.model_copy(update={"shown_to_model": shown})


class CheckingEvaluator:
    """Checks each submission's file hashes against the recording, then delegates."""

    def __init__(self, inner: Evaluator, recorded: list[SubmissionData]) -> None:
        self.inner = inner
        self.by_iteration = {s.iteration: s for s in recorded}
        self.checked: list[int] = []

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        want = self.by_iteration.get(iteration)
        got = file_hashes(files)
        if want is None:
            raise ReplayDivergence(-1, f"workspace files of iteration {iteration}", "the recording has no submission here")
        if want.files != got:
            changed = sorted(p for p in set(want.files) | set(got) if want.files.get(p) != got.get(p))
            raise ReplayDivergence(-1, f"workspace files of iteration {iteration}",
                                   f"files whose hashes differ from the recording: {changed}")
        self.checked.append(iteration)
        return self.inner.evaluate(iteration, files)


class VerdictMove(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    iteration: int
    recorded_status: str
    replayed_status: str
    recorded_speedup: float | None
    replayed_speedup: float | None
    speedup_change: float | None = Field(default=None, description="replayed / recorded - 1")
    status_changed: bool
    moved: bool = Field(description="the status changed, or the speedup moved by more than protocol.noise.noise_floor")


class ReplayReport(BaseModel):
    """What ``atb replay`` prints."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    transcript: str
    scripted: bool
    provider: str
    model: str
    measurement: str = Field(description="recorded | fresh")
    records: int
    model_calls: int
    requests_identical: int
    tool_calls: int
    tool_output_differences: list[str]
    submissions_checked: int
    verdicts: list[VerdictMove]
    verdicts_reproduced: bool
    environment_differences: list[str]
    protocol_sha256_recorded: str
    protocol_sha256_now: str = Field(description="the protocol fresh measurement used (differs: verdicts may move)")


def replay_transcript(path: Path | str, *, toolbox_factory: ToolBoxFactory, fresh_evaluator: Evaluator | None = None,
                      workdir: Path | None = None) -> ReplayReport:
    """Replay ``path`` and return the report; ``fresh_evaluator`` re-measures (else recorded verdicts).

    Raises:
        TranscriptTampered / TranscriptFormatError: the file fails verification (an edited transcript).
        ReplayDivergence: a request, tool call, file or verdict differs from the recording.
    """
    from protocol import load_protocol

    transcript = read_transcript(path)
    header = transcript.header
    if header.provider not in ("openai", "anthropic"):
        raise ReplayDivergence(-1, "header.provider", f"cannot replay provider {header.provider!r} "
                               "(only openai and anthropic transcripts replay through an SDK)")
    if transcript.end is None:
        raise ReplayDivergence(-1, "end record", f"{path} has no end record: the run it records did not finish "
                               "(resume it with `atb run ... --resume RUN`, then replay its transcript)")
    proto = load_protocol()
    cursor = ReplayCursor(transcript.model_calls())
    inbox = SubmissionInbox()
    tools = ReplayToolBox(toolbox_factory(inbox, header.task_brief), transcript.tool_calls())
    fresh = FreshEvaluator(fresh_evaluator, RecordedEvaluator(transcript)) if fresh_evaluator is not None else None
    checking = CheckingEvaluator(fresh or RecordedEvaluator(transcript), transcript.submissions())
    sink = MemoryIterationSink()
    with tempfile.TemporaryDirectory(prefix="atb-replay-", dir=workdir) as tmp:
        env = TuningEnvironment(
            campaign_id=f"{header.campaign_id}-replay", task_id=header.task, task_brief=header.task_brief,
            budget=header.budget, seed=header.seed, toolbox=tools, inbox=inbox, evaluator=checking, iterations=sink,
            transcript=TranscriptWriter(Path(tmp) / "replay.jsonl"), checkpoint_path=Path(tmp) / "checkpoints.sqlite",
            max_output_tokens=header.max_output_tokens,
            max_tool_calls_per_iteration=header.max_tool_calls_per_iteration,
            model_timeout_s=proto.agent.model_timeout_s, replay=cursor)
        tuner = graph_tuner_from_header(header.tuner_spec, header)
        try:
            tuner.run(env)
        except RequestMismatch as exc:
            detail = exc.detail
            if detail.startswith("body.tools"):
                detail += (" (the tool definitions differ from the recorded run's: it used another toolbox or "
                           "another version of the tools)")
            raise ReplayDivergence(exc.call_index, exc.field, detail) from exc
        except RecordingExhausted as exc:
            raise ReplayDivergence(exc.call_index, "number of model calls", str(exc)) from exc
    if not cursor.exhausted:
        raise ReplayDivergence(cursor.served, "number of model calls",
                               f"the replay made {cursor.served} calls, the recording holds {len(cursor.calls)}")
    if tools.position != len(tools.recorded):
        raise ReplayDivergence(-1, "number of tool calls",
                               f"the replay made {tools.position} tool calls, the recording holds {len(tools.recorded)}")
    moves = []
    recorded = {v.iteration: VerdictSummary.model_validate(v.verdict) for v in transcript.verdicts()}
    for idx, row in sorted(sink.rows.items()):
        now = fresh.fresh[idx] if fresh is not None else VerdictSummary.model_validate(row["verdict"])
        was = recorded[idx]
        change = (now.speedup / was.speedup - 1.0) if now.speedup is not None and was.speedup else None
        status_changed = was.status != now.status
        speed_moved = (was.speedup is None) != (now.speedup is None) or (
            change is not None and abs(change) > proto.noise.noise_floor)
        moves.append(VerdictMove(iteration=idx, recorded_status=was.status, replayed_status=now.status,
                                 recorded_speedup=was.speedup, replayed_speedup=now.speedup, speedup_change=change,
                                 status_changed=status_changed, moved=status_changed or speed_moved))
    reproduced = not any(m.moved for m in moves) and len(moves) == len(recorded)
    if fresh_evaluator is None and not reproduced:
        raise ReplayDivergence(-1, "verdicts", "the recorded verdicts were not reproduced: " +
                               "; ".join(f"iteration {m.iteration}" for m in moves if m.moved))
    return ReplayReport(
        ok=True, transcript=str(path), scripted=header.scripted, provider=header.provider, model=header.model,
        measurement="fresh" if fresh_evaluator is not None else "recorded", records=len(transcript.records),
        model_calls=len(cursor.calls), requests_identical=cursor.served, tool_calls=tools.position,
        tool_output_differences=tools.output_differences, submissions_checked=len(checking.checked), verdicts=moves,
        verdicts_reproduced=reproduced, environment_differences=cursor.environment_differences,
        protocol_sha256_recorded=header.protocol_sha256, protocol_sha256_now=proto.sha256)


def replay_mcp_log(path: Path | str, *, toolbox_factory: Callable[..., Any], evaluator: Evaluator) -> Any:
    """The MCP branch of ``atb replay``: an MCP call log (``atb mcp serve``) has no model calls to serve back,
    so its tool calls are re-executed against a fresh sandbox (``toolbox_factory(submit, brief)``) and
    every submission measured afresh by ``evaluator``. Returns an ``atb_agent.mcp.McpReplayReport``.

    Raises:
        McpLogError / McpLogTampered: the log cannot be read or fails verification.
        ReplayDivergence: a submission's files differ from the logged ones.
    """
    from atb_agent.mcp._replay import replay_call_log

    return replay_call_log(path, toolbox_factory=toolbox_factory, evaluator=evaluator)


__all__ = ["CheckingEvaluator", "FreshEvaluator", "RecordedEvaluator", "ReplayReport", "ReplayToolBox", "ReplayedOutcome",
           "ToolBoxFactory", "VerdictMove", "replay_transcript"]
