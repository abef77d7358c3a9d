"""The bubblewrap sandbox over the host's own files (issue 26): what a GPU host without Docker or an image gets.

Against the real bwrap: with no image root filesystem (``ATB_SANDBOX_CACHE`` pointed at an empty folder)
the sandbox starts over the host's files, runs python3 as the tuner's uid, cannot write outside its
workspace, sees none of /root, /home, /run (the Docker socket) or the repository, has no network, and
says in ``info()`` that it is host-root and why. The image mode's confinement tests are re-run here
against the host root (imported below); the pure checks (reachability as the tuner's uid, protected
folders, the interpreter choice) are tested without bwrap.

This machine's interpreter lives under /root/.pyenv (/root is mode 0700), which the tuner's uid cannot
reach; the sandbox then runs the system's /usr/bin/python3.X of the same minor, and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import load_protocol
from sandbox import ExecResult, Sandbox, SandboxLimits, SandboxUnavailableError, open_sandbox
from sandbox._hostroot import (
    HOST_ROOT_IMAGE,
    HostRootError,
    choose_interpreter,
    exposes,
    plan_host_root,
    project_root,
    tuner_blocked_at,
)
from sandbox._identity import TUNER_UID

# The image mode's confinement tests, collected again here with this module's host-root ``box``.
from test_sandbox_confinement import (  # noqa: F401
    test_harness_code_is_not_inside,
    test_network_is_unreachable,
    test_nothing_outside_the_workspace_is_writable,
    test_output_is_capped,
    test_runs_unprivileged_in_the_workspace,
    test_symlink_to_harness_file_is_not_followed_at_copy_out,
)

AS_ROOT = os.geteuid() == 0


def _limits() -> SandboxLimits:
    return SandboxLimits.from_params(load_protocol().sandbox)


def _need_bwrap() -> None:
    from sandbox._bwrap import bwrap_available

    why = bwrap_available()
    if why is not None:
        pytest.skip(why)


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    _need_bwrap()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATB_SANDBOX_CACHE", str(tmp_path_factory.mktemp("no-image")))
        sb = open_sandbox(_limits(), "bwrap", quiet=True)
    yield sb
    sb.close()


def _py(box: Sandbox, code: str) -> ExecResult:
    return box.exec(["python3", "-c", textwrap.dedent(code)], timeout_s=30)


# ------------------------------------------------------------------------------------ with bwrap
@pytest.mark.bwrap
def test_auto_without_docker_or_image_starts_over_the_host_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _need_bwrap()
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("ATB_SANDBOX_CACHE", str(tmp_path))
    sb = open_sandbox(_limits(), "auto", mount_torch=False)
    try:
        info = sb.info()
        assert sb.backend == "bwrap" and info.image == HOST_ROOT_IMAGE
        chain = info.enforcement["selection"].split(" -> ")
        assert chain[0].startswith("auto: no Docker daemon answers"), chain
        assert chain[1].startswith(f"no image root filesystem at {tmp_path}"), chain
        err = capsys.readouterr().err
        assert "Using the bubblewrap backend" in err and "over the host's own files" in err
        r = sb.exec(["python3", "-c", "import sys; print(sys.version_info[:2])"])
        assert r.ok and r.stdout.strip() == str(sys.version_info[:2]), r
    finally:
        sb.close()


@pytest.mark.bwrap
def test_info_records_host_root_what_is_bound_and_why(box: Sandbox) -> None:
    info = box.info()
    assert info.backend == "bwrap" and info.image == HOST_ROOT_IMAGE
    root = info.enforcement["root_filesystem"]
    assert root.startswith("host-root:") and "/usr: programs" in root
    assert "at /etc/passwd: a private passwd" in root and "Never bound: /root, /home, /run" in root
    assert "no image root filesystem" in info.enforcement["selection"]
    python = info.enforcement["python"]
    assert python.split(":")[0].endswith("python%d.%d" % sys.version_info[:2])
    if AS_ROOT and tuner_blocked_at(sys.base_prefix) is not None:  # this machine: pyenv under /root
        assert "passed over" in python and "cannot reach" in python


@pytest.mark.bwrap
def test_python_runs_as_the_tuner_with_a_private_passwd(box: Sandbox) -> None:
    r = _py(box, """
        import os, pwd
        print(os.getuid(), pwd.getpwuid(os.getuid()).pw_name, len(open('/etc/passwd').read().splitlines()))
    """)
    assert r.ok, r
    uid, name, lines = r.stdout.split()
    assert int(uid) == (TUNER_UID if AS_ROOT else os.getuid())
    assert name == "tuner" and int(lines) <= 3  # not the host's accounts


@pytest.mark.bwrap
def test_cannot_see_root_home_run_the_socket_or_the_repo(box: Sandbox) -> None:
    r = _py(box, f"""
        import json, os
        seen = [p for p in ("/home", "/run", "/var", "/var/run/docker.sock", "/run/docker.sock",
                            "/work", {str(project_root())!r}, "/root/.bashrc", "/root/.ssh") if os.path.lexists(p)]
        root = sorted(os.listdir("/root")) if os.path.isdir("/root") else []
        print(json.dumps([seen, root, sorted(os.listdir("/"))]))
    """)
    assert r.ok, r
    seen, root, top = json.loads(r.stdout)
    assert seen == []
    # /root exists inside only as the path to an interpreter prefix bound under it (not on this machine)
    under_root = [p for p in info_python_prefix(box) if p.startswith("/root/")]
    assert root == ([Path(under_root[0]).parts[2]] if under_root else [])
    assert set(top) <= {"usr", "bin", "lib", "lib64", "lib32", "libx32", "sbin", "etc", "opt", "tmp", "workspace",
                        "dev", "proc", "root"}


def info_python_prefix(box: Sandbox) -> list[str]:
    """The interpreter prefix bound at its own path, if any (from the recorded plan)."""
    binds = getattr(box, "_host").binds
    return [b.source for b in binds if b.why == "the Python interpreter's prefix"]


@pytest.mark.bwrap
def test_cannot_write_outside_the_workspace(box: Sandbox) -> None:
    r = _py(box, """
        import os, sys
        written = []
        for d in ["/", "/etc", "/usr", "/usr/bin", "/opt", "/opt/atb", "/opt/atb/bin", sys.prefix]:
            try:
                open(os.path.join(d, "atb-pwned"), "w").write("x")
                written.append(d)
            except OSError:
                pass
        try:
            os.symlink("/usr/bin/true", "/opt/atb/bin/python3x"); written.append("link")
        except OSError:
            pass
        open("/workspace/ok.txt", "w").write("fine")
        print("written:", written)
    """)
    assert r.ok, r
    assert r.stdout.strip() == "written: []"
    assert box.read_file("ok.txt") == b"fine"
    assert not Path("/usr/atb-pwned").exists() and not Path("/atb-pwned").exists()


@pytest.mark.bwrap
def test_no_network_but_a_down_loopback(box: Sandbox) -> None:
    r = _py(box, """
        import socket
        s = socket.socket(); s.settimeout(2)
        try:
            s.connect(("1.1.1.1", 53)); reached = True
        except OSError:
            reached = False
        print(socket.if_nameindex(), reached)
    """)
    assert r.ok, r
    assert r.stdout.strip() == "[(1, 'lo')] False"


@pytest.mark.bwrap
def test_an_interpreter_prefix_outside_usr_is_bound_at_its_own_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on the H200 (an interpreter under /opt): its prefix is bound read-only at its real path and
    ``python3`` runs it. A script stands in for the interpreter (nothing else of the prefix is needed)."""
    _need_bwrap()
    from sandbox import _hostroot
    from sandbox._bwrap import BwrapSandbox

    # under /var/tmp: anyone may search it, and (unlike /tmp) the sandbox mounts nothing over it
    prefix = Path(tempfile.mkdtemp(prefix="atb-fakepy-", dir="/var/tmp"))
    try:
        prefix.chmod(0o755)
        exe = prefix / "bin" / "python3.99"
        exe.parent.mkdir(mode=0o755)
        exe.write_text('#!/bin/sh\necho "fake python from $0: $*"\n')
        exe.chmod(0o755)
        monkeypatch.setattr(_hostroot, "_interpreter_candidates", lambda: [(exe, prefix, "this interpreter's base prefix")])
        with BwrapSandbox(_limits(), mount_torch=False, root="host") as sb:
            r = sb.exec(["python3", "-c", "print(1)"])
            assert r.ok and r.stdout == "fake python from /opt/atb/bin/python3: -c print(1)\n", r
            r = sb.exec(f"ls {prefix}/bin && touch {prefix}/x")
            assert r.stdout == "python3.99\n" and "Read-only file system" in r.stderr, r
            assert sb.info().enforcement["python"].startswith(f"{exe}: this interpreter's base prefix, {prefix} bound")
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


