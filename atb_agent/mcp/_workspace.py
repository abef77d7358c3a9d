"""Where an MCP campaign's workspace outlives the server process: a folder the server owns, and its lock.

Why: a client that opens one MCP session per tool call (LangGraph's MCP adapter by default, with
``client.get_tools()``) starts a new ``atb mcp serve`` for every call over stdio, and any client loses its
server when it is restarted. The campaign is in the store and its calls are in the call log, but the
sandbox's workspace dies with the process. So after every call that can change the workspace the server
copies the workspace's regular files into ``<dir of --db>/mcp_workspaces/<run id>/`` and logs their
digest; the next server that takes the campaign up loads that folder into its fresh sandbox when its
digest is the last one logged (the workspace is *kept*, effects of ``run_in_sandbox`` included), and
otherwise rebuilds it from the logged file writes.

One server at a time holds a campaign: ``<run id>.lock`` beside the folder is an exclusive ``flock``
held from the moment a server takes the campaign up until it closes, so two per-call servers started at
once (a client running two tool calls in parallel) take turns instead of interleaving in the call log.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path
from typing import Any

from atb_agent.errors import CampaignError
from harness.records import canonical_json, sha256_bytes, sha256_text

WORKSPACES_DIR = "mcp_workspaces"

# Tools whose successful calls write the workspace's files: re-applied, in order, to rebuild a workspace
# that could not be kept (and by replay after a ``rebuilt`` resume record).
WORKSPACE_WRITERS = ("write_file", "edit_file", "set_flags")
# Tools whose calls can change the workspace at all (run_in_sandbox runs commands in it): after each, the
# workspace is copied to its folder and its digest logged.
WORKSPACE_CHANGERS = (*WORKSPACE_WRITERS, "run_in_sandbox")


class CampaignBusy(CampaignError):
    """Another ``atb mcp serve`` holds the campaign and did not let go in time."""


def workspace_home(store_path: Path) -> Path:
    """Workspace folders live beside the store, like the call logs: ``<dir of --db>/mcp_workspaces``."""
    return store_path.resolve().parent / WORKSPACES_DIR


def manifest_sha256(files: dict[str, bytes]) -> str:
    """Digest of a workspace's regular files: SHA-256 of the canonical JSON of ``[[path, sha256], ...]``, sorted."""
    return sha256_text(canonical_json(sorted([p, sha256_bytes(data)] for p, data in files.items())))


def snapshot(sandbox: Any) -> dict[str, bytes] | None:
    """The sandbox workspace's regular files (path -> bytes), read host-side through the sandbox's own
    confined file access (links are never followed). None when the workspace cannot be taken whole (more
    entries than a listing holds, or a file over the copy-out cap): the next server rebuilds it instead."""
    limits = sandbox.limits
    entries, truncated = sandbox.list_files(".", True, limits.list_max_entries)
    if truncated:
        return None
    files: dict[str, bytes] = {}
    total = 0
    for e in entries:
        if e.kind != "file":
            continue
        if e.size > limits.copy_out_max_bytes:
            return None
        data = sandbox.read_file(e.path, limits.copy_out_max_bytes)
        total += len(data)
        if total > limits.copy_out_max_bytes or len(files) >= limits.copy_out_max_files:
            return None
        files[e.path] = data
    return files


def load_into(sandbox: Any, files: dict[str, bytes]) -> None:
    """Write ``files`` into the (fresh, empty) sandbox workspace."""
    for path in sorted(files):
        sandbox.write_file(path, files[path])


def _safe_parts(path: str) -> list[str]:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise CampaignError(f"workspace path {path!r} cannot be kept in the workspace folder")
    return parts


class WorkspaceFolder:
    """``<home>/<run id>/``: the campaign's workspace as plain files, replaced whole on every save."""

    def __init__(self, home: Path, campaign_id: str) -> None:
        self.home = home
        self.campaign_id = campaign_id
        self.path = home / campaign_id

    def save(self, files: dict[str, bytes]) -> None:
        """Replace the folder's content with ``files``: written beside it, then swapped in by rename."""
        self.home.mkdir(parents=True, exist_ok=True)
        new = self.home / f".{self.campaign_id}.new-{os.getpid()}"
        old = self.home / f".{self.campaign_id}.old-{os.getpid()}"
        shutil.rmtree(new, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
        new.mkdir(mode=0o700)
        for path, data in files.items():
            target = new.joinpath(*_safe_parts(path))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if self.path.exists():
            os.rename(self.path, old)
        os.rename(new, self.path)
        shutil.rmtree(old, ignore_errors=True)

    def load(self) -> dict[str, bytes] | None:
        """The folder's regular files, or None when there is no folder. Links are not followed."""
        if not self.path.is_dir():
            return None
        out: dict[str, bytes] = {}
        for dirpath, dirnames, filenames in os.walk(self.path, followlinks=False):
            for name in filenames:
                full = Path(dirpath) / name
                if full.is_symlink() or not full.is_file():
                    continue
                out[full.relative_to(self.path).as_posix()] = full.read_bytes()
        return out

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class CampaignLock:
    """An exclusive ``flock`` on ``<home>/<run id>.lock``, held by the one server working on the campaign."""

    def __init__(self, home: Path, campaign_id: str) -> None:
        self.path = home / f"{campaign_id}.lock"
        self.campaign_id = campaign_id
        self._fd: int | None = None

    def acquire(self, wait_s: float) -> None:
        """Take the lock, waiting up to ``wait_s`` seconds for another server to let go.

        Raises:
            CampaignBusy: another server still holds it after ``wait_s`` (the message names its pid).
        """
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                    os.close(fd)
                    raise CampaignBusy(
                        f"campaign {self.campaign_id} is in use by another `atb mcp serve` (pid {holder}) and was not "
                        f"released within {wait_s:g} s; one server works on a campaign at a time") from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None


__all__ = ["WORKSPACES_DIR", "WORKSPACE_CHANGERS", "WORKSPACE_WRITERS", "CampaignBusy", "CampaignLock", "WorkspaceFolder", "load_into", "manifest_sha256",
           "snapshot", "workspace_home"]
