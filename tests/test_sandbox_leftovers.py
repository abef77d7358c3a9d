"""Issue 14: nothing the tuner starts outlives its tool call, and no sandbox output goes uncapped.

Attacks, on the real Docker daemon and real bubblewrap:
- a background writer left behind by ``run_in_sandbox`` truncated ``candidate.py`` in a loop, so
  ``submit`` copied out a 0-byte candidate (Docker: background processes survived between calls);
- a process running in the sandbox while ``submit`` copies the workspace out;
- a command's output, and any file it writes, must be bounded on the host.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from protocol import load_protocol
from sandbox import Sandbox, SandboxLimits, SandboxUnavailableError

BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), pytest.param("bwrap", marks=pytest.mark.bwrap)]
GOOD = "class ModelNew:\n    pass\n"


def _open(backend: str) -> Sandbox:
    limits = SandboxLimits.from_params(load_protocol().sandbox)
    try:
        if backend == "docker":
            from sandbox._docker import DockerSandbox

            return DockerSandbox(limits, mount_torch=False)
        from sandbox._bwrap import BwrapSandbox

        return BwrapSandbox(limits, mount_torch=False)
    except SandboxUnavailableError as exc:
        pytest.skip(f"{backend} backend unavailable here: {exc}")


@pytest.fixture(scope="module", params=BACKENDS)
def box(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    sb = _open(request.param)
    yield sb
    sb.close()


def _beats(box: Sandbox) -> bytes:
    try:
        return box.read_file("beat")
    except Exception:  # noqa: BLE001 - not written yet
        return b""


def test_a_background_process_does_not_outlive_its_tool_call(box: Sandbox) -> None:
    r = box.exec("(while :; do date +%s%N > /workspace/beat; sleep 0.02; done) >/dev/null 2>&1 &", timeout_s=20)
    assert r.ok, r
    first = _beats(box)
    time.sleep(0.5)
    assert _beats(box) == first, "a background process started by an earlier command is still writing"
    count = box.exec("for p in /proc/[0-9]*; do [ -O $p ] && echo $p; done | wc -l", timeout_s=20)
    # the counting shell and its pipeline only (a subshell, wc): nothing left from the earlier call
    assert count.ok and int(count.stdout) <= 4, count


def test_a_background_writer_cannot_truncate_what_submit_copies_out(box: Sandbox) -> None:
    """The attack as reported: a writer left running empties candidate.py; submit must see the tool's write."""
    r = box.exec("(while :; do : > /workspace/candidate.py; sleep 0.005; done) >/dev/null 2>&1 &", timeout_s=20)
    assert r.ok, r
    box.write_file("candidate.py", GOOD)
    time.sleep(0.3)
    out = box.copy_out()
    assert out.files["candidate.py"] == GOOD.encode(), "copy-out read a file a leftover process rewrote"


@pytest.mark.docker
@pytest.mark.usefixtures("docker_sandbox_ready")
def test_copy_out_kills_a_process_running_in_the_container_first() -> None:
    """A process that is running when submit copies out (started here behind exec's back, through the
    daemon, as the tuner uid) is killed before any file is read, and the copy is what it left."""
    from sandbox._docker import DockerSandbox
    from sandbox._identity import TUNER_GID, TUNER_UID

    sb = _open("docker")
    assert isinstance(sb, DockerSandbox)
    try:
        sb.write_file("candidate.py", GOOD)
        api: Any = sb._client.api
        eid = api.exec_create(sb.ident, ["/bin/sh", "-c", "sleep 0.5; while :; do : > /workspace/candidate.py; "
                                         "sleep 0.005; done"], user=f"{TUNER_UID}:{TUNER_GID}")["Id"]
        api.exec_start(eid, detach=True)
        out = sb.copy_out()                   # well before the writer's first truncation
        assert out.files["candidate.py"] == GOOD.encode()
        assert not api.exec_inspect(eid)["Running"], "copy-out left the writer running"
        time.sleep(0.8)
        assert sb.read_file("candidate.py") == GOOD.encode()
    finally:
        sb.close()


def test_command_output_and_written_files_are_capped(box: Sandbox) -> None:
    """Output comes back capped per stream (the rest is counted, not kept) and a file is bounded by
    RLIMIT_FSIZE even where the workspace could not be a capped tmpfs."""
    cap = box.limits.exec_output_cap_bytes
    r = box.exec(f"head -c {cap * 8} /dev/zero; head -c {cap * 8} /dev/zero >&2", timeout_s=30)
    assert r.truncated and r.stdout_bytes == r.stderr_bytes == cap * 8
    assert len(r.stdout.encode()) <= cap and len(r.stderr.encode()) <= cap
    r = box.exec(["python3", "-c", "import resource, json; print(json.dumps(resource.getrlimit(resource.RLIMIT_FSIZE)))"],
                 timeout_s=20)
    assert r.ok, r
    soft, hard = json.loads(r.stdout)
    from sandbox._docker import FSIZE_MARGIN_BYTES

    bound = max(box.limits.workspace_max_bytes, box.limits.tmp_max_bytes) + FSIZE_MARGIN_BYTES
    assert 0 < soft <= bound and 0 < hard <= bound


@pytest.mark.docker
@pytest.mark.usefixtures("docker_sandbox_ready")
def test_the_container_keeps_no_log_on_the_host() -> None:
    from sandbox._docker import DockerSandbox

    sb = _open("docker")
    assert isinstance(sb, DockerSandbox)
    try:
        attrs = sb._client.api.inspect_container(sb.ident)
        assert attrs["HostConfig"]["LogConfig"]["Type"] == "none"
    finally:
        sb.close()
