"""Issue 26's target "Bad input: a KernelBench file whose model cannot be built, or a space point that fails
to compile, gets a verdict that says so; the campaign goes on", on the CPU with our own fixtures
(``tests/fixtures/kernelbench_bad_input``).

Beside ``tests/test_random_kernelbench.py`` (a constructor that raises; a point whose compilation fails):
a file that raises on import, ``get_init_inputs``/``get_inputs`` that raise, a forward that raises, each a
rejected verdict naming the reference and its exception, the campaign completed; and the sweep driver
(``benchmarks/kernelbench_random.py``) going on past a file that is not Python and a broken problem to a
working one, its rows keeping the exception (which the first 400 characters of a traceback cut off).
Also the space-coverage script on a broken file: the space exists (as the harness builds it), the
rendered points' meta build says why they fail.

Slow: every campaign opens a real measurement session (about 20-35 s each on the shared 2-core machine).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.store import open_store
from harness.tuning.campaigns import get_iterations
from protocol import load_protocol

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "kernelbench_bad_input"
PROTO = load_protocol()

BROKEN = {
    "import_fails.py": ("reference import_error", "this fixture cannot be imported"),
    "init_inputs_fail.py": ("reference exception", "this fixture's init inputs cannot be made"),
    "inputs_fail.py": ("reference exception", "this fixture's inputs cannot be made"),
    "forward_fails.py": ("reference exception", "mat1 and mat2 shapes cannot be multiplied"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_problem_gets_a_verdict_naming_its_reference_and_the_campaign_completes(
        tmp_path: Path, name: str) -> None:
    from harness.tuning.search import random_search_task

    prefix, text = BROKEN[name]
    with open_store(tmp_path / "atb.sqlite") as store:
        summary = random_search_task(FIX / name, store=store, protocol=PROTO, budget=1, seed=1, backend="cpu")
        assert summary.outcome is not None and summary.outcome.status == "completed"
        assert summary.iterations_recorded == 1 and summary.usable_iterations == 0
        (it,) = get_iterations(store, summary.campaign.id)
        assert it.status == "rejected" and it.verdict_id is not None
        reason = store.verdict(it.verdict_id).reason
    assert reason.startswith(prefix + ": "), reason[:300]
    assert text in reason.strip().splitlines()[-1], reason[-300:]


def _kb(tmp_path: Path) -> Path:
    """A KernelBench-shaped folder of our fixtures: a non-Python file, a broken problem, a working one."""
    level = tmp_path / "kb" / "KernelBench" / "level1"
    level.mkdir(parents=True)
    shutil.copyfile(FIX / "not_python.txt", level / "1_not_python.py")
    shutil.copyfile(FIX / "forward_fails.py", level / "2_forward_fails.py")
    shutil.copyfile(FIX / "good_scale.py", level / "3_good_scale.py")
    return tmp_path / "kb"


@pytest.mark.slow
def test_the_random_sweep_goes_on_past_files_it_cannot_load_or_run(tmp_path: Path) -> None:
    out = tmp_path / "random.jsonl"
    cmd = [sys.executable, "benchmarks/kernelbench_random.py", "--kb", str(_kb(tmp_path)), "--level", "1",
           "--out", str(out), "--stores", str(tmp_path / "stores"), "--device", "cpu", "--budget", "1", "--seed", "1",
           "--time-budget-s", "580"]
    proc = subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    # a child that broke without a result is retried by the next call (--max-attempts 2), then settled
    assert "stopped: 1 problems left" in proc.stdout, proc.stdout[-2000:]
    again = subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "done: all 3 problems" in again.stdout, again.stdout[-2000:]
    lines = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [r["problem"] for r in lines] == ["1_not_python", "2_forward_fails", "3_good_scale", "1_not_python"]
    rows = {r["problem"]: r for r in lines}
    assert list(rows) == ["1_not_python", "2_forward_fails", "3_good_scale"], proc.stdout[-2000:]
    # a file that does not parse: no campaign can start; the row says why, and the sweep goes on
    bad = rows["1_not_python"]
    assert bad["kind"] == "random_campaign" and bad["outcome"] == "error"
    assert "TaskError" in bad["reason"] and "does not parse" in bad["reason"]
    # a problem whose reference raises: a completed campaign of rejected verdicts that name the reference
    broken = rows["2_forward_fails"]
    assert broken["outcome"] == "completed" and broken["usable_iterations"] == 0
    assert broken["reference_failures"] == broken["iterations_recorded"] == 1
    (it,) = broken["iterations"]
    assert it["status"] == "rejected" and it["reason"].startswith("reference exception: ")
    assert "mat1 and mat2 shapes cannot be multiplied" in it["reason_last_line"]
    # the working problem after them is measured
    good = rows["3_good_scale"]
    assert good["outcome"] == "completed" and good["reference_failures"] == 0
    assert good["iterations"][0]["status"] == "accepted", good["iterations"][0]


def test_space_coverage_builds_a_space_for_a_broken_file_and_says_why_its_points_fail(tmp_path: Path) -> None:
    level = tmp_path / "kb" / "level1"
    level.mkdir(parents=True)
    shutil.copyfile(FIX / "import_fails.py", level / "1_import_fails.py")
    shutil.copyfile(FIX / "good_scale.py", level / "2_good_scale.py")
    out = tmp_path / "coverage.json"
    proc = subprocess.run([sys.executable, "benchmarks/kernelbench_space_coverage.py", "--kb", str(tmp_path / "kb"),
                           "--levels", "1", "--budget", "4", "--out", str(out), "--full"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])   # the broken file's points fail
    doc = json.loads(out.read_text())
    summary = doc["levels"]["1"]
    assert summary["problems"] == 2 and summary["with_space"] == {"cuda": 2, "cpu": 2}
    rows = {r["problem"]: r for r in doc["rows"]}
    broken = rows["1_import_fails"]
    assert broken["count"]["method"].startswith("bytes_only:import failed")
    for backend in ("cuda", "cpu"):
        for e in broken["spaces"][backend]["points"]:
            assert e["legal"] and e["parses"] and e["scans_clean"] and not e["built_meta"]
            assert "this fixture cannot be imported" in e["error"]
        good = rows["2_good_scale"]["spaces"][backend]
        assert len(good["points"]) == 4
        assert all(e["legal"] and e["parses"] and e["scans_clean"] and e["built_meta"] for e in good["points"])
        assert all(e.get("forward_meta", True) for e in good["points"])
    assert any("forward_meta" in e for b in ("cuda", "cpu") for e in rows["2_good_scale"]["spaces"][b]["points"])
    assert summary["cuda"]["points_rendered"] == 8 and summary["cuda"]["points_built_meta"] == 4
    assert len(summary["cuda"]["failures"]) == 4
    # the committed file's compact rows: one shared sequence per space, per problem what passed and what failed
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from kernelbench_space_coverage import compact
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    sequences, small = compact(doc["rows"])
    by = {r["problem"]: r for r in small}
    for backend in ("cuda", "cpu"):
        b, g = by["1_import_fails"]["spaces"][backend], by["2_good_scale"]["spaces"][backend]
        assert (b["ok"], b["of"], len(b["failures"])) == (0, 4, 4) and (g["ok"], g["of"], g["failures"]) == (4, 4, [])
        assert sequences[g["sequence"]]["points"] == [e["point"] for e in rows["2_good_scale"]["spaces"][backend]["points"]]
