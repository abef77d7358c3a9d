"""Confined measuring children (issue 14 item 1; issue 13 item 5): what a candidate can see and do,
that nothing it starts outlives the evaluation or the harness, that its output is capped, and that the
next harness start removes what a killed one left behind.

These run real bwrap (installed by scripts/setup.sh) and real child processes; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.measure.runner import Worker
from harness.measure.runner._confine import seccomp_program
from harness.measure.runner._reaper import OWNER_ENV, owner_token, reap_stale
from harness.measure.session import worker_config
from harness.tasks import load_task
from protocol import load_protocol

REPO = Path(__file__).resolve().parents[1]
ATTACK = REPO / "tests" / "redteam" / "confinement" / "verdict_rewrite.py"
RELU = load_task("relu")

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("ATB_BWRAP"),
                                 reason="bubblewrap is not installed (scripts/setup.sh installs it)")


def _config() -> dict[str, Any]:
    return worker_config("cpu", load_protocol())


def _load_cmd(workdir: Path, source: str, task_path: Path = RELU.path, name: str = "c") -> dict[str, Any]:
    path = workdir / f"atb_candidate_{name}.py"
    path.write_text(source)
    return {"op": "load", "task_path": str(task_path), "task_module": "atb_task_relu", "init_seed": 3,
            "candidate_path": str(path), "candidate_module": f"atb_candidate_{name}"}


def _processes_of(token: str) -> list[int]:
    """Live processes whose environment names ``token`` as their harness owner."""
    key = f"{OWNER_ENV}={token}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if key in env and state != "Z":
            found.append(int(entry.name))
    return found


def _gone(token: str, within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while True:
        left = _processes_of(token)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture()
def listener() -> Iterator[int]:
    """A TCP port on the host's loopback that accepts connections (the network a child must not reach)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def _attack_source(outside: Path, port: int) -> str:
    return ATTACK.read_text().replace("__OUTSIDE__", str(outside)).replace("__PORT__", str(port))


