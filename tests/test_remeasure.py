"""`atb remeasure` on CPU: every stored verdict of a run measured again in a fresh session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atb_agent.cli import main
from harness.science.remeasure import _side
from harness.store import open_store

from test_retest import CANDIDATE, NO_PORT, build_run  # noqa: E402 - the same tuned run's builder

SLOWER = NO_PORT.replace("return torch.addmm(self.fc.bias, x, self.fc.weight.t()).clamp_min_(0).mul_(0.5)",
                         "y = self.fc(x)\n        for _ in range(3):\n            y = y.clone()\n"
                         "        return torch.relu(y) * 0.5")
BROKEN = NO_PORT.replace(".clamp_min_(0)", ".clamp_min_(0.1)")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_run(tmp_path_factory.mktemp("remeasure"), [SLOWER, BROKEN, CANDIDATE], attempts=1)


def test_direction_helper() -> None:
    assert (_side(1.2), _side(0.8), _side(1.0)) == (1, -1, 0)


def test_remeasure_every_verdict_in_a_fresh_session(run: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert "clone" in SLOWER and "0.1" in BROKEN
    code = main(["remeasure", run["run"], "--task", run["task"], "--db", run["db"], "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["remeasured"] == 3 and out["session_id"] != run["session"]
    by_iter = {it["iteration"]: it for it in out["items"]}
    assert by_iter[1]["original_status"] == "rejected" and by_iter[1]["new_status"] == "rejected"
    assert by_iter[1]["relative_deviation"] is None  # a wrong candidate has no ratio to compare
    compared = [it for it in out["items"] if it["relative_deviation"] is not None]
    assert out["compared"] == len(compared) == 2
    devs = sorted(it["relative_deviation"] for it in compared)
    assert out["median_abs_deviation"] == pytest.approx(sum(devs) / 2)  # the median of two
    for it in compared:
        assert it["relative_deviation"] == pytest.approx(abs(it["new_ratio"] - it["original_ratio"]) / it["original_ratio"])
        assert it["direction_kept"] == (_side(it["new_ratio"]) == _side(it["original_ratio"]))
    assert out["direction_kept"] == sum(1 for it in compared if it["direction_kept"])
    assert out["status_kept"] == sum(1 for it in out["items"] if it["new_status"] == it["original_status"])
    assert out["noise_floor"] > 0 and out["usability_bar"] > 0 and "median" in out["definition"]
    with open_store(run["db"]) as store:
        assert out["report_id"] in [r["id"] for r in store.reports("remeasure", run["run"])]
        for it in compared:  # every re-measurement is a stored verdict of the fresh session
            assert store.verdict(it["new_verdict_id"]).session_id == out["session_id"]


def test_remeasure_unknown_run_is_bad_input(run: dict[str, Any], capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    code = main(["remeasure", "run-nope", "--db", run["db"], "--json"])
    assert code == 2 and json.loads(capsys.readouterr().out)["ok"] is False
