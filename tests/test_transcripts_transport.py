"""Recording and replay at the transport, for both httpx and httpx2, against a real loopback server."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType

import httpx
import httpx2
import pytest

from transcripts import (
    HttpRequestRecord,
    HttpResponseRecord,
    ModelCallData,
    RecordingExhausted,
    ReplayCursor,
    RequestMismatch,
    recording_transport,
    replay_transport,
)


class _Gzip(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["content-length"]))
        data = gzip.compress(json.dumps({"echo": json.loads(body)}).encode(), mtime=0)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-encoding", "gzip")
        self.send_header("content-length", str(len(data)))
        self.send_header("set-cookie", "session=secret")
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def url() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Gzip)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1/x"
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("http", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_record_then_replay_serves_the_same_bytes(http: ModuleType, url: str) -> None:
    seen: list[tuple[HttpRequestRecord, HttpResponseRecord]] = []
    live = http.Client(transport=recording_transport(http, http.HTTPTransport(), lambda q, r: seen.append((q, r))))
    r1 = live.post(url, json={"a": 1}, headers={"Authorization": "Bearer sk-live", "x-stainless-retry-count": "0"})
    assert r1.json() == {"echo": {"a": 1}}
    (req, resp), = seen
    assert req.body == b'{"a":1}' or json.loads(req.body) == {"a": 1}
    assert gzip.decompress(resp.body) == r1.content       # stored still encoded, exactly as on the wire
    assert "set-cookie" not in dict(resp.headers)
    assert dict(req.headers)["authorization"] == "<redacted>"

    cursor = ReplayCursor([ModelCallData(call_index=0, iteration=0, request=req, response=resp)])
    again = http.Client(transport=replay_transport(http, cursor))
    r2 = again.post(url, json={"a": 1}, headers={"Authorization": "Bearer other", "x-stainless-retry-count": "3"})
    assert r2.content == r1.content and r2.status_code == 200
    assert cursor.exhausted
    with pytest.raises(RecordingExhausted):
        again.post(url, json={"a": 1})


def _call(body: dict[str, object], url: str = "http://h/v1/chat/completions") -> ModelCallData:
    """Record one real exchange through an httpx2 client (against an in-process mock server)."""
    seen: list[ModelCallData] = []
    inner = httpx2.MockTransport(lambda request: httpx2.Response(200, json={}))
    client = httpx2.Client(transport=recording_transport(
        httpx2, inner, lambda q, r: seen.append(ModelCallData(call_index=0, iteration=0, request=q, response=r))))
    client.post(url, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
    return seen[0]


def test_a_different_body_names_the_json_path() -> None:
    cursor = ReplayCursor([_call({"model": "m", "messages": [{"role": "user", "content": "hi"}]})])
    client = httpx2.Client(transport=replay_transport(httpx2, cursor))
    with pytest.raises(RequestMismatch) as exc:
        client.post("http://h/v1/chat/completions", content=json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "HI"}]}).encode(),
            headers={"content-type": "application/json"})
    assert exc.value.call_index == 0 and exc.value.field == "body"
    assert "body.messages[0].content" in exc.value.detail


def test_a_different_url_or_header_is_named() -> None:
    client = httpx2.Client(transport=replay_transport(httpx2, ReplayCursor([_call({"a": 1})])))
    with pytest.raises(RequestMismatch) as exc:
        client.post("http://h/v1/other", content=json.dumps({"a": 1}).encode(), headers={"content-type": "application/json"})
    assert exc.value.field == "url"
    client = httpx2.Client(transport=replay_transport(httpx2, ReplayCursor([_call({"a": 1})])))
    with pytest.raises(RequestMismatch) as exc:
        client.post("http://h/v1/chat/completions", content=json.dumps({"a": 1}).encode(),
                    headers={"content-type": "text/plain"})
    assert exc.value.field == "header:content-type"
