"""One short digest of the code that measures and judges, so a GPU figure can say what measured it.

Why: device time comes in 30-minute sessions, so GPU evidence (the honest corpus, the cheats, KernelBench
A/A sweeps, random-search campaigns) piles up over many sessions and many commits. A figure counts only if
it was taken under the final measuring code. A commit id (``code_rev``) says that only after a hand-run
``git diff REV HEAD -- <the measuring paths>``, and the GPU machine gets a ``git archive`` snapshot with no
``.git`` in which to run it. A digest of the measuring paths' contents is the same wherever the same code
is, so a row that records it can be checked by comparing two strings.

What is hashed: every file under ``harness/measure`` (but not ``harness/measure/serving``, the engine-serving
session, which KernelBench and honest-corpus figures never run through), ``harness/verdict`` and
``protocol`` (but not ``protocol/preregistrations``, which gains a file with every new A/B and changes no
measurement), skipping ``__pycache__`` folders and ``*.pyc`` files: sha256 over the sorted relative paths
(POSIX form) and each file's bytes, cut to its first 12 hex digits. A symbolic link counts as the text of
its target, which is what git stores for one, so a checkout, a ``git archive`` snapshot and git's own
objects of one commit give the same value. This module lives in ``benchmarks/`` because it is not part of
what it hashes: changing it must not change the digest.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

#: The folders whose contents decide a measurement or a verdict.
MEASURING_PATHS: tuple[str, ...] = ("harness/measure", "harness/verdict", "protocol")
#: Folders inside them that do not (see the module's docstring for why each is left out).
EXCLUDED_PATHS: tuple[str, ...] = ("harness/measure/serving", "protocol/preregistrations")
DIGEST_HEX = 12


def counted(rel: str) -> bool:
    """Whether the file at POSIX relative path ``rel`` (from the repository root) enters the digest."""
    parts = rel.split("/")
    if "__pycache__" in parts or rel.endswith(".pyc"):
        return False
    if not any(rel.startswith(p + "/") for p in MEASURING_PATHS):
        return False
    return not any(rel == p or rel.startswith(p + "/") for p in EXCLUDED_PATHS)


def _digest(entries: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over (path, bytes) pairs in path order; each part is length-prefixed, so none can run into the next."""
    h = hashlib.sha256()
    for rel, data in sorted(entries, key=lambda e: e[0]):
        name = rel.encode("utf-8")
        h.update(b"%d:" % len(name) + name + b"%d:" % len(data))
        h.update(data)
    return h.hexdigest()[:DIGEST_HEX]


def _tree_entries(root: Path) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for top in MEASURING_PATHS:
        base = root / top
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in [*filenames, *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))]:
                path = os.path.join(dirpath, name)
                rel = Path(path).relative_to(root).as_posix()
                if not counted(rel):
                    continue
                if os.path.islink(path):
                    out.append((rel, os.fsencode(os.readlink(path))))
                else:
                    with open(path, "rb") as fh:
                        out.append((rel, fh.read()))
    return out


def measuring_digest(root: Path) -> str:
    """The measuring digest of the files under ``root`` (a checkout, or a ``git archive`` snapshot without .git).

    Files there that git does not track (apart from ``__pycache__``/``*.pyc``) count too: they are part of
    what would measure, so a stray file makes the digest differ from its commit's, which is the point.
    """
    return _digest(_tree_entries(Path(root)))


@functools.cache
def process_measuring_digest(root: Path) -> str:
    """``measuring_digest(root)``, computed once per process: what a device script records on each of its rows.

    Once, because a run's rows must all name the code the run started with, and hashing the tree for every
    row would cost time in a session that has little of it.
    """
    return measuring_digest(root)


class RevisionError(ValueError):
    """A revision git cannot resolve to a commit in the repository asked."""


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RevisionError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace').strip()[:300]}")
    return proc.stdout


@functools.cache
def _digest_of_commit(sha: str, repo: Path) -> str:
    listing = _git(repo, "ls-tree", "-r", "-z", "--full-tree", sha, "--", *MEASURING_PATHS)
    wanted: list[tuple[str, str]] = []
    for item in listing.split(b"\0"):
        if not item:
            continue
        meta, _, name = item.partition(b"\t")
        _mode, kind, obj = meta.decode().split(" ")
        rel = name.decode("utf-8")
        if kind == "blob" and counted(rel):   # a submodule ("commit") has no files in a snapshot either
            wanted.append((rel, obj))
    if not wanted:
        return _digest([])
    raw = _git(repo, "cat-file", "--batch", stdin="".join(f"{obj}\n" for _, obj in wanted).encode())
    entries: list[tuple[str, bytes]] = []
    pos = 0
    for rel, obj in wanted:
        end = raw.index(b"\n", pos)
        head = raw[pos:end].decode().split(" ")
        if len(head) != 3 or head[0] != obj:
            raise RevisionError(f"git cat-file: unexpected answer {raw[pos:end][:120]!r} for {rel}")
        size = int(head[2])
        entries.append((rel, raw[end + 1:end + 1 + size]))
        pos = end + 1 + size + 1   # the content is followed by one newline
    return _digest(entries)


def measuring_digest_at(rev: str, repo: Path) -> str:
    """The measuring digest of commit ``rev`` in the git repository at ``repo``, read from git's objects.

    Why: rows written before the digest existed carry only ``code_rev``; this says what digest the code of
    that commit has, without a checkout, so old rows can be checked here against today's measuring code.
    It equals ``measuring_digest`` of a clean checkout or a ``git archive`` snapshot of the same commit
    (no ``.gitattributes`` filters apply in this repository). Raises ``RevisionError`` for a revision git
    cannot resolve to a commit.
    """
    if not rev or rev.startswith("-"):
        raise RevisionError(f"not a revision: {rev!r}")
    try:
        sha = _git(Path(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    except RevisionError as exc:
        raise RevisionError(f"{rev!r} is not a commit in {repo}") from exc
    return _digest_of_commit(sha.decode().strip(), Path(repo).resolve())
