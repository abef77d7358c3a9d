"""The ``Sandbox`` protocol, and the part of it both backends share: workspace files and output capping.

A backend is one class that starts its confinement and runs commands (``_run``); file access never goes
through the sandbox's own processes. It is done host-side on the bound workspace directory by
``sandbox._safefs``, which follows no link, so the same code (and the same guarantees) serve both
backends, and a tool call costs a system call instead of a process start.
"""

from __future__ import annotations

import os
import shlex
from abc import ABC, abstractmethod
import threading
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from sandbox import _cleanup, _safefs
from sandbox._errors import SandboxClosedError
from sandbox._models import CopyOut, ExecResult, FileEntry, SandboxInfo, SandboxLimits
from sandbox._workspace import Workspace


@runtime_checkable
class Sandbox(Protocol):
    """What the tools and the harness's copy-out step need from a sandbox backend."""

    backend: str
    limits: SandboxLimits

    def info(self) -> SandboxInfo:
        """How this sandbox is confined (backend, limits and the mechanism enforcing each)."""
        ...

    def exec(self, command: Sequence[str] | str, timeout_s: float | None = None) -> ExecResult:
        """Run a command inside, in /workspace, as the unprivileged tuner user.

        ``timeout_s`` is clipped to ``limits.exec_timeout_s`` and to the run's remaining wall-clock time.
        A command that times out, is killed at the memory limit or exhausts the pids limit is a
        result (``timed_out``, ``killed_signal``, ``note``), never an exception. Raises
        ``SandboxClosedError`` when the sandbox is closed or its wall-clock limit has passed.
        """
        ...

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Read a regular workspace file. Raises ``PathOutsideWorkspaceError``, ``WorkspaceFileError``."""
        ...

    def write_file(self, path: str, data: bytes | str) -> int:
        """Create or replace a workspace file. Raises ``PathOutsideWorkspaceError``, ``WorkspaceFileError``."""
        ...

    def list_files(self, path: str = ".", recursive: bool = True, max_entries: int | None = None) -> tuple[list[FileEntry], bool]:
        """List entries (links shown, not followed), at most ``limits.list_max_entries``. Raises ``PathOutsideWorkspaceError``, ``WorkspaceFileError``."""
        ...

    def copy_out(self) -> CopyOut:
        """Copy the workspace's regular files out by content, capped and hashed. Raises ``CopyOutError``."""
        ...

    def close(self) -> None:
        """Stop everything the sandbox runs and delete its workspace. Idempotent."""
        ...


