"""Provider-neutral conversation and turn types.

The graph keeps the conversation in this neutral form (plain JSON, so it checkpoints); each provider
translates it to its wire format deterministically, so the same state always yields the same request
bytes (which replay depends on).

Messages are dicts of three shapes:

* ``{"role": "user", "content": str}``
* ``{"role": "assistant", "text": str, "tool_calls": [{"id", "name", "arguments"}]}``
  (``arguments`` is the model's raw JSON text)
* ``{"role": "tool", "results": [{"id", "content", "is_error"}]}``
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from transcripts import HttpRequestRecord, HttpResponseRecord, TruncationData

Message = dict[str, Any]
ExchangeSink = Callable[[HttpRequestRecord, HttpResponseRecord], None]


class ToolCallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    arguments: str


class ModelTurn(BaseModel):
    """One model call's parsed outcome."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    stop_reason: str
    input_tokens: int = 0
    output_tokens: int = 0
    truncation: TruncationData

    def assistant_message(self) -> Message:
        return {"role": "assistant", "text": self.text,
                "tool_calls": [c.model_dump() for c in self.tool_calls]}


class ToolSource(Protocol):
    """What a provider needs from a toolbox: the tool definitions in each wire format."""

    def openai_tools(self) -> list[dict[str, Any]]: ...

    def anthropic_tools(self) -> list[dict[str, Any]]: ...


class Provider(Protocol):
    """A model API behind an official SDK. ``complete`` makes exactly one HTTP call (retries off).

    Raises (from ``complete``):
        ProviderError: the API answered with an error or a malformed response, or was unreachable.
        transcripts.RequestMismatch / RecordingExhausted: during replay, the request diverged.
    """

    name: str
    model: str
    base_url: str

    def tool_definitions(self, tools: ToolSource) -> list[dict[str, Any]]: ...

    def complete(self, system: str, messages: list[Message], tools: list[dict[str, Any]],
                 max_output_tokens: int) -> ModelTurn: ...

    def close(self) -> None: ...