@pytest.mark.bwrap
def test_atb_bwrap_is_honoured_as_a_loader_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200 runs a carried bwrap as ``LOADER --library-path DIR DIR/bwrap``: the same form works here."""
    _need_bwrap()
    loader, real = "/lib64/ld-linux-x86-64.so.2", shutil.which("bwrap")
    if not os.path.exists(loader) or real is None:
        pytest.skip("no x86-64 loader or bwrap on PATH")
    from sandbox._bwrap import BwrapSandbox

    monkeypatch.setenv("ATB_SANDBOX_CACHE", str(tmp_path))
    monkeypatch.setenv("ATB_BWRAP", "/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailableError, match="ATB_BWRAP names '/nonexistent/bwrap'"):
        BwrapSandbox(_limits(), mount_torch=False)
    monkeypatch.setenv("ATB_BWRAP", f"{loader} {real}")
    with BwrapSandbox(_limits(), mount_torch=False) as sb:
        assert sb._bwrap == [loader, real]
        r = sb.exec("echo carried")
        assert r.ok and r.stdout == "carried\n", r


@pytest.mark.bwrap
@pytest.mark.skipif(not AS_ROOT, reason="only root switches to the tuner's uid before bwrap")
def test_a_bwrap_the_tuner_cannot_reach_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundle carried under /root (mode 0700) would fail every command; it fails at the start instead."""
    _need_bwrap()
    hidden = Path(tempfile.mkdtemp(prefix="atb-hidden-"))  # 0700, under /tmp
    try:
        real = shutil.which("bwrap")
        assert real is not None
        shutil.copy(real, hidden / "bwrap")
        from sandbox._bwrap import BwrapSandbox

        monkeypatch.setenv("ATB_BWRAP", str(hidden / "bwrap"))
        with pytest.raises(SandboxUnavailableError,
                           match=f"uid {TUNER_UID}, which cannot reach {hidden}/bwrap: blocked at {hidden} "
                                 r"\(mode 0700.*point ATB_BWRAP there"):
            BwrapSandbox(_limits(), mount_torch=False, root="host")
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


