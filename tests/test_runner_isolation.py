"""Measuring children: crashes, hangs, exits and exceptions become WorkerFailures; timers are bound
before candidate code; the reference never imports candidate code; inputs are paired by seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.measure.runner import Worker, WorkerDied
from harness.measure.session import worker_config
from harness.tasks import load_task
from protocol import load_protocol

RELU = load_task("relu")


def _config() -> dict[str, Any]:
    return worker_config("cpu", load_protocol())


def _load_cmd(tmp: Path, source: str | None, name: str = "c") -> dict[str, Any]:
    cmd: dict[str, Any] = {"op": "load", "task_path": str(RELU.path), "task_module": "atb_task_relu", "init_seed": 3}
    if source is not None:
        path = tmp / f"atb_candidate_{name}.py"
        path.write_text(source)
        cmd.update(candidate_path=str(path), candidate_module=f"atb_candidate_{name}")
    return cmd


def _candidate(forward_body: str, header: str = "") -> str:
    return (f"import torch\nimport torch.nn as nn\n{header}\n\nclass ModelNew(nn.Module):\n"
            f"    def forward(self, x):\n{forward_body}\n")


def _start(tmp: Path, role: str = "candidate", timeout: float = 60.0) -> Worker:
    return Worker(role, _config(), tmp, timeout).start()  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runner")


def test_failures_become_worker_failures(workdir: Path) -> None:
    cases = {
        "exit": _candidate("        import os\n        os._exit(3)"),
        "crash": _candidate("        import ctypes\n        return ctypes.string_at(8, 64)"),
        "timeout": _candidate("        while True:\n            pass"),
    }
    workers = {k: _start(workdir, timeout=4.0) for k in cases}
    try:
        for kind, src in cases.items():
            w = workers[kind]
            w.startup_timeout_s = 120.0
            # the load command's warm call runs forward once: the failure surfaces there
            with pytest.raises(WorkerDied) as info:
                w.request(_load_cmd(workdir, src, kind))
            assert info.value.failure.kind == kind, info.value.failure
            assert info.value.failure.role == "candidate"
            if kind == "timeout":
                # the child wrote its stacks just before the deadline: the failure says where it hung
                assert "most recent call first" in info.value.failure.detail, info.value.failure.detail
                assert "forward" in info.value.failure.detail
            assert not w.alive()
    finally:
        for w in workers.values():
            w.close()


# The candidate writes a line that is not a reply where the child's replies go (the reply fd is the child's
# argv[2]), then the child either exits with status 3 shortly after or keeps running.
_GARBAGE = "        import os, sys, time\n        os.write(int(sys.argv[2]), b'not a reply\\n')\n"


@pytest.mark.parametrize("name,then,expect,absent", [
    ("exits", "        time.sleep(0.3)\n        os._exit(3)", "(exit status 3)", "stopped by the harness"),
    ("stays", "        time.sleep(3600)", "(still running: stopped by the harness)", "exit status"),
], ids=["exits-3", "keeps-running"])
def test_a_protocol_failure_reports_the_childs_own_exit(workdir: Path, name: str, then: str, expect: str,
                                                        absent: str) -> None:
    """Issue 29: the parent used to kill the child before reading its status, so a child that broke the
    protocol and exited with status 3 was recorded as a crash, killed by SIGKILL (the harness's own kill).
    A child that exits on its own is reported with its own status; one that stays is stopped by the
    harness and still reported as the protocol failure it is, never as a crash."""
    w = _start(workdir)
    w.startup_timeout_s = 120.0
    try:
        with pytest.raises(WorkerDied) as info:
            w.request(_load_cmd(workdir, _candidate(_GARBAGE + then), f"garbage_{name}"))
        failure = info.value.failure
        assert failure.kind == "protocol", failure
        assert "unreadable reply to 'load'" in failure.detail and expect in failure.detail, failure.detail
        assert "killed by" not in failure.detail and absent not in failure.detail, failure.detail
        assert not w.alive()
    finally:
        w.close()


def test_exceptions_and_import_errors_are_replies_not_deaths(workdir: Path) -> None:
    w = _start(workdir)
    try:
        r = w.request(_load_cmd(workdir, "import torch\nthis is not python\n", "syntax"))
        assert r.ok is False and r.failure_kind == "import_error"
        r = w.request(_load_cmd(workdir, _candidate("        raise ValueError('boom')"), "raises"))
        assert r.ok is False and r.failure_kind == "exception" and "boom" in r.error
        r = w.request(_load_cmd(workdir, _candidate("        return torch.empty(1 << 40)"), "huge"))
        assert r.ok is False and r.failure_kind == "memory", r
        assert w.alive()
        r = w.request(_load_cmd(workdir, "import torch.nn as nn\nclass Other(nn.Module): pass\n", "noclass"))
        assert r.ok is False and "ModelNew" in r.error
    finally:
        w.close()


def test_reference_refuses_candidate_code_and_pairs_inputs_with_the_candidate(workdir: Path) -> None:
    ref, cand = _start(workdir, "reference"), _start(workdir)
    try:
        refused = ref.request(_load_cmd(workdir, _candidate("        return torch.relu(x)"), "sneak"))
        assert refused.ok is False and "never imports candidate code" in refused.error
        assert ref.request(_load_cmd(workdir, None)).ok
        assert cand.request(_load_cmd(workdir, _candidate("        return x.clamp_min(0)"), "good")).ok
        for dist in ("task", "negative", "noncontiguous", "large"):
            a = ref.request({"op": "call", "class_inputs": "factory", "seed": 99, "distribution": dist, "save_path": str(workdir / f"r{dist}.pt")})
            b = cand.request({"op": "call", "class_inputs": "factory", "seed": 99, "distribution": dist, "save_path": str(workdir / f"c{dist}.pt"),
                              "record_ops": True})
            assert a.ok and b.ok
            assert a.input_hashes_before == b.input_hashes_before
            assert b.input_hashes_after == b.input_hashes_before
        c = cand.request({"op": "call", "class_inputs": "factory", "seed": 100, "distribution": "task", "save_path": str(workdir / "c100.pt"),
                          "record_ops": True})
        assert c.input_hashes_before != a.input_hashes_before
        assert "clamp_min" in c.ops_called
        integ = ref.request({"op": "integrity"})
        assert integ.candidate_modules == [] and all(integ.checks.values())
        assert cand.request({"op": "integrity"}).candidate_modules == ["atb_candidate_good"]
    finally:
        ref.close()
        cand.close()


def test_timers_are_bound_before_candidate_import(workdir: Path) -> None:
    src = _candidate("        return torch.relu(x)",
                     header="import time\n_fake = iter(range(0, 10**12, 10))\n"
                            "time.perf_counter_ns = lambda: next(_fake)\n")
    w = _start(workdir)
    try:
        assert w.request(_load_cmd(workdir, src, "patcher")).ok
        prep = w.request({"op": "prepare", "seed": 5})
        assert prep.ok and prep.inner >= 1
        block = w.request({"op": "block", "reps": 3, "rep_offset": 0, "capture": [1], "save_dir": str(workdir)})
        # the fake clock would give 10 ns per call; the harness's bound clock sees real work
        assert min(block.times_ns) > 100
        assert block.timed_outputs[0].input_seed != 5
        integ = w.request({"op": "integrity"})
        assert integ.checks["time.perf_counter_ns"] is False
        assert integ.checks["time.thread_time_ns"] is True
    finally:
        w.close()


def test_audit_events_from_candidate_frames_are_recorded(workdir: Path) -> None:
    src = _candidate("        import gc\n        gc.get_objects()\n        return torch.relu(x)")
    w = _start(workdir)
    try:
        assert w.request(_load_cmd(workdir, src, "scavenger")).ok
        assert "gc.get_objects" in w.request({"op": "integrity"}).audit_events
    finally:
        w.close()


def test_the_stack_dump_timer_starts_no_thread() -> None:
    """A measuring child's thread count is evidence (the escape gate counts threads before and after the
    candidate's calls). faulthandler's watchdog thread, still exiting from one request when the next
    counted, once read as the candidate's thread left running (3 against 2): the timer is a signal now."""
    import os

    from harness.measure.runner._serve import _arm_stack_dump, _disarm_stack_dump

    before = len(os.listdir("/proc/self/task"))
    _arm_stack_dump(30.0)
    try:
        assert len(os.listdir("/proc/self/task")) == before
    finally:
        _disarm_stack_dump()
    assert len(os.listdir("/proc/self/task")) == before
