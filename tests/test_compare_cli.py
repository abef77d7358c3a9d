"""`atb compare` on the command line: JSON contract, verdict text, refusals exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atb_agent.cli import main
from harness.store import open_store
from test_campaign_support import build_campaign, open_session


def test_compare_prints_usable_iterations_and_a_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "atb.sqlite"
    with open_store(db) as store:
        sid = open_session(store)
        rnd = build_campaign(store, sid, [None, 1.05, None, None, 1.2], tag="r")
        llm = build_campaign(store, sid, [1.1, 1.3, 1.45, None, 1.6], tuner="openai:scripted", tag="l")
    assert main(["compare", rnd, llm, "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["a"]["usable_iterations"], out["b"]["usable_iterations"]) == (2, 4)
    assert out["verdict"] == "b_better" and out["beyond_noise"] is True
    assert main(["compare", rnd, llm, "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "2/5 usable" in text and "4/5 usable" in text and "openai:scripted (B) is better" in text


def test_compare_refusal_exits_2_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "atb.sqlite"
    with open_store(db) as store:
        a = build_campaign(store, open_session(store, "one"), [1.1], tag="a")
        b = build_campaign(store, open_session(store, "two"), [1.2], tag="b")
    assert main(["compare", a, b, "--db", str(db), "--json"]) == 2
    err = json.loads(capsys.readouterr().out)
    assert "IncomparableError" in err["error"] and "device fingerprints" in err["error"]


def test_run_with_an_unavailable_tuner_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "relu", "--tuner", "nosuch:thing", "--budget", "2", "--seed", "1",
                 "--db", str(tmp_path / "atb.sqlite"), "--json"])
    assert code == 2
    assert json.loads(capsys.readouterr().out)["ok"] is False
