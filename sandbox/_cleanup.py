"""Sandboxes are always removed: at close, at interpreter exit, on SIGTERM/SIGHUP, and by label.

Three layers, because a run can end in three ways:
* normally or by an exception: ``Sandbox.close()`` (also via ``with``);
* by SIGTERM/SIGHUP, Ctrl-C or interpreter exit: the registry below closes every live sandbox;
* by SIGKILL or a crash of the host: nothing in-process runs, so each container's init is a ``sleep``
  of ``run_wallclock_s`` with ``auto_remove`` (the daemon removes it at the deadline by itself), and
  ``cleanup_leftovers()`` (``atb sandbox cleanup``) removes labelled containers, workspaces and cgroups
  whose owner process is gone.
"""

from __future__ import annotations

import atexit
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import BaseModel, ConfigDict

from sandbox._cgroup import pid_alive, stale_cgroups
from sandbox._identity import LABEL, LABEL_OWNER_HOST, LABEL_OWNER_PID

_lock = threading.RLock()  # re-entered when a signal arrives while the registry is held
_live: dict[int, Callable[[], None]] = {}
_installed = False
_previous: dict[int, Any] = {}


def register(closer: Callable[[], None]) -> int:
    """Remember a sandbox's close function until ``unregister``; installs the exit hooks once."""
    global _installed
    with _lock:
        key = id(closer)
        _live[key] = closer
        if not _installed:
            _installed = True
            atexit.register(close_all)
            _install_signal_handlers()
    return key


def unregister(key: int) -> None:
    with _lock:
        _live.pop(key, None)


def close_all() -> None:
    """Close every live sandbox (errors are swallowed: this runs while the process is ending)."""
    with _lock:
        closers = list(_live.values())
        _live.clear()
    for closer in closers:
        try:
            closer()
        except Exception:  # noqa: BLE001 - best effort at exit; label cleanup catches the rest
            pass


def _handler(signum: int, frame: FrameType | None) -> None:
    close_all()
    previous = _previous.get(signum)
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN:
            continue
        _previous[signum] = current if current not in (signal.SIG_DFL, signal.default_int_handler) else None
        signal.signal(signum, _handler)


class CleanupReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    containers_removed: list[str]
    workspaces_removed: list[str]
    cgroups_removed: list[str]
    docker_checked: bool
    docker_note: str


def _stale_workspaces(base: Path, everything: bool) -> list[Path]:
    out: list[Path] = []
    if not base.is_dir():
        return out
    for d in base.glob("atb-ws-*"):
        owner = d.name.split("-")[2] if d.name.count("-") >= 3 else ""
        if d.is_dir() and owner.isdigit() and (everything or not pid_alive(int(owner))):
            out.append(d)
    return out


def cleanup_leftovers(everything: bool = False, workspace_base: Path | None = None) -> CleanupReport:
    """Remove sandboxes left by runs that died; with ``everything``, also those of live runs on this host.

    Never raises for an absent daemon: ``docker_checked`` and ``docker_note`` say what happened.
    """
    import shutil
    import socket
    import subprocess

    host = socket.gethostname()
    removed: list[str] = []
    note = ""
    checked = False
    try:
        import docker
        import requests

        client = docker.from_env(timeout=30)
        client.ping()
        checked = True
        for c in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
            labels = c.labels
            owner = labels.get(LABEL_OWNER_PID, "")
            same_host = labels.get(LABEL_OWNER_HOST) == host
            stale = not same_host or not owner.isdigit() or not pid_alive(int(owner))
            if everything or stale:
                try:
                    c.remove(force=True)
                    removed.append(c.name)
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as exc:
                    if "already in progress" not in str(exc):
                        raise
                except requests.exceptions.ReadTimeout:
                    pass  # the daemon goes on removing it (vfs under load); ``containers_owned_by`` sees when
        client.close()
    except Exception as exc:  # noqa: BLE001 - the daemon may be absent; say so and go on
        note = f"docker not checked: {type(exc).__name__}: {exc}"
    base = workspace_base or Path(os.environ.get("ATB_SANDBOX_WORKDIR", tempfile.gettempdir()))
    ws_removed: list[str] = []
    for d in _stale_workspaces(base, everything):
        mount = d / "workspace"
        if os.path.ismount(mount):
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)
        shutil.rmtree(d, ignore_errors=True)
        ws_removed.append(str(d))
    cg_removed: list[str] = []
    for d in stale_cgroups():
        try:
            d.rmdir()
            cg_removed.append(str(d))
        except OSError:
            continue
    return CleanupReport(containers_removed=removed, workspaces_removed=ws_removed, cgroups_removed=cg_removed,
                         docker_checked=checked, docker_note=note)


def containers_owned_by(pids: Iterable[int]) -> list[str]:
    """Names of the labelled sandbox containers of this host whose owner is one of ``pids``, in any state
    (a container being created or removed included); empty where no daemon answers.

    Why: one ``cleanup_leftovers`` pass does not settle a killed run. Its removal request can time out while
    the daemon goes on removing (vfs under load), and a process still dying keeps its sandbox out of that
    pass; whoever reaps a killed run asks again until none of its containers is left.
    """
    wanted = {str(p) for p in pids}
    if not wanted:
        return []
    import socket

    try:
        import docker

        client = docker.from_env(timeout=30)
        try:
            found = client.containers.list(all=True, filters={"label": f"{LABEL}=1"})
            host = socket.gethostname()
            return sorted(c.name for c in found
                          if c.labels.get(LABEL_OWNER_PID) in wanted and c.labels.get(LABEL_OWNER_HOST) == host)
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - no daemon (or it did not answer): nothing this host can list
        return []
