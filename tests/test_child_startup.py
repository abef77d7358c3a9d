"""A measuring child's start-up is every evaluation's critical path: keep it to torch and its own code.

On the H200 hosts the reference child's ``import torch`` takes 2.6-4.9 s, and the evaluation waits
for it. These tests keep two things that shorten that wait: the modules a child imports (its
command loop, inputs, sharing, timers, the comparison and the device facts) pull in neither pydantic
nor the protocol package, and ``atb eval`` can start its children before it opens a store or loads
its task (``spawn_early``), with nothing left running when the caller gives up before the open.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from proc_state import process_alive

from harness.measure.session import open_measurement_session, spawn_early
from harness.store import open_store
from protocol import load_protocol

ROOT = Path(__file__).resolve().parents[1]

CHILD_MODULES = ["harness.measure.timing._clock", "harness.measure.runner._inputs", "harness.measure.backends._share",
                 "harness.measure.timing._cpu", "harness.measure.timing._cuda", "harness.measure.runner._serve",
                 "harness.measure.correctness", "harness.measure.device_facts"]


def test_the_childs_modules_import_no_pydantic_and_no_protocol() -> None:
    code = ("import sys\n" + "".join(f"import {m}\n" for m in CHILD_MODULES)
            + "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('pydantic', 'protocol', 'yaml')}"
              " | {m for m in sys.modules if m in ('harness.records', 'harness.measure.evidence', "
              "'harness.measure.runner._worker')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", f"a measuring child would import {out.stdout.strip()} before it is ready"


def test_the_runner_package_still_exports_the_parents_names() -> None:
    import harness.measure.runner as runner

    assert runner.Worker.__name__ == "Worker" and runner.TASK_DISTRIBUTION == "task"
    with pytest.raises(AttributeError):
        runner.NoSuchName  # noqa: B018


def test_early_workers_die_with_an_unopened_session_and_serve_an_opened_one(tmp_path: Path) -> None:
    proto = load_protocol()
    early = spawn_early("cpu", proto)
    pid, workdir = early.reference.pid, early.workdir
    assert process_alive(pid) and workdir.is_dir()
    early.close()
    deadline = time.monotonic() + 10
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(pid), "an early worker outlived a caller that never opened its session"
    assert not workdir.exists()

    early = spawn_early("cpu", proto)
    pid = early.reference.pid
    store = open_store(str(tmp_path / "s.sqlite"))
    try:
        with open_measurement_session(store, "cpu", proto, early=early, start_arm=False) as ctx:
            assert ctx.reference_worker().pid == pid, "the session did not use the worker started early"
            early.close()   # the session owns it now: this must not stop it
            assert process_alive(pid)
        with pytest.raises(ValueError, match="already used"):
            open_measurement_session(store, "cpu", proto, early=early)
    finally:
        store.close()
