"""The bubblewrap backend, for machines where no Docker daemon answers. Same interface, same confinement.

Each command is one ``bwrap`` process over the same root filesystem the Docker image was imported from
(mounted read-only), with the workspace as the only writable bind, a size-capped private /tmp, every namespace
unshared (so no network but a down loopback), all capabilities dropped and no nested user namespaces.
The tuner's commands run as the same unprivileged uid as in Docker: as root this process switches to
it before starting bwrap, so the sandbox never holds host-root's file ownership. A per-sandbox cgroup
(when this process may make one) enforces the memory, pids and CPU limits, as Docker's does; without
one, RLIMIT_NPROC and RLIMIT_AS stand in and ``info()`` says so.

Where no image root filesystem was built (a GPU host without Docker, issue 26), the root is made of the
host's own files instead (``sandbox._hostroot``: an empty read-only tmpfs with only the system folders, a
few /etc entries, a private passwd/group and one Python interpreter bound read-only); every other flag is
the same. ``info().image`` is then ``"host-root"`` and ``enforcement`` says which paths were bound and why
(``root_filesystem``) and how the backend was chosen (``selection``).

The bwrap program is ``$ATB_BWRAP`` when set (a path, or a command such as
``/x/ld-linux-x86-64.so.2 --library-path /x /x/bwrap`` for a carried copy), as for the measuring
children (``harness.measure.runner._confine``), else ``bwrap`` on PATH.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from io import BufferedReader
from typing import Literal

from sandbox._base import CappedBuffer, WorkspaceSandbox, describe_kill, normalise_command
from sandbox._cgroup import Cgroup
from sandbox._docker import exec_environment, file_size_cap
from sandbox._errors import ImageMissingError, SandboxUnavailableError
from sandbox._hostpy import host_python_minor, torch_site_packages
from sandbox._hostroot import HOST_ROOT_IMAGE, PYTHON_LINK_DIR, HostRoot, plan_host_root, tuner_blocked_at
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


RootChoice = Literal["auto", "image", "host"]


def bwrap_command() -> list[str]:
    """The command that runs bwrap: ``$ATB_BWRAP`` (split like a shell would) or ``bwrap`` on PATH.

    Raises ``SandboxUnavailableError`` when neither gives a program that exists and can run.
    """
    given = os.environ.get("ATB_BWRAP", "").strip()
    if given:
        argv = shlex.split(given)
        if not os.access(argv[0], os.X_OK):
            raise SandboxUnavailableError(f"ATB_BWRAP names {argv[0]!r}, which is not an executable file; "
                                          "point it at bwrap (or at a loader command running a carried bwrap)")
        return argv
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailableError("bubblewrap is not installed (apt-get install bubblewrap, or set ATB_BWRAP "
                                      "to a carried bwrap)")
    return [found]


def bwrap_available() -> str | None:
    """Why bwrap cannot run here, or ``None`` when it can (what ``open_sandbox`` asks before falling back)."""
    try:
        bwrap_command()
    except SandboxUnavailableError as exc:
        return str(exc)
    return None


def bwrap_binary() -> str:
    """Path of the bwrap program (the first word of :func:`bwrap_command`). Raises ``SandboxUnavailableError``."""
    return bwrap_command()[0]


def _check_reachable_by_tuner(argv: list[str]) -> None:
    """bwrap runs as the tuner's uid: each absolute path of its command must be reachable by that uid
    (a bundle carried under /root is not). Raises ``SandboxUnavailableError`` naming the folder."""
    for word in argv:
        if word.startswith("/") and os.path.exists(word):
            blocked = tuner_blocked_at(word)
            if blocked:
                raise SandboxUnavailableError(
                    f"the sandbox runs bwrap as uid {TUNER_UID}, which cannot reach {word}: blocked at {blocked}; "
                    "put bwrap (and a carried bundle's loader and libraries) in a folder others may search, "
                    "such as /opt/atb-bwrap, and point ATB_BWRAP there")


def _release_identity(release: Path) -> str:
    """An image root filesystem's identity: the SHA-256 of its release file (tag, suite, packages, Python)."""
    import hashlib

    data = release.read_bytes()
    try:
        fields = json.loads(data)
    except ValueError:
        fields = {}
    what = ", ".join(f"{k} {fields[k]}" for k in ("tag", "suite", "python") if k in fields)
    return f"release sha256:{hashlib.sha256(data).hexdigest()} ({what})" if what else \
        f"release sha256:{hashlib.sha256(data).hexdigest()}"


def _host_identity() -> str:
    """The host root's identity: its OS (``/etc/os-release``) and kernel; the Python is added by ``info()``."""
    pretty = ""
    try:
        for line in Path("/etc/os-release").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("PRETTY_NAME="):
                pretty = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return f"host {pretty or 'unknown OS'}, kernel {os.uname().release}"


