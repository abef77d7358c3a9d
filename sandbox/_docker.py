"""The Docker backend: one long-lived container per tuning run, every command an ``exec`` into it.

Container creation on the vfs storage driver takes seconds (vfs copies the root filesystem), an exec
about 0.07 s, so a run starts one container and execs into it. The container is created with no
network, a read-only root, a single writable bind (the workspace, a size-capped tmpfs on the host),
a size-capped /tmp, all capabilities dropped, ``no-new-privileges``, and the pids, memory and CPU limits
of ``protocol.sandbox``. Its init is ``sleep run_wallclock_s`` running as an unprivileged keeper uid
under Docker's tini, with ``auto_remove``: the daemon deletes the container at the wall-clock deadline
even when this process was SIGKILLed. Commands run as a different unprivileged uid (the tuner).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandbox._base import CappedBuffer, WorkspaceSandbox, describe_kill, normalise_command
from sandbox._cgroup import docker_container_counters
from sandbox._errors import ImageMissingError, SandboxClosedError, SandboxError, SandboxUnavailableError
from sandbox._hostpy import host_python_minor, torch_site_packages
from sandbox._identity import (
    IMAGE_LABEL_PYTHON,
    KEEPER_GID,
    KEEPER_UID,
    LABEL,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_WORKSPACE,
    SITE_PACKAGES_IN_SANDBOX,
    TUNER_GID,
    TUNER_UID,
    WORKSPACE_IN_SANDBOX,
)
from sandbox._models import ExecResult, SandboxInfo, SandboxLimits
from sandbox._workspace import create_workspace

_KILL_ALL = ["/usr/bin/python3", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"]
_POLL_S = 0.05


def docker_client(timeout_s: float = 60.0) -> Any:
    """A Docker SDK client that answered a ping. Raises ``SandboxUnavailableError`` naming the fix."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailableError("the docker Python SDK is not installed (pip install docker)") from exc
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no daemon answers"
        raise SandboxUnavailableError(
            f"no Docker daemon answers at {where} ({type(exc).__name__}); start one "
            "(sandbox/ci_setup.sh starts `dockerd --storage-driver=vfs`) or use the bubblewrap backend "
            "(--sandbox bwrap)"
        ) from None
    return client


FSIZE_MARGIN_BYTES = 1 << 20


def file_size_cap(limits: SandboxLimits) -> int:
    """RLIMIT_FSIZE of every sandboxed process: the larger of the workspace and /tmp caps.

    The caps are tmpfs sizes when this process may mount; without mount rights the workspace is a
    plain host directory, and this limit is what still bounds each file the sandbox writes there.
    One MiB above the larger cap: at exactly the tmpfs size, a file filling an empty tmpfs met the size
    limit first (SIGXFSZ, "File size limit exceeded") instead of the full disk the sandbox reports.
    """
    return max(limits.workspace_max_bytes, limits.tmp_max_bytes) + FSIZE_MARGIN_BYTES


