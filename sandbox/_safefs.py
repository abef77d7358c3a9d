"""Host-side file access confined to a workspace directory, immune to the tuner's symbolic links.

Why this exists: the workspace is a host directory that code inside the sandbox can change at any
moment. A naive ``open(workspace / path)`` in the host process would follow a link the tuner planted
(``candidate.py -> /work/main/harness/...``) and read or overwrite a file outside the sandbox. Every
function here walks the path one component at a time with ``openat(..., O_NOFOLLOW)`` relative to the
parent's descriptor, so no symbolic link is ever followed and a concurrent rename cannot redirect the
walk. Only regular files are read (``O_NONBLOCK`` so a FIFO cannot hang the host); writes go to a fresh
file that is then renamed into place, so a hard or symbolic link at the target is replaced, not
written through.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox._errors import CopyOutError, PathOutsideWorkspaceError, WorkspaceFileError
from sandbox._models import CopiedFile, CopyOut, FileEntry, FileKind, SkippedEntry

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def split_workspace_path(path: str) -> tuple[str, ...]:
    """Split a workspace-relative path into components.

    Accepts ``a/b.py``, ``./a/b.py`` and ``/workspace/a/b.py`` (the path as seen inside the sandbox).
    Raises ``PathOutsideWorkspaceError`` for any other absolute path, a ``..`` component or a NUL byte.
    """
    if not isinstance(path, str):
        raise PathOutsideWorkspaceError(f"path must be a string, got {type(path).__name__}")
    if "\x00" in path:
        raise PathOutsideWorkspaceError("path contains a NUL byte")
    text = path.strip()
    if text == "/workspace" or text.startswith("/workspace/"):
        text = text[len("/workspace"):]
        text = text.lstrip("/")
    elif text.startswith("/") or text.startswith("~"):
        raise PathOutsideWorkspaceError(
            f"{path!r} is outside the workspace: give a path relative to the workspace (e.g. 'candidate.py')"
        )
    parts = tuple(p for p in text.split("/") if p not in ("", "."))
    if ".." in parts:
        raise PathOutsideWorkspaceError(f"{path!r} climbs out of the workspace with '..'; '..' is not allowed")
    return parts


class _TooLarge(WorkspaceFileError):
    """A file is over the byte cap of the read that met it."""


def _kind(mode: int) -> FileKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _open_component_dir(parent_fd: int, name: str, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        raise WorkspaceFileError(f"no such directory in the workspace: {shown!r}") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise PathOutsideWorkspaceError(
                    f"{shown!r} is a symbolic link; links are never followed"
                ) from None
            raise WorkspaceFileError(f"{shown!r} is not a directory") from None
        raise


@contextmanager
def _walk_to_parent(root: Path, parts: tuple[str, ...], create: bool = False,
                    owner: tuple[int, int] | None = None) -> Iterator[int]:
    """Yield a descriptor of the directory holding ``parts[-1]`` (of ``parts`` itself when empty)."""
    fd = os.open(str(root), _DIR_FLAGS)
    try:
        for i, name in enumerate(parts[:-1]):
            shown = "/".join(parts[: i + 1])
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                    if owner is not None:
                        os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            nxt = _open_component_dir(fd, name, shown)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def read_file(root: Path, path: str, max_bytes: int) -> bytes:
    """Read one regular workspace file without following links.

    Raises ``PathOutsideWorkspaceError`` (link, traversal), ``WorkspaceFileError`` (missing, not a
    regular file, larger than ``max_bytes``).
    """
    parts = split_workspace_path(path)
    if not parts:
        raise WorkspaceFileError("give a file path, not the workspace itself")
    with _walk_to_parent(root, parts) as dfd:
        return _read_regular(dfd, parts[-1], "/".join(parts), max_bytes)


def _read_regular(dfd: int, name: str, shown: str, max_bytes: int) -> bytes:
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        raise WorkspaceFileError(f"no such file in the workspace: {shown!r}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathOutsideWorkspaceError(f"{shown!r} is a symbolic link; links are never followed") from None
        raise WorkspaceFileError(f"cannot open {shown!r}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceFileError(f"{shown!r} is a {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise _TooLarge(f"{shown!r} is {st.st_size} bytes, over the cap of {max_bytes}")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise _TooLarge(f"{shown!r} grew past the cap of {max_bytes} bytes while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_file(root: Path, path: str, data: bytes, max_bytes: int,
               owner: tuple[int, int] | None = None) -> int:
    """Write ``data`` to a workspace file (creating parent directories), never through a link.

    The bytes go to a new temporary file in the target's directory, which is then renamed over the
    target: an existing link at the target is replaced, its destination untouched. ``owner`` (uid, gid)
    is applied so that the sandbox user can edit the file afterwards. Returns the bytes written.
    Raises ``PathOutsideWorkspaceError``, ``WorkspaceFileError`` (too large, target is a directory,
    workspace full).
    """
    parts = split_workspace_path(path)
    if not parts:
        raise WorkspaceFileError("give a file path, not the workspace itself")
    if len(data) > max_bytes:
        raise WorkspaceFileError(f"{len(data)} bytes is over the write cap of {max_bytes} bytes")
    name = parts[-1]
    shown = "/".join(parts)
    with _walk_to_parent(root, parts, create=True, owner=owner) as dfd:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise WorkspaceFileError(f"{shown!r} is a directory")
        except FileNotFoundError:
            pass
        tmp = f".atb-write-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if owner is not None:
                    os.fchown(fd, *owner)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError as exc:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise WorkspaceFileError("the workspace is full (its size is capped); delete files first") from None
            raise WorkspaceFileError(f"cannot write {shown!r}: {exc.strerror}") from None
    return len(data)


def list_files(root: Path, path: str = ".", recursive: bool = True, max_entries: int = 512) -> tuple[list[FileEntry], bool]:
    """List workspace entries under ``path`` without following links.

    Returns (entries sorted by path, truncated). Raises ``PathOutsideWorkspaceError``,
    ``WorkspaceFileError`` (not a directory).
    """
    parts = split_workspace_path(path)
    entries: list[FileEntry] = []
    truncated = False
    with _walk_to_parent(root, parts + ("",)) as start_fd:
        stack: list[tuple[int, str]] = [(os.dup(start_fd), "/".join(parts))]
        try:
            while stack:
                dfd, prefix = stack.pop()
                try:
                    with os.scandir(dfd) as it:
                        items = sorted(it, key=lambda e: e.name)
                    for entry in items:
                        rel = f"{prefix}/{entry.name}" if prefix else entry.name
                        st = entry.stat(follow_symlinks=False)
                        kind = _kind(st.st_mode)
                        if len(entries) >= max_entries:
                            truncated = True
                            break
                        entries.append(FileEntry(path=rel, kind=kind, size=st.st_size if kind == "file" else 0))
                        if kind == "dir" and recursive:
                            try:
                                stack.append((os.open(entry.name, _DIR_FLAGS, dir_fd=dfd), rel))
                            except OSError:
                                continue
                finally:
                    os.close(dfd)
                if truncated:
                    break
        finally:
            for dfd, _ in stack:
                os.close(dfd)
    entries.sort(key=lambda e: e.path)
    return entries, truncated


def copy_out(root: Path, max_bytes: int, max_files: int) -> CopyOut:
    """Copy every regular file out of the workspace by content, hashed.

    Symbolic links, FIFOs, sockets and devices are skipped (reported in ``skipped``), never followed;
    directories are walked through descriptors opened with ``O_NOFOLLOW``. Raises ``CopyOutError``
    when the workspace holds more than ``max_files`` entries or more than ``max_bytes`` bytes in files,
    so a partial copy is never mistaken for the candidate.
    """
    files: dict[str, bytes] = {}
    manifest: list[CopiedFile] = []
    skipped: list[SkippedEntry] = []
    total = 0
    seen = 0
    root_fd = os.open(str(root), _DIR_FLAGS)
    stack: list[tuple[int, str]] = [(root_fd, "")]
    try:
        while stack:
            dfd, prefix = stack.pop()
            try:
                with os.scandir(dfd) as it:
                    names = sorted(e.name for e in it)
                for name in names:
                    rel = f"{prefix}/{name}" if prefix else name
                    seen += 1
                    if seen > max_files:
                        raise CopyOutError(
                            f"the workspace holds more than {max_files} entries (the copy-out cap); "
                            "delete scratch files before submitting"
                        )
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        try:
                            stack.append((os.open(name, _DIR_FLAGS, dir_fd=dfd), rel))
                        except OSError as exc:
                            skipped.append(SkippedEntry(path=rel, reason=f"directory not readable: {exc.strerror}"))
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        skipped.append(SkippedEntry(path=rel, reason=f"{_kind(st.st_mode)}, not a regular file"))
                        continue
                    try:
                        data = _read_regular(dfd, name, rel, max_bytes - total)
                    except PathOutsideWorkspaceError:
                        skipped.append(SkippedEntry(path=rel, reason="became a symbolic link; not followed"))
                        continue
                    except _TooLarge:
                        raise CopyOutError(
                            f"the workspace's files exceed the copy-out cap of {max_bytes} bytes at {rel!r}; "
                            "delete large scratch files before submitting"
                        ) from None
                    except WorkspaceFileError as exc:
                        skipped.append(SkippedEntry(path=rel, reason=str(exc)))
                        continue
                    total += len(data)
                    files[rel] = data
                    manifest.append(CopiedFile(path=rel, size=len(data), sha256=hashlib.sha256(data).hexdigest()))
            finally:
                os.close(dfd)
    finally:
        for dfd, _ in stack:
            os.close(dfd)
    manifest.sort(key=lambda f: f.path)
    digest = hashlib.sha256("".join(f"{f.path}\0{f.sha256}\n" for f in manifest).encode()).hexdigest()
    return CopyOut(files=files, manifest=manifest, skipped=skipped, total_bytes=total, sha256=digest)
