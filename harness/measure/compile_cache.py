"""A compile cache shared only among the harness's own renderings of compiled points, one entry per
problem (issue 26).

Why: a compiled random-search point spends most of its evaluation in Inductor's first-call compile,
and each measuring child's Inductor and Triton caches live in its private scratch, so every point
compiled from nothing. Within one seed's campaign a point never repeats, so an entry per exact
rendering never hit inside a campaign. The points of one problem share the model code and differ only
in the settings they pass to ``torch.compile``; so the entry is per *problem*: every exact rendering of
the same task reads and extends one entry, and Inductor's lower-level caches (the generated C++/Triton
code and shared libraries, keyed by their source; autotune results; AOT-autograd and FX-graph entries,
keyed by graph and options) can hit across points even where the FX-graph cache misses because the
options differ.

Why per problem is still safe: Inductor's on-disk cache holds generated Python modules and shared
libraries that a later compile loads and runs. A file planted by candidate code would run inside another
evaluation's measuring child, where it could change what that child times or reports. So only the
harness's own renderings of that problem ever write or read an entry: the key is the renderer, the
task's source digest, the torch version, the backend and the device fingerprint, and it is given only
to a candidate whose text :func:`harness.tasks._module_space.point_of_rendering` re-renders exactly (one
byte changed and there is no key). Inside an entry, Inductor's own keys (hashes of the graph, the
options and the generated source) decide what is reused, so a hit runs the code that this compile
would have generated; a file it does not match is simply not used. And:

* a child never sees the shared folder: the parent copies an entry's files into the child's scratch
  before ``load`` (:meth:`RenderedPointCache.seed`) and merges that child's cache back afterwards
  (:meth:`RenderedPointCache.keep`): regular files only, file by file, a file already in the entry
  stays as it is (first writer wins per file), a new one is written beside and linked into place;
* only a child whose candidate is an exact rendering of a compiled point is seeded or merged back; an
  agent's candidate (any other text) gets neither, so it can neither read an entry nor plant one;
* only confined children take part: an unconfined child could write the shared folder itself, and the
  cache's root must lie outside everything the confinement binds (checked, else the cache is off).

An entry past ``MAX_ENTRY_BYTES`` stops growing; past ``MAX_TOTAL_BYTES`` whole entries are trimmed,
least recently used first. The cache changes only the untimed first call.
``ATB_COMPILE_CACHE`` names the root (``off`` turns it off); the default is
``~/.cache/autotunebench/compile-cache``. ``ATB_COMPILE_CACHE_KEY=rendering`` keys an entry per exact
rendering instead (the earlier behaviour), for benchmarks that compare the two
(``benchmarks/compiled_point_cost.py --compare-keys``); the default is ``problem``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.records import sha256_text
from harness.tasks._model import Task
from harness.tasks._module_space import RENDERER, point_of_rendering

log = logging.getLogger(__name__)

#: the environment variable naming the cache's root ("off" or "0" turns the cache off)
ENV = "ATB_COMPILE_CACHE"
#: the environment variable choosing what an entry is per: "problem" (the default) or "rendering" (the
#: earlier per-exact-rendering key, kept so benchmarks can compare the two)
KEY_ENV = "ATB_COMPILE_CACHE_KEY"
KEY_MODES = ("problem", "rendering")
#: the folder under a child's scratch that holds its Inductor and Triton caches (set in _child.py)
CHILD_DIR = "compile-cache"
#: an entry stops growing past MAX_ENTRY_BYTES; the whole cache is trimmed, oldest first, past MAX_TOTAL_BYTES
MAX_ENTRY_BYTES = 512 << 20
MAX_TOTAL_BYTES = 4 << 30


class CacheUse(BaseModel):
    """What the cache did for one evaluation (for benchmarks and logs; never part of a verdict)."""

    model_config = ConfigDict(extra="forbid")

    key: str = ""            # "" when the candidate is not an exact rendering of a compiled point
    key_by: str = ""         # what the entry is per: "problem" or "rendering" (ATB_COMPILE_CACHE_KEY)
    seeded_files: int = 0    # files copied into the child before load (0: a miss)
    kept_files: int = 0      # files of the child's cache merged into the entry (new to it) after the evaluation
    already_files: int = 0   # files of the child's cache the entry held already (left as they were)
    why_not: str = ""        # why the cache was not used, when it was not


def default_root() -> Path | None:
    """The cache's root from ``ATB_COMPILE_CACHE``, or None when it is turned off."""
    given = os.environ.get(ENV, "").strip()
    if given.lower() in ("off", "0", "none", "false"):
        return None
    return Path(given).expanduser() if given else Path.home() / ".cache" / "autotunebench" / "compile-cache"