class CappedBuffer:
    """Keeps the first ``cap`` bytes written to it and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: list[bytes] = []
        self.kept = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - self.kept
        if room > 0:
            piece = chunk[:room]
            self.parts.append(piece)
            self.kept += len(piece)

    @property
    def truncated(self) -> bool:
        return self.total > self.kept

    def text(self) -> str:
        return b"".join(self.parts).decode("utf-8", errors="replace")


def normalise_command(command: Sequence[str] | str) -> list[str]:
    """A string is run by ``sh -c``; a sequence is an argv. Raises ``ValueError`` for an empty command."""
    if isinstance(command, str):
        if not command.strip():
            raise ValueError("empty command")
        return ["/bin/sh", "-c", command]
    argv = [str(a) for a in command]
    if not argv:
        raise ValueError("empty command")
    return argv


def describe_kill(exit_code: int | None, timed_out: bool, before: dict[str, int] | None,
                  after: dict[str, int] | None, limits: SandboxLimits, timeout_s: float) -> tuple[int | None, str]:
    """(killed signal, a note a tuner can act on) for a command that did not end on its own."""
    notes: list[str] = []
    signal_no = exit_code - 128 if exit_code is not None and exit_code > 128 else None
    if timed_out:
        notes.append(f"stopped after the {timeout_s:g} s time limit; every process it started was killed")
        signal_no = 9
    if before is not None and after is not None:
        oom = after.get("oom_kill", 0) - before.get("oom_kill", 0)
        forks = after.get("pids_max", 0) - before.get("pids_max", 0)
        if oom > 0:
            notes.append(f"{oom} process(es) killed at the memory limit of {limits.memory_mb} MiB")
        if forks > 0:
            notes.append(f"{forks} fork(s) refused at the limit of {limits.pids_limit} processes")
    elif signal_no == 9 and not timed_out:
        notes.append(f"killed by SIGKILL: probably the memory limit of {limits.memory_mb} MiB")
    return signal_no, "; ".join(notes)


class WorkspaceSandbox(ABC):
    """Shared implementation: workspace file access, wall-clock accounting, registration for cleanup."""

    backend: str = ""

    def __init__(self, limits: SandboxLimits, workspace: Workspace) -> None:
        self.limits = limits
        self.workspace = workspace
        self._started = time.monotonic()
        self._closed = False
        self._close_lock = threading.RLock()  # a signal handler may close while close() runs
        self._cleanup_key = _cleanup.register(self.close)

    # -- wall clock -------------------------------------------------------------------------------
    def remaining_s(self) -> float:
        return self.limits.run_wallclock_s - (time.monotonic() - self._started)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError("the sandbox is closed; open a new one")
        if self.remaining_s() <= 0:
            raise SandboxClosedError(
                f"the run's wall-clock limit of {self.limits.run_wallclock_s:g} s has passed; "
                "the sandbox no longer runs commands"
            )

    def workspace_note(self, note: str) -> str:
        """``note`` plus a line saying the workspace is full, when a command left it (nearly) so."""
        if not self.workspace.capped:
            return note
        try:
            st = os.statvfs(self.workspace.host_path)
        except OSError:
            return note
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        if free > total // 100:
            return note
        full = (f"the workspace is full ({total - free} of its {self.limits.workspace_max_bytes} bytes used); "
                "delete files to write more")
        return f"{note}; {full}" if note else full

    def _clip_timeout(self, timeout_s: float | None) -> float:
        wanted = self.limits.exec_timeout_s if timeout_s is None else float(timeout_s)
        return max(0.1, min(wanted, self.limits.exec_timeout_s, self.remaining_s()))

    # -- files --------------------------------------------------------------------------------------
    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        self._check_open()
        return _safefs.read_file(self.workspace.host_path, path, max_bytes or self.limits.copy_out_max_bytes)

    def write_file(self, path: str, data: bytes | str) -> int:
        self._check_open()
        raw = data.encode() if isinstance(data, str) else bytes(data)
        return _safefs.write_file(self.workspace.host_path, path, raw, self.limits.copy_out_max_bytes,
                                  owner=self.workspace.owner)

    def list_files(self, path: str = ".", recursive: bool = True, max_entries: int | None = None) -> tuple[list[FileEntry], bool]:
        self._check_open()
        cap = min(max_entries or self.limits.list_max_entries, self.limits.list_max_entries)
        return _safefs.list_files(self.workspace.host_path, path, recursive, cap)

    def copy_out(self) -> CopyOut:
        """Kill every process left in the sandbox, then copy the workspace out.

        A process the tuner left running (a background writer) could otherwise rewrite or truncate a
        file while it is read, so what the harness measures would not be what the tuner saw. Nothing
        runs in the sandbox while its files are copied.
        """
        if self._closed:
            raise SandboxClosedError("the sandbox is closed; its workspace is gone")
        self._kill_leftovers()
        return _safefs.copy_out(self.workspace.host_path, self.limits.copy_out_max_bytes,
                                self.limits.copy_out_max_files)

    # -- lifetime -----------------------------------------------------------------------------------
    @abstractmethod
    def _kill_leftovers(self) -> None:
        """SIGKILL every process in the sandbox but its init (after each command and before copy-out),
        so nothing the tuner starts outlives the tool call that started it."""

    @abstractmethod
    def _shutdown(self) -> None:
        """Backend-specific teardown (stop processes); the workspace is deleted afterwards."""

    @abstractmethod
    def exec(self, command: Sequence[str] | str, timeout_s: float | None = None) -> ExecResult:
        """See ``Sandbox.exec``."""

    @abstractmethod
    def info(self) -> SandboxInfo:
        """See ``Sandbox.info``."""

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._shutdown()
        finally:
            self.workspace.destroy()
            _cleanup.unregister(self._cleanup_key)

    def __enter__(self) -> "WorkspaceSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {state} workspace={shlex.quote(str(self.workspace.host_path))}>"
