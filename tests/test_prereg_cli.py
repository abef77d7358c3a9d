"""`atb ab`: registration first, arms claimed, delivery checked from real transcripts, decision stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from atb_agent.cli import main
from harness.science.prereg import load_spec, register
from harness.store import open_store
from test_campaign_support import PROTO, build_campaign, open_session
from transcripts import HeaderData, HttpRequestRecord, HttpResponseRecord, ModelCallData, TranscriptWriter
from transcripts._records import b64

EXAMPLE = Path(__file__).resolve().parents[1] / "protocol" / "preregistrations" / "example-hint-ab.yaml"
MARKER = "ATB-TREATMENT: prefer vectorised torch ops"


def _write_transcript(path: Path, campaign_id: str, tuner: str, seed: int, system: str, replies: list[str]) -> None:
    w = TranscriptWriter(path)
    fields = dict(scripted=True, label="test fixture, not a real model", tuner_spec=tuner, provider="openai",
                  model="scripted", base_url="http://127.0.0.1:1", task="relu", budget=4, seed=seed,
                  campaign_id=campaign_id, protocol_version=PROTO.version, protocol_sha256=PROTO.sha256,
                  max_output_tokens=64, tool_definitions_sha256="0" * 64, created_at="2026-12-02T00:00:00Z")
    for name, info in HeaderData.model_fields.items():   # fields this test does not care about
        if info.is_required() and name not in fields:
            fields[name] = {int: 0, bool: False, float: 0.0}.get(info.annotation, "")  # type: ignore[call-overload]
    w.append("header", HeaderData.model_validate(fields))
    for i, reply in enumerate(replies):
        body = json.dumps({"model": "scripted", "messages": [{"role": "system", "content": system},
                                                             {"role": "user", "content": f"iteration {i}"}]})
        w.append("model_call", ModelCallData(
            call_index=i, iteration=i,
            request=HttpRequestRecord(method="POST", url="http://127.0.0.1:1/v1/chat/completions", headers=[],
                                      body_b64=b64(body.encode())),
            response=HttpResponseRecord(status=200, headers=[], body_b64=b64(reply.encode()))))


@pytest.fixture
def ab(tmp_path: Path) -> tuple[Path, Path, Path]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update({"id": "cli-ab", "budget": 4, "seeds": [1], "primary_metric": "best_speedup",
                 "decision_rule": {"min_seed_wins": 1}})
    spec_path = tmp_path / "ab.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    db = tmp_path / "atb.sqlite"
    return spec_path, db, tmp_path / "transcripts"


def _runs(spec_path: Path, db: Path, tdir: Path, treatment_system: str) -> None:
    spec = load_spec(spec_path)
    with open_store(db) as store:
        reg = register(store, spec, PROTO)
        sid = open_session(store)
        c = build_campaign(store, sid, [1.0, 1.05, 1.1, 1.1], tuner=spec.control.tuner, seed=1,
                           preregistration_id=reg.id, arm="control", tag="c")
        t = build_campaign(store, sid, [1.1, 1.4, 1.6, 1.6], tuner=spec.treatment.tuner, seed=1,
                           preregistration_id=reg.id, arm="treatment", tag="t")
    _write_transcript(tdir / "c.jsonl", c, spec.control.tuner, 1, "You tune kernels.", ["a", "b"])
    _write_transcript(tdir / "t.jsonl", t, spec.treatment.tuner, 1, treatment_system, ["x", "y"])


def test_treatment_that_never_reaches_the_model_voids_the_ab(ab: tuple[Path, Path, Path],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    spec_path, db, tdir = ab
    _runs(spec_path, db, tdir, "You tune kernels.")          # the hint was dropped on the way to the model
    assert main(["ab", str(spec_path), "--db", str(db), "--transcripts", str(tdir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "void" and not out["delivery"]["delivered"]
    ev = out["delivery"]["evidence"]["per_seed"][0]
    assert ev["treatment_requests"] == 2 and ev["treatment_requests_with_marker"] == 0
    with open_store(db) as store:
        assert store.reports("ab_outcome", "cli-ab")[0]["body"]["status"] == "void"


def test_delivered_treatment_is_decided_and_reported(ab: tuple[Path, Path, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    spec_path, db, tdir = ab
    _runs(spec_path, db, tdir, "You tune kernels. " + MARKER + " over Python loops.")
    assert main(["ab", str(spec_path), "--db", str(db), "--transcripts", str(tdir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["delivery"]["delivered"] and out["status"] == "treatment_wins", out["explanation"]
    assert main(["report", "cli-ab", "--out", str(tmp_path / "rep"), "--db", str(db)]) == 0
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "treatment_wins" in page and "control: " in page and "treatment: " in page


def test_an_edited_spec_is_refused(ab: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    spec_path, db, tdir = ab
    _runs(spec_path, db, tdir, MARKER)
    data = yaml.safe_load(spec_path.read_text())
    data["hypothesis"] = data["hypothesis"] + " (and, after seeing the data, also faster)"
    spec_path.write_text(yaml.safe_dump(data))
    assert main(["ab", str(spec_path), "--db", str(db), "--transcripts", str(tdir), "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert "RegistrationEdited" in err and "cannot be edited" in err


@pytest.mark.slow
def test_ab_end_to_end_with_real_runs_voids_a_treatment_no_model_saw(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`atb ab` registers, runs both arms through the real harness (budget 1), then voids: the treatment
    (a prompt hint) was given to random search, which sends no request to any model."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update({"id": "e2e-ab", "budget": 1, "seeds": [3], "decision_rule": {"min_seed_wins": 1},
                 "control": {"name": "control", "tuner": "random"},
                 "treatment": {"name": "treatment", "tuner": "random",
                               "config": {"system_prompt_suffix": MARKER}}})
    spec_path = tmp_path / "ab.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    db = tmp_path / "atb.sqlite"
    assert main(["ab", str(spec_path), "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "void"
    reasons = " ".join(out["delivery"]["void_reasons"])
    assert "recorded no model request" in reasons and "byte-identical" in reasons   # same seed, same candidates
    with open_store(db) as store:
        runs = store.query("SELECT arm, preregistration_id, created_at FROM campaigns ORDER BY arm")
        reg_at = store.query("SELECT created_at FROM preregistrations WHERE id = 'e2e-ab'")[0][0]
    assert [r[0] for r in runs] == ["control", "treatment"] and all(r[1] == "e2e-ab" and r[2] > reg_at for r in runs)
