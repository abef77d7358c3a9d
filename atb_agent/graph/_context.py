"""What the graph's nodes use but do not checkpoint: the provider, toolbox, evaluator, sinks.

It is passed as LangGraph's run-time context (``graph.invoke(..., context=ctx)``), never stored in
the state, so a resumed run rebuilds it and continues from the checkpointed state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from transcripts import HttpRequestRecord, HttpResponseRecord, ModelCallData, TranscriptWriter

from atb_agent.evaluation import Evaluator, IterationSink, file_hashes
from atb_agent.providers import Provider


class ToolOutcomeLike(Protocol):
    """Read-only, so the frozen models ``tools.ToolOutcome`` and ``ReplayedOutcome`` both implement it."""

    @property
    def content(self) -> str: ...

    @property
    def is_error(self) -> bool: ...

    @property
    def submitted(self) -> dict[str, Any] | None: ...


class ToolBoxLike(Protocol):
    """The part of ``tools.ToolBox`` the graph uses (see docs/contracts.md)."""

    def openai_tools(self) -> list[dict[str, Any]]: ...

    def anthropic_tools(self) -> list[dict[str, Any]]: ...

    def call(self, name: str, arguments: str | dict[str, Any]) -> ToolOutcomeLike: ...


class SubmissionInbox:
    """The ``submit`` callback given to the ToolBox: it takes the copied-out workspace files and
    holds them for the graph's ``submit`` node, which hands them to the harness.

    Measuring inside the tool call would let the model's turn continue around a verdict; holding the
    files makes a submission end the iteration, and keeps measurement in one named node.
    """

    def __init__(self) -> None:
        self.files: dict[str, bytes] | None = None

    def __call__(self, files: dict[str, bytes]) -> dict[str, Any]:
        self.files = dict(files)
        return {"received": True, "files": file_hashes(self.files),
                "note": "the harness measures this submission now; its verdict opens your next turn"}

    def take(self) -> dict[str, bytes] | None:
        files, self.files = self.files, None
        return files


class ExchangeRecorder:
    """The providers' transport sink: one ``model_call`` record per HTTP exchange, tagged with the
    iteration and call index that ``call_model`` set before calling."""

    def __init__(self, transcript: TranscriptWriter) -> None:
        self.transcript = transcript
        self.iteration = 0
        self.call_index = 0

    def __call__(self, request: HttpRequestRecord, response: HttpResponseRecord) -> None:
        self.transcript.append("model_call", ModelCallData(
            call_index=self.call_index, iteration=self.iteration, request=request, response=response))


@dataclass
class AgentContext:
    provider: Provider
    toolbox: ToolBoxLike
    inbox: SubmissionInbox
    evaluator: Evaluator
    iterations: IterationSink
    transcript: TranscriptWriter
    exchanges: ExchangeRecorder
    system_prompt: str
    task_brief: str
    max_output_tokens: int
    max_tool_calls_per_iteration: int
    tools: list[dict[str, Any]] = field(default_factory=list)
    text_protocol: str = ""               # "" (off) or the declared protocol, e.g. "fenced-python/1"
    candidate_file: str = "candidate.py"  # where the text protocol writes the fenced block
    prompt_variant: str = "standard"      # which observation text (see _prompts)
