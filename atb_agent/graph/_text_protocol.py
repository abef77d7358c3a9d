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
"""

from __future__ import annotations

import re

WRITE_CALL_ID = "text-protocol-write"
SUBMIT_CALL_ID = "text-protocol-submit"

_FENCE = re.compile(r"```[ \t]*(python3?|py)[ \t]*\r?\n(.*?)\r?\n[ \t]*```", re.DOTALL | re.IGNORECASE)


def fenced_python_blocks(text: str) -> list[str]:
    """The closed fenced Python blocks of ``text``, in order (an unclosed trailing block is not one)."""
    return [m.group(2) for m in _FENCE.finditer(text)]


def candidate_from_text(text: str) -> str | None:
    """The block the protocol takes from a turn's text, or None when there is no closed Python block."""
    blocks = fenced_python_blocks(text)
    if not blocks:
        return None
    with_model = [b for b in blocks if re.search(r"^\s*class\s+ModelNew\b", b, re.MULTILINE)]
    chosen = (with_model or blocks)[-1]
    return chosen if chosen.endswith("\n") else chosen + "\n"


__all__ = ["SUBMIT_CALL_ID", "WRITE_CALL_ID", "candidate_from_text", "fenced_python_blocks"]
