"""The HTTP client each SDK is given: a client of the package the SDK itself uses (httpx2 for
openai 3.x and anthropic 2.x, httpx for older releases), whose transport records or replays."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from transcripts import ReplayCursor, recording_transport, replay_transport

from atb_agent.providers._types import ExchangeSink


def sdk_http_module(sdk: str) -> ModuleType:
    """The HTTP package that ``sdk`` (``openai`` or ``anthropic``) builds its clients on.

    Found from the SDK's own base client module, not assumed: anthropic moved from httpx to httpx2.
    """
    base = importlib.import_module(f"{sdk}._base_client")
    for name in ("httpx2", "httpx"):
        mod = getattr(base, name, None)
        if isinstance(mod, ModuleType):
            return mod
    raise ImportError(f"cannot tell which HTTP package {sdk} uses")


def recording_client(sdk: str, sink: ExchangeSink, timeout_s: float) -> Any:
    """A live client: real network transport, every exchange reported to ``sink``."""
    http = sdk_http_module(sdk)
    transport = recording_transport(http, http.HTTPTransport(), sink)
    return http.Client(transport=transport, timeout=timeout_s)


def replaying_client(sdk: str, cursor: ReplayCursor, sink: ExchangeSink | None, timeout_s: float) -> Any:
    """A client that never opens a connection: it serves ``cursor``'s recorded responses."""
    http = sdk_http_module(sdk)
    return http.Client(transport=replay_transport(http, cursor, sink), timeout=timeout_s)
