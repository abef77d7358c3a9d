"""Counting a task's cost in its own process: the harness side of :mod:`harness.tasks._cost`.

Why here (issue 29): the counting process runs the task file's code, so it is started exactly as a
measuring child is (issue 27): with the measuring children's allow-listed environment
(:func:`harness.measure.runner._worker.child_environment`: no credentials, no URL user-info), confined the
same way when confinement is available (:func:`harness.measure.runner._confine.plan`: bubblewrap, no
network, a read-only view of the interpreter and the harness, a private scratch folder as its cwd and
HOME), with the task file staged as a read-only copy in that scratch; where confinement is impossible the
count says ``unconfined:<why>`` in :attr:`~harness.tasks.CountedCost.confinement`. Starting it from the
measuring layer uses those helpers directly, so the two kinds of child cannot drift apart, and the task
package (a foundation every layer reads) imports no layer: import-linter's contract holds with no ignored
import. What the process runs (``python -m harness.tasks._cost FILE``), the figures' models and how they
combine (:func:`harness.tasks.resolve_cost`) stay in :mod:`harness.tasks._cost`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.measure.runner import _confine
from harness.measure.runner._worker import child_environment
from harness.tasks import CountedCost, Task, TaskCost, needs_count, resolve_cost

COUNT_TIMEOUT_S = 120.0

_CACHE: dict[str, CountedCost] = {}   # by task source digest: a campaign counts each task once


class PendingCost:
    """A count running in its own process; :meth:`resolve` combines it with declared/measured figures."""

    def __init__(self, task: Task, proc: subprocess.Popen[str] | None, cached: CountedCost | None,
                 scratch: Path | None = None, confinement: str = "") -> None:
        self.task, self._proc, self._counted = task, proc, cached
        self._scratch, self._confinement = scratch, confinement

    def _done(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def counted(self, timeout_s: float = COUNT_TIMEOUT_S) -> CountedCost | None:
        """The count (None when the task's figures are declared and nothing was counted)."""
        if self._counted is not None or self._proc is None:
            return self._counted
        try:
            out, err = self._proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(self._proc)
            self._proc.communicate()
            self._done()
            self._counted = CountedCost(method=f"bytes_only:counting timed out after {timeout_s:g} s",
                                        confinement=self._confinement)
            return self._counted
        _kill_group(self._proc)     # nothing the task started outlives its count
        self._done()
        _IN_FLIGHT.pop(self.task.source_sha256, None)
        line = out.strip().splitlines()[-1] if out.strip() else ""
        try:
            counted = CountedCost.model_validate(json.loads(line)["cost"])
            self._counted = counted.model_copy(update={"confinement": self._confinement})
            _CACHE[self.task.source_sha256] = self._counted
        except (ValueError, KeyError, TypeError) as exc:
            tail = err.strip().splitlines()[-1:] if err else []
            self._counted = CountedCost(method=f"bytes_only:counting process failed (exit {self._proc.returncode}, "
                                               f"{type(exc).__name__}; {' '.join(tail)[:160]})",
                                        confinement=self._confinement)
        return self._counted

    def resolve(self, *, input_bytes: int = 0, output_bytes: int = 0) -> TaskCost:
        """The floor's figures: declared where the task declares them, else counted, else measured.

        ``input_bytes``/``output_bytes`` are what the reference process measured on real inputs
        (0 when it did not get that far).
        """
        return resolve_cost(self.task, self.counted(), input_bytes=input_bytes, output_bytes=output_bytes)


_IN_FLIGHT: dict[str, PendingCost] = {}


def begin_cost(task: Task) -> PendingCost:
    """Start counting ``task`` in a child process (if it needs counting and is not cached). A count
    already running for the same task is shared, so a caller that knows its task early (``atb eval``
    before it opens a measurement session) can start it and the evaluation picks it up."""
    if not needs_count(task):
        return PendingCost(task, None, None)
    cached = _CACHE.get(task.source_sha256)
    if cached is not None:
        return PendingCost(task, None, cached)
    running = _IN_FLIGHT.get(task.source_sha256)
    if running is not None:
        return running
    proc, scratch, confinement = _spawn_counter(Path(task.path))
    pending = PendingCost(task, proc, None, scratch, confinement)
    _IN_FLIGHT[task.source_sha256] = pending
    return pending


def _spawn_counter(task_path: Path) -> tuple[subprocess.Popen[str], Path, str]:
    """Start ``python -m harness.tasks._cost COPY`` as a measuring child is started: the allow-listed
    environment, confined when confinement is available, in a private scratch folder (its cwd and HOME)
    that holds a read-only copy of the task file. Returns the process, the scratch folder (the caller
    removes it) and the confinement's descriptor.
    """
    scratch = _confine.new_scratch("cost")
    inbox = scratch / "inbox"
    inbox.mkdir()
    staged = inbox / task_path.name
    shutil.copyfile(task_path, staged)
    staged.chmod(0o444)
    plan = _confine.plan("cpu", scratch, scratch, inbox=inbox)
    env = child_environment(1)
    env["CUDA_VISIBLE_DEVICES"] = ""      # the count runs on the meta device, else the CPU
    env["HOME"] = str(scratch)
    if plan.confined:
        env["TMPDIR"] = "/tmp"
    parent = os.getpid()
    try:
        proc = subprocess.Popen(plan.prefix + [sys.executable, "-m", "harness.tasks._cost", str(staged)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                cwd=str(scratch), pass_fds=plan.pass_fds, start_new_session=True,
                                preexec_fn=lambda: _child_setup(_confine.die_with_parent, parent))  # noqa: PLW1509
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        plan.close()
    return proc, scratch, plan.descriptor


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill the counting process's group (it is its own session): whatever the task's code started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _child_setup(die_with_parent: Any, parent: int) -> None:
    """In the counting child before exec: lowest priority (it runs beside measurements), then what every
    measuring child gets (``_confine.die_with_parent``: death with the harness, no new privileges), so a
    killed harness leaves no counting process behind.

    The nice stays: on a small host (this project's 2-core development machine) a count at normal
    priority would compete with the timed children for the cores, and on the H200 hosts (16 cores)
    running it unniced (``cbe4b90``) did not shorten the verdict's wait for it (see
    ``benchmarks/results/kernelbench/README.md``)."""
    os.nice(19)
    die_with_parent(parent)


def count_task(task: Task, timeout_s: float = COUNT_TIMEOUT_S) -> CountedCost | None:
    """Count synchronously (for tools and tests); None for a task whose FLOPs are declared."""
    return begin_cost(task).counted(timeout_s)


__all__ = ["COUNT_TIMEOUT_S", "PendingCost", "begin_cost", "count_task"]
