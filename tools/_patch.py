"""Text edits for ``edit_file``: exact replacements and unified-diff hunks, both strict.

Strict on purpose: an edit that does not match exactly (a replacement found twice, a hunk whose context
is not in the file) is refused with a message saying where, rather than applied approximately, so the
file the model thinks it has is the file the harness measures.
"""

from __future__ import annotations

import re

from tools._args import Replacement


class EditError(ValueError):
    """An edit did not apply; the message says which one and why."""


def apply_replacements(text: str, replacements: list[Replacement]) -> tuple[str, int]:
    """Apply each replacement in order; returns (new text, number of replacements made)."""
    made = 0
    for i, rep in enumerate(replacements, 1):
        count = text.count(rep.old)
        if count == 0:
            raise EditError(f"replacement {i}: the 'old' text was not found in the file")
        if count > 1 and not rep.replace_all:
            raise EditError(f"replacement {i}: the 'old' text occurs {count} times; make it unique "
                            "or set replace_all")
        text = text.replace(rep.old, rep.new) if rep.replace_all else text.replace(rep.old, rep.new, 1)
        made += count if rep.replace_all else 1
    return text, made


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _parse_hunks(patch: str) -> list[tuple[int, list[str], list[str]]]:
    hunks: list[tuple[int, list[str], list[str]]] = []
    current: tuple[int, list[str], list[str]] | None = None
    for raw in patch.splitlines():
        if raw.startswith(("--- ", "+++ ", "diff ", "index ")) and current is None:
            continue
        m = _HUNK.match(raw)
        if m:
            current = (int(m.group(1)), [], [])
            hunks.append(current)
            continue
        if current is None:
            if raw.strip():
                raise EditError(f"patch text before the first '@@' hunk header: {raw[:60]!r}")
            continue
        if raw.startswith("\\"):
            continue
        tag, body = (raw[0], raw[1:]) if raw else (" ", "")
        if tag == " ":
            current[1].append(body)
            current[2].append(body)
        elif tag == "-":
            current[1].append(body)
        elif tag == "+":
            current[2].append(body)
        else:
            raise EditError(f"a hunk line must start with ' ', '-' or '+': {raw[:60]!r}")
    if not hunks:
        raise EditError("the patch holds no '@@ -a,b +c,d @@' hunk")
    return hunks


def apply_unified_diff(text: str, patch: str) -> tuple[str, int]:
    """Apply a unified diff's hunks; each hunk's old lines must match at one place. Returns (text, hunks)."""
    lines = text.split("\n")
    trailing_newline = text.endswith("\n")
    if trailing_newline:
        lines = lines[:-1]
    offset = 0
    for n, (start, old, new) in enumerate(_parse_hunks(patch), 1):
        want = max(start - 1 + offset, 0)
        if old and lines[want:want + len(old)] == old:
            at = want
        else:
            spots = [i for i in range(len(lines) - len(old) + 1) if lines[i:i + len(old)] == old] if old else [want]
            if not spots:
                raise EditError(f"hunk {n} (@@ -{start}): its context and removed lines are not in the file")
            if len(spots) > 1:
                raise EditError(f"hunk {n} (@@ -{start}): its lines match {len(spots)} places; add context")
            at = spots[0]
        lines[at:at + len(old)] = new
        offset += len(new) - len(old)
    out = "\n".join(lines)
    return (out + "\n" if trailing_newline or not text else out), n