# ------------------------------------------------------------------------------------ what it sees
@needs_bwrap
def test_a_candidate_sees_no_parent_store_network_or_other_process(tmp_path: Path, listener: int) -> None:
    """The first attack's reconnaissance, run in a real candidate worker: the parent's command line,
    the store, the network and other processes are out of view; nothing lands outside its scratch;
    its detached grandchild dies when the worker is closed. The task file lives outside the session's
    work directory, so it is staged into the child's read-only inbox."""
    workdir = Path(tempfile.mkdtemp(prefix="atb-measure-"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "atb.sqlite").write_text("the store")
    task_copy = outside / "relu_task.py"
    shutil.copyfile(RELU.path, task_copy)
    w = Worker("candidate", _config(), workdir, 120.0).start()
    try:
        assert w.confinement.startswith("bwrap:"), w.confinement
        assert "pidns" in w.confinement and "netns" in w.confinement
        assert ("seccomp" in w.confinement) == (seccomp_program() is not None)
        reply = w.request(_load_cmd(workdir, _attack_source(outside, listener), task_copy))
        assert reply.ok, reply
        line = [ln for ln in w.log_tail(20000).splitlines() if ln.startswith("ATB-ATTACK ")]
        assert line, w.log_tail()
        seen = json.loads(line[-1].split(" ", 1)[1])
        # the only ancestor in view is bwrap's own init (pid 1 of the namespace); the harness is not
        assert all("bwrap" in c or "ld-linux" in c.split()[0] for c in seen["ancestor_cmdlines"]), seen
        assert not any("pytest" in c or "atb.sqlite" in c for c in seen["ancestor_cmdlines"]), seen
        assert seen["store"] is None and not seen["store_readable"]
        assert seen["network"] is False
        assert seen["visible_pids"] <= 3, seen
        assert seen["findings_written"] is False
    finally:
        w.close()
        shutil.rmtree(workdir, ignore_errors=True)
    assert _gone(owner_token(), 10.0) == []
    assert sorted(p.name for p in outside.iterdir()) == ["atb.sqlite", "relu_task.py"]


@needs_bwrap
def test_the_child_is_an_unprivileged_filtered_process(tmp_path: Path) -> None:
    """uid 65534, no capabilities, no new privileges, a seccomp filter that refuses namespaces,
    mounts and ptrace, and a read-only view of the project's packages."""
    probe = textwrap.dedent("""
        import ctypes, json, os, torch, torch.nn as nn
        libc = ctypes.CDLL(None, use_errno=True)
        def err(rc):
            return 0 if rc == 0 else ctypes.get_errno()
        st = open("/proc/self/status").read()
        field = lambda k: st.split(k + ":")[1].split()[0]
        import harness
        facts = {"uid": os.getuid(), "cap_eff": field("CapEff"), "nnp": field("NoNewPrivs"),
                 "seccomp": field("Seccomp"), "unshare_net": err(libc.unshare(0x40000000)),
                 "ptrace": err(libc.ptrace(0, 0, 0, 0)),
                 "mount": err(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
                 "write_harness": os.access(os.path.dirname(harness.__file__), os.W_OK),
                 "cwd": os.getcwd()}
        print("ATB-FACTS " + json.dumps(facts), flush=True)
        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.relu(x)
    """)
    w = Worker("candidate", _config(), tmp_path, 120.0).start()
    try:
        assert w.request(_load_cmd(tmp_path, probe)).ok
        line = [ln for ln in w.log_tail(20000).splitlines() if ln.startswith("ATB-FACTS ")]
        facts = json.loads(line[-1].split(" ", 1)[1])
        assert w.scratch is not None and facts["cwd"] == str(w.scratch.resolve())
    finally:
        w.close()
    assert facts["uid"] == 65534
    assert int(facts["cap_eff"], 16) == 0
    assert facts["nnp"] == "1"
    assert facts["unshare_net"] != 0 and facts["mount"] != 0 and facts["ptrace"] != 0
    assert facts["write_harness"] is False
    if seccomp_program() is not None:
        assert facts["seccomp"] == "2"


# ------------------------------------------------------------------------------------ end to end
@needs_bwrap
def test_the_verdict_rewrite_attack_is_defeated_end_to_end(tmp_path: Path, listener: int) -> None:
    """Replays issue 14's first attack through ``atb eval``: after it returns, no detached process of
    the candidate is alive, nothing was written outside its scratch, and the stored verdicts are
    exactly what ``atb eval`` stored."""
    outside = tmp_path / "outside"
    outside.mkdir()
    cand = tmp_path / "attack.py"
    cand.write_text(_attack_source(outside, listener))
    db = tmp_path / "atb.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATB_")}
    proc = subprocess.Popen([sys.executable, "-m", "atb_agent.cli", "eval", "relu", str(cand), "--json",
                             "--db", db.name], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    token = owner_token(proc.pid)  # read while the harness is alive: the start time pins the process
    out, err = proc.communicate(timeout=540)
    assert proc.returncode in (0, 1), err[-2000:]
    result = json.loads(out)
    assert result.get("verdict_id"), result
    with sqlite3.connect(db) as con:
        before = con.execute("SELECT * FROM verdicts ORDER BY id").fetchall()
    assert before
    survivors = _gone(token, 5.0)
    time.sleep(4.0)  # the attack's detached process acts 2 s after the harness is gone
    with sqlite3.connect(db) as con:
        after = con.execute("SELECT * FROM verdicts ORDER BY id").fetchall()
    assert survivors == [], f"processes of the evaluation outlived it: {survivors}"
    assert list(outside.iterdir()) == [], [p.name for p in outside.iterdir()]
    assert after == before


# ------------------------------------------------------------------------------------ kill -9
_STANDIN = textwrap.dedent("""
    import json, sys, tempfile
    from pathlib import Path
    from harness.measure.runner import Worker
    from harness.measure.session import worker_config
    from protocol import load_protocol
    workdir = Path(tempfile.mkdtemp(prefix="atb-measure-"))
    src = '''
    import os, time, torch, torch.nn as nn
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(300)
        os._exit(0)
    class ModelNew(nn.Module):
        def forward(self, x):
            return torch.relu(x)
    '''
    (workdir / "atb_candidate_s.py").write_text(src)
    w = Worker("candidate", worker_config("cpu", load_protocol()), workdir, 120.0).start()
    r = w.request({"op": "load", "task_path": sys.argv[1], "task_module": "atb_task_relu", "init_seed": 3,
                   "candidate_path": str(workdir / "atb_candidate_s.py"), "candidate_module": "atb_candidate_s"})
    print(json.dumps({"ok": r.ok, "confinement": w.confinement, "workdir": str(workdir),
                      "scratch": str(w.scratch)}), flush=True)
    sys.stdin.read()
""")


@pytest.mark.parametrize("confined", [True, False], ids=["confined", "unconfined"])
def test_kill_9_of_the_harness_leaves_nothing_after_the_next_start(tmp_path: Path, confined: bool) -> None:
    """A harness stand-in spawns a candidate worker whose candidate leaves a detached sleeper, then
    is killed with SIGKILL. Confined, nothing it started is alive a moment later; unconfined, the
    detached sleeper escapes the process group and PR_SET_PDEATHSIG, and the next start's reaper kills
    it. Either way the next start removes the dead harness's scratch directories."""
    if confined and shutil.which("bwrap") is None and not os.environ.get("ATB_BWRAP"):
        pytest.skip("bubblewrap is not installed")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATB_")}
    env["TMPDIR"] = str(tmpdir)
    if not confined:
        env["ATB_BWRAP"] = str(tmp_path / "no-such-bwrap")
    harness = subprocess.Popen([sys.executable, "-c", _STANDIN, str(RELU.path)], env=env, cwd=REPO,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert harness.stdout is not None
        line = harness.stdout.readline()
        assert line, harness.stderr.read() if harness.stderr else ""
        info = json.loads(line)
        assert info["ok"], info
        assert info["confinement"].startswith("bwrap:" if confined else "unconfined:"), info
        token = owner_token(harness.pid)
        deadline = time.monotonic() + 10.0   # the sleeper's second fork may still be under way
        while len(_processes_of(token)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_processes_of(token)) >= 2  # the worker and the detached sleeper
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait(timeout=10)
    finally:
        if harness.poll() is None:
            harness.kill()
    left = _gone(token, 10.0)
    if confined:
        assert left == [], f"survived the harness's SIGKILL: {left}"
    assert Path(info["workdir"]).is_dir() and Path(info["scratch"]).is_dir()  # stale until the next start
    killed, removed = reap_stale(tmpdir)
    assert set(left) <= set(killed)
    assert _gone(token, 10.0) == []
    assert not Path(info["workdir"]).exists() and not Path(info["scratch"]).exists(), removed


def test_the_reaper_leaves_live_owners_and_unmarked_directories_alone(tmp_path: Path) -> None:
    """Only directories whose marked owner is dead are removed (a pid reused by another process
    does not count as the owner: the start time is part of the mark)."""
    from harness.measure.runner._reaper import claim

    live = tmp_path / "atb-measure-live"
    dead = tmp_path / "atb-child-candidate-dead"
    reused = tmp_path / "atb-child-reference-reused"
    unmarked = tmp_path / "atb-measure-unmarked"
    for d in (live, dead, reused, unmarked):
        d.mkdir()
    claim(live)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_token = owner_token(gone.pid)
    gone.wait()
    (dead / ".atb-owner").write_text(json.dumps({"owner": gone_token}))
    (reused / ".atb-owner").write_text(json.dumps({"owner": f"{os.getpid()}:1"}))
    _, removed = reap_stale(tmp_path)
    assert sorted(Path(r).name for r in removed) == sorted([dead.name, reused.name])
    assert live.is_dir() and unmarked.is_dir()


# ------------------------------------------------------------------------------------ output cap
@needs_bwrap
def test_a_candidate_printing_500_mb_fills_nothing(tmp_path: Path) -> None:
    """stdout/stderr go to a bounded in-memory tail: 500 MB printed leaves at most the cap held
    and nothing on disk."""
    src = textwrap.dedent("""
        import os, torch, torch.nn as nn
        block = b"x" * (1 << 20)
        for _ in range(500):
            os.write(1, block)
        os.write(2, b"END-OF-FLOOD")
        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.relu(x)
    """)
    w = Worker("candidate", _config(), tmp_path, 240.0).start()
    try:
        assert w.request(_load_cmd(tmp_path, src), timeout_s=240.0).ok
        assert w.output is not None
        deadline = time.monotonic() + 30
        while w.output.total < 500 << 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert w.output.total >= 500 << 20
        assert len(w.output.tail(1 << 30)) <= w.output.cap
        assert "END-OF-FLOOD" in w.log_tail(4096)
        assert w.scratch is not None
        on_disk = sum(p.stat().st_size for d in (tmp_path, w.scratch) for p in d.rglob("*") if p.is_file())
        assert on_disk < 1 << 20
    finally:
        w.close()