# ------------------------------------------------------------------------------------ without bwrap
@pytest.mark.skipif(not AS_ROOT, reason="the stat check stands in for another uid only when run as root")
def test_reachability_is_checked_as_the_tuner_uid() -> None:
    base = Path(tempfile.mkdtemp(prefix="atb-reach-"))  # under /tmp, which anyone may search
    try:
        base.chmod(0o755)
        exe = base / "prefix" / "bin" / "python3.99"
        exe.parent.mkdir(parents=True)
        exe.write_text("")
        for p in (base / "prefix", exe.parent, exe):
            p.chmod(0o755)
        assert tuner_blocked_at(exe) is None
        (base / "prefix").chmod(0o700)
        blocked = tuner_blocked_at(exe)
        assert blocked is not None and blocked.startswith(f"{base / 'prefix'} (mode 0700"), blocked
        assert tuner_blocked_at(exe, uid=os.getuid(), gid=os.getgid()) is None  # its owner passes
        (base / "prefix").chmod(0o755)
        exe.chmod(0o700)
        blocked = tuner_blocked_at(exe)
        assert blocked is not None and blocked.startswith(f"{exe} (mode 0700"), blocked
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_an_unreachable_interpreter_fails_naming_the_path_and_the_fix(tmp_path: Path) -> None:
    prefix = tmp_path / "py"
    (prefix / "bin").mkdir(parents=True)
    exe = prefix / "bin" / "python3.99"
    exe.write_text("")
    exe.chmod(0o700)
    os.chmod(prefix, 0o700)
    uid = TUNER_UID if AS_ROOT else os.getuid()
    missing = tmp_path / "none" / "python3.99"
    cands: list[tuple[Path, Path | None, str]] = [(missing, None, "the system's Python 3.99")]
    if AS_ROOT:  # as another uid the 0700 folders block; as the owner they would not
        cands.insert(0, (exe, prefix, "this interpreter's base prefix"))
    with pytest.raises(HostRootError) as caught:
        choose_interpreter(uid, uid, cands)
    msg = str(caught.value)
    assert f"{missing}: does not exist" in msg and "chmod o+x" in msg and "atb sandbox build --no-docker" in msg
    if AS_ROOT:
        assert f"{exe}: uid {uid} cannot reach" in msg


