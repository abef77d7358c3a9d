"""`atb tasks` and `atb eval` on a KernelBench Level-1 problem file with a KernelBench-style candidate."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from atb_agent.cli import main
from harness.store import open_store

FIX = Path(__file__).parent / "fixtures" / "kernelbench"


def _json(capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    return json.loads(lines[0])


def test_atb_tasks_lists_the_native_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "--json"]) == 0
    data = _json(capsys)
    assert data["count"] >= 12 and {"relu", "matmul", "conv2d"} <= {t["id"] for t in data["tasks"]}
    assert all(t["knobs"] for t in data["tasks"])


def test_atb_eval_on_a_kernelbench_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "atb.sqlite"
    rc = main(["eval", str(FIX / "19_ReLU.py"), str(FIX / "19_ReLU_new.py"), "--db", str(db), "--json"])
    data = _json(capsys)
    assert rc == 0, data
    for key in ("verdict", "correct", "gates", "speedup", "speedup_ci", "speedup_vs_start", "strawman",
                "roofline_fraction", "device", "seeds", "protocol_sha256", "candidate_sha256"):
        assert key in data
    assert data["correct"] is True and data["speedup"] > 0
    assert data["verdict"] == "accepted", [g for g in data["gates"] if not g["passed"]]
    assert data["start_label"] == "start:eager-reference" and data["task_id"].startswith("kb:19_ReLU:")
    # issue 14: every verdict says how each arm's child was confined; on this machine bwrap confines them
    assert set(data["confinement"]) == {"candidate", "reference"}
    assert data["confinement"]["candidate"].startswith(("bwrap:", "unconfined:"))
    if os.environ.get("CI") == "true":
        assert data["confinement"]["candidate"].startswith("bwrap:"), data["confinement"]
    with open_store(db) as s:
        assert s.verdict(data["verdict_id"]).candidate_sha256 == data["candidate_sha256"]


def test_atb_eval_bad_inputs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "relu", str(FIX / "19_ReLU_new.py"), "--device", "mlx", "--json"]) == 2
    assert "atb retest" in _json(capsys)["error"]
    assert main(["eval", "no_such_task", str(FIX / "19_ReLU_new.py"), "--json"]) == 2
    assert "native tasks are" in _json(capsys)["error"]
    assert main(["eval", "relu", str(tmp_path / "missing.py"), "--db", str(tmp_path / "x.sqlite"), "--json"]) == 2
    assert "no candidate file" in _json(capsys)["error"]
