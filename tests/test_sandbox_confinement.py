"""Confinement, tested from inside a real sandbox: Docker (real daemon) and bubblewrap, same tests.

One sandbox per backend for the whole module (container creation on vfs takes seconds). Every attack
runs as the tuner would run it, through ``exec``; the assertions are about what the host sees after.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import load_protocol
from sandbox import (
    ExecResult,
    Sandbox,
    SandboxClosedError,
    SandboxLimits,
    SandboxUnavailableError,
)

REPO = Path(__file__).resolve().parents[1]
HARNESS_FILE = REPO / "harness" / "errors.py"
BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), pytest.param("bwrap", marks=pytest.mark.bwrap)]


def _limits(**changes: object) -> SandboxLimits:
    data = load_protocol().sandbox.model_dump()
    data.update(changes)
    return SandboxLimits.model_validate(data)


def _open(backend: str, limits: SandboxLimits) -> Sandbox:
    try:
        if backend == "docker":
            from sandbox._docker import DockerSandbox

            return DockerSandbox(limits)
        from sandbox._bwrap import BwrapSandbox

        return BwrapSandbox(limits)
    except SandboxUnavailableError as exc:
        pytest.skip(f"{backend} backend unavailable here: {exc}")


@pytest.fixture(scope="module", params=BACKENDS)
def box(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    sb = _open(request.param, _limits())
    yield sb
    sb.close()


def _py(box: Sandbox, code: str, timeout_s: float = 20.0) -> ExecResult:
    return box.exec(["python3", "-c", textwrap.dedent(code)], timeout_s=timeout_s)


def _assert_alive(box: Sandbox) -> None:
    """The sandbox still runs commands and no tuner process is left over."""
    r = box.exec("echo alive", timeout_s=20)
    assert r.ok and r.stdout == "alive\n", r
    r = _py(box, """
        import os
        mine = [p for p in os.listdir('/proc') if p.isdigit() and os.stat('/proc/' + p).st_uid == os.getuid()]
        print(len(mine))
    """)
    assert r.ok, r
    # this python, plus bwrap's reaper on the bwrap backend
    assert int(r.stdout) <= 3, f"leftover tuner processes: {r.stdout}"


def test_runs_unprivileged_in_the_workspace(box: Sandbox) -> None:
    r = _py(box, """
        import os
        status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)
        print(os.getuid(), os.getcwd(), status['CapEff'].strip(), status['NoNewPrivs'].strip())
    """)
    assert r.ok, r
    uid, cwd, cap_eff, nnp = r.stdout.split()
    assert uid != "0" and cwd == "/workspace"
    assert int(cap_eff, 16) == 0, "capabilities were not dropped"
    assert nnp == "1"


def test_network_is_unreachable(box: Sandbox) -> None:
    r = _py(box, """
        import os, socket
        reached = []
        for host, port in [("1.1.1.1", 53), ("8.8.8.8", 443), ("10.0.0.1", 80), ("172.17.0.1", 2375)]:
            s = socket.socket(); s.settimeout(2)
            try:
                s.connect((host, port)); reached.append(host)
            except OSError:
                pass
        try:
            socket.getaddrinfo("deb.debian.org", 80); reached.append("dns")
        except OSError:
            pass
        for sock in ("/var/run/docker.sock", "/run/docker.sock"):
            if os.path.exists(sock):
                reached.append(sock)
        print("reached:", reached)
    """)
    assert r.ok, r
    assert r.stdout.strip() == "reached: []"


def test_nothing_outside_the_workspace_is_writable(box: Sandbox) -> None:
    r = _py(box, """
        import os
        written = []
        for d in ["/", "/etc", "/usr", "/usr/lib/python3.11", "/opt/atb/site-packages", "/var", "/root", "/home",
                  "/bin", "/work/main/harness", "/var/cache"]:
            try:
                with open(os.path.join(d, "atb-pwned"), "w") as f:
                    f.write("x")
                written.append(d)
            except OSError:
                pass
        open("/workspace/ok.txt", "w").write("fine")
        open("/tmp/private.txt", "w").write("private")
        print("written:", written, os.path.exists("/work/main"))
    """)
    assert r.ok, r
    assert r.stdout.strip() == "written: [] False"
    assert box.read_file("ok.txt") == b"fine"
    assert not (HARNESS_FILE.parent / "atb-pwned").exists()
    assert not Path("/tmp/private.txt").exists(), "the sandbox's /tmp must not be the host's"


def test_harness_code_is_not_inside(box: Sandbox) -> None:
    r = _py(box, """
        import importlib.util
        print([m for m in ("harness", "protocol", "tools", "atb_agent") if importlib.util.find_spec(m)])
    """)
    assert r.ok, r
    assert r.stdout.strip() == "[]"


def test_endless_loop_is_stopped_and_reported(box: Sandbox) -> None:
    r = box.exec(["python3", "-c", "while True: pass"], timeout_s=2)
    assert r.timed_out and r.exit_code is None and r.killed_signal == 9
    assert "time limit" in r.note
    assert r.duration_s < 10
    _assert_alive(box)


def test_fork_bomb_is_contained_and_reported(box: Sandbox) -> None:
    r = _py(box, """
        import os, time
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
    """, timeout_s=5)
    assert r.timed_out, r
    assert "fork(s) refused" in r.note, r.note
    _assert_alive(box)


def test_memory_hog_is_killed_and_reported(box: Sandbox) -> None:
    r = _py(box, """
        hog = []
        while True:
            hog.append(b"x" * (32 << 20))
    """, timeout_s=30)
    assert not r.timed_out, r
    assert r.killed_signal == 9, r
    assert "memory limit" in r.note, r.note
    _assert_alive(box)


def test_disk_filler_meets_the_workspace_cap(box: Sandbox) -> None:
    limits = box.limits
    ws_mb, tmp_mb = limits.workspace_max_bytes >> 20, limits.tmp_max_bytes >> 20
    r = box.exec(f"dd if=/dev/zero of=/workspace/fill bs=1M count={ws_mb + 16}; "
                 f"dd if=/dev/zero of=/tmp/fill bs=1M count={tmp_mb + 16}", timeout_s=50)
    assert r.exit_code not in (0, None), r
    assert r.stderr.count("No space left on device") == 2, r.stderr
    assert "the workspace is full" in r.note, r.note
    assert box.info().workspace_capped
    size = os.stat(Path(box.info().workspace_host_path) / "fill").st_size
    assert size <= limits.workspace_max_bytes
    rm = box.exec("rm -f /workspace/fill /tmp/fill", timeout_s=10)
    assert rm.ok
    _assert_alive(box)


def test_output_is_capped(box: Sandbox) -> None:
    cap = box.limits.exec_output_cap_bytes
    r = box.exec(f"head -c {cap * 3} /dev/zero | tr '\\0' 'a'", timeout_s=20)
    assert r.ok and r.truncated
    assert len(r.stdout) == cap and r.stdout_bytes == cap * 3


def test_symlink_to_harness_file_is_not_followed_at_copy_out(box: Sandbox) -> None:
    r = box.exec(f"ln -sf {HARNESS_FILE} /workspace/candidate.py && mkdir -p /workspace/pkg "
                 f"&& ln -sf {HARNESS_FILE.parent} /workspace/pkg/harness && echo planted", timeout_s=10)
    assert r.ok, r
    out = box.copy_out()
    assert "candidate.py" not in out.files
    assert {s.path for s in out.skipped} >= {"candidate.py", "pkg/harness"}
    secret = HARNESS_FILE.read_bytes()
    assert all(data != secret for data in out.files.values())
    box.exec("rm -rf /workspace/candidate.py /workspace/pkg", timeout_s=10)


@pytest.mark.bwrap
def test_wallclock_limit_ends_the_run() -> None:
    from sandbox._bwrap import BwrapSandbox

    try:
        sb = BwrapSandbox(_limits(run_wallclock_s=1.5), mount_torch=False)
    except SandboxUnavailableError as exc:
        pytest.skip(str(exc))
    with sb:
        r = sb.exec("sleep 30", timeout_s=30)
        assert r.timed_out and r.duration_s < 5, "a command may not outlive the run's wall-clock limit"
        with pytest.raises(SandboxClosedError, match="wall-clock"):
            sb.exec("true")