def default_key_by() -> str:
    """What an entry is per, from ``ATB_COMPILE_CACHE_KEY`` ("problem" unless it says "rendering").

    Raises:
        ValueError: any other value (a typo must not silently pick one).
    """
    given = os.environ.get(KEY_ENV, "").strip().lower() or "problem"
    if given not in KEY_MODES:
        raise ValueError(f"{KEY_ENV}={given!r}: expected one of {KEY_MODES}")
    return given


def _torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "unknown"


def _copy_files(src: Path, dst: Path, max_bytes: int) -> tuple[int, int]:
    """Copy the regular files under ``src`` to ``dst`` (same relative paths): symlinks, devices and
    anything else are skipped, never followed. Returns (files, bytes); stops past ``max_bytes``."""
    files = total = 0
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = Path(dirpath).relative_to(src)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            total += st.st_size
            if total > max_bytes:
                raise OverflowError(f"more than {max_bytes} bytes under {src}")
            (dst / rel).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dst / rel / name, follow_symlinks=False)
            files += 1
    return files, total


def _tree_bytes(root: Path) -> int:
    """The bytes of the regular files under ``root`` (symlinks not followed)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def _merge_files(src: Path, dst: Path, staging: Path, max_bytes: int) -> tuple[int, int]:
    """Merge the regular files under ``src`` into ``dst`` (same relative paths), file by file: a file
    ``dst`` holds already stays as it is (first writer wins per file, also against a concurrent
    writer); a new one is copied into ``staging`` (same filesystem) and linked into place, so ``dst``
    only ever holds whole files. Symlinks, devices and anything else are skipped, never followed.
    Stops adding once ``dst`` would hold more than ``max_bytes``. Returns (files added, files present)."""
    added = present = 0
    size = _tree_bytes(dst) if dst.is_dir() else 0
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = Path(dirpath).relative_to(src)
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                continue
            final = dst / rel / name
            if os.path.lexists(final):
                present += 1
                continue
            if size + st.st_size > max_bytes:
                return added, present   # the entry is full: it stops growing
            staged = staging / uuid.uuid4().hex
            shutil.copyfile(path, staged, follow_symlinks=False)
            (dst / rel).mkdir(parents=True, exist_ok=True)
            try:
                os.link(staged, final)   # fails if the file appeared meanwhile: the first writer keeps it
            except FileExistsError:
                present += 1
                continue
            except OSError:              # a filesystem without hard links: rename, unless it appeared
                if os.path.lexists(final):
                    present += 1
                    continue
                os.rename(staged, final)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(staged)
            size += st.st_size
            added += 1
    return added, present


class RenderedPointCache:
    """Inductor/Triton caches of compiled points the harness rendered, one entry per problem (or, with
    ``key_by="rendering"``, per exact rendering: the earlier behaviour, for benchmarks).

    ``root`` must be a folder no measuring child can see (see the module's docstring)."""

    def __init__(self, root: Path, backend: str, device_sha256: str, max_entry_bytes: int = MAX_ENTRY_BYTES,
                 max_total_bytes: int = MAX_TOTAL_BYTES, key_by: str | None = None) -> None:
        self.root = Path(root)
        self.backend, self.device_sha256 = backend, device_sha256
        self.max_entry_bytes, self.max_total_bytes = max_entry_bytes, max_total_bytes
        self.key_by = default_key_by() if key_by is None else key_by
        if self.key_by not in KEY_MODES:
            raise ValueError(f"key_by={self.key_by!r}: expected one of {KEY_MODES}")

    def key_for(self, task: Task, candidate_source: str) -> str | None:
        """The entry's key for an exact rendering of a compiled point of ``task``, else None (any other
        candidate, and uncompiled points, which have nothing to cache). Every compiled point of one
        task has the same key (per problem); with ``key_by="rendering"``, each rendering its own."""
        point = point_of_rendering(task, candidate_source)
        if point is None or point["compile"] == "off":
            return None
        fields = {"renderer": RENDERER, "torch": _torch_version(), "backend": self.backend,
                  "device": self.device_sha256}
        if self.key_by == "rendering":
            fields["text"] = sha256_text(candidate_source)
        else:
            fields["problem"] = task.source_sha256 or sha256_text(task.source)
        return sha256_text(json.dumps(fields, sort_keys=True))[:32]

    def entry(self, key: str) -> Path:
        return self.root / key

    def seed(self, key: str, child_cache: Path) -> int:
        """Copy entry ``key`` (if there is one) into a child's cache folder; the number of files."""
        entry = self.entry(key)
        if not entry.is_dir():
            return 0
        os.utime(entry)   # recently used: trimmed last
        return _copy_files(entry, child_cache, self.max_entry_bytes)[0]

    def keep(self, key: str, child_cache: Path) -> int:
        """Merge a child's cache folder into entry ``key``, file by file (a file the entry holds already
        stays as it is; see :func:`_merge_files`); the number of files added."""
        return self.merge(key, child_cache)[0]

    def merge(self, key: str, child_cache: Path) -> tuple[int, int]:
        """:meth:`keep`, returning (files added, files the entry held already). An entry past
        ``max_entry_bytes`` stops growing; an error stops the merge (what was linked stays: whole files)."""
        if not child_cache.is_dir():
            return 0, 0
        entry = self.entry(key)
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".tmp-{uuid.uuid4().hex}"
        added = present = 0
        try:
            staging.mkdir()
            added, present = _merge_files(child_cache, entry, staging, self.max_entry_bytes)
        except OSError:
            pass
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if entry.is_dir():
            with contextlib.suppress(OSError):
                os.utime(entry)   # recently used: trimmed last
        if added:
            self._trim()
        return added, present

    def _trim(self) -> None:
        """Remove the least recently used entries while the cache holds more than ``max_total_bytes``."""
        sizes: list[tuple[float, int, Path]] = []
        for e in self.root.iterdir():
            if e.is_dir() and not e.name.startswith("."):
                sizes.append((e.stat().st_mtime, _tree_bytes(e), e))
        total = sum(s for _, s, _ in sizes)
        for _, size, e in sorted(sizes):
            if total <= self.max_total_bytes:
                break
            shutil.rmtree(e, ignore_errors=True)
            total -= size


def bound_by_confinement(root: Path, also: tuple[Path, ...] = ()) -> str:
    """Why ``root`` would be visible to a confined child ('' when it is not): inside a path the
    confinement binds (the project, the interpreter's folders, the compilers', the system folders) or
    inside one of ``also`` (the session's work directory, a child's scratch)."""
    from harness.measure.runner import _confine

    real = Path(os.path.realpath(root))
    project = _confine._project_roots()
    bound = [*project, *_confine._python_roots(project), *_confine._compiler_roots(project),
             *(d for d in _confine._SYSTEM_DIRS if os.path.isdir(d)), *(str(p) for p in also)]
    for b in bound:
        rb = Path(os.path.realpath(b))
        if real.is_relative_to(rb):
            return f"the cache root {real} lies in {rb}, which measuring children see"
    return ""


@contextlib.contextmanager
def lend(task: Task, candidate_source: str, worker: Any, backend: str, device_sha256: str,
         root: Path | None = None) -> Iterator[CacheUse]:
    """Around one evaluation's measurement: seed the candidate worker's cache from its problem's entry
    (an exact rendering of a compiled point only), then merge what it compiled into that entry. Yields a :class:`CacheUse`; does nothing for any
    other candidate, an unconfined worker, or a root that children could see. Never raises for the
    cache's own sake."""
    use = CacheUse()
    root = default_root() if root is None else root
    try:
        cache = RenderedPointCache(root, backend, device_sha256) if root is not None else None
    except ValueError as exc:   # a bad ATB_COMPILE_CACHE_KEY: no cache, and say why
        cache, use.why_not = None, str(exc)
    if cache is not None:
        use.key_by = cache.key_by
    key = cache.key_for(task, candidate_source) if cache is not None else None
    scratch = getattr(worker, "scratch", None)
    if use.why_not:
        pass
    elif cache is None:
        use.why_not = f"{ENV} is off"
    elif key is None:
        use.why_not = "not an exact rendering of a compiled point"
    elif scratch is None or not str(getattr(worker, "confinement", "")).startswith("bwrap"):
        use.why_not = "the candidate worker is not confined"
    elif why := bound_by_confinement(cache.root, tuple(Path(p) for p in (getattr(worker, "workdir", None),
                                                                       scratch) if p is not None)):
        use.why_not = why
    if use.why_not or cache is None or key is None or scratch is None:
        yield use
        log.info("compile cache: %s", use.model_dump_json())
        return
    use.key = key
    child_cache = Path(scratch) / CHILD_DIR
    try:
        use.seeded_files = cache.seed(key, child_cache)
    except (OSError, OverflowError) as exc:
        use.why_not = f"seed failed: {type(exc).__name__}"
    try:
        yield use
    finally:
        try:
            use.kept_files, use.already_files = cache.merge(key, child_cache)
        except OSError as exc:
            use.why_not = f"keep failed: {type(exc).__name__}"
        log.info("compile cache: %s", use.model_dump_json())


__all__ = ["CHILD_DIR", "ENV", "KEY_ENV", "KEY_MODES", "CacheUse", "RenderedPointCache", "bound_by_confinement",
           "default_key_by", "default_root", "lend"]
