"""Anthropic messages with tool use, through the official SDK.

The SDK is given a client of the HTTP package it uses (httpx2 for anthropic 2.x; see ``_http``)
whose transport records or replays, and ``max_retries=0``. ``pause_turn`` (a server-tool pause) is
reported as the stop reason; the graph then ends the iteration as for any turn without tool calls.
"""

from __future__ import annotations

import json
import os
from typing import Any

from transcripts import ReplayCursor, TranscriptError

from atb_agent.errors import MissingApiKeyError, ProviderError
from atb_agent.providers._http import recording_client, replaying_client
from atb_agent.providers._types import ExchangeSink, Message, ModelTurn, ToolCallRequest, ToolSource
from atb_agent.truncation import assess_truncation

API_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_BASE_URL = "https://api.anthropic.com"
EMPTY_REPLY = "[empty reply]"


def _tool_input(arguments: str) -> dict[str, Any]:
    """The ``input`` object of a tool_use block echoed back; unparsable arguments become {}."""
    try:
        value = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Neutral conversation -> messages API ``messages``; consecutive user-side turns are merged into
    one user message (tool results first, then text), as the API expects alternating roles."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant":
            blocks: list[dict[str, Any]] = []
            if m["text"]:
                blocks.append({"type": "text", "text": m["text"]})
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": _tool_input(c["arguments"])}
                       for c in m["tool_calls"]]
            # the API refuses empty text blocks: an empty reply is echoed as a marked placeholder
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": EMPTY_REPLY}]})
            continue
        if m["role"] == "user":
            new = [{"type": "text", "text": m["content"]}]
        else:
            new = [{"type": "tool_result", "tool_use_id": r["id"], "content": r["content"], "is_error": r["is_error"]}
                   for r in m["results"]]
        if out and out[-1]["role"] == "user":
            out[-1]["content"].extend(new)
        else:
            out.append({"role": "user", "content": new})
    return out


class AnthropicProvider:
    """``anthropic:MODEL``. Raises MissingApiKeyError at construction when the key is unset (live mode)."""

    name = "anthropic"

    def __init__(self, model: str, *, sink: ExchangeSink, timeout_s: float, base_url: str | None = None,
                 replay: ReplayCursor | None = None) -> None:
        self.model = model
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        if replay is None:
            key = os.environ.get(API_KEY_ENV, "")
            if not key:
                raise MissingApiKeyError(API_KEY_ENV, "Anthropic")
            http_client = recording_client("anthropic", sink, timeout_s)
        else:
            key = "replay-needs-no-key"  # x-api-key is redacted in transcripts, so any value replays
            http_client = replaying_client("anthropic", replay, sink, timeout_s)
        import anthropic  # here, not at module level: the SDK takes ~1 s to import and a campaign
        # with a non-LLM tuner (random, grid) never builds this provider

        self._client = anthropic.Anthropic(api_key=key, base_url=self.base_url, max_retries=0, timeout=timeout_s,
                                           http_client=http_client)

    def tool_definitions(self, tools: ToolSource) -> list[dict[str, Any]]:
        return tools.anthropic_tools()

    def complete(self, system: str, messages: list[Message], tools: list[dict[str, Any]],
                 max_output_tokens: int) -> ModelTurn:
        import anthropic

        try:
            raw = self._client.messages.with_raw_response.create(
                model=self.model, system=system, messages=to_anthropic_messages(messages),  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
                max_tokens=max_output_tokens)
            message = raw.parse()
        except anthropic.APIStatusError as exc:
            raise ProviderError(f"Anthropic API at {self.base_url} answered HTTP {exc.status_code}: {exc.message}") from exc
        except anthropic.APIConnectionError as exc:
            if isinstance(exc.__cause__, TranscriptError):
                raise exc.__cause__ from None
            raise ProviderError(f"cannot reach the Anthropic API at {self.base_url}: {exc.__cause__ or exc}") from exc
        except anthropic.AnthropicError as exc:
            raise ProviderError(f"Anthropic call failed: {exc}") from exc
        text = "".join(b.text for b in message.content if b.type == "text")
        calls = [ToolCallRequest(id=b.id, name=b.name, arguments=json.dumps(b.input, sort_keys=True))
                 for b in message.content if b.type == "tool_use"]
        produced = text + "".join(c.name + c.arguments for c in calls)
        truncation = assess_truncation(api="anthropic-messages", response_body=raw.http_response.content,
                                       requested_cap=max_output_tokens, model=self.model,
                                       usage_output_tokens=message.usage.output_tokens, output_text=produced)
        return ModelTurn(text=text, tool_calls=calls, stop_reason=str(message.stop_reason),
                         input_tokens=message.usage.input_tokens, output_tokens=message.usage.output_tokens,
                         truncation=truncation)

    def close(self) -> None:
        self._client.close()
