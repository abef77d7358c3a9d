"""The one writable directory of a sandbox: a host directory bound into the sandbox at /workspace.

When this process may mount (root), the workspace is a tmpfs of exactly ``workspace_max_bytes``, so a
disk filler inside the sandbox meets ENOSPC instead of filling the host's disk. Without that right it
is a plain directory and ``capped`` says so (``atb sandbox status`` reports it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from sandbox._errors import SandboxError


class Workspace:
    """A host directory owned by the sandbox user; ``destroy()`` unmounts and deletes it."""

    def __init__(self, host_path: Path, capped: bool, owner: tuple[int, int] | None) -> None:
        self.host_path = host_path
        self.capped = capped
        self.owner = owner
        self._mounted = capped
        self._destroyed = False

    def destroy(self) -> None:
        """Unmount (lazily when still busy) and delete the workspace; safe to call twice."""
        if self._destroyed:
            return
        self._destroyed = True
        if self._mounted:
            done = subprocess.run(["umount", str(self.host_path)], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(self.host_path)], capture_output=True, check=False)
        shutil.rmtree(self.host_path.parent, ignore_errors=True)


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


def create_workspace(max_bytes: int, owner: tuple[int, int], base_dir: Path | None = None) -> Workspace:
    """Make a fresh workspace; capped (tmpfs) when this process may mount, else a plain directory.

    ``owner`` is the (uid, gid) the sandbox's commands run as. Raises ``SandboxError`` when the tmpfs
    cannot be mounted although this process is root.
    """
    base = base_dir or Path(os.environ.get("ATB_SANDBOX_WORKDIR", tempfile.gettempdir()))
    base.mkdir(parents=True, exist_ok=True)
    holder = Path(tempfile.mkdtemp(prefix=f"atb-ws-{os.getpid()}-", dir=base))
    os.chmod(holder, 0o711)
    path = holder / "workspace"
    path.mkdir()
    if _can_mount():
        opts = f"size={max_bytes},uid={owner[0]},gid={owner[1]},mode=0755,nosuid,nodev"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "atb-workspace", str(path)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            shutil.rmtree(holder, ignore_errors=True)
            raise SandboxError(f"could not mount the workspace tmpfs at {path}: {done.stderr.strip()}")
        return Workspace(path, capped=True, owner=owner)
    if os.geteuid() == 0:
        os.chown(path, *owner)
        return Workspace(path, capped=False, owner=owner)
    os.chmod(path, 0o777)
    return Workspace(path, capped=False, owner=None)
