"""Find a campaign's transcript and lay it out turn by turn for the transcript page.

Transcripts are files, not store rows: a campaign names its own in its config or outcome
(``transcript``/``transcript_path``, as ``atb ab`` reads them), else it is the ``*.jsonl`` beside the store
whose header names the campaign. The chain is verified (:func:`transcripts.read_transcript`); a broken
one is shown as broken, with the first bad line, and its records are laid out unverified so the edit can
be seen, never silently trusted.

Long texts are cut on the page (``text_cut`` says how many characters were left out, and the page marks
it) so one 200 KB request body cannot make a page slow; the file holds every byte.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

from transcripts import TranscriptError, read_transcript
from transcripts._records import Envelope

from atb_agent.view._models import TranscriptLine, TranscriptView

TEXT_LIMIT = 4000
_KEYS = ("transcript", "transcript_path")


class TranscriptIndex:
    """campaign id -> transcript path for the folders searched, rebuilt at most every ``ttl`` seconds."""

    def __init__(self, folders: list[Path], ttl: float = 2.0) -> None:
        self.folders = [f for f in folders if f is not None]
        self.ttl = ttl
        self._lock = threading.Lock()
        self._built = 0.0
        self._map: dict[str, Path] = {}

    def _scan(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        for folder in self.folders:
            if not folder.is_dir():
                continue
            for path in sorted(folder.rglob("*.jsonl")):
                try:
                    with path.open("rb") as fh:
                        first = json.loads(fh.readline() or b"{}")
                except (OSError, ValueError):
                    continue
                data = first.get("data") if isinstance(first, dict) else None
                if isinstance(first, dict) and first.get("kind") == "header" and isinstance(data, dict):
                    cid = data.get("campaign_id")
                    if isinstance(cid, str):
                        found.setdefault(cid, path)
        return found

    def find(self, campaign_id: str, named: list[dict[str, Any]]) -> Path | None:
        """The transcript of ``campaign_id``: a path ``named`` (config, outcome detail) first, else a scan."""
        for source in named:
            for key in _KEYS:
                value = source.get(key) if isinstance(source, dict) else None
                if isinstance(value, str) and Path(value).is_file():
                    return Path(value)
        with self._lock:
            if time.monotonic() - self._built > self.ttl:
                self._map = self._scan()
                self._built = time.monotonic()
            return self._map.get(campaign_id)


def _cut(text: str) -> tuple[str, int]:
    return (text, 0) if len(text) <= TEXT_LIMIT else (text[:TEXT_LIMIT], len(text) - TEXT_LIMIT)


def _body_text(b64: str) -> str:
    try:
        raw = base64.b64decode(b64.encode("ascii"))
    except ValueError:
        return "(body not base64)"
    try:
        return json.dumps(json.loads(raw), indent=1, ensure_ascii=False)
    except ValueError:
        return raw.decode("utf-8", errors="replace")


def _line(env: Envelope, voided: bool) -> TranscriptLine:
    d: dict[str, Any] = env.data
    it = d.get("iteration") if isinstance(d.get("iteration"), int) else None
    base: dict[str, Any] = {"seq": env.seq, "kind": env.kind, "iteration": it, "voided": voided}
    kind = env.kind
    if kind == "header":
        text = json.dumps({k: v for k, v in d.items() if k != "task_brief"}, indent=1, ensure_ascii=False)
        badges = ["scripted fixture" if d.get("scripted") else "real model"]
        return TranscriptLine(**base, title=f"header: {d.get('provider')} {d.get('model')}", badges=badges,
                              text=text)
    if kind == "iteration_start":
        text, cut = _cut(str(d.get("observation", "")))
        return TranscriptLine(**base, title=f"iteration {it} starts: observation", text=text, text_cut=cut)
    if kind == "model_call":
        req = d.get("request") or {}
        resp = d.get("response") or {}
        text, cut = _cut(_body_text(str(resp.get("body_b64", ""))))
        return TranscriptLine(**base, title=f"model call {d.get('call_index')}: {req.get('method')} {req.get('url')} "
                                            f"-> HTTP {resp.get('status')}", text=text, text_cut=cut,
                              badges=[f"request {len(base64.b64decode(str(req.get('body_b64', ''))))} B"])
    if kind == "model_turn":
        tr = d.get("truncation") or {}
        truncated = bool(tr.get("truncated"))
        badges = [f"stop {d.get('stop_reason')}", f"in {d.get('input_tokens')} / out {d.get('output_tokens')} tokens"]
        if truncated:
            why = tr.get("api_signal") or "; ".join(tr.get("reasons") or []) or "over the cap"
            badges.insert(0, f"TRUNCATED ({why}; cap {tr.get('requested_cap')})")
        text, cut = _cut(str(d.get("text", "")))
        calls = [{"name": str(c.get("name", c.get("function", {}).get("name", "?"))),
                  "arguments": _cut(str(c.get("arguments", c.get("function", {}).get("arguments", ""))))[0]}
                 for c in (d.get("tool_calls") or []) if isinstance(c, dict)]
        return TranscriptLine(**base, title=f"model turn {d.get('call_index')}", badges=badges, text=text,
                              text_cut=cut, tool_calls=calls, truncated=truncated)
    if kind == "tool_call":
        text, cut = _cut(str(d.get("content", "")))
        args, _ = _cut(str(d.get("arguments", "")))
        badges = ["error" if d.get("is_error") else "ok"] + (["submitted"] if d.get("submitted") else [])
        return TranscriptLine(**base, title=f"tool {d.get('name')} ({d.get('call_id')})", badges=badges, text=text,
                              text_cut=cut, tool_calls=[{"name": str(d.get("name")), "arguments": args}])
    if kind == "submission":
        files = d.get("files") or {}
        return TranscriptLine(**base, title="submission" + (" (forced: the turn ended without submit)" if d.get("forced") else ""),
                              text="\n".join(f"{p}  sha256 {h}" for p, h in files.items()),
                              badges=["forced"] if d.get("forced") else [])
    if kind == "verdict":
        v = d.get("verdict") or {}
        ratio = v.get("ratio")
        badges = [str(v.get("status"))] + ([f"{ratio:.3f}x"] if isinstance(ratio, (int, float)) else [])
        return TranscriptLine(**base, title="verdict (as the transcript recorded it; the store's row is the evidence)",
                              badges=badges, verdict_id=v.get("id") if isinstance(v.get("id"), str) else None,
                              text=str(v.get("reason", "")))
    if kind == "resume":
        return TranscriptLine(**base, title=f"resumed: records {d.get('abandoned_from')}..{d.get('abandoned_to')} void",
                              badges=["resume"])
    text = json.dumps(d, indent=1, ensure_ascii=False)
    return TranscriptLine(**base, title=kind, text=text,
                          badges=[f"truncated fraction {d.get('truncated_fraction')}"] if kind == "end" else [])


def _unverified(path: Path) -> list[Envelope]:
    out: list[Envelope] = []
    for raw in path.read_bytes().splitlines():
        try:
            out.append(Envelope.model_validate(json.loads(raw)))
        except ValueError:
            continue
    return out


def transcript_view(campaign_id: str, path: Path | None) -> TranscriptView:
    """The transcript page's content; never raises (a missing or broken transcript is a state)."""
    if path is None:
        return TranscriptView(campaign_id=campaign_id, path=None,
                              problem="no transcript found: the campaign names none, and no *.jsonl beside the "
                                      "store has its id in its header (random search records none)")
    problem = ""
    try:
        t = read_transcript(path)
        records, voided, intact = t.records, t.voided, True
    except TranscriptError as exc:
        problem = f"the transcript fails verification: {exc}"
        try:
            records, voided, intact = _unverified(path), set(), False
        except OSError as err:
            return TranscriptView(campaign_id=campaign_id, path=str(path), problem=f"{problem}; unreadable: {err}")
    lines = [_line(env, env.seq in voided) for env in records]
    header = records[0].data if records and records[0].kind == "header" else {}
    if header.get("campaign_id") not in (None, campaign_id):
        problem = (problem + "; " if problem else "") + f"its header names campaign {header.get('campaign_id')}"
    turns = [ln for ln in lines if ln.kind == "model_turn" and not ln.voided]
    return TranscriptView(campaign_id=campaign_id, path=str(path), problem=problem, intact=intact,
                          header=header, lines=lines, truncated_turns=sum(1 for t in turns if t.truncated),
                          model_turns=len(turns))


__all__ = ["TEXT_LIMIT", "TranscriptIndex", "transcript_view"]
