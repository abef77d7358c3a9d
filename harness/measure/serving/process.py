"""Launch an engine process, wait until it is ready, stop it cleanly: the same for every engine.

A launch can fail in three ways, and each ends in :class:`EngineLaunchFailed` carrying the end of the
engine's own log, never in a hang: the process exits before it is ready, readiness does not come
within the start-up timeout, or the executable cannot be started at all.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from harness.engines._errors import EngineLaunchFailed
from harness.engines.adapters.base import LaunchSpec

_POLL_S = 0.1
_STOP_GRACE_S = 10.0
_LOG_TAIL_BYTES = 4000


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the engine binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, limit: int = _LOG_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a log file as text (empty when it does not exist)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


class EngineProcess:
    """One running engine. Use as a context manager: the process is stopped on exit, whatever happened.

    ``start()`` spawns it in its own process group with stdout and stderr going to ``log_path``;
    ``wait_ready()`` polls ``spec.ready_paths`` until each answers HTTP 200.
    """

    def __init__(self, spec: LaunchSpec, log_path: Path | None = None) -> None:
        self.spec = spec
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="atb-engine-", suffix=".log")
            os.close(fd)
            log_path = Path(name)
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.ready_after_s: float | None = None

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def log_excerpt(self) -> str:
        return log_tail(self.log_path)

    def start(self) -> "EngineProcess":
        """Spawn the engine.

        Raises:
            EngineLaunchFailed: the executable could not be started (missing, not executable).
        """
        env = {**os.environ, **self.spec.env}
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(self.spec.argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        except OSError as exc:
            raise EngineLaunchFailed(f"could not start {self.spec.argv[0]}: {exc}") from exc
        finally:
            log.close()
        return self

    def wait_ready(self, timeout_s: float) -> float:
        """Block until every readiness path answers 200; return the seconds it took.

        Raises:
            EngineLaunchFailed: the process exited first (with its exit status), or ``timeout_s``
                passed; the process is stopped before raising.
        """
        assert self._proc is not None, "start() first"
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        pending = list(self.spec.ready_paths)
        last = "no answer yet"
        with httpx.Client(timeout=2.0, trust_env=False) as http:
            while pending:
                code = self._proc.poll()
                if code is not None:
                    raise EngineLaunchFailed(
                        f"{Path(self.spec.argv[0]).name} exited with status {code} before it was ready "
                        f"({last})", self.log_excerpt())
                if time.monotonic() > deadline:
                    excerpt = self.log_excerpt()
                    self.stop()
                    raise EngineLaunchFailed(
                        f"{Path(self.spec.argv[0]).name} was not ready within {timeout_s:g} s "
                        f"(last readiness answer: {last})", excerpt)
                try:
                    r = http.get(self.base_url + pending[0])
                    last = f"GET {pending[0]} -> {r.status_code}"
                    if r.status_code == 200:
                        pending.pop(0)
                        continue
                except httpx.HTTPError as exc:
                    last = f"GET {pending[0]} -> {type(exc).__name__}"
                time.sleep(_POLL_S)
        self.ready_after_s = time.monotonic() - t0
        return self.ready_after_s

    def pause(self) -> None:
        """SIGSTOP the process group, so an idle arm cannot take CPU from the arm being measured."""
        if self.alive():
            assert self._proc is not None
            os.killpg(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the process group (after :meth:`pause`)."""
        if self.alive():
            assert self._proc is not None
            os.killpg(self._proc.pid, signal.SIGCONT)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, grace_s: float = _STOP_GRACE_S) -> int | None:
        """SIGTERM the process group, then SIGKILL after ``grace_s``; return the exit status."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGCONT)  # a paused process cannot act on SIGTERM
                os.killpg(self._proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self._proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._proc.wait(timeout=grace_s)
        return self._proc.returncode

    def __enter__(self) -> "EngineProcess":
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
