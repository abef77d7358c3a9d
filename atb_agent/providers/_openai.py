"""OpenAI chat completions with tool calling, through the official SDK.

``base_url`` makes any OpenAI-compatible server (a locally served model, the test loopback server)
the tuner. The SDK gets an httpx2 client whose transport records (or replays) every exchange, and
``max_retries=0``, so a missing recording fails instead of being retried.
"""

from __future__ import annotations

import os
from typing import Any

from transcripts import ReplayCursor, TranscriptError

from atb_agent.errors import MissingApiKeyError, ProviderError
from atb_agent.providers._http import recording_client, replaying_client
from atb_agent.providers._types import ExchangeSink, Message, ModelTurn, ToolCallRequest, ToolSource
from atb_agent.truncation import assess_truncation

API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Neutral conversation -> chat-completions ``messages`` (deterministic)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "assistant":
            # content may be null only beside tool calls; an empty reply is sent back as ""
            msg: dict[str, Any] = {"role": "assistant", "content": m["text"] or (None if m["tool_calls"] else "")}
            if m["tool_calls"]:
                msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in m["tool_calls"]]
            out.append(msg)
        else:
            for r in m["results"]:
                out.append({"role": "tool", "tool_call_id": r["id"], "content": r["content"]})
    return out


class OpenAIProvider:
    """``openai:MODEL``. Raises MissingApiKeyError at construction when the key is unset (live mode) and
    no ``api_key`` is given (a model served here by ``atb model serve`` needs none: the tuner passes a
    placeholder)."""

    name = "openai"

    def __init__(self, model: str, *, sink: ExchangeSink, timeout_s: float, base_url: str | None = None,
                 replay: ReplayCursor | None = None, api_key: str | None = None) -> None:
        self.model = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        # extra request fields (a locally served model gets the run's seed and a temperature); part of
        # the request bytes, so a replay must set the same ones (the transcript header says which)
        self.request_options: dict[str, Any] = {}
        if replay is None:
            key = api_key or os.environ.get(API_KEY_ENV, "")
            if not key:
                raise MissingApiKeyError(API_KEY_ENV, "OpenAI")
            http_client = recording_client("openai", sink, timeout_s)
        else:
            key = "replay-needs-no-key"  # authorization is redacted in transcripts, so any value replays
            http_client = replaying_client("openai", replay, sink, timeout_s)
        import openai  # here, not at module level: the SDK takes ~1 s to import and a campaign
        # with a non-LLM tuner (random, grid) never builds this provider

        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0, timeout=timeout_s,
                                     http_client=http_client)

    def tool_definitions(self, tools: ToolSource) -> list[dict[str, Any]]:
        return tools.openai_tools()

    def complete(self, system: str, messages: list[Message], tools: list[dict[str, Any]],
                 max_output_tokens: int) -> ModelTurn:
        import openai

        try:
            raw = self._client.chat.completions.with_raw_response.create(
                model=self.model, messages=to_openai_messages(system, messages),  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
                max_completion_tokens=max_output_tokens, **self.request_options)
            completion = raw.parse()
        except openai.APIStatusError as exc:
            raise ProviderError(f"OpenAI API at {self.base_url} answered HTTP {exc.status_code}: {exc.message}") from exc
        except openai.APIConnectionError as exc:
            if isinstance(exc.__cause__, TranscriptError):
                raise exc.__cause__ from None
            raise ProviderError(f"cannot reach the OpenAI API at {self.base_url}: {exc.__cause__ or exc}") from exc
        except openai.OpenAIError as exc:
            raise ProviderError(f"OpenAI call failed: {exc}") from exc
        if not completion.choices:
            raise ProviderError(f"OpenAI API at {self.base_url} returned no choices")
        choice = completion.choices[0]
        text = choice.message.content or ""
        calls = [ToolCallRequest(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
                 for c in (choice.message.tool_calls or []) if c.type == "function"]
        usage = completion.usage
        out_tokens = usage.completion_tokens if usage else None
        produced = text + "".join(c.name + c.arguments for c in calls)
        truncation = assess_truncation(api="openai-chat", response_body=raw.http_response.content,
                                       requested_cap=max_output_tokens, model=self.model,
                                       usage_output_tokens=out_tokens, output_text=produced)
        return ModelTurn(text=text, tool_calls=calls, stop_reason=str(choice.finish_reason),
                         input_tokens=usage.prompt_tokens if usage else 0, output_tokens=out_tokens or 0,
                         truncation=truncation)

    def close(self) -> None:
        self._client.close()

