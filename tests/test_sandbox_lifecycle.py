"""Sandboxes never outlive their run: the container's confinement as the daemon sees it, removal at the
wall-clock deadline, on SIGTERM, and by label after SIGKILL; the fallback when no daemon answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from protocol import load_protocol
from sandbox import SandboxClosedError, SandboxLimits, SandboxUnavailableError, cleanup_leftovers, open_sandbox

REPO = Path(__file__).resolve().parents[1]


def _limits(**changes: object) -> SandboxLimits:
    data = load_protocol().sandbox.model_dump()
    data.update(changes)
    return SandboxLimits.model_validate(data)


def _client():  # type: ignore[no-untyped-def]
    from sandbox._docker import docker_client

    try:
        return docker_client()
    except SandboxUnavailableError as exc:
        pytest.skip(str(exc))


def _gone(client, cid: str, within_s: float) -> bool:  # type: ignore[no-untyped-def]
    import docker

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            client.containers.get(cid)
        except docker.errors.NotFound:
            return True
        time.sleep(0.25)
    return False


CHILD = textwrap.dedent("""
    import json, sys, time
    from protocol import load_protocol
    from sandbox import SandboxLimits
    from sandbox._docker import DockerSandbox
    data = load_protocol().sandbox.model_dump(); data["run_wallclock_s"] = 600.0
    sb = DockerSandbox(SandboxLimits.model_validate(data), mount_torch=False)
    print(json.dumps({"id": sb.ident, "ws": sb.info().workspace_host_path}), flush=True)
    time.sleep(300)
""")


def _start_child() -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the child did not start a sandbox"
    return proc, json.loads(line)


@pytest.mark.docker
def test_container_confinement_and_wallclock_removal() -> None:
    from sandbox._docker import DockerSandbox

    client = _client()
    limits = _limits(run_wallclock_s=6.0)
    sb = DockerSandbox(limits, mount_torch=False, client=client)
    try:
        attrs = client.api.inspect_container(sb.ident)
        host, cfg = attrs["HostConfig"], attrs["Config"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
        assert host["PidsLimit"] == limits.pids_limit
        assert host["Memory"] == host["MemorySwap"] == limits.memory_mb * 1024 * 1024
        assert host["NanoCpus"] == int(limits.cpus * 1e9)
        assert host["AutoRemove"] is True and host["Init"] is True
        assert not cfg["User"].startswith("0") and cfg["User"] != "root"
        assert cfg["Labels"]["org.autotunebench.sandbox"] == "1"
        assert cfg["Labels"]["org.autotunebench.owner-pid"] == str(os.getpid())
        writable = [m["Destination"] for m in attrs["Mounts"] if m["RW"]]
        assert writable == ["/workspace"]
        assert set(host["Tmpfs"]) == {"/tmp"}
        ws = Path(sb.info().workspace_host_path)
        assert ws.is_dir() and os.path.ismount(ws)
        # The daemon removes the container at the deadline by itself: nothing of ours needs to run.
        assert _gone(client, sb.ident, within_s=30), "the container outlived its wall-clock limit"
        with pytest.raises(SandboxClosedError):
            sb.exec("true")
    finally:
        sb.close()
    assert not ws.exists(), "close() must delete the workspace"


@pytest.mark.docker
def test_sigterm_removes_the_container_and_workspace() -> None:
    client = _client()
    proc, info = _start_child()
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM
    assert _gone(client, info["id"], within_s=10)
    assert not Path(info["ws"]).exists()


@pytest.mark.docker
def test_sigkill_leftovers_are_removed_by_label() -> None:
    client = _client()
    proc, info = _start_child()
    proc.kill()
    proc.wait(timeout=30)
    left = client.containers.get(info["id"])
    assert left.labels["org.autotunebench.sandbox"] == "1"
    from atb_agent.cli import main

    report = cleanup_leftovers()
    assert left.name in report.containers_removed
    assert info["ws"] in {str(Path(w) / "workspace") for w in report.workspaces_removed}
    assert _gone(client, info["id"], within_s=10)
    assert not Path(info["ws"]).exists()
    assert main(["sandbox", "cleanup", "--json"]) == 0


@pytest.mark.bwrap
def test_auto_falls_back_to_bwrap_and_says_why(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailableError, match="no Docker daemon answers at unix:///nonexistent"):
        open_sandbox(_limits(), "docker")
    sb = open_sandbox(_limits(), "auto", mount_torch=False)
    try:
        assert sb.backend == "bwrap"
        assert "no Docker daemon answers" in capsys.readouterr().err
        assert sb.exec("echo fallback").stdout == "fallback\n"
    finally:
        sb.close()


@pytest.mark.docker
def test_cli_status_and_build(capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli import main

    _client()
    assert main(["sandbox", "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["auto_backend"] == "docker" and status["image"]["docker_image_present"] is True
    assert main(["sandbox", "build", "--json"]) == 0
    out = capsys.readouterr().out
    built = json.loads(out)
    assert out.count("\n") == 1 and built["ok"] is True and built["tag"] == load_protocol().sandbox.image


@pytest.mark.usefixtures("docker_sandbox_ready")
def test_a_stopped_sweep_waits_until_the_cancelled_workers_container_is_gone(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The stop of a sweep removes the container a force-cancelled worker left even when the first removal
    pass does not get it (CI once saw the container still up after ``removed 0 sandbox container(s)``: on vfs
    under load a removal can outlast the client's timeout). Here the first pass removes nothing, as such a
    pass does; the container must still be gone when ``reap_cancelled`` returns, and be counted."""
    import socket

    import sandbox
    from atb_agent.sweep import _driver
    from sandbox._identity import LABEL, LABEL_OWNER_HOST, LABEL_OWNER_PID

    client = _client()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)                                   # a worker pid that is gone, as after a force-cancel
    container = client.containers.create(
        load_protocol().sandbox.image, ["/bin/sleep", "120"], name=f"atb-sbx-{dead.pid}-reaptest",
        labels={LABEL: "1", LABEL_OWNER_PID: str(dead.pid), LABEL_OWNER_HOST: socket.gethostname()})
    real = sandbox.cleanup_leftovers
    passes: list[int] = []

    def first_pass_times_out() -> sandbox.CleanupReport:
        passes.append(1)
        if len(passes) == 1:
            return sandbox.CleanupReport(containers_removed=[], workspaces_removed=[], cgroups_removed=[],
                                         docker_checked=True, docker_note="")
        return real()

    monkeypatch.setattr(sandbox, "cleanup_leftovers", first_pass_times_out)
    monkeypatch.setattr(_driver, "attempts",
                        lambda store, key: [{"body": {"node": {"hostname": socket.gethostname()}, "pid": dead.pid}}])
    try:
        _driver.reap_cancelled(None, [object()], wait_s=5, removal_s=60)  # type: ignore[list-item]
        assert len(passes) >= 2
        assert _gone(client, container.id, within_s=1), "the container outlived the stopped sweep"
        assert "removed 1 sandbox container(s)" in capsys.readouterr().err
    finally:
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001 - already removed: the expected case
            pass
