"""benchmarks/retest_recorded.py measures only the candidate the results file certified."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
H200_RUNS = ROOT / "benchmarks" / "results" / "h200" / "random_cuda.json"


def _script() -> ModuleType:
    return load_benchmark("retest_recorded")


def _swish_run() -> dict:
    return next(r for r in json.loads(H200_RUNS.read_text())["runs"] if r["task"] == "swish")


def test_a_candidate_that_does_not_hash_to_the_record_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _swish_run()
    run["best_candidate_sha256"] = "0" * 64  # the recorded candidate is not what the knobs render to
    results = tmp_path / "runs.json"
    results.write_text(json.dumps({"runs": [run]}))
    out = tmp_path / "leg.json"
    assert _script().main([str(results), "swish", "--backend", "cpu", "--out", str(out)]) == 1
    assert "not the recorded 000000000000" in capsys.readouterr().err and not out.exists()


def test_the_committed_swish_leg_is_the_certified_candidate() -> None:
    """The committed held-out leg names the sha256 the H200 run certified, re-derivable from its knobs."""
    import hashlib

    from harness.tasks import load_task

    run = _swish_run()
    leg = json.loads((H200_RUNS.parent / "retest_swish_on_dev_cpu.json").read_text())
    source = load_task("swish").render_candidate(run["knob_sequence"][run["best_iteration"] - 1])
    assert hashlib.sha256(source.encode()).hexdigest() == run["best_candidate_sha256"] == leg["candidate_sha256"]
    assert leg["home_ratio"] == run["best_speedup"] and leg["held_out"] is True