def exec_environment(torch_mounted: bool, cpus: float) -> dict[str, str]:
    """The environment of every command: no host variables leak in."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": str(max(1, int(cpus))),
    }
    if torch_mounted:
        env["PYTHONPATH"] = SITE_PACKAGES_IN_SANDBOX
    return env


class DockerSandbox(WorkspaceSandbox):
    """A sandbox backed by one Docker container.

    Raises at construction: ``SandboxUnavailableError`` (no daemon), ``ImageMissingError`` (run
    ``atb sandbox build``), ``SandboxError`` (the container did not start).
    """

    backend = "docker"

    def __init__(self, limits: SandboxLimits, *, mount_torch: bool = True, workspace_base: Path | None = None,
                 client: Any = None, selection: Sequence[str] = ()) -> None:
        import docker

        self._client = client or docker_client()
        self._selection = list(selection) or ["Docker asked for"]
        try:
            image = self._client.images.get(limits.image)
        except docker.errors.ImageNotFound:
            raise ImageMissingError(
                f"the sandbox image {limits.image!r} is not built; run `atb sandbox build` "
                "(or sandbox/ci_setup.sh)"
            ) from None
        self._image_id = str(getattr(image, "id", "") or "")
        self._selection.append(f"the Docker image {limits.image} ({self._image_id or 'no id'})")
        site = torch_site_packages() if mount_torch else None
        image_py = (image.labels or {}).get(IMAGE_LABEL_PYTHON)
        self._torch_note = ""
        if site is not None and image_py is not None and image_py != host_python_minor():
            self._torch_note = f"torch not mounted: image Python {image_py} != host Python {host_python_minor()}"
            site = None
        workspace = create_workspace(limits.workspace_max_bytes, (TUNER_UID, TUNER_GID), workspace_base)
        super().__init__(limits, workspace)
        self._torch_mounted = site is not None
        self._env = exec_environment(self._torch_mounted, limits.cpus)
        volumes = {str(workspace.host_path): {"bind": WORKSPACE_IN_SANDBOX, "mode": "rw"}}
        if site is not None:
            volumes[str(site)] = {"bind": SITE_PACKAGES_IN_SANDBOX, "mode": "ro"}
        mem = f"{limits.memory_mb}m"
        fsize = file_size_cap(limits)
        try:
            self._container = self._client.containers.run(
                limits.image,
                ["/bin/sleep", str(int(limits.run_wallclock_s))],
                detach=True,
                auto_remove=True,
                init=True,
                name=f"atb-sbx-{os.getpid()}-{os.urandom(3).hex()}",
                hostname="sandbox",
                user=f"{KEEPER_UID}:{KEEPER_GID}",
                working_dir=WORKSPACE_IN_SANDBOX,
                network_mode="none",
                read_only=True,
                tmpfs={"/tmp": f"size={limits.tmp_max_bytes},mode=1777,exec"},
                volumes=volumes,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=limits.pids_limit,
                mem_limit=mem,
                memswap_limit=mem,
                nano_cpus=int(limits.cpus * 1e9),
                ipc_mode="private",
                labels={
                    LABEL: "1",
                    LABEL_OWNER_PID: str(os.getpid()),
                    LABEL_OWNER_HOST: socket.gethostname(),
                    LABEL_WORKSPACE: str(workspace.host_path),
                },
                environment=self._env,
                # Nothing the tuner runs reaches the container's log (its init only sleeps); "none" makes
                # sure no output of the sandbox is ever kept by the daemon on the host's disk.
                log_config=docker.types.LogConfig(type="none"),
                # No single file the sandbox writes outgrows its largest filesystem, even where the
                # workspace could not be a capped tmpfs.
                ulimits=[docker.types.Ulimit(name="fsize", soft=fsize, hard=fsize)],
            )
        except Exception as exc:
            self.close()
            raise SandboxError(f"the sandbox container did not start: {exc}") from exc
        self.ident = self._container.id

    # -- commands -----------------------------------------------------------------------------------
    def exec(self, command: Sequence[str] | str, timeout_s: float | None = None) -> ExecResult:
        self._check_open()
        argv = normalise_command(command)
        timeout = self._clip_timeout(timeout_s)
        api = self._client.api
        before = docker_container_counters(self.ident)
        try:
            exec_id = api.exec_create(self.ident, argv, user=f"{TUNER_UID}:{TUNER_GID}",
                                      workdir=WORKSPACE_IN_SANDBOX, environment=self._env)["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=True)
        except Exception as exc:  # noqa: BLE001 - mapped to a typed error
            self._raise_if_gone(exc)
            return self._failed_start(argv, exc)
        out, err = CappedBuffer(self.limits.exec_output_cap_bytes), CappedBuffer(self.limits.exec_output_cap_bytes)

        def pump() -> None:
            try:
                for o, e in stream:
                    if o:
                        out.add(o)
                    if e:
                        err.add(e)
            except Exception:  # noqa: BLE001 - the stream is closed under us on timeout
                pass

        reader = threading.Thread(target=pump, daemon=True)
        t0 = time.monotonic()
        reader.start()
        timed_out = False
        while reader.is_alive():
            reader.join(_POLL_S)
            if not reader.is_alive():
                break
            if time.monotonic() - t0 > timeout:
                timed_out = True
                break
            if not api.exec_inspect(exec_id)["Running"]:
                # The command ended but a background child still holds its output open.
                reader.join(0.5)
                break
        # Nothing outlives the command: a background process left running could rewrite the workspace
        # between tool calls (or while submit copies it out).
        if timed_out:
            self._kill_tuner_processes()
            reader.join(2.0)
        else:
            self._kill_leftovers()
        stream.close()
        reader.join(1.0)
        duration = time.monotonic() - t0
        state = self._wait_exit(api, exec_id)
        code = None if timed_out else state
        after = docker_container_counters(self.ident)
        killed, note = describe_kill(code, timed_out, before, after, self.limits, timeout)
        note = self.workspace_note(note)
        return ExecResult(command=argv, exit_code=code, stdout=out.text(), stderr=err.text(),
                          stdout_bytes=out.total, stderr_bytes=err.total,
                          truncated=out.truncated or err.truncated, timed_out=timed_out,
                          killed_signal=killed, duration_s=duration, note=note)

    def _wait_exit(self, api: Any, exec_id: str) -> int | None:
        for _ in range(40):
            info = api.exec_inspect(exec_id)
            if not info["Running"]:
                code = info["ExitCode"]
                return int(code) if code is not None else None
            time.sleep(_POLL_S)
        return None

    def _failed_start(self, argv: list[str], exc: Exception) -> ExecResult:
        """An exec the runtime could not start (e.g. every pid in use): a result the tuner sees."""
        self._kill_tuner_processes()
        return ExecResult(command=argv, exit_code=None, stdout="", stderr="", stdout_bytes=0, stderr_bytes=0,
                          truncated=False, timed_out=False, killed_signal=None, duration_s=0.0,
                          note=f"the command could not be started ({exc}); leftover processes were killed")

    def _raise_if_gone(self, exc: Exception) -> None:
        import docker

        if isinstance(exc, docker.errors.NotFound) or "is not running" in str(exc):
            raise SandboxClosedError(
                "the sandbox container is gone (its wall-clock limit passed or it was removed); "
                "open a new sandbox"
            ) from None

    def _kill_tuner_processes(self) -> None:
        """SIGKILL every process of the tuner uid in the container; the container itself stays up.

        As root, from the host by the container's process list (fast, and works when a fork bomb holds
        every pid so that no exec can start). Otherwise from inside: ``kill(-1)`` as the tuner reaches
        exactly the tuner's processes, never the keeper's init.
        """
        if os.geteuid() == 0:
            self._host_kill()
            if not self._tuner_pids():
                return
        api = self._client.api
        for _ in range(3):
            try:
                kid = api.exec_create(self.ident, _KILL_ALL, user=f"{TUNER_UID}:{TUNER_GID}")["Id"]
                api.exec_start(kid)
            except Exception:  # noqa: BLE001 - fall through to the host-side kill
                self._host_kill()
            if not self._tuner_pids():
                return
        self._host_kill()

    def _kill_leftovers(self) -> None:
        """SIGKILL every process in the container but its init (tini and the keeper's ``sleep``).

        One ``top`` call when nothing is left (the common case); the full kill otherwise.
        """
        if self._tuner_pids():
            self._kill_tuner_processes()

    def _tuner_pids(self) -> list[int]:
        """Host pids of every process in the container that is not the keeper's (its init).

        Commands run as the tuner uid and cannot change uid (no capabilities, no-new-privileges), so
        this is the tuner's processes; anything else that is not the init is counted too.
        """
        try:
            top = self._container.top(ps_args="-eo pid,uid")
        except Exception:  # noqa: BLE001 - container gone
            return []
        titles = [t.upper() for t in top.get("Titles", [])]
        if "PID" not in titles or "UID" not in titles:
            return []
        ip, iu = titles.index("PID"), titles.index("UID")
        return [int(p[ip]) for p in top.get("Processes") or [] if p[iu] != str(KEEPER_UID)]

    def _host_kill(self) -> None:
        for _ in range(20):
            pids = self._tuner_pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.05)

    # -- description and teardown ---------------------------------------------------------------------
    def info(self) -> SandboxInfo:
        enforcement = {
            "network": "docker network_mode=none",
            "root_filesystem": "read-only (docker read_only)",
            "pids_limit": "docker pids cgroup",
            "memory_mb": "docker memory cgroup (swap disabled)",
            "cpus": "docker nano_cpus (CFS quota)",
            "exec_timeout_s": "host-side timer, then SIGKILL of every tuner process",
            "run_wallclock_s": "container init sleeps run_wallclock_s, auto-removed at exit",
            "workspace_max_bytes": "host tmpfs size" if self.workspace.capped else "NOT capped (no mount rights)",
            "tmp_max_bytes": "docker tmpfs size of the private /tmp",
            "file_size": f"RLIMIT_FSIZE {file_size_cap(self.limits)} bytes (docker ulimit)",
            "output": f"exec output capped at {self.limits.exec_output_cap_bytes} bytes per stream; "
                      "container log driver none",
            "user": f"uid {TUNER_UID}, all capabilities dropped, no-new-privileges",
        }
        if self._torch_note:
            enforcement["torch"] = self._torch_note
        enforcement["selection"] = " -> ".join(self._selection)
        return SandboxInfo(backend="docker", ident=self.ident, image=self.limits.image,
                           workspace_host_path=str(self.workspace.host_path),
                           workspace_in_sandbox=WORKSPACE_IN_SANDBOX, workspace_capped=self.workspace.capped,
                           limits=self.limits, enforcement=enforcement, torch_mounted=self._torch_mounted,
                           root="image", root_identity=f"docker image {self._image_id or 'id unknown'}")

    def _shutdown(self) -> None:
        container = getattr(self, "_container", None)
        if container is None:
            return
        import docker

        import requests

        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise
        except requests.exceptions.ReadTimeout:
            pass  # the daemon is still removing it (vfs under load can take over a minute); a finished run stands
