"""Whether a process is still running, read from /proc: shared by the tests that watch measuring workers
start and end (a zombie counts as gone, since it runs nothing and holds no GPU or file)."""

from __future__ import annotations


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
