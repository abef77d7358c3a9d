"""The bubblewrap backend, for machines where no Docker daemon answers. Same interface, same confinement.

Each command is one ``bwrap`` process over the same root filesystem the Docker image was imported from
(mounted read-only), with the workspace as the only writable bind, a size-capped private /tmp, every namespace
unshared (so no network but a down loopback), all capabilities dropped and no nested user namespaces.
The tuner's commands run as the same unprivileged uid as in Docker: as root this process switches to
it before starting bwrap, so the sandbox never holds host-root's file ownership. A per-sandbox cgroup
(when this process may make one) enforces the memory, pids and CPU limits, as Docker's does; without
one, RLIMIT_NPROC and RLIMIT_AS stand in and ``info()`` says so.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from io import BufferedReader

from sandbox._base import CappedBuffer, WorkspaceSandbox, describe_kill, normalise_command
from sandbox._cgroup import Cgroup
from sandbox._docker import exec_environment, file_size_cap
from sandbox._errors import ImageMissingError, SandboxUnavailableError
from sandbox._hostpy import host_python_minor, torch_site_packages
from sandbox._identity import (
    RELEASE_FILE,
    SITE_PACKAGES_IN_SANDBOX,
    TUNER_GID,
    TUNER_UID,
    WORKSPACE_IN_SANDBOX,
)
from sandbox._image import rootfs_path
from sandbox._models import ExecResult, SandboxInfo, SandboxLimits
from sandbox._workspace import create_workspace


def bwrap_binary() -> str:
    """Path of ``bwrap``. Raises ``SandboxUnavailableError`` when it is not installed."""
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailableError("bubblewrap is not installed (apt-get install bubblewrap)")
    return found


class BwrapSandbox(WorkspaceSandbox):
    """A sandbox whose commands each run in a fresh ``bwrap`` over the image's root filesystem.

    Raises at construction: ``SandboxUnavailableError`` (no bwrap), ``ImageMissingError`` (no root
    filesystem: run ``atb sandbox build --no-docker``).
    """

    backend = "bwrap"

    def __init__(self, limits: SandboxLimits, *, mount_torch: bool = True, workspace_base: Path | None = None,
                 rootfs: Path | None = None) -> None:
        self._bwrap = bwrap_binary()
        self._rootfs = rootfs or rootfs_path(limits.image)
        release = self._rootfs / RELEASE_FILE
        if not release.is_file():
            raise ImageMissingError(
                f"no sandbox root filesystem at {self._rootfs}; run `atb sandbox build` "
                "(`--no-docker` when there is no Docker daemon)"
            )
        image_py = json.loads(release.read_text()).get("python")
        site = torch_site_packages() if mount_torch else None
        self._torch_note = ""
        if site is not None and image_py != host_python_minor():
            self._torch_note = f"torch not mounted: image Python {image_py} != host Python {host_python_minor()}"
            site = None
        self._as_root = os.geteuid() == 0
        owner = (TUNER_UID, TUNER_GID) if self._as_root else (os.getuid(), os.getgid())
        workspace = create_workspace(limits.workspace_max_bytes, owner, workspace_base)
        super().__init__(limits, workspace)
        self._site = site
        self._env = exec_environment(site is not None, limits.cpus)
        self.ident = f"{os.getpid()}-{os.urandom(4).hex()}"
        self._cgroup = Cgroup.create(self.ident, limits.memory_mb * 1024 * 1024, limits.pids_limit, limits.cpus)
        # /tmp outlives each command (as a container's does), so compiler caches survive between them.
        try:
            self._scratch = create_workspace(limits.tmp_max_bytes, owner, workspace_base)
        except Exception:
            self.close()
            raise

    def _argv(self, command: list[str]) -> list[str]:
        argv = [
            self._bwrap,
            "--ro-bind", str(self._rootfs), "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--bind", str(self._scratch.host_path), "/tmp",
            "--bind", str(self.workspace.host_path), WORKSPACE_IN_SANDBOX,
        ]
        if self._site is not None:
            argv += ["--ro-bind", str(self._site), SITE_PACKAGES_IN_SANDBOX]
        argv += ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
                 "--hostname", "sandbox", "--chdir", WORKSPACE_IN_SANDBOX, "--clearenv"]
        for key, val in self._env.items():
            argv += ["--setenv", key, val]
        return argv + ["--", *command]

    def _preexec(self) -> Callable[[], None]:
        procs = self._cgroup.procs_files() if self._cgroup is not None else []
        limits = self.limits
        as_root = self._as_root

        fsize = file_size_cap(limits)

        def setup() -> None:  # runs in the child between fork and exec
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            pid = str(os.getpid())
            for path in procs:
                with open(path, "w") as f:
                    f.write(pid)
            if not procs:
                resource.setrlimit(resource.RLIMIT_NPROC, (limits.pids_limit, limits.pids_limit))
                mem = limits.memory_mb * 1024 * 1024
                resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            if as_root:
                os.setgroups([])
                os.setgid(TUNER_GID)
                os.setuid(TUNER_UID)

        return setup

    def exec(self, command: Sequence[str] | str, timeout_s: float | None = None) -> ExecResult:
        self._check_open()
        argv = normalise_command(command)
        timeout = self._clip_timeout(timeout_s)
        before = self._cgroup.events() if self._cgroup is not None else None
        out, err = CappedBuffer(self.limits.exec_output_cap_bytes), CappedBuffer(self.limits.exec_output_cap_bytes)
        t0 = time.monotonic()
        proc = subprocess.Popen(self._argv(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=self._preexec(), start_new_session=True,
                                close_fds=True)

        def pump(pipe: BufferedReader, buf: CappedBuffer) -> None:
            while True:
                chunk = pipe.read1(1 << 16)
                if not chunk:
                    return
                buf.add(chunk)

        assert proc.stdout is not None and proc.stderr is not None
        assert isinstance(proc.stdout, BufferedReader) and isinstance(proc.stderr, BufferedReader)
        readers = [threading.Thread(target=pump, args=(proc.stdout, out), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, err), daemon=True)]
        for r in readers:
            r.start()
        timed_out = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            proc.wait()
        # The pid namespace dies with bwrap (--die-with-parent); the cgroup catches anything else.
        if self._cgroup is not None:
            self._cgroup.kill_all()
        for r in readers:
            r.join(2.0)
        proc.stdout.close()
        proc.stderr.close()
        duration = time.monotonic() - t0
        code = None if timed_out else proc.returncode
        if code is not None and code < 0:
            code = 128 - code
        after = self._cgroup.events() if self._cgroup is not None else None
        killed, note = describe_kill(code, timed_out, before, after, self.limits, timeout)
        note = self.workspace_note(note)
        return ExecResult(command=argv, exit_code=code, stdout=out.text(), stderr=err.text(),
                          stdout_bytes=out.total, stderr_bytes=err.total,
                          truncated=out.truncated or err.truncated, timed_out=timed_out,
                          killed_signal=killed, duration_s=duration, note=note)

    def _kill_leftovers(self) -> None:
        """Nothing outlives a command here (its pid namespace dies with bwrap); the cgroup, when there
        is one, is emptied again anyway before a copy-out."""
        if self._cgroup is not None:
            self._cgroup.kill_all()

    def info(self) -> SandboxInfo:
        cg = self._cgroup
        via = f"cgroup v{cg.version}" if cg is not None else None
        enforcement = {
            "network": "bwrap --unshare-net (only a down loopback)",
            "root_filesystem": f"read-only bind of {self._rootfs}",
            "pids_limit": f"{via} pids.max" if via else "RLIMIT_NPROC",
            "memory_mb": f"{via} memory limit" if via else "RLIMIT_AS (address space, approximate)",
            "cpus": f"{via} CFS quota" if via else "NOT enforced (no cgroup rights)",
            "exec_timeout_s": "host-side timer, then SIGKILL of bwrap and its pid namespace",
            "run_wallclock_s": "checked before every command; nothing outlives a command",
            "workspace_max_bytes": "host tmpfs size" if self.workspace.capped else "NOT capped (no mount rights)",
            "tmp_max_bytes": "host tmpfs size of the private /tmp" if self._scratch.capped else "NOT capped (no mount rights)",
            "file_size": f"RLIMIT_FSIZE {file_size_cap(self.limits)} bytes",
            "output": f"exec output capped at {self.limits.exec_output_cap_bytes} bytes per stream",
            "user": (f"uid {TUNER_UID}" if self._as_root else f"uid {os.getuid()}")
            + ", all capabilities dropped, no nested user namespaces",
        }
        if self._torch_note:
            enforcement["torch"] = self._torch_note
        return SandboxInfo(backend="bwrap", ident=self.ident, image=str(self._rootfs),
                           workspace_host_path=str(self.workspace.host_path),
                           workspace_in_sandbox=WORKSPACE_IN_SANDBOX, workspace_capped=self.workspace.capped,
                           limits=self.limits, enforcement=enforcement, torch_mounted=self._site is not None)

    def _shutdown(self) -> None:
        cg = getattr(self, "_cgroup", None)
        if cg is not None:
            cg.destroy()
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            scratch.destroy()
