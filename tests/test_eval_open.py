"""A one-shot ``atb eval`` opens its session sooner (issue 26 item 4), and no arm gives up its own confinement.

What changed, and what these tests hold (no test here times anything: ``benchmarks/eval_open.py`` measures):

* ``spawn_early`` starts the reference, a candidate worker and (when asked) a start worker side by side on
  every backend, each its own confined process (its own bwrap, scratch and inbox), spawned by a parent
  that holds no arm's state yet. Before, on a CPU the candidate was spawned only after the session had
  measured the ceilings, and the evaluation waited for its ``import torch`` then.
* On a CPU the ceilings are measured on the host's cores, so the session waits for the other arms'
  start-up before it measures them: their ``import torch`` never competes with that measurement. A
  candidate that fails to start does not fail the session's open (its evaluation reports it).
* ``atb eval`` (and ``atb tasks``) builds only its own command group, and the session module imports no
  store, so the parent reaches the spawn with fewer imports; the ``eval`` parser is the same either way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from proc_state import process_alive

ROOT = Path(__file__).resolve().parents[1]

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("ATB_BWRAP"),
                                 reason="bubblewrap is not installed")


# ------------------------------------------------------------------------------------ the parser
def test_eval_and_tasks_build_only_their_own_group() -> None:
    from atb_agent.cli import _eval, command_groups, groups_for

    assert groups_for(["eval", "relu", "start"]) == (_eval,)
    assert groups_for(["tasks", "--json"]) == (_eval,)
    everything = command_groups()
    for argv in ([], ["run", "relu"], ["--json", "eval"], ["protocol", "show"]):
        assert groups_for(argv) == everything


def _eval_parser(full: bool) -> Any:
    from atb_agent.cli import _eval, build_parser

    parser = build_parser() if full else build_parser((_eval,))
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["eval"]


def test_the_eval_parser_is_the_same_alone_or_in_the_whole_parser() -> None:
    from atb_agent.cli._common import BadInput

    def described(p: Any) -> list[tuple[Any, ...]]:
        return [(tuple(a.option_strings), a.dest, a.default, tuple(a.choices or ()), a.nargs, a.required, a.help)
                for a in p._actions]

    alone, whole = _eval_parser(False), _eval_parser(True)
    assert described(alone) == described(whole)
    assert alone.prog == whole.prog == "atb eval"
    argv = ["relu", "cand.py", "--device", "cpu", "--db", "x.sqlite", "--json"]
    assert vars(alone.parse_args(argv)) == vars(whole.parse_args(argv))
    messages = []
    for p in (alone, whole):
        with pytest.raises(BadInput) as exc:
            p.parse_args(["relu", "cand.py", "--device", "nope"])
        messages.append(str(exc.value))
    assert messages[0] == messages[1]


_PROBE = """\
import json, sys
from atb_agent.cli import main
code = main(sys.argv[1:])
print("ATB-MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""


def test_an_eval_imports_no_other_command_group_and_no_store_before_its_children(tmp_path: Path) -> None:
    """A task that does not load stops ``atb eval`` (exit 2) after the session module and the task loader are
    imported and before any child starts: by then no other command's module and no store module is loaded."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", _PROBE, "eval", str(tmp_path / "missing.py"), "cand.py", "--json"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, (out.stdout, out.stderr[-3000:])
    marked = [line for line in out.stderr.splitlines() if line.startswith("ATB-MODULES ")]
    import json

    modules = json.loads(marked[-1][len("ATB-MODULES "):])
    assert "harness.measure.session" in modules and "harness.tasks" in modules   # the path that spawns ran
    groups = [m for m in modules if m.startswith("atb_agent.cli._") and m not in ("atb_agent.cli._common",
                                                                                 "atb_agent.cli._eval")]
    assert groups == [], f"atb eval imported other command groups: {groups}"
    assert not [m for m in modules if m == "harness.store" or m.startswith("harness.store.")]


# ------------------------------------------------------------------------------------ the session
def _gone(pids: list[int], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(process_alive(p) for p in pids)


@needs_bwrap
def test_spawn_early_starts_every_arm_side_by_side_each_in_its_own_confinement() -> None:
    from harness.measure.session import spawn_early
    from protocol import load_protocol

    early = spawn_early("cpu", load_protocol(), start_arm=True)
    try:
        workers = [early.reference, early.candidate, early.start]
        assert [w.role for w in workers if w is not None] == ["reference", "candidate", "start"]
        assert all(w is not None and w.ready_at is None for w in workers), "spawn_early waited on a child"
        live = [w for w in workers if w is not None]
        assert len({w.pid for w in live}) == 3 and all(process_alive(w.pid) for w in live)
        assert len({w.scratch for w in live}) == 3, "two arms share a scratch folder"
        for w in live:
            assert w.confinement.startswith("bwrap:"), w.confinement
            with open(f"/proc/{w.pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            # each arm is its own bwrap process running a fresh interpreter, never a fork of another arm
            assert any(b"bwrap" in a for a in argv[:4]), argv[:4]
            assert b"harness.measure.runner._child" in argv and w.role.encode() in argv
        for w in live:
            w.wait_ready()
    finally:
        pids = [w.pid for w in (early.reference, early.candidate, early.start) if w is not None]
        early.close()
    assert _gone(pids), "an early worker outlived its caller's close"
    assert not early.workdir.exists()


def test_spawn_early_without_a_start_arm_starts_reference_and_candidate() -> None:
    from harness.measure.session import spawn_early
    from protocol import load_protocol

    early = spawn_early("cpu", load_protocol())
    try:
        assert early.start is None and early.candidate is not None
        assert early.candidate.role == "candidate" and early.reference.role == "reference"
    finally:
        pids = [early.reference.pid, early.candidate.pid if early.candidate else 0]
        early.close()
    assert _gone([p for p in pids if p])


def test_a_cpu_session_measures_its_ceilings_once_the_other_arms_are_ready(tmp_path: Path) -> None:
    """A fresh store (no stored ceilings): the ceilings are measured, and only after the candidate worker
    started beside the reference has said it is ready; the session then serves that candidate."""
    from harness.measure.runner import _messages as M
    from harness.measure.session import open_measurement_session, spawn_early
    from harness.store import open_store
    from protocol import load_protocol

    proto = load_protocol()
    early = spawn_early("cpu", proto)
    cand = early.candidate
    assert cand is not None
    seen: dict[str, Any] = {}
    ask = early.reference.request

    def request(command: Any, timeout_s: float | None = None) -> Any:
        if isinstance(command, M.Ceilings):
            seen["candidate_ready_at_ceilings"] = cand.ready_at is not None
        return ask(command, timeout_s)

    early.reference.request = request  # type: ignore[method-assign]
    store = open_store(str(tmp_path / "s.sqlite"))
    try:
        with open_measurement_session(store, "cpu", proto, early=early, start_arm=False) as ctx:
            assert seen == {"candidate_ready_at_ceilings": True}
            stages = ctx.open_stages
            assert stages["fingerprint"] <= stages["others_ready"] <= stages["ceilings"]
            assert ctx.take_candidate_worker() is cand, "the session did not serve the candidate started early"
            cand.close()
    finally:
        store.close()


def test_a_candidate_that_fails_to_start_does_not_fail_the_wait() -> None:
    from harness.measure.evidence import WorkerFailure
    from harness.measure.runner import WorkerDied
    from harness.measure.session import _wait_started

    calls: list[str] = []

    class Fake:
        def __init__(self, name: str, fails: bool) -> None:
            self.name, self.fails = name, fails

        def wait_ready(self) -> None:
            calls.append(self.name)
            if self.fails:
                raise WorkerDied(WorkerFailure(role="candidate", kind="exit", detail="died at import"))

    _wait_started([Fake("start", True), Fake("candidate", False)])  # type: ignore[list-item]
    assert calls == ["start", "candidate"]