class BwrapSandbox(WorkspaceSandbox):
    """A sandbox whose commands each run in a fresh ``bwrap`` over the image's root filesystem, or,
    where none was built, over the host's own files (read-only, only what a tuner needs).

    ``root``: ``"auto"`` (the image's root filesystem when built, else the host's), ``"image"`` (the image's
    or an error), ``"host"`` (the host's even when an image exists). ``selection``: how the caller chose
    this backend (``open_sandbox`` passes its reasons); recorded in ``info().enforcement['selection']``.

    Raises at construction: ``SandboxUnavailableError`` (no bwrap, or it cannot start here),
    ``ImageMissingError`` (``root="image"`` with no root filesystem: run ``atb sandbox build --no-docker``),
    ``HostRootError`` (a host root without a Python the tuner's uid can reach; the message names the fix).
    """

    backend = "bwrap"

    def __init__(self, limits: SandboxLimits, *, mount_torch: bool = True, workspace_base: Path | None = None,
                 rootfs: Path | None = None, root: RootChoice = "auto", selection: Sequence[str] = ()) -> None:
        if root not in ("auto", "image", "host"):
            raise ValueError(f"unknown sandbox root {root!r}; use auto, image or host")
        self._bwrap = bwrap_command()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            _check_reachable_by_tuner(self._bwrap)
        self._rootfs = rootfs or rootfs_path(limits.image)
        release = self._rootfs / RELEASE_FILE
        self._selection = list(selection)
        self._host: HostRoot | None = None
        host = root == "host" or (root == "auto" and not release.is_file())
        if not host and not release.is_file():
            raise ImageMissingError(
                f"no sandbox root filesystem at {self._rootfs}; run `atb sandbox build` "
                "(`--no-docker` when there is no Docker daemon)"
            )
        if host:
            if root == "auto":
                self._selection.append(f"no image root filesystem at {self._rootfs} (`atb sandbox build "
                                       "--no-docker` makes one), so the host's own files, read-only")
            elif not self._selection:
                self._selection.append("the host's own files, read-only, asked for")
            image_py = host_python_minor()  # the host root's interpreter has this minor (see _hostroot)
        else:
            self._selection.append(f"the image's root filesystem {self._rootfs}")
            image_py = json.loads(release.read_text()).get("python")
        self._root_identity = _host_identity() if host else _release_identity(release)
        site = torch_site_packages() if mount_torch else None
        self._torch_note = ""
        if site is not None and image_py != host_python_minor():
            self._torch_note = f"torch not mounted: image Python {image_py} != host Python {host_python_minor()}"
            site = None
        if site is not None and host and self._as_root:
            blocked = tuner_blocked_at(site)
            if blocked:
                self._torch_note = (f"torch not mounted: uid {TUNER_UID} cannot reach {site} (blocked at {blocked}); "
                                    "make the folders above it searchable by others to mount it")
                site = None
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
            if host:
                self._start_host_root(owner)
        except Exception:
            self.close()
            raise

    def _start_host_root(self, owner: tuple[int, int]) -> None:
        """Plan the host root (the private passwd/group go into the scratch's holder folder: root's,
        mode 0711, never bound writable, removed with the scratch), then run one command to prove it
        starts, so a host where bwrap cannot run as the tuner fails here with bwrap's own words rather
        than on every tool call."""
        self._host = plan_host_root(self._scratch.host_path.parent / "etc", *owner)
        self._env["PATH"] = f"{PYTHON_LINK_DIR}:{self._env['PATH']}"
        probe = self.exec(["python3", "-c", "import sys"], timeout_s=60)
        if not probe.ok:
            said = (probe.stderr.strip().splitlines() or [probe.note or f"exit status {probe.exit_code}"])[-1]
            raise SandboxUnavailableError(
                f"the bubblewrap sandbox over the host's files did not start: {said[:300]}. If bwrap says "
                "'No permissions to creating new namespace' or 'setting up uid map', this kernel refuses user "
                f"namespaces to uid {owner[0]} (enable them: sysctl user.max_user_namespaces=15000, "
                "kernel.unprivileged_userns_clone=1, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0); "
                "else build the image root (`atb sandbox build --no-docker`)")

    def _root_args(self) -> list[str]:
        if self._host is None:
            return ["--ro-bind", str(self._rootfs), "/"]
        return self._host.bwrap_args()

    def _argv(self, command: list[str]) -> list[str]:
        argv = [
            *self._bwrap,
            *self._root_args(),
            "--dev", "/dev",
            "--proc", "/proc",
            "--bind", str(self._scratch.host_path), "/tmp",
            "--bind", str(self.workspace.host_path), WORKSPACE_IN_SANDBOX,
        ]
        if self._site is not None:
            argv += ["--ro-bind", str(self._site), SITE_PACKAGES_IN_SANDBOX]
        if self._host is not None:
            argv += ["--remount-ro", "/"]
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
            "root_filesystem": self._host.describe() if self._host is not None
            else f"read-only bind of {self._rootfs}",
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
        elif self._site is not None:
            enforcement["torch"] = f"{self._site} bound read-only at {SITE_PACKAGES_IN_SANDBOX} (PYTHONPATH)"
        enforcement["selection"] = " -> ".join(self._selection)
        if self._host is not None:
            enforcement["python"] = f"{self._host.python}: {self._host.python_reason}"
        image = HOST_ROOT_IMAGE if self._host is not None else str(self._rootfs)
        identity = self._root_identity
        if self._host is not None:
            identity += f", Python {self._host.python}"
        return SandboxInfo(backend="bwrap", ident=self.ident, image=image,
                           workspace_host_path=str(self.workspace.host_path),
                           workspace_in_sandbox=WORKSPACE_IN_SANDBOX, workspace_capped=self.workspace.capped,
                           limits=self.limits, enforcement=enforcement, torch_mounted=self._site is not None,
                           root="host" if self._host is not None else "image", root_identity=identity)

    def _shutdown(self) -> None:
        cg = getattr(self, "_cgroup", None)
        if cg is not None:
            cg.destroy()
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            scratch.destroy()
