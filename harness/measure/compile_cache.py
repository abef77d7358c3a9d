"""A compile cache shared only among the harness's own renderings of compiled points (issue 26).

Why: a compiled random-search point spends most of its evaluation in Inductor's first-call compile,
and each measuring child's Inductor and Triton caches live in its private scratch, so a point
evaluated again (another seed's draw of the same point, a resumed campaign redoing its cut point, a
retest or remeasure) compiled from nothing every time.

Why only exact renderings: Inductor's on-disk cache holds generated Python modules and shared
libraries that a later compile loads and runs. A cache entry planted by candidate code would run inside
another evaluation's measuring child, where it could change what that child times or reports. So an
entry is keyed by the rendered file's exact text (:func:`harness.tasks._module_space.point_of_rendering`
re-renders it; one byte changed and there is no key) with the renderer, the torch version, the backend
and the device fingerprint, and:

* a child never sees the shared folder: the parent copies an entry's files into the child's scratch
  before ``load`` (:meth:`RenderedPointCache.seed`) and copies that child's cache back afterwards
  (:meth:`RenderedPointCache.keep`), regular files only, first writer wins, written beside and renamed;
* only a child whose candidate is an exact rendering of a compiled point is seeded or copied back; an
  agent's candidate (any other text) gets neither, so it can neither read an entry nor plant one;
* only confined children take part: an unconfined child could write the shared folder itself, and the
  cache's root must lie outside everything the confinement binds (checked, else the cache is off).

The cache changes only the untimed first call; a compile from a hit runs the same generated code.
``ATB_COMPILE_CACHE`` names the root (``off`` turns it off); the default is
``~/.cache/autotunebench/compile-cache``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
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
#: the folder under a child's scratch that holds its Inductor and Triton caches (set in _child.py)
CHILD_DIR = "compile-cache"
#: an entry larger than this is not kept; the whole cache is trimmed, oldest first, past MAX_TOTAL_BYTES
MAX_ENTRY_BYTES = 512 << 20
MAX_TOTAL_BYTES = 4 << 30


class CacheUse(BaseModel):
    """What the cache did for one evaluation (for benchmarks and logs; never part of a verdict)."""

    model_config = ConfigDict(extra="forbid")

    key: str = ""            # "" when the candidate is not an exact rendering of a compiled point
    seeded_files: int = 0    # files copied into the child before load (0: a miss)
    kept_files: int = 0      # files copied back into a new entry after the evaluation
    why_not: str = ""        # why the cache was not used, when it was not


def default_root() -> Path | None:
    """The cache's root from ``ATB_COMPILE_CACHE``, or None when it is turned off."""
    given = os.environ.get(ENV, "").strip()
    if given.lower() in ("off", "0", "none", "false"):
        return None
    return Path(given).expanduser() if given else Path.home() / ".cache" / "autotunebench" / "compile-cache"


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


class RenderedPointCache:
    """Inductor/Triton caches of compiled points the harness rendered, one entry per exact rendering.

    ``root`` must be a folder no measuring child can see (see the module's docstring)."""

    def __init__(self, root: Path, backend: str, device_sha256: str, max_entry_bytes: int = MAX_ENTRY_BYTES,
                 max_total_bytes: int = MAX_TOTAL_BYTES) -> None:
        self.root = Path(root)
        self.backend, self.device_sha256 = backend, device_sha256
        self.max_entry_bytes, self.max_total_bytes = max_entry_bytes, max_total_bytes

    def key_for(self, task: Task, candidate_source: str) -> str | None:
        """The entry's key for an exact rendering of a compiled point of ``task``, else None (any other
        candidate, and uncompiled points, which have nothing to cache)."""
        point = point_of_rendering(task, candidate_source)
        if point is None or point["compile"] == "off":
            return None
        return sha256_text(json.dumps({"renderer": RENDERER, "text": sha256_text(candidate_source),
                                       "torch": _torch_version(), "backend": self.backend,
                                       "device": self.device_sha256}, sort_keys=True))[:32]

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
        """Copy a child's cache folder into a new entry ``key`` unless one exists (first writer wins;
        a concurrent writer's rename loses quietly); the number of files kept."""
        if self.entry(key).exists() or not child_cache.is_dir():
            return 0
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{uuid.uuid4().hex}"
        try:
            files, _ = _copy_files(child_cache, tmp, self.max_entry_bytes)
            if files == 0:
                return 0
            os.rename(tmp, self.entry(key))
        except (OSError, OverflowError):
            return 0
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._trim()
        return files

    def _trim(self) -> None:
        """Remove the least recently used entries while the cache holds more than ``max_total_bytes``."""
        sizes: list[tuple[float, int, Path]] = []
        for e in self.root.iterdir():
            if e.is_dir() and not e.name.startswith("."):
                size = sum(f.stat().st_size for f in e.rglob("*") if f.is_file() and not f.is_symlink())
                sizes.append((e.stat().st_mtime, size, e))
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
    """Around one evaluation's measurement: seed the candidate worker's cache from the entry of an
    exact rendering, then keep what it compiled. Yields a :class:`CacheUse`; does nothing for any
    other candidate, an unconfined worker, or a root that children could see. Never raises for the
    cache's own sake."""
    use = CacheUse()
    root = default_root() if root is None else root
    cache = RenderedPointCache(root, backend, device_sha256) if root is not None else None
    key = cache.key_for(task, candidate_source) if cache is not None else None
    scratch = getattr(worker, "scratch", None)
    if cache is None:
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
            use.kept_files = cache.keep(key, child_cache)
        except OSError as exc:
            use.why_not = f"keep failed: {type(exc).__name__}"
        log.info("compile cache: %s", use.model_dump_json())


__all__ = ["CHILD_DIR", "ENV", "CacheUse", "RenderedPointCache", "bound_by_confinement", "default_root", "lend"]
