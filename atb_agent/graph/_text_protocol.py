"""The declared text protocol for models without native tool calls (``fenced-python/1``).

Many small local models answer a tool-offering request with code in plain text instead of a tool
call. Under this protocol, declared in the transcript header (``text_protocol``):

* a turn **with** any native tool call is handled as usual: the tool calls take precedence and the
  text is ignored by the protocol;
* a turn **without** tool calls whose text holds a closed fenced Python block (```` ```python ````,
  ```` ```py ````) has that block written to the candidate file and submitted when the turn ends.
  When several blocks are present, the last one defining ``class ModelNew`` is taken (else the last);
* an unclosed block (an answer cut off at the output cap) is not taken: the code is incomplete, and
  the turn ends like any turn without a submission (the workspace is submitted as it stands);
* both steps run through the sandbox's own ``write_file`` and ``submit`` tools and are recorded as
  ``tool_call`` records with call ids ``text-protocol-write`` / ``text-protocol-submit``, so the
  transcript shows exactly what the protocol did and a replay re-runs it.

The model's text is never edited: the block's content is written byte for byte.

``fenced-python-stop/1`` is the same protocol with one addition, for a small model that repeats itself
after its code (SmolLM2-135M wrote its block, then the same block again and again until the output cap):

* every request asks the server to stop where the first block closes (``stop``: :data:`STOP_SEQUENCES`,
  part of the request bytes, so a replay sends it too). An OpenAI-compatible server leaves the stop
  sequence out of the reply, so the reply ends with the block's code and no closing fence;
* a trailing block that the server ended itself (``finish_reason == "stop"``: the stop sequence or the
  model's own end of text) and that the truncation check did not flag is taken as closed. A reply cut
  off at the output cap (``length``, or counted at the cap) is still truncated and its block never taken.
"""

from __future__ import annotations

import re

from transcripts import TEXT_PROTOCOL_FENCED_PYTHON

TEXT_PROTOCOL_FENCED_PYTHON_STOP = "fenced-python-stop/1"
TEXT_PROTOCOLS = (TEXT_PROTOCOL_FENCED_PYTHON, TEXT_PROTOCOL_FENCED_PYTHON_STOP)
"""The declared text protocols a run may use."""
STOP_SEQUENCES = ("\n```\n",)
"""What ``fenced-python-stop/1`` requests stop at: a closing fence on its own line. An opening fence is
never one (it carries its language: ```` ```python ````)."""

WRITE_CALL_ID = "text-protocol-write"
SUBMIT_CALL_ID = "text-protocol-submit"

_FENCE = re.compile(r"```[ \t]*(python3?|py)[ \t]*\r?\n(.*?)\r?\n[ \t]*```", re.DOTALL | re.IGNORECASE)
_OPEN = re.compile(r"```[ \t]*(python3?|py)[ \t]*\r?\n(.*)\Z", re.DOTALL | re.IGNORECASE)


def fenced_python_blocks(text: str) -> list[str]:
    """The closed fenced Python blocks of ``text``, in order (an unclosed trailing block is not one)."""
    return [m.group(2) for m in _FENCE.finditer(text)]


def stopped_block(text: str) -> str | None:
    """The trailing block of a reply the server ended at a :data:`STOP_SEQUENCES` entry: an opening
    Python fence after the last closed block, its code running to the end of the text; None if none."""
    last_end = 0
    for m in _FENCE.finditer(text):
        last_end = m.end()
    tail = _OPEN.search(text, last_end)
    if tail is None or not tail.group(2).strip():
        return None
    return tail.group(2)


def candidate_from_text(text: str, *, protocol: str = TEXT_PROTOCOL_FENCED_PYTHON, stopped: bool = False) -> str | None:
    """The block the protocol takes from a turn's text, or None when there is no closed Python block.

    ``stopped``: the server ended the reply itself (``finish_reason == "stop"``) and it was not
    truncated; only then, and only under ``fenced-python-stop/1``, is a trailing block taken as closed.
    """
    blocks = fenced_python_blocks(text)
    if protocol == TEXT_PROTOCOL_FENCED_PYTHON_STOP and stopped:
        tail = stopped_block(text)
        if tail is not None:
            blocks.append(tail)
    if not blocks:
        return None
    with_model = [b for b in blocks if re.search(r"^\s*class\s+ModelNew\b", b, re.MULTILINE)]
    chosen = (with_model or blocks)[-1]
    return chosen if chosen.endswith("\n") else chosen + "\n"


__all__ = ["STOP_SEQUENCES", "SUBMIT_CALL_ID", "TEXT_PROTOCOLS", "TEXT_PROTOCOL_FENCED_PYTHON_STOP", "WRITE_CALL_ID",
           "candidate_from_text", "fenced_python_blocks", "stopped_block"]
