"""Parent side of a measuring child: spawn, send a command, wait for its reply with a deadline.

A child that crashes, hangs past its deadline, exits, or breaks the reply protocol raises
:class:`WorkerDied` carrying a :class:`harness.evidence.WorkerFailure`; the evaluation turns it into
a rejected verdict. Nothing a child does can raise anything else out of :meth:`Worker.request`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from harness.evidence import WorkerFailure

Role = Literal["candidate", "reference", "start"]
FailureKind = Literal["import_error", "exception", "crash", "timeout", "exit", "memory", "protocol"]


class WorkerDied(Exception):
    """A child process failed; ``failure`` says how. Internal to the runner and the evaluation."""

    def __init__(self, failure: WorkerFailure) -> None:
        super().__init__(f"{failure.role} worker: {failure.kind}: {failure.detail}")
        self.failure = failure


class Worker:
    """One persistent measuring child process, driven by JSON commands over pipes.

    ``config`` is handed to the child on its command line (backend, threads, tf32, memory limit,
    timing parameters); ``timeout_s`` bounds each command. Start-up (``import torch``) is covered
    by ``startup_timeout_s``.
    """

    def __init__(self, role: Role, config: dict[str, Any], workdir: Path, timeout_s: float,
                 startup_timeout_s: float | None = None) -> None:
        self.role: Role = role
        self.config = config
        self.workdir = Path(workdir)
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s or max(timeout_s, 60.0)
        self.log_path = self.workdir / f"{role}-{os.getpid()}-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._reply_r: int | None = None
        self._buf = b""
        self._ready: dict[str, Any] | None = None
        self.failed: WorkerFailure | None = None

    # ------------------------------------------------------------------ life cycle
    def start(self) -> "Worker":
        """Spawn the child without waiting for it to finish importing torch."""
        r, w = os.pipe()
        self._reply_r = r
        log = open(self.log_path, "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ATB_")}
        env["PYTHONUNBUFFERED"] = "1"
        env["OMP_NUM_THREADS"] = str(self.config["threads"])
        env["MKL_NUM_THREADS"] = str(self.config["threads"])
        # glibc's mmap threshold adapts to each process's allocation history, so two workers running
        # the same code can differ in page faults per call; a fixed threshold (and no trimming) makes
        # every worker allocate alike.
        mmap_threshold = int(self.config.get("cpu", {}).get("malloc_mmap_threshold_bytes", 0))
        if mmap_threshold > 0:
            env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)
            env["MALLOC_TRIM_THRESHOLD_"] = str(4 * mmap_threshold)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.runner._child", self.role, str(w), json.dumps(self.config)],
                stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(w,), env=env,
                cwd=str(self.workdir), start_new_session=True,
            )
        finally:
            os.close(w)
            log.close()
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.failed is None

    def wait_ready(self) -> dict[str, Any]:
        """Block until the child has imported torch and bound its timers.

        Raises:
            WorkerDied: the child failed to start (crash, exit, timeout).
        """
        if self._ready is None:
            self._ready = self._read_reply(self.startup_timeout_s, "start-up")
        return self._ready

    def request(self, cmd: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send one command and return its reply (which may say ``ok: false`` for a caught error).

        Raises:
            WorkerDied: the child crashed, exited, hung past the deadline, or replied garbage.
        """
        if self.failed is not None:
            raise WorkerDied(self.failed)
        self.wait_ready()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died("exit", f"the process ended before command {cmd.get('op')!r}") from None
        return self._read_reply(self.timeout_s if timeout_s is None else timeout_s, str(cmd.get("op")))

    def close(self) -> None:
        """Stop the child and release the pipes: a candidate worker is killed outright (with its
        process group, so nothing it started survives); others are asked to exit first."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                if (self.role != "candidate" and self.failed is None and self._ready is not None
                        and self.proc.stdin is not None):
                    self.proc.stdin.write(b'{"op": "exit"}\n')
                    self.proc.stdin.flush()
                    self.proc.wait(timeout=2.0)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
            self._kill()
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self._reply_r is not None:
            os.close(self._reply_r)
            self._reply_r = None

    def __enter__(self) -> "Worker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _kill(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        try:
            self.proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            pass

    def log_tail(self, n: int = 1500) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-n:].decode("utf-8", "replace").strip()

    def _died(self, kind: FailureKind, detail: str) -> WorkerDied:
        self._kill()
        tail = self.log_tail()
        if self.proc is not None and self.proc.returncode is not None and kind in ("exit", "crash", "protocol"):
            rc = self.proc.returncode
            if rc < 0:
                kind = "crash"
                try:
                    detail += f" (killed by {signal.Signals(-rc).name})"
                except ValueError:
                    detail += f" (signal {-rc})"
            else:
                kind = "exit" if kind != "protocol" else kind
                detail += f" (exit status {rc})"
            if "MemoryError" in tail or "std::bad_alloc" in tail or "out of memory" in tail.lower():
                kind = "memory"
        if tail:
            detail += f"; last output: {tail[-600:]}"
        self.failed = WorkerFailure(role=self.role, kind=kind, detail=detail[:3000])
        return WorkerDied(self.failed)

    def _read_reply(self, timeout_s: float, what: str) -> dict[str, Any]:
        assert self._reply_r is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._died("timeout", f"no reply to {what!r} within {timeout_s:g} s")
            ready, _, _ = select.select([self._reply_r], [], [], min(left, 0.5))
            if not ready:
                if self.proc is not None and self.proc.poll() is not None:
                    raise self._died("exit", f"the process ended during {what!r}")
                continue
            chunk = os.read(self._reply_r, 1 << 20)
            if not chunk:
                if self.proc is not None:
                    try:
                        self.proc.wait(timeout=5.0)
                    except subprocess.TimeoutExpired:
                        pass
                raise self._died("exit", f"the process ended during {what!r}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            raise self._died("protocol", f"unreadable reply to {what!r}: {line[:200]!r}") from None
        if not isinstance(reply, dict):
            raise self._died("protocol", f"reply to {what!r} is not an object")
        return reply
