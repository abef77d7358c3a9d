"""Recording and replaying at the HTTP transport, for both ``httpx`` and ``httpx2``.

Why the transport: it is the last point before bytes leave the process, below every SDK layer, so
what is recorded is exactly what the API saw and returned, and replay exercises the same SDK code
(request building, response parsing, error mapping) as the live run.

The two packages have the same transport interface but distinct classes, so each class is built for
one package by :func:`recording_transport` / :func:`replay_transport`. Bodies are kept as raw bytes
(the response body still content-encoded), base64 in the transcript.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from transcripts._errors import RecordingExhausted, RequestMismatch
from transcripts._normalise import ENVIRONMENT_HEADERS, compared_headers, normalise_request_headers, normalise_response_headers
from transcripts._records import HttpRequestRecord, HttpResponseRecord, ModelCallData, b64

ExchangeSink = Callable[[HttpRequestRecord, HttpResponseRecord], None]


def _headers(h: Any) -> list[tuple[str, str]]:
    return [(k.decode("latin-1") if isinstance(k, bytes) else k, v.decode("latin-1") if isinstance(v, bytes) else v)
            for k, v in h.raw] if hasattr(h, "raw") else list(h.items())


def request_record(request: Any) -> HttpRequestRecord:
    """The stored form of a request (reads its body)."""
    body = request.read()
    return HttpRequestRecord(method=request.method, url=str(request.url),
                             headers=normalise_request_headers(_headers(request.headers)), body_b64=b64(body))


def recording_transport(http: ModuleType, inner: Any, sink: ExchangeSink) -> Any:
    """A transport of package ``http`` (httpx or httpx2) that forwards to ``inner`` and reports each
    exchange, with its exact bytes, to ``sink`` before the SDK sees the response."""

    class RecordingTransport(http.BaseTransport):  # type: ignore[name-defined,misc]
        def handle_request(self, request: Any) -> Any:
            req = request_record(request)
            response = inner.handle_request(request)
            try:
                # An in-process transport (MockTransport) hands back an already-read response.
                raw = response.content if response.is_stream_consumed else b"".join(response.iter_raw())
            finally:
                response.close()
            headers = normalise_response_headers(_headers(response.headers))
            sink(req, HttpResponseRecord(status=response.status_code, headers=headers, body_b64=b64(raw)))
            return http.Response(response.status_code, headers=headers, content=raw, request=request)

        def close(self) -> None:
            inner.close()

    return RecordingTransport()


def _first_json_difference(a: Any, b: Any, path: str = "body") -> str | None:
    if type(a) is not type(b):
        return f"{path}: recorded {json.dumps(a)[:120]}, replayed {json.dumps(b)[:120]}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                side = "recorded" if key in a else "replayed"
                return f"{path}.{key}: present only in the {side} request"
            found = _first_json_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        if list(a) != list(b):
            return f"{path}: same keys in a different order"
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_json_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            return f"{path}: recorded {len(a)} items, replayed {len(b)}"
        return None
    if a != b:
        return f"{path}: recorded {json.dumps(a)[:120]}, replayed {json.dumps(b)[:120]}"
    return None


def describe_body_difference(recorded: bytes, replayed: bytes) -> str:
    """Where two request bodies first differ: a JSON path when both parse, else a byte offset."""
    try:
        found = _first_json_difference(json.loads(recorded), json.loads(replayed))
        if found:
            return found
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    n = next((i for i, (x, y) in enumerate(zip(recorded, replayed)) if x != y), min(len(recorded), len(replayed)))
    return (f"bytes differ from offset {n} (recorded {len(recorded)} bytes, replayed {len(replayed)}): "
            f"recorded {recorded[n:n + 40]!r}, replayed {replayed[n:n + 40]!r}")


def compare_request(call_index: int, recorded: HttpRequestRecord, replayed: HttpRequestRecord) -> None:
    """Raise RequestMismatch naming the first field in which ``replayed`` differs from ``recorded``."""
    if recorded.method != replayed.method:
        raise RequestMismatch(call_index, "method", f"recorded {recorded.method}, replayed {replayed.method}")
    if recorded.url != replayed.url:
        raise RequestMismatch(call_index, "url", f"recorded {recorded.url}, replayed {replayed.url}")
    if recorded.body != replayed.body:
        raise RequestMismatch(call_index, "body", describe_body_difference(recorded.body, replayed.body))
    want, got = dict(compared_headers(recorded.headers)), dict(compared_headers(replayed.headers))
    for name in sorted(set(want) | set(got)):
        if want.get(name) != got.get(name):
            raise RequestMismatch(call_index, f"header:{name}", f"recorded {want.get(name)!r}, replayed {got.get(name)!r}")


class ReplayCursor:
    """The recorded calls, served in order; shared by the transport and whoever checks completion."""

    def __init__(self, calls: Sequence[ModelCallData]) -> None:
        self.calls = list(calls)
        self.served = 0
        self.environment_differences: list[str] = []
        self._lock = threading.Lock()

    def serve(self, replayed: HttpRequestRecord) -> ModelCallData:
        with self._lock:
            index = self.served
            if index >= len(self.calls):
                raise RecordingExhausted(index, len(self.calls))
            recorded = self.calls[index]
            compare_request(index, recorded.request, replayed)
            was, now = dict(recorded.request.headers), dict(replayed.headers)
            for name in sorted(ENVIRONMENT_HEADERS & (set(was) | set(now))):
                if was.get(name) != now.get(name):
                    self.environment_differences.append(f"call #{index}: {name}: {was.get(name)!r} -> {now.get(name)!r}")
            self.served = index + 1
            return recorded

    @property
    def exhausted(self) -> bool:
        return self.served == len(self.calls)


def replay_transport(http: ModuleType, cursor: ReplayCursor, sink: ExchangeSink | None = None) -> Any:
    """A transport of package ``http`` that opens no connection: it checks each request against the
    next recorded one (raising RequestMismatch / RecordingExhausted) and returns the recorded bytes."""

    class ReplayTransport(http.BaseTransport):  # type: ignore[name-defined,misc]
        def handle_request(self, request: Any) -> Any:
            replayed = request_record(request)
            recorded = cursor.serve(replayed)
            if sink is not None:
                sink(replayed, recorded.response)
            return http.Response(recorded.response.status, headers=recorded.response.headers,
                                 content=recorded.response.body, request=request)

    return ReplayTransport()


__all__ = ["ExchangeSink", "ReplayCursor", "compare_request", "describe_body_difference", "recording_transport",
           "replay_transport", "request_record"]
