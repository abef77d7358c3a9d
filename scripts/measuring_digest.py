"""Print the measuring digest, or check which recorded rows were measured under the current measuring code.

    python scripts/measuring_digest.py                      # the digest of this working tree
    python scripts/measuring_digest.py --rev c1cd348        # the digest of a commit, from git's objects
    python scripts/measuring_digest.py --check A.jsonl ...  # per file: rows under the current digest, and not

Why: GPU evidence accumulates over many 30-minute device sessions, and a figure counts only if it was
taken under the final measuring code (``benchmarks/_measuring_digest.py`` says what is hashed and why).
A row's digest is its recorded ``measuring_digest``, else the digest of its ``code_rev`` computed here
from git; a row with neither, or whose ``code_rev`` is marked ``+dirty`` or unknown to this repository,
cannot be placed and counts as not under the current digest. Exit 0 whatever the rows say; 2 (one line
on stderr) for bad input: an unreadable file, a line that is not a JSON object, an unknown ``--rev``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._measuring_digest import (
    RevisionError,
    measuring_digest,
    measuring_digest_at,
)

UNKNOWN = "unknown"


class BadInput(Exception):
    """Input the check cannot read; reported in one line, exit 2."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from exc
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path}:{n}: not JSON: {exc.msg}") from exc
        if not isinstance(row, dict):
            raise BadInput(f"{path}:{n}: not a JSON object")
        rows.append(row)
    return rows


def row_digest(row: dict[str, Any], repo: Path, cache: dict[str, str]) -> str:
    """The row's measuring digest: recorded, else its clean ``code_rev``'s from git, else ``unknown``."""
    recorded = row.get("measuring_digest")
    if isinstance(recorded, str) and recorded:
        return recorded
    rev = row.get("code_rev")
    if not isinstance(rev, str) or not rev or rev.endswith("+dirty"):
        return UNKNOWN
    if rev not in cache:
        try:
            cache[rev] = measuring_digest_at(rev, repo)
        except RevisionError:
            cache[rev] = UNKNOWN
    return cache[rev]


def check(paths: list[Path], repo: Path) -> list[str]:
    current = measuring_digest(repo)
    lines = [f"current measuring digest: {current}"]
    cache: dict[str, str] = {}
    for path in paths:
        counts = Counter(row_digest(r, repo, cache) for r in read_rows(path))
        under = counts.pop(current, 0)
        unknown = counts.pop(UNKNOWN, 0)
        other = ", ".join(f"{d} x{n}" for d, n in sorted(counts.items()))
        detail = [f"{sum(counts.values())} under other digests ({other})" if counts else "",
                  f"{unknown} unplaced (no measuring_digest, and no clean code_rev git knows)" if unknown else ""]
        lines.append(f"{path}: {under} under {current}, {sum(counts.values()) + unknown} not"
                     + (f": {'; '.join(d for d in detail if d)}" if counts or unknown else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--rev", help="print the digest of this commit (computed from git's objects)")
    group.add_argument("--check", nargs="+", type=Path, metavar="ROWS.jsonl",
                       help="count each file's rows under the current digest and not")
    args = ap.parse_args(argv)
    try:
        if args.rev is not None:
            print(measuring_digest_at(args.rev, ROOT))
        elif args.check:
            print("\n".join(check(args.check, ROOT)))
        else:
            print(measuring_digest(ROOT))
    except (BadInput, RevisionError) as exc:
        print(f"measuring_digest: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
