"""A control group for the bubblewrap backend: memory, pids and CPU limits, and killing what is left.

Docker puts each container in its own cgroup; bubblewrap does not, so this module makes one per
sandbox when this process may (root with a writable cgroup filesystem, v1 or v2). The kernel then
enforces the limits on every process the sandbox starts, and ``kill_all`` ends stragglers that left
their process group. ``events`` reads the kernel's counters of OOM kills and refused forks, which is how
a contained memory hog or fork bomb is *reported*, not only stopped.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PARENT = "atb-sandbox"


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read_kv(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, val = line.partition(" ")
            if val.strip().lstrip("-").isdigit():
                out[key] = int(val)
    except OSError:
        pass
    return out


class Cgroup:
    """One cgroup (v1: one directory per controller; v2: one directory) named ``atb-sandbox/NAME``."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs

    @classmethod
    def create(cls, name: str, memory_bytes: int, pids: int, cpus: float) -> "Cgroup | None":
        """Make and configure the cgroup; None when this process cannot (not root, read-only cgroupfs)."""
        if os.geteuid() != 0:
            return None
        try:
            if (CGROUP_ROOT / "memory" / "memory.limit_in_bytes").exists():
                dirs = {c: CGROUP_ROOT / c / GROUP_PARENT / name for c in ("memory", "pids", "cpu")}
                for d in dirs.values():
                    d.mkdir(parents=True, exist_ok=True)
                _write(dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
                swap = dirs["memory"] / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    _write(swap, str(memory_bytes))
                _write(dirs["pids"] / "pids.max", str(pids))
                _write(dirs["cpu"] / "cpu.cfs_period_us", "100000")
                _write(dirs["cpu"] / "cpu.cfs_quota_us", str(int(cpus * 100000)))
                return cls(1, dirs)
            if (CGROUP_ROOT / "cgroup.controllers").exists():
                parent = CGROUP_ROOT / GROUP_PARENT
                parent.mkdir(exist_ok=True)
                _write(CGROUP_ROOT / "cgroup.subtree_control", "+memory +pids +cpu")
                _write(parent / "cgroup.subtree_control", "+memory +pids +cpu")
                d = parent / name
                d.mkdir(exist_ok=True)
                _write(d / "memory.max", str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
                _write(d / "pids.max", str(pids))
                _write(d / "cpu.max", f"{int(cpus * 100000)} 100000")
                return cls(2, {"memory": d, "pids": d, "cpu": d})
        except OSError:
            return None
        return None

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a new process writes its pid into (before it execs)."""
        return sorted({str(d / "cgroup.procs") for d in self.dirs.values()})

    def pids(self) -> set[int]:
        found: set[int] = set()
        for f in self.procs_files():
            try:
                found.update(int(x) for x in Path(f).read_text().split())
            except OSError:
                continue
        return found

    def kill_all(self, wait_s: float = 5.0) -> int:
        """SIGKILL every process in the cgroup until none is left; returns how many were signalled."""
        killed = 0
        deadline = time.monotonic() + wait_s
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > deadline:
                return killed
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def events(self) -> dict[str, int]:
        """Kernel counters: ``oom_kill`` (processes killed at the memory limit), ``pids_max`` (forks refused)."""
        if self.version == 1:
            oom = _read_kv(self.dirs["memory"] / "memory.oom_control").get("oom_kill", 0)
        else:
            oom = _read_kv(self.dirs["memory"] / "memory.events").get("oom_kill", 0)
        pids_max = _read_kv(self.dirs["pids"] / "pids.events").get("max", 0)
        return {"oom_kill": oom, "pids_max": pids_max}

    def destroy(self) -> None:
        self.kill_all()
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def docker_container_counters(container_id: str) -> dict[str, int] | None:
    """The same counters for a Docker container's cgroup, when the host's cgroupfs is readable."""
    candidates = [
        (CGROUP_ROOT / "memory" / "docker" / container_id / "memory.oom_control",
         CGROUP_ROOT / "pids" / "docker" / container_id / "pids.events"),
        (CGROUP_ROOT / "system.slice" / f"docker-{container_id}.scope" / "memory.events",
         CGROUP_ROOT / "system.slice" / f"docker-{container_id}.scope" / "pids.events"),
        (CGROUP_ROOT / "docker" / container_id / "memory.events",
         CGROUP_ROOT / "docker" / container_id / "pids.events"),
    ]
    for mem, pids in candidates:
        if mem.exists():
            return {"oom_kill": _read_kv(mem).get("oom_kill", 0), "pids_max": _read_kv(pids).get("max", 0)}
    return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_cgroups() -> list[Path]:
    """Leftover ``atb-sandbox/PID-*`` cgroup directories whose owner process is gone."""
    out: list[Path] = []
    for parent in (CGROUP_ROOT / "memory" / GROUP_PARENT, CGROUP_ROOT / "pids" / GROUP_PARENT,
                   CGROUP_ROOT / "cpu" / GROUP_PARENT, CGROUP_ROOT / GROUP_PARENT):
        if not parent.is_dir():
            continue
        for d in parent.iterdir():
            owner = d.name.split("-", 1)[0]
            if d.is_dir() and owner.isdigit() and not pid_alive(int(owner)):
                out.append(d)
    return out
