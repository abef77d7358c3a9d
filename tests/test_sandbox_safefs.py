"""Host-side workspace access: no link is ever followed, only regular files are read, caps hold.

These run on a plain directory (no sandbox needed): the guarantees are the host process's own, and
they are what makes copy-out safe whatever the tuner left in the workspace.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sandbox import CopyOutError, PathOutsideWorkspaceError, WorkspaceFileError, copy_out, split_workspace_path
from sandbox import _safefs

REPO = Path(__file__).resolve().parents[1]
HARNESS_FILE = REPO / "harness" / "errors.py"


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (tmp_path / "outside.txt").write_text("outside secret\n")
    return root


@pytest.mark.parametrize("bad", ["/etc/passwd", "../outside.txt", "a/../../outside.txt", "~/x", "a\x00b",
                                 "/workspace/../etc/passwd"])
def test_traversal_is_refused(bad: str) -> None:
    with pytest.raises(PathOutsideWorkspaceError):
        split_workspace_path(bad)


def test_paths_inside_are_accepted() -> None:
    assert split_workspace_path("./a//b.py") == ("a", "b.py")
    assert split_workspace_path("/workspace/a/b.py") == ("a", "b.py")
    assert split_workspace_path(".") == ()


def test_read_through_symlink_refused(ws: Path) -> None:
    (ws / "link.py").symlink_to(HARNESS_FILE)
    (ws / "dirlink").symlink_to(HARNESS_FILE.parent)
    with pytest.raises(PathOutsideWorkspaceError, match="symbolic link"):
        _safefs.read_file(ws, "link.py", 1 << 20)
    with pytest.raises(PathOutsideWorkspaceError, match="symbolic link"):
        _safefs.read_file(ws, "dirlink/errors.py", 1 << 20)


def test_write_replaces_a_link_never_writes_through_it(ws: Path, tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    (ws / "candidate.py").symlink_to(target)
    _safefs.write_file(ws, "candidate.py", b"new\n", 1 << 20)
    assert target.read_text() == "outside secret\n"
    assert not (ws / "candidate.py").is_symlink()
    assert (ws / "candidate.py").read_bytes() == b"new\n"
    (ws / "sub").symlink_to(tmp_path)
    with pytest.raises(PathOutsideWorkspaceError):
        _safefs.write_file(ws, "sub/outside.txt", b"x", 1 << 20)
    assert target.read_text() == "outside secret\n"


def test_write_replaces_a_hard_link(ws: Path) -> None:
    (ws / "a.py").write_text("original\n")
    os.link(ws / "a.py", ws / "b.py")
    _safefs.write_file(ws, "b.py", b"changed\n", 1 << 20)
    assert (ws / "a.py").read_text() == "original\n"


def test_fifo_is_not_opened_for_reading(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    with pytest.raises(WorkspaceFileError, match="not a regular file"):
        _safefs.read_file(ws, "pipe", 1 << 20)


def test_caps(ws: Path) -> None:
    (ws / "big.bin").write_bytes(b"x" * 2048)
    with pytest.raises(WorkspaceFileError, match="over the cap"):
        _safefs.read_file(ws, "big.bin", 1024)
    with pytest.raises(WorkspaceFileError, match="write cap"):
        _safefs.write_file(ws, "c.bin", b"x" * 2048, 1024)


def test_copy_out_skips_links_and_hashes_content(ws: Path) -> None:
    (ws / "candidate.py").write_text("class ModelNew: pass\n")
    (ws / "pkg").mkdir()
    (ws / "pkg" / "helper.py").write_text("X = 1\n")
    (ws / "ref.py").symlink_to(HARNESS_FILE)
    (ws / "pkg" / "up").symlink_to(HARNESS_FILE.parent)
    os.mkfifo(ws / "pipe")
    out = copy_out(ws, max_bytes=1 << 20, max_files=64)
    assert set(out.files) == {"candidate.py", "pkg/helper.py"}
    assert {s.path for s in out.skipped} == {"ref.py", "pkg/up", "pipe"}
    assert all(HARNESS_FILE.read_bytes() != data for data in out.files.values())
    sha = {f.path: f.sha256 for f in out.manifest}
    assert sha["candidate.py"] == hashlib.sha256(b"class ModelNew: pass\n").hexdigest()
    again = copy_out(ws, max_bytes=1 << 20, max_files=64)
    assert again.sha256 == out.sha256
    (ws / "candidate.py").write_text("class ModelNew: x = 2\n")
    assert copy_out(ws, max_bytes=1 << 20, max_files=64).sha256 != out.sha256


def test_copy_out_caps_refuse_rather_than_truncate(ws: Path) -> None:
    (ws / "a.bin").write_bytes(b"a" * 600)
    (ws / "b.bin").write_bytes(b"b" * 600)
    with pytest.raises(CopyOutError, match="copy-out cap"):
        copy_out(ws, max_bytes=1000, max_files=64)
    for i in range(5):
        (ws / f"f{i}").write_text("x")
    with pytest.raises(CopyOutError, match="entries"):
        copy_out(ws, max_bytes=1 << 20, max_files=4)


def test_list_shows_links_without_following(ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "x.py").write_text("1")
    (ws / "l").symlink_to("/etc")
    entries, truncated = _safefs.list_files(ws, ".", True, 100)
    assert not truncated
    assert [(e.path, e.kind) for e in entries] == [("d", "dir"), ("d/x.py", "file"), ("l", "symlink")]
    with pytest.raises(PathOutsideWorkspaceError):
        _safefs.list_files(ws, "l", True, 100)
    entries, truncated = _safefs.list_files(ws, ".", True, 2)
    assert truncated and len(entries) == 2
