"""Parent side of a measuring child: spawn, send a command, wait for its reply with a deadline.

A child that crashes, hangs past its deadline, exits, or breaks the reply protocol raises
:class:`WorkerDied` carrying a :class:`harness.measure.evidence.WorkerFailure`; the evaluation turns it into
a rejected verdict. Nothing a child does can raise anything else out of :meth:`Worker.request`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, overload

from pydantic import ValidationError

from harness.measure.evidence import WorkerFailure
from harness.measure.runner import _confine
from harness.measure.runner._messages import (TORCH_COMMANDS, ChildCommand, ChildReply, CommandSet, Failed, Ready,
                                              ReplyT, parse_reply)
from harness.measure.runner._reaper import OWNER_ENV, claim, owner_token, reap_once

Role = Literal["candidate", "reference", "start"]
FailureKind = Literal["import_error", "exception", "crash", "timeout", "exit", "memory", "protocol"]


OUTPUT_TAIL_BYTES = 64 << 10
# seconds before a request's deadline at which the child writes its threads' stacks (see _serve)
STACK_DUMP_LEAD_S = 1.5
# seconds a child that broke the reply protocol or ended its pipes gets to exit on its own before the
# harness kills it, so that the failure records the child's own exit status (see Worker._died)
EXIT_GRACE_S = 2.0
_URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@]+@")
# command keys naming a file the child imports: each is staged read-only into the child's inbox
IMPORTED_PATH_KEYS = ("task_path", "candidate_path")
# The only host variables a measuring child receives (issue 27: a filter by name let DATABASE_URL and
# OPENAI_BASE_URL, passwords in their user-info, into candidate code, and from a failing candidate's output
# into a stored verdict's reason). Everything else is left out; the harness then sets HOME (the scratch),
# TMPDIR when confined, the thread counts and the malloc thresholds itself. Names only, no prefixes, and
# none of them carries a credential: the interpreter's search and locale, CUDA device selection and
# libraries, torch/Triton/Inductor caches and compilers (a load_inline or Triton build inside the child),
# and OpenMP/BLAS threading knobs.
CHILD_ENV_ALLOW = frozenset({
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "TZ", "TERM", "USER", "LOGNAME", "TMPDIR",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH", "CUDA_MODULE_LOADING",
    "CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NVML_BASED_CUDA_CHECK", "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TORCH_CUDA_ARCH_LIST", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
    "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "TRITON_HOME", "MAX_JOBS", "CC", "CXX", "CUDAHOSTCXX",
    "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES",
    "OMP_DYNAMIC", "KMP_AFFINITY", "KMP_BLOCKTIME", "GOMP_CPU_AFFINITY", "MKL_DYNAMIC",
})


class OutputTail:
    """The last ``cap`` bytes a child wrote to stdout/stderr, drained from a pipe by a daemon thread.

    Why: a candidate printing 500 MB once filled the host's /tmp through the child's log file
    (issue 14); a pipe read into a bounded buffer keeps what a failure report needs and nothing more.
    ``total`` counts every byte seen, so a report can say how much was dropped.
    """

    def __init__(self, fd: int, cap: int = OUTPUT_TAIL_BYTES) -> None:
        self.cap = cap
        self.total = 0
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._fd = fd
        self._thread = threading.Thread(target=self._drain, name=f"atb-child-output-{fd}", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            while True:
                try:
                    chunk = os.read(self._fd, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                with self._lock:
                    self.total += len(chunk)
                    self._buf += chunk
                    if len(self._buf) > self.cap:
                        del self._buf[:len(self._buf) - self.cap]
        finally:
            try:
                os.close(self._fd)
            except OSError:
                pass

    def tail(self, n: int) -> bytes:
        with self._lock:
            return bytes(self._buf[-n:])

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)


def child_environment(threads: int, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """The allow-listed part of the harness's environment (:data:`CHILD_ENV_ALLOW`) without the names
    in ``drop``, with thread counts pinned and unbuffered output. A value holding URL user-info
    (``scheme://user:pass@``) is left out even under an allowed name (a ``PYTHONPATH`` never needs one)."""
    env = {k: v for k, v in os.environ.items()
           if k in CHILD_ENV_ALLOW and k not in drop and not _URL_USERINFO.search(v)}
    env["PYTHONUNBUFFERED"] = "1"
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def _with_stack(tail: str, keep: int = 600, stack_keep: int = 1800) -> str:
    """The end of a child's output, widened to keep a stack dump whole when one was written.

    A hung request's child writes ``Thread 0x... (most recent call first):`` blocks shortly before its
    deadline; 600 characters would cut them to their last frames, which are the harness's own.
    """
    at = tail.rfind("most recent call first")
    if at < 0:
        return tail[-keep:]
    start = tail.rfind("\n", 0, max(0, at - 40)) + 1
    return tail[max(start, len(tail) - stack_keep):]


def _errors(exc: ValidationError) -> str:
    """A validation error in one line: each field's path and message."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors())[:600]


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

    #: the commands this child answers (the MLX child's worker has its own set)
    commands: CommandSet = TORCH_COMMANDS

    def __init__(self, role: Role, config: dict[str, Any], workdir: Path, timeout_s: float,
                 startup_timeout_s: float | None = None) -> None:
        self.role: Role = role
        self.config = config
        self.workdir = Path(workdir)
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s or max(timeout_s, 60.0)
        self.proc: subprocess.Popen[bytes] | None = None
        self.scratch: Path | None = None
        #: how the child is confined, for the verdict: "bwrap:userns+pidns+..." or "unconfined:<why>"
        self.confinement: str = ""
        self.output: OutputTail | None = None
        self._confined = False
        self._inbox: Path | None = None
        self._staged = 0
        self._reply_r: int | None = None
        self._buf = b""
        self._ready: Ready | None = None
        #: monotonic clock at spawn and at the ready reply (where a session's open time goes)
        self.spawned_at: float | None = None
        self.ready_at: float | None = None
        self.failed: WorkerFailure | None = None
        self._fdsock: socket.socket | None = None     # the harness's end of the child's fd channel
        self._fd_pending: dict[str, int] = {}         # fds the child sent that no check asked for yet

    # ------------------------------------------------------------------ life cycle
    def start(self) -> "Worker":
        """Spawn the child without waiting for it to finish importing torch."""
        env = child_environment(int(self.config["threads"]))
        # glibc's mmap threshold adapts to each process's allocation history, so two workers running
        # the same code can differ in page faults per call; a fixed threshold (and no trimming) makes
        # every worker allocate alike.
        mmap_threshold = int(self.config.get("cpu", {}).get("malloc_mmap_threshold_bytes", 0))
        if mmap_threshold > 0:
            env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)
            env["MALLOC_TRIM_THRESHOLD_"] = str(4 * mmap_threshold)
        return self._spawn("harness.measure.runner._child", env)

    def _spawn(self, module: str, env: dict[str, str]) -> "Worker":
        """Start ``python -m MODULE ROLE REPLY_FD CONFIG`` confined (see :mod:`harness.measure.runner._confine`).

        The child gets a private scratch directory (its cwd and HOME), its stdout and stderr go to a
        bounded in-memory tail, it dies with this process (``PR_SET_PDEATHSIG``), and every
        descendant dies with it (bwrap's PID namespace and ``--die-with-parent``). The first spawn
        of a harness process removes what dead harness processes left behind.
        """
        reap_once()
        claim(self.workdir)
        self.scratch = _confine.new_scratch(self.role)
        self._inbox = self.scratch / "inbox"
        self._inbox.mkdir()
        plan = _confine.plan(str(self.config.get("backend", "cpu")), self.workdir, self.scratch, inbox=self._inbox)
        self.confinement = plan.descriptor
        self._confined = plan.confined
        env = dict(env)
        env[OWNER_ENV] = owner_token()
        env["HOME"] = str(self.scratch)
        if plan.confined:
            env["TMPDIR"] = "/tmp"
        r, w = os.pipe()
        out_r, out_w = os.pipe()
        self._reply_r = r
        # the fd channel: device-memory fds of shared outputs (harness.measure.backends._share) cross here
        self._fdsock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = {**self.config, "fd_channel": child_sock.fileno()}
        self.spawned_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                plan.prefix + [sys.executable, "-m", module, self.role, str(w), json.dumps(config)],
                stdin=subprocess.PIPE, stdout=out_w, stderr=out_w,
                pass_fds=(w, child_sock.fileno(), *plan.pass_fds), env=env,
                cwd=str(self.scratch), start_new_session=True,
                preexec_fn=functools.partial(_confine.die_with_parent, os.getpid()),
            )
        except BaseException:
            os.close(out_r)
            raise
        finally:
            os.close(w)
            os.close(out_w)
            child_sock.close()
            plan.close()
        self.output = OutputTail(out_r)
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.failed is None

    def wait_ready(self) -> Ready:
        """Block until the child has imported torch and bound its timers.

        Raises:
            WorkerDied: the child failed to start (crash, exit, timeout), or its first line is not a
                :class:`~harness.measure.runner._messages.Ready`.
        """
        if self._ready is None:
            data = self._read_reply(self.startup_timeout_s, "start-up")
            try:
                self._ready = Ready.model_validate(data)
            except ValidationError as exc:
                raise self._died("protocol", f"malformed ready line: {_errors(exc)}") from None
            self.ready_at = time.monotonic()
        return self._ready

    def startup_stages(self) -> dict[str, float]:
        """Seconds from spawn to the ready reply, and the child's own split of its start-up (import
        torch, device init); empty before the child is ready."""
        if self._ready is None or self.spawned_at is None or self.ready_at is None:
            return {}
        stages = {"spawn_to_ready": round(self.ready_at - self.spawned_at, 3)}
        stages.update({k: float(v) for k, v in self._ready.startup_s.items()})
        return stages

    @overload
    def request(self, command: ChildCommand[ReplyT], timeout_s: float | None = None) -> ReplyT | Failed: ...

    @overload
    def request(self, command: Mapping[str, Any], timeout_s: float | None = None) -> ChildReply: ...

    def request(self, command: ChildCommand[Any] | Mapping[str, Any], timeout_s: float | None = None) -> ChildReply:
        """Send one command and return its reply, validated: the command's reply model (which may say
        ``ok`` False with a failed call's facts) or :class:`~harness.measure.runner._messages.Failed` (the
        child's loop caught an error).

        ``command`` is one of this child's command models (:mod:`harness.measure.runner._messages`), or
        a mapping validated into one here, before anything is sent.

        Raises:
            pydantic.ValidationError: ``command`` is not a valid command of this child.
            WorkerDied: the child crashed, exited, hung past the deadline, or replied garbage (a line
                that is not JSON, or fits neither reply model: kind ``protocol``).
        """
        typed: ChildCommand[Any] = self.commands.parse(command)
        if self.failed is not None:
            raise WorkerDied(self.failed)
        self.wait_ready()
        assert self.proc is not None and self.proc.stdin is not None
        cmd = self._stage(typed.model_dump(mode="json", exclude_none=True))
        deadline_s = self.timeout_s if timeout_s is None else timeout_s
        # the child dumps every thread's stack to its output shortly before this deadline, so that a
        # request that hangs is reported with where it hung (the tail goes into the failure's detail)
        cmd.setdefault("stack_dump_after_s", max(0.5, deadline_s - STACK_DUMP_LEAD_S))
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died("exit", f"the process ended before command {cmd.get('op')!r}") from None
        data = self._read_reply(deadline_s, typed.op)
        try:
            return parse_reply(typed, data)
        except ValidationError as exc:
            raise self._died("protocol", f"malformed reply to {typed.op!r}: {_errors(exc)}") from None

    # ------------------------------------------------------------------ fd channel
    def receive_fd(self, tag: str, timeout_s: float | None = None) -> int | None:
        """The fd this child sent under ``tag`` (the caller closes it), or None if none came in time
        (a candidate that never sends one only makes its own comparison fall back to a file)."""
        from harness.measure.backends._share import recv_tagged_fd

        if self._fdsock is None:
            return None
        try:
            return recv_tagged_fd(self._fdsock, tag, self.timeout_s if timeout_s is None else timeout_s,
                                  self._fd_pending)
        except (TimeoutError, OSError):
            return None

    def send_fd(self, fd: int, tag: str) -> None:
        """Hand ``fd`` to this child under ``tag`` (the harness relays a candidate's output fd to the
        reference child this way; nothing ever flows the other way)."""
        if self._fdsock is None:
            raise WorkerDied(WorkerFailure(role=self.role, kind="protocol", detail="the child has no fd channel"))
        socket.send_fds(self._fdsock, [tag.encode()], [fd])

    def drop_fds(self) -> None:
        """Close every fd the child sent that was not relayed (after its outputs are released)."""
        while self._fd_pending:
            try:
                os.close(self._fd_pending.pop(next(iter(self._fd_pending))))
            except OSError:
                pass

    def close(self) -> None:
        """Stop the child and release the pipes. Every role is killed outright, with its process
        group, so nothing it started survives: a child holds nothing that needs flushing, and the
        kernel frees its device memory faster than an orderly exit of its CUDA context would."""
        if self.proc is not None and self.proc.poll() is None:
            self._kill()
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self._reply_r is not None:
            os.close(self._reply_r)
            self._reply_r = None
        self.drop_fds()
        if self._fdsock is not None:
            self._fdsock.close()
            self._fdsock = None
        if self.output is not None:
            self.output.join(2.0)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> "Worker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _stage(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Every file a confined child imports (the task, a candidate or start file) is copied by the
        parent into this child's read-only inbox, and the command names the copy.

        Why always, not only for files the child cannot see: the session's work directory is writable
        by every child, and a candidate once rewrote the start arm's file there at import, so the start
        arm timed the candidate's version (``speedup_vs_start`` 18.9x, honest 1.0; issue 27). A copy in
        the child's own read-only inbox is what it imports, whatever any other child writes; the parent
        copies from where it wrote the file (``harness.verdict.evaluate`` keeps candidate and start
        files in a folder no child can see).
        """
        if not self._confined or self._inbox is None:
            return cmd
        staged = dict(cmd)
        for key in IMPORTED_PATH_KEYS:
            path = cmd.get(key)
            if not path:
                continue
            src = Path(path).resolve()
            self._staged += 1
            dst = self._inbox / f"{self._staged}-{src.name}"
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o444)
            staged[key] = str(dst)
        return staged

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
        """The last ``n`` bytes the child printed (stdout and stderr), as text."""
        if self.output is None:
            return ""
        if self.proc is not None and self.proc.poll() is not None:
            self.output.join(1.0)  # a dead child's last words may still be in the pipe
        return self.output.tail(n).decode("utf-8", "replace").strip()

    def _settle(self, grace_s: float) -> bool:
        """Give a child that is ending ``grace_s`` to exit on its own; True when it did (its status is
        then its own), False when it is still running (the caller kills it)."""
        if self.proc is None:
            return False
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _died(self, kind: FailureKind, detail: str) -> WorkerDied:
        # Why wait before killing: a child that broke the protocol or closed its pipes is usually on its
        # way out, and its exit status is the evidence (a status 3 is the child's own exit, not a crash).
        # Killing it first recorded every such failure as "killed by SIGKILL", the harness's own signal.
        # A child that missed its deadline is killed at once; it had its time.
        exited = kind != "timeout" and self._settle(EXIT_GRACE_S)
        self._kill()
        tail = self.log_tail()
        if self.proc is not None and self.proc.returncode is not None and kind in ("exit", "crash", "protocol"):
            rc = self.proc.returncode
            if self._confined and 128 < rc < 128 + 65:
                rc = -(rc - 128)  # bwrap reports a child killed by signal N as exit status 128+N
            if not exited:
                detail += " (still running: stopped by the harness)"
            elif rc < 0:
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
            detail += f"; last output: {_with_stack(tail)}"
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
        if self._confined and "pid" in reply:
            # inside its PID namespace every child is pid 2: the harness names a child by the pid it
            # sees (bwrap's), which is what tells one arm's process from another's
            reply["pid_in_sandbox"], reply["pid"] = reply["pid"], self.pid
        return reply
