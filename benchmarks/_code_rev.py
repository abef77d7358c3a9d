"""The commit a benchmark row was measured at: the rows' ``code_rev``, one rule for every row writer.

Why: GPU rows are measured in a ``git archive`` snapshot, which has no ``.git`` to ask, so the commit used
to come only from ``$ATB_CODE_REV``, typed by whoever made the device call. On 2026-12-07 a snapshot of
``15b319c`` ran with ``ATB_CODE_REV=ca11c27``: the measuring digest was the same, but 23 rows named a
commit whose benchmark scripts they had not run, and the mistake showed only by comparing files by hand.
Now the snapshot names itself. ``_archive_rev.txt`` holds ``$Format:%H$`` in the repository and is marked
``export-subst`` in ``.gitattributes``, so ``git archive`` writes the archived commit's id into it. A
snapshot's row takes that id; ``$ATB_CODE_REV``, where set, must agree with it or the run stops before
measuring anything. In a checkout the commit is git's (with ``+dirty`` when tracked files differ from it),
or ``$ATB_CODE_REV`` where the caller names one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: substituted by ``git archive`` (``export-subst`` in ``.gitattributes``); ``$Format:%H$`` in a checkout
ARCHIVE_REV_FILE = Path(__file__).resolve().with_name("_archive_rev.txt")
_UNSUBSTITUTED = "$Format:"


class CodeRevMismatch(RuntimeError):
    """``$ATB_CODE_REV`` names another commit than the snapshot this code was archived from."""


def archived_rev(path: Path = ARCHIVE_REV_FILE) -> str | None:
    """The commit this tree was ``git archive``-d from (40 hex digits), or None in a checkout (the file
    still holds its placeholder) or where the file is missing."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text or text.startswith(_UNSUBSTITUTED):
        return None
    return text


def _git_rev(root: Path, short: bool) -> str:
    try:
        args = ["git", "-C", str(root), "rev-parse", *(["--short"] if short else []), "HEAD"]
        rev = subprocess.run(args, capture_output=True, text=True, timeout=10).stdout.strip()
        if not rev:
            return ""
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
        return f"{rev}+dirty" if dirty else rev
    except (OSError, subprocess.SubprocessError):
        return ""


def code_rev(root: Path, short: bool = True, archive_file: Path = ARCHIVE_REV_FILE) -> str:
    """The commit measured, for a row's ``code_rev`` (7 hex digits when ``short``, else 40).

    A ``git archive`` snapshot: the commit it was archived from. A checkout: ``$ATB_CODE_REV`` if set, else
    ``git rev-parse HEAD`` (``+dirty`` when tracked files were changed). "" where neither is known.

    Raises:
        CodeRevMismatch: ``$ATB_CODE_REV`` is set in a snapshot of another commit.
    """
    named = os.environ.get("ATB_CODE_REV", "").strip()
    archived = archived_rev(archive_file)
    if archived is not None:
        if named and not archived.startswith(named):
            raise CodeRevMismatch(
                f"ATB_CODE_REV={named} but this tree is a git archive of {archived[:12]} "
                f"({archive_file.name}): unset ATB_CODE_REV or archive the commit it names")
        return archived[:7] if short else archived
    if named:
        return named
    return _git_rev(root, short)


def checked_code_rev(root: Path, short: bool = True) -> str:
    """:func:`code_rev` for a script's start: a mismatch ends the script with its one-line reason and exit
    status 2, before anything is measured or written."""
    try:
        return code_rev(root, short)
    except CodeRevMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


__all__ = ["ARCHIVE_REV_FILE", "CodeRevMismatch", "archived_rev", "checked_code_rev", "code_rev"]
