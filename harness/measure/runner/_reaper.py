"""Leftovers of a harness that died: its measuring children and its scratch directories.

Why: a harness killed with ``SIGKILL`` runs no cleanup. Its children die with it (``PR_SET_PDEATHSIG``,
bwrap's ``--die-with-parent`` and PID namespace), but its scratch directories stay, and an
unconfined child's descendants could outlive it and hold GPU memory (58 GB was seen held by three
orphans, issue 13). Each scratch directory therefore carries an owner marker (the harness's pid and
its start time, so a reused pid is not mistaken for the owner), each child's environment carries
``ATB_CHILD_OWNER`` with the same pair, and :func:`reap_stale` (run once per harness process, on the
first child spawned) kills the processes and removes the directories whose owner is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

OWNER_FILE = ".atb-owner"
OWNER_ENV = "ATB_CHILD_OWNER"
SCRATCH_PREFIXES = ("atb-child-", "atb-measure-")
_reaped = [False]


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def owner_token(pid: int | None = None) -> str:
    """``PID:STARTTIME`` of this process (or ``pid``)."""
    p = os.getpid() if pid is None else pid
    return f"{p}:{process_start_time(p) or 0}"


def token_alive(token: str) -> bool:
    """Whether the process named by an owner token is still the same live process."""
    try:
        pid_s, start_s = token.split(":", 1)
        pid, start = int(pid_s), int(start_s)
    except ValueError:
        return False
    now = process_start_time(pid)
    return now is not None and (start == 0 or now == start)


def claim(directory: Path) -> None:
    """Mark ``directory`` as owned by this process, unless it already has an owner."""
    marker = Path(directory) / OWNER_FILE
    if marker.exists():
        return
    try:
        marker.write_text(json.dumps({"owner": owner_token()}))
    except OSError:
        pass


def _dir_owner(directory: Path) -> str | None:
    try:
        return str(json.loads((directory / OWNER_FILE).read_text())["owner"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def orphan_pids() -> list[int]:
    """Processes whose environment names a harness owner that is no longer alive."""
    found: list[int] = []
    key = OWNER_ENV.encode() + b"="
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry.name}/environ").read_bytes()
        except OSError:
            continue
        for item in env.split(b"\0"):
            if item.startswith(key):
                if not token_alive(item[len(key):].decode("ascii", "replace")):
                    found.append(int(entry.name))
                break
    return found


def reap_stale(base: Path | None = None) -> tuple[list[int], list[str]]:
    """Kill orphaned measuring children and remove scratch directories of dead harness processes.

    Returns (pids killed, directories removed). Directories without an owner marker are left alone:
    they may belong to a harness older than this rule, or to something else entirely.
    """
    killed: list[int] = []
    for pid in orphan_pids():
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    removed: list[str] = []
    root = Path(base or tempfile.gettempdir())
    try:
        entries = list(os.scandir(root))
    except OSError:
        entries = []
    for entry in entries:
        if not entry.name.startswith(SCRATCH_PREFIXES) or not entry.is_dir(follow_symlinks=False):
            continue
        owner = _dir_owner(Path(entry.path))
        if owner is not None and not token_alive(owner):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return killed, removed


def reap_once() -> None:
    """:func:`reap_stale` the first time a harness process spawns a child; later calls do nothing."""
    if not _reaped[0]:
        _reaped[0] = True
        reap_stale()
