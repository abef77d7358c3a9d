"""The one redaction of secrets from text that is stored or shown to a model.

Why here, a shared foundation that imports nothing: a candidate's output (a traceback, a print of
``os.environ``) reaches a verdict's reason, the store, and in a campaign the model. Measuring children get
an allow-list environment (``harness.measure.runner._worker.child_environment``), so a secret should
never be there to print; this is the second line, applied where verdict reasons and details are stored
(``harness.verdict.evaluate``) and where tool and verdict text goes to the model (``tools.ToolBox.call``).
Issue 27: ``DATABASE_URL`` and ``OPENAI_BASE_URL`` with passwords in their user-info appeared in a stored
verdict's reason.

What is redacted (each replaced so the shape stays readable):
- the user-info of a URL (``scheme://user:password@host`` -> ``scheme://<redacted>@host``);
- API tokens: ``sk-...`` (OpenAI, Anthropic ``sk-ant-...``), GitHub ``ghp_``/``gho_``/``ghs_``/``ghu_``/
  ``ghr_``/``github_pat_``, AWS access key ids ``AKIA...``;
- ``Bearer ...`` and ``Basic ...`` credentials;
- ``password=...``, ``passwd:``, ``secret=``, ``token=``, ``api_key=``, ``apikey=``, also with a prefix
  (``DB_PASSWORD=``, ``OPENAI_API_KEY=``) and quoted, JSON style.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@'\"<>]+@")
_TOKENS = re.compile(
    r"\b(?:sk-[A-Za-z0-9_\-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}|AKIA[0-9A-Z]{16})")
_AUTH_SCHEME = re.compile(r"(?i)\b(Bearer|Basic)(\s+)[A-Za-z0-9._~+/=\-]{6,}")
_KEY_VALUE = re.compile(
    r"""(?ix)
    (["']?\b(?:[A-Za-z0-9]+_)*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey)["']?
     \s*[=:]\s*["']?)
    (?!<redacted>)[^\s&;,'"<>()]{4,}""")


def redact(text: str) -> str:
    """``text`` with every secret this module knows replaced by ``<redacted>``; other text unchanged."""
    if not text:
        return text
    out = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    out = _TOKENS.sub(REDACTED, out)
    out = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", out)
    return _KEY_VALUE.sub(lambda m: f"{m.group(1)}{REDACTED}", out)


def redact_obj(value: Any) -> Any:
    """:func:`redact` applied to every string inside ``value`` (dicts, lists, tuples; keys kept)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_obj(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_obj(v) for v in value)
    return value


__all__ = ["REDACTED", "redact", "redact_obj"]
