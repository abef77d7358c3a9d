"""Header normalisation: what is stored, what is compared, and why.

The SDKs add headers that change from one attempt to the next, or that must never be written down.
Before a request is hashed into the transcript its headers are normalised into three groups:

* **per-attempt** headers (:data:`PER_ATTEMPT_HEADERS`: retry count, read timeout, idempotency key)
  are stored with the fixed value ``"<per-attempt>"``: they differ between a run and its replay
  although the request is the same;
* **secret** headers (:data:`SECRET_HEADERS`: API keys) are stored as ``"<redacted>"``: a transcript
  can be shared and committed;
* **environment** headers (:data:`ENVIRONMENT_HEADERS`: user agent, OS, Python and SDK versions) are
  stored verbatim but not compared on replay, so a transcript recorded on one machine replays on another.
  A difference is reported, not fatal.

Everything else (method, URL, the remaining headers, the body bytes) must be identical on replay.
Header names are stored lower-case and sorted.
"""

from __future__ import annotations

from collections.abc import Iterable

PER_ATTEMPT_HEADERS = frozenset({
    "x-stainless-retry-count", "x-stainless-read-timeout", "x-stainless-timeout", "idempotency-key",
    "x-stainless-idempotency-key",
})
SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization", "cookie"})
ENVIRONMENT_HEADERS = frozenset({
    "user-agent", "x-stainless-os", "x-stainless-arch", "x-stainless-runtime", "x-stainless-runtime-version",
    "x-stainless-package-version", "x-stainless-lang", "x-stainless-async",
})
# Response headers never stored: they would only leak cookies.
RESPONSE_DROPPED_HEADERS = frozenset({"set-cookie"})

PER_ATTEMPT_VALUE = "<per-attempt>"
REDACTED_VALUE = "<redacted>"


def normalise_request_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Lower-case, sort and normalise request headers into the form stored and hashed."""
    out: list[tuple[str, str]] = []
    for name, value in items:
        key = name.lower()
        if key in PER_ATTEMPT_HEADERS:
            value = PER_ATTEMPT_VALUE
        elif key in SECRET_HEADERS:
            value = REDACTED_VALUE
        out.append((key, value))
    return sorted(out)


def normalise_response_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Response headers as stored: lower-case, in the server's order, cookies dropped."""
    return [(n.lower(), v) for n, v in items if n.lower() not in RESPONSE_DROPPED_HEADERS]


def compared_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The normalised headers that replay requires to be identical (environment headers left out)."""
    return [(n, v) for n, v in headers if n not in ENVIRONMENT_HEADERS]