def test_a_prefix_the_sandbox_would_cover_is_passed_over() -> None:
    """A prefix under /tmp would be hidden by the sandbox's own /tmp: passed over, with the reason."""
    base = Path(tempfile.mkdtemp(prefix="atb-tmppy-"))
    try:
        base.chmod(0o755)
        exe = base / "python3.99"
        exe.write_text("")
        exe.chmod(0o755)
        with pytest.raises(HostRootError, match="lies under /tmp, which the sandbox mounts its own folder over"):
            choose_interpreter(os.getuid(), os.getgid(), [(exe, base, "this interpreter's base prefix")])
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_an_interpreter_under_usr_needs_no_bind_of_its_own() -> None:
    exe, prefix, why = choose_interpreter(
        os.getuid(), os.getgid(), [(Path("/usr/bin/env"), Path("/usr"), "system"),
                                   (Path(sys.executable), None, "unused")])
    assert exe == Path("/usr/bin/env") and prefix is None and "under /usr" in why


def test_protected_folders_are_never_bound() -> None:
    assert exposes("/") is not None and exposes("/home") is not None and exposes("/root") is not None
    assert exposes("/run") is not None and exposes("/var/run") is not None
    assert exposes(project_root()) is not None and exposes(project_root() / "harness") is not None
    assert exposes("/usr") is None and exposes("/usr/lib") is None


def test_the_plan_binds_nothing_protected(tmp_path: Path) -> None:
    uid = TUNER_UID if AS_ROOT else os.getuid()
    try:
        plan = plan_host_root(tmp_path / "etc", uid, uid)
    except HostRootError as exc:
        pytest.skip(f"no interpreter the tuner can reach here: {exc}")
    sources = {b.source for b in plan.binds}
    for b in plan.binds:
        assert b.why and Path(b.source).exists()
        if not b.source.startswith(str(tmp_path)):
            assert exposes(b.source) is None, b
    assert not sources & {"/", "/root", "/home", "/run", "/var/run", "/etc", "/var", str(project_root())}
    passwd = (tmp_path / "etc" / "passwd").read_text().splitlines()
    assert len(passwd) <= 3 and (f"tuner:x:{uid}:" in "\n".join(passwd) or uid in (0, 65534))
    args = plan.bwrap_args()
    assert args[:2] == ["--tmpfs", "/"] and "--bind" not in args  # read-only binds only
