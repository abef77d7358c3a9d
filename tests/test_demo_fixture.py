"""The scripted fixture `transcripts/recorded/scripted-openai-docker.jsonl` replays as a tuner.

The main job (`scripts/demo.sh`) is live now (a real model served locally, see
tests/test_live_model.py); this scripted fixture stays for tests: if the tools, prompts or task brief
drift from what it recorded, the replay diverges, and this test catches that. Regenerate the fixture
with `python tests/loopback/make_fixtures.py --docker` after such a change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atb_agent.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "transcripts" / "recorded" / "scripted-openai-docker.jsonl"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_fixture_is_labelled_scripted() -> None:
    header = json.loads(FIXTURE.read_text().splitlines()[0])
    assert header["data"]["scripted"] is True and "not a real model" in header["data"]["label"]


@pytest.mark.usefixtures("docker_sandbox_ready")
def test_replay_fixture_as_a_tuner_then_compare_with_random(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "atb.sqlite")
    assert main(["run", "gelu", "--tuner", f"replay:{FIXTURE}", "--budget", "3", "--seed", "0", "--db", db, "--json"]) == 0
    replay = json.loads(capsys.readouterr().out)
    assert replay["iterations_recorded"] == 3 and replay["outcome"] == "completed"
    assert main(["run", "gelu", "--tuner", "random", "--budget", "3", "--seed", "1", "--db", db, "--json"]) == 0
    rand = json.loads(capsys.readouterr().out)
    assert main(["compare", rand["run_id"], replay["run_id"], "--db", db, "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["budget"] == 3 and cmp["task_id"] == "gelu"
    assert cmp["a"]["tuner_spec"] == "random" and cmp["b"]["tuner_spec"].startswith("replay:")
    assert 0 <= cmp["a"]["usable_iterations"] <= 3 and 0 <= cmp["b"]["usable_iterations"] <= 3
    assert cmp["verdict"] in {"a_better", "b_better", "within_noise", "uninformative_saturated", "no_usable_result"}


@pytest.mark.usefixtures("docker_sandbox_ready")
def test_recorded_replay_of_the_fixture_is_byte_identical(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(FIXTURE), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["requests_identical"] == out["model_calls"] == 5
    assert all(not v["moved"] for v in out["verdicts"])
