"""Loopback model server (127.0.0.1, an ephemeral port) speaking two wire formats.

``POST /v1/chat/completions`` answers in OpenAI's chat-completions format, ``POST /v1/messages`` in
Anthropic's messages format. A request whose conversation holds N assistant turns is answered with
scripted turn N (so the server is stateless, and a repeated request gets the same answer). A turn
marked ``truncate`` answers as a reply cut off at the request's own cap (``finish_reason: length`` /
``stop_reason: max_tokens``, output tokens equal to the cap). Responses are deterministic (ids and
timestamps derive from the turn number), so a scripted run's transcript is reproducible. No
streaming: the providers do not stream. Every request body is kept in ``requests`` for assertions.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ScriptedCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ScriptedTurn:
    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = ()
    truncate: bool = False
    output_tokens: int = 12


@dataclass
class _State:
    turns: list[ScriptedTurn]
    served: int = 0
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _openai_body(n: int, turn: ScriptedTurn, request: dict[str, Any]) -> dict[str, Any]:
    cap = int(request.get("max_completion_tokens") or request.get("max_tokens") or 0)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{n}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments, sort_keys=True)}}
            for i, c in enumerate(turn.tool_calls)]
    finish = "length" if turn.truncate else ("tool_calls" if turn.tool_calls else "stop")
    out_tokens = cap if turn.truncate else turn.output_tokens
    return {"id": f"chatcmpl-loopback-{n}", "object": "chat.completion", "created": 1700000000 + n,
            "model": request.get("model", ""), "system_fingerprint": "loopback-scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 100 + n, "completion_tokens": out_tokens, "total_tokens": 100 + n + out_tokens}}


def _anthropic_body(n: int, turn: ScriptedTurn, request: dict[str, Any]) -> dict[str, Any]:
    cap = int(request.get("max_tokens") or 0)
    content: list[dict[str, Any]] = []
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    content += [{"type": "tool_use", "id": f"toolu_{n}_{i}", "name": c.name, "input": c.arguments}
                for i, c in enumerate(turn.tool_calls)]
    stop = "max_tokens" if turn.truncate else ("tool_use" if turn.tool_calls else "end_turn")
    out_tokens = cap if turn.truncate else turn.output_tokens
    return {"id": f"msg_loopback_{n}", "type": "message", "role": "assistant", "model": request.get("model", ""),
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 100 + n, "output_tokens": out_tokens}}


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr logging
        return

    def _send(self, status: int, body: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("content-length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        state = self.server.state
        path = self.path.split("?")[0]
        if path not in ("/v1/chat/completions", "/v1/messages"):
            self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        # The turn is chosen by how many assistant turns the conversation already holds, not by how
        # many requests came in: a resumed run that repeats a lost call gets the same answer again.
        n = sum(1 for m in request.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
        with state.lock:
            state.requests.append((path, request))
            state.served += 1
            turn = state.turns[n] if n < len(state.turns) else None
        if turn is None:
            self._send(500, {"error": {"message": f"the script has only {len(state.turns)} turns", "type": "script_exhausted"}})
        elif path == "/v1/chat/completions":
            self._send(200, _openai_body(n, turn, request), {"x-request-id": f"req_loopback_{n}"})
        else:
            self._send(200, _anthropic_body(n, turn, request), {"request-id": f"req_loopback_{n}"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: _State


class LoopbackServer:
    """Context manager: ``with LoopbackServer(turns) as srv: srv.openai_base_url ...``."""

    def __init__(self, turns: list[ScriptedTurn]) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = _State(turns=list(turns))
        self._thread = threading.Thread(target=self._server.serve_forever, name="loopback-model", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        return list(self._server.state.requests)

    @property
    def served(self) -> int:
        return self._server.state.served

    def __enter__(self) -> "LoopbackServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
