"""The measuring digest (benchmarks/_measuring_digest.py) and its CLI (scripts/measuring_digest.py).

Every test that edits files works on a copy under tmp_path; the real tree is only read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from benchmarks._measuring_digest import (
    MEASURING_PATHS,
    measuring_digest,
    measuring_digest_at,
)

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / "scripts" / "measuring_digest.py"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the measured folders, and of benchmarks/ (which the digest must ignore)."""
    root = tmp_path / "tree"
    for top in (*MEASURING_PATHS, "benchmarks"):
        shutil.copytree(ROOT / top, root / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "results"))
    return root


def _append(path: Path, text: str = "\n# changed\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)


def test_digest_is_twelve_hex_and_equals_the_real_trees(tree: Path) -> None:
    d = measuring_digest(tree)
    assert len(d) == 12 and all(c in "0123456789abcdef" for c in d)
    assert d == measuring_digest(ROOT)


@pytest.mark.parametrize("rel", ["harness/verdict/evaluate.py", "harness/measure/session.py", "protocol/protocol.yaml",
                                 "harness/verdict/new_file.py"])
def test_a_change_in_the_measuring_paths_changes_the_digest(tree: Path, rel: str) -> None:
    before = measuring_digest(tree)
    _append(tree / rel)
    assert measuring_digest(tree) != before


def test_a_rename_changes_the_digest(tree: Path) -> None:
    before = measuring_digest(tree)
    (tree / "harness/verdict/evaluate.py").rename(tree / "harness/verdict/evaluate2.py")
    assert measuring_digest(tree) != before


@pytest.mark.parametrize("rel", ["harness/measure/serving/session.py", "harness/measure/serving/new.py",
                                 "protocol/preregistrations/new.json", "benchmarks/kernelbench_sweep.py",
                                 "harness/verdict/__pycache__/evaluate.cpython-311.pyc", "protocol/stray.pyc"])
def test_changes_outside_what_measures_leave_it(tree: Path, rel: str) -> None:
    assert (tree / "harness/measure/serving").is_dir() and (tree / "protocol/preregistrations").is_dir()
    before = measuring_digest(tree)
    _append(tree / rel)
    assert measuring_digest(tree) == before


def test_a_git_archive_snapshot_matches_git_objects(tmp_path: Path) -> None:
    """What the GPU machine gets (a `git archive` without .git) hashes as git's objects of that commit do."""
    tar = tmp_path / "snap.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(tar), "HEAD", "--", *MEASURING_PATHS],
                   check=True, timeout=120)
    snap = tmp_path / "snap"
    with tarfile.open(tar) as tf:
        tf.extractall(snap, filter="tar")
    assert not (snap / ".git").exists()
    assert measuring_digest(snap) == measuring_digest_at("HEAD", ROOT)


def test_the_clean_checkout_matches_git_objects_of_head() -> None:
    status = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--ignored", "--untracked-files=all",
                             "--", *MEASURING_PATHS], capture_output=True, text=True, check=True, timeout=60).stdout
    dirty = [ln for ln in status.splitlines() if "__pycache__" not in ln and not ln.endswith(".pyc")]
    if dirty:
        pytest.skip(f"measuring paths differ from HEAD here: {dirty[:3]}")
    assert measuring_digest(ROOT) == measuring_digest_at("HEAD", ROOT)


def test_an_unknown_revision_is_refused() -> None:
    with pytest.raises(ValueError):
        measuring_digest_at("no-such-revision-here", ROOT)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CLI), *args], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          check=False)


def test_cli_prints_the_digest_and_a_revs() -> None:
    p = _cli()
    assert p.returncode == 0 and p.stdout.strip() == measuring_digest(ROOT)
    p = _cli("--rev", "HEAD")
    assert p.returncode == 0 and p.stdout.strip() == measuring_digest_at("HEAD", ROOT)
    p = _cli("--rev", "no-such-revision-here")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


def test_cli_check_counts_rows_under_the_current_digest(tmp_path: Path) -> None:
    current = measuring_digest(ROOT)
    head = measuring_digest_at("HEAD", ROOT)
    rows = [
        {"code_rev": "abc", "measuring_digest": current},          # recorded: under
        {"code_rev": "HEAD", "measuring_digest": current},         # recorded wins over code_rev
        {"code_rev": "HEAD"},                                      # from git: under only where HEAD's is current
        {"code_rev": "x", "measuring_digest": "000000000000"},     # another digest: not
        {"code_rev": "HEAD+dirty"},                                # cannot be placed: not
        {"code_rev": "no-such-revision-here"},                     # unknown to git: not
        {"other": 1},                                              # neither: not
    ]
    f = tmp_path / "rows.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    p = _cli("--check", str(f), str(empty))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[0] == f"current measuring digest: {current}"
    under = 3 if head == current else 2
    assert lines[1].startswith(f"{f}: {under} under {current}, {7 - under} not")
    assert "000000000000 x1" in lines[1] and "3 unplaced" in lines[1]
    assert lines[2] == f"{empty}: 0 under {current}, 0 not"


@pytest.mark.parametrize("content", ["{not json}\n", "[1, 2]\n"])
def test_cli_check_refuses_bad_input(tmp_path: Path, content: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"code_rev": "HEAD"}) + "\n" + content)
    p = _cli("--check", str(f))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and f"{f}:2" in p.stderr
    p = _cli("--check", str(tmp_path / "missing.jsonl"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
