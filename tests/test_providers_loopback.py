"""The real OpenAI and Anthropic SDKs against the loopback server: tool calling, no retries, keys,
and truncation caught both from the API's own signal and from token counts."""

from __future__ import annotations

import pytest
from loopback import LoopbackServer, ScriptedCall, ScriptedTurn

from atb_agent.errors import MissingApiKeyError, ProviderError
from atb_agent.providers import AnthropicProvider, OpenAIProvider, sdk_http_module, to_anthropic_messages
from atb_agent.truncation import api_truncation_signal, assess_truncation, offline_encoding
from transcripts import HttpRequestRecord, HttpResponseRecord

TOOLS_OPENAI = [{"type": "function", "function": {"name": "write_file", "description": "w",
                 "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
TOOLS_ANTHROPIC = [{"name": "write_file", "description": "w",
                    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
MESSAGES = [{"role": "user", "content": "tune it"}]


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-anthropic")


def _provider(kind: str, srv: LoopbackServer, sink: list[tuple[HttpRequestRecord, HttpResponseRecord]]):
    def record(q: HttpRequestRecord, r: HttpResponseRecord) -> None:
        sink.append((q, r))

    if kind == "openai":
        return OpenAIProvider("gpt-4-scripted", sink=record, timeout_s=10, base_url=srv.openai_base_url), TOOLS_OPENAI
    return AnthropicProvider("claude-scripted", sink=record, timeout_s=10, base_url=srv.anthropic_base_url), TOOLS_ANTHROPIC


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_tool_calls_round_trip_and_are_recorded(kind: str) -> None:
    turns = [ScriptedTurn(text="writing", tool_calls=(ScriptedCall("write_file", {"path": "candidate.py"}),))]
    seen: list[tuple[HttpRequestRecord, HttpResponseRecord]] = []
    with LoopbackServer(turns) as srv:
        provider, tools = _provider(kind, srv, seen)
        turn = provider.complete("system text", MESSAGES, tools, 64)
        provider.close()
        path, body = srv.requests[0]
    assert turn.text == "writing"
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("write_file", '{"path": "candidate.py"}')]
    assert not turn.truncation.truncated
    assert len(seen) == 1 and seen[0][1].status == 200
    if kind == "openai":
        assert path == "/v1/chat/completions" and body["max_completion_tokens"] == 64
        assert body["messages"][0] == {"role": "system", "content": "system text"}
    else:
        assert path == "/v1/messages" and body["max_tokens"] == 64 and body["system"] == "system text"
    # the API key never reaches the transcript
    assert all(v == "<redacted>" for k, v in seen[0][0].headers if k in ("authorization", "x-api-key"))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_http_error_is_not_retried(kind: str) -> None:
    with LoopbackServer([]) as srv:          # an empty script answers 500
        provider, tools = _provider(kind, srv, [])
        with pytest.raises(ProviderError, match="HTTP 500"):
            provider.complete("s", MESSAGES, tools, 16)
        assert srv.served == 1               # max_retries=0: exactly one attempt


@pytest.mark.parametrize("kind,variable", [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")])
def test_a_missing_key_names_the_variable(kind: str, variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(variable)
    cls = OpenAIProvider if kind == "openai" else AnthropicProvider
    with pytest.raises(MissingApiKeyError, match=variable):
        cls("m", sink=lambda q, r: None, timeout_s=1)


@pytest.mark.parametrize("kind,signal", [("openai", "finish_reason=length"), ("anthropic", "stop_reason=max_tokens")])
def test_a_reply_cut_at_the_cap_is_truncated(kind: str, signal: str) -> None:
    with LoopbackServer([ScriptedTurn(text="def f(", truncate=True)]) as srv:
        provider, tools = _provider(kind, srv, [])
        turn = provider.complete("s", MESSAGES, tools, 32)
    assert turn.truncation.truncated and turn.truncation.api_signal == signal
    assert turn.truncation.usage_output_tokens == 32


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_token_count_at_the_cap_is_caught_when_the_api_says_nothing(kind: str) -> None:
    long_text = "word " * 40                 # about 40 tokens; the API claims a normal stop and 5 tokens
    with LoopbackServer([ScriptedTurn(text=long_text, output_tokens=5)]) as srv:
        provider, tools = _provider(kind, srv, [])
        turn = provider.complete("s", MESSAGES, tools, 16)
    t = turn.truncation
    assert t.truncated and t.api_signal == "" and t.usage_output_tokens == 5
    assert t.tiktoken_output_tokens is not None and t.tiktoken_output_tokens >= 16
    assert any("tiktoken" in r for r in t.reasons)


def test_api_signals_of_all_three_formats() -> None:
    assert api_truncation_signal("openai-chat", b'{"choices":[{"finish_reason":"length"}]}') == "finish_reason=length"
    assert api_truncation_signal("openai-chat", b'{"choices":[{"finish_reason":"stop"}]}') == ""
    assert api_truncation_signal("openai-responses", b'{"status":"incomplete","incomplete_details":'
                                 b'{"reason":"max_output_tokens"}}') == "status=incomplete(max_output_tokens)"
    assert api_truncation_signal("openai-responses", b'{"status":"incomplete","incomplete_details":'
                                 b'{"reason":"content_filter"}}') == ""
    assert api_truncation_signal("anthropic-messages", b'{"stop_reason":"model_context_window_exceeded"}') \
        == "stop_reason=model_context_window_exceeded"
    assert api_truncation_signal("anthropic-messages", b'{"stop_reason":"pause_turn"}') == ""
    assert api_truncation_signal("anthropic-messages", b"<html>bad gateway</html>") == ""


def test_tiktoken_loads_offline_and_marks_approximations(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    enc = offline_encoding()
    assert enc.name == "cl100k_base" and enc.encode("hello world") == [15339, 1917]
    exact = assess_truncation(api="openai-chat", response_body=b"{}", requested_cap=100, model="gpt-4-0613",
                              usage_output_tokens=3, output_text="hi")
    approx = assess_truncation(api="anthropic-messages", response_body=b"{}", requested_cap=100, model="claude-x",
                               usage_output_tokens=3, output_text="hi")
    assert exact.tiktoken_exact and not approx.tiktoken_exact and not exact.truncated


def test_both_sdks_are_given_the_http_package_they_use() -> None:
    import httpx2

    # anthropic 2.x moved to httpx2 and refuses an httpx client; the provider asks the SDK.
    assert sdk_http_module("openai") is httpx2
    assert sdk_http_module("anthropic").__name__ in ("httpx", "httpx2")


def test_anthropic_messages_merge_user_side_turns() -> None:
    msgs = [{"role": "user", "content": "a"},
            {"role": "assistant", "text": "", "tool_calls": [{"id": "t1", "name": "submit", "arguments": "{}"}]},
            {"role": "tool", "results": [{"id": "t1", "content": "ok", "is_error": False}]},
            {"role": "user", "content": "next"}]
    out = to_anthropic_messages(msgs)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert [b["type"] for b in out[2]["content"]] == ["tool_result", "text"]
