"""A benchmark row's ``code_rev`` names the code that ran (``benchmarks/_code_rev.py``).

GPU rows are measured in a ``git archive`` snapshot. The snapshot now names its own commit
(``benchmarks/_archive_rev.txt``, ``export-subst``), and ``$ATB_CODE_REV`` that names another commit stops
a row writer before it measures, with one line and exit status 2.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
REV = "0123456789abcdef0123456789abcdef01234567"


def _archive(tmp: Path, *paths: str) -> Path:
    """``git archive HEAD PATHS`` unpacked under ``tmp``: what the device machine gets."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to archive")
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", "HEAD:benchmarks/_code_rev.py"],
                      capture_output=True).returncode != 0:
        pytest.skip("HEAD predates benchmarks/_code_rev.py (commit it first)")
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "HEAD", *paths],
                          capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(tmp, filter="data")
    return tmp


def test_a_checkout_has_no_archived_rev_and_a_missing_file_none() -> None:
    mod = load_benchmark("_code_rev")
    assert mod.ARCHIVE_REV_FILE.read_text().strip() == "$Format:%H$"
    assert mod.archived_rev() is None
    assert mod.archived_rev(ROOT / "no-such-file.txt") is None


def test_an_archived_rev_wins_and_a_disagreeing_atb_code_rev_is_refused(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_benchmark("_code_rev")
    stamp = tmp_path / "_archive_rev.txt"
    stamp.write_text(REV + "\n")
    monkeypatch.delenv("ATB_CODE_REV", raising=False)
    assert mod.code_rev(tmp_path, archive_file=stamp) == REV[:7]
    assert mod.code_rev(tmp_path, short=False, archive_file=stamp) == REV
    monkeypatch.setenv("ATB_CODE_REV", REV[:7])                 # the same commit, named short: agreed
    assert mod.code_rev(tmp_path, archive_file=stamp) == REV[:7]
    monkeypatch.setenv("ATB_CODE_REV", "ca11c27")               # another commit: refused
    with pytest.raises(mod.CodeRevMismatch,
                       match="ATB_CODE_REV=ca11c27 but this tree is a git archive of 0123456789ab"):
        mod.code_rev(tmp_path, archive_file=stamp)


def test_in_a_checkout_atb_code_rev_is_taken_as_named(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_benchmark("_code_rev")
    monkeypatch.setenv("ATB_CODE_REV", "abc1234")
    assert mod.code_rev(ROOT) == "abc1234"


def test_git_archive_writes_the_commit_into_the_snapshot(tmp_path: Path) -> None:
    snap = _archive(tmp_path, ".gitattributes", "benchmarks/_archive_rev.txt")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert (snap / "benchmarks" / "_archive_rev.txt").read_text().strip() == head


def test_a_sweep_in_a_snapshot_with_another_atb_code_rev_stops_before_measuring(tmp_path: Path) -> None:
    snap = _archive(tmp_path / "snap", "benchmarks", "harness", "protocol", ".gitattributes")
    kb = tmp_path / "kb"
    (kb / "KernelBench" / "level1").mkdir(parents=True)
    out = tmp_path / "rows.jsonl"
    env = {**os.environ, "ATB_CODE_REV": "ca11c27", "PYTHONPATH": str(snap)}
    proc = subprocess.run([sys.executable, str(snap / "benchmarks" / "kernelbench_sweep.py"), "--kb", str(kb),
                           "--level", "1", "--out", str(out), "--device", "cpu"],
                          cwd=snap, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout[-1500:], proc.stderr[-1500:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ATB_CODE_REV=ca11c27 but this tree is a git archive of")
    assert not out.exists()
