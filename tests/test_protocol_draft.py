"""Issue 27, item 4: a protocol whose digest is not released is a *draft*, and says so everywhere.

The red team bumped the version with ``anomaly_speedup: 1000`` and ``paired_seeds: 2``, relocked, and
``atb protocol verify`` said "verified". Each test here builds its own draft in a tmp folder (the
repository's own protocol may or may not be released when the suite runs) and points the loader at it.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import protocol._loader as loader
from atb_agent.cli import main
from harness.store import open_store
from protocol import (
    DRAFT_ENV, DraftProtocolRefused, RELEASED, draft_label, file_sha256, load_protocol, require_released,
)
from protocol.relock import relock


def _make_draft(tmp_path: Path) -> tuple[Path, Path]:
    """The repository's protocol with the red team's edit, under a new version, relocked in tmp."""
    p, lock = tmp_path / "protocol.yaml", tmp_path / "protocol.lock.json"
    shutil.copy(loader.PROTOCOL_PATH, p)
    shutil.copy(loader.LOCK_PATH, lock)
    text = p.read_text()
    text, n = re.subn(r"(?m)^version: .*$", "version: 9.9.9", text, count=1)
    assert n == 1
    text, n = re.subn(r"(?m)^(\s*)anomaly_speedup: .*$", r"\1anomaly_speedup: 1000", text, count=1)
    assert n == 1
    p.write_text(text)
    assert relock(p, lock) == 0
    return p, lock


@pytest.fixture
def draft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the loader (hence every command) at a tmp draft; the suite-wide allowance is removed."""
    (tmp_path / "proto").mkdir()
    p, lock = _make_draft(tmp_path / "proto")
    monkeypatch.setattr(loader, "PROTOCOL_PATH", p)
    monkeypatch.setattr(loader, "LOCK_PATH", lock)
    monkeypatch.delenv(DRAFT_ENV, raising=False)
    return p


def test_a_relocked_edit_is_a_draft_and_a_released_digest_is_not(draft: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proto = load_protocol()
    assert proto.version == "9.9.9" and proto.gates.anomaly_speedup == 1000
    assert proto.draft is True
    assert draft_label(proto) == f"draft (unreleased) 9.9.9 {file_sha256(draft)}"
    # the same file, once its digest is a released constant, is not a draft
    monkeypatch.setitem(RELEASED, "9.9.9", file_sha256(draft))
    assert load_protocol().draft is False


def test_protocol_verify_says_draft_on_its_own_line(draft: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["protocol", "verify"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"draft (unreleased) 9.9.9 {file_sha256(draft)}"
    assert main(["protocol", "verify", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["protocol_draft"] is True and out["released"] is False
    assert out["version"] == "9.9.9"            # the old keys are still there (additive shape)


def test_require_released_refuses_a_draft_unless_allowed(draft: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proto = load_protocol()
    with pytest.raises(DraftProtocolRefused, match="--allow-draft-protocol"):
        require_released(proto, "compare runs")
    require_released(proto, "compare runs", allow_draft=True)
    monkeypatch.setenv(DRAFT_ENV, "1")
    require_released(proto, "compare runs")


def test_compare_refuses_a_draft_before_touching_the_store(draft: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "atb.sqlite"
    with open_store(db):
        pass
    before = db.read_bytes()
    assert main(["compare", "run-a", "run-b", "--db", str(db), "--json"]) == 2
    err = json.loads(capsys.readouterr().out)
    assert "DraftProtocolRefused" in err["error"] and "draft (unreleased) 9.9.9" in err["error"]
    assert db.read_bytes() == before
    # with the flag the draft is allowed, and the unknown ids are what stops it
    assert main(["compare", "run-a", "run-b", "--db", str(db), "--json", "--allow-draft-protocol"]) == 2
    err = json.loads(capsys.readouterr().out)
    assert "DraftProtocolRefused" not in err["error"] and "run-a" in err["error"]


def test_compare_runs_and_ab_registration_refuse_a_draft_in_the_harness(draft: Path, tmp_path: Path) -> None:
    from harness.science.prereg import load_spec, register
    from harness.tuning.compare import compare_runs

    proto = load_protocol()
    with open_store(tmp_path / "s.sqlite") as store:
        with pytest.raises(DraftProtocolRefused):
            compare_runs(store, "a", "b", proto)
        spec_path = sorted((Path(__file__).resolve().parent.parent / "protocol" / "preregistrations").glob("*.yaml"))[0]
        with pytest.raises(DraftProtocolRefused):
            register(store, load_spec(spec_path), proto)
        assert store.preregistration(load_spec(spec_path).id) is None     # nothing was stored


def test_ab_cli_refuses_a_draft_and_creates_no_store(draft: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = sorted((Path(__file__).resolve().parent.parent / "protocol" / "preregistrations").glob("*.yaml"))[0]
    db = tmp_path / "ab.sqlite"
    assert main(["ab", str(spec_path), "--db", str(db), "--json"]) == 2
    assert "DraftProtocolRefused" in json.loads(capsys.readouterr().out)["error"]
    assert not db.exists()


def test_report_names_a_draft_protocol_at_the_top(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Runs recorded under a digest that is not released get a banner; once it is released, none."""
    from test_campaign_support import PROTO, build_campaign, open_session

    db = tmp_path / "atb.sqlite"
    with open_store(db) as store:
        sid = open_session(store)
        a = build_campaign(store, sid, [1.1, 1.2], tag="a")
        b = build_campaign(store, sid, [1.0, 1.3], tuner="openai:scripted", tag="b")
    monkeypatch.delitem(RELEASED, PROTO.version, raising=False)            # the runs' protocol: a draft
    assert main(["report", a, b, "--out", str(tmp_path / "r1"), "--db", str(db), "--json"]) == 0
    page = (tmp_path / "r1" / "report.html").read_text()
    assert "id='protocol-draft'" in page and "DRAFT PROTOCOL" in page and PROTO.sha256[:12] in page
    monkeypatch.setitem(RELEASED, PROTO.version, PROTO.sha256)              # the same digest, released
    assert main(["report", a, b, "--out", str(tmp_path / "r2"), "--db", str(db), "--json"]) == 0
    assert "DRAFT PROTOCOL" not in (tmp_path / "r2" / "report.html").read_text()
    capsys.readouterr()


def test_a_verdict_measured_under_a_draft_is_stamped(draft: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict record (its detail) and the result both say protocol_draft; the same protocol once
    its digest is released says False."""
    from harness.measure.session import open_measurement_session
    from harness.verdict.evaluate import evaluate_candidate

    proto = load_protocol()
    crash = "raise RuntimeError('this candidate does not import')\n"
    with open_store(tmp_path / "v.sqlite") as store:
        with open_measurement_session(store, "cpu", proto, note="tests") as ctx:
            res = evaluate_candidate("relu", crash, store=store, session=ctx, protocol=proto, prespawn_next=False)
            assert res.protocol_draft is True
            assert store.verdict(res.verdict_id).detail["protocol_draft"] is True
            monkeypatch.setitem(RELEASED, "9.9.9", file_sha256(draft))
            res2 = evaluate_candidate("relu", crash + "# 2\n", store=store, session=ctx, protocol=proto,
                                      prespawn_next=False)
            assert res2.protocol_draft is False
            assert store.verdict(res2.verdict_id).detail["protocol_draft"] is False


# ---------------------------------------------------------------------- engines, and the store's verify
def test_an_engine_verdict_measured_under_a_draft_is_stamped(draft: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Both engine paths (a measured trial, and a configuration outside the flag space) stamp
    protocol_draft in the stored record and the result, as kernel verdicts do."""
    from test_engine_verdict import SEEDS, _arm, _trial

    from harness.engines import load_engine_task, render_config
    from harness.measure.serving.session import open_engine_session
    from harness.verdict.engine import evaluate_engine_candidate, record_engine_trial

    proto = load_protocol()
    task = load_engine_task("llamacpp-tiny")
    with open_store(tmp_path / "e.sqlite") as store:
        session = open_engine_session(store, proto)
        trial = _trial(_arm("candidate", {s: 12.0 for s in SEEDS}, config={"parallel": 4}))
        res = record_engine_trial(task, render_config({"parallel": 4}), {"parallel": 4}, trial, store=store,
                                  session=session, protocol=proto)
        assert res.protocol_draft is True and store.verdict(res.verdict_id).detail["protocol_draft"] is True
        bad = evaluate_engine_candidate(task, '{"threads": 64}', store=store, session=session, protocol=proto)
        assert bad.verdict == "rejected"
        assert bad.protocol_draft is True and store.verdict(bad.verdict_id).detail["protocol_draft"] is True
        monkeypatch.setitem(RELEASED, "9.9.9", file_sha256(draft))           # the same digest, released
        res2 = record_engine_trial(task, render_config({"parallel": 2}), {"parallel": 2}, trial, store=store,
                                   session=session, protocol=proto)
        assert res2.protocol_draft is False and store.verdict(res2.verdict_id).detail["protocol_draft"] is False


def _draft_store(store: object, proto: object) -> None:
    from harness.engines import load_engine_task
    from harness.measure.serving.session import open_engine_session
    from harness.verdict.engine import evaluate_engine_candidate

    session = open_engine_session(store, proto)  # type: ignore[arg-type]
    task = load_engine_task("llamacpp-tiny")
    for text in ('{"threads": 64}', '{"threads": 65}'):
        evaluate_engine_candidate(task, text, store=store, session=session, protocol=proto)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_store_verify_counts_verdicts_under_a_draft(kind: str, draft: Path, tmp_path: Path,
                                                    request: pytest.FixtureRequest,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """By digest, not by the verdict's own stamp; a draft is reported, not a problem (ok stays true)."""
    proto = load_protocol()
    if kind == "sqlite":
        store: object = open_store(tmp_path / "d.sqlite")
    else:

        store = open_store(request.getfixturevalue("pg_db"))
    try:
        _draft_store(store, proto)
        res = store.verify(tmp_path / "keys")  # type: ignore[attr-defined]
        assert res.ok and res.draft_verdicts == 2
        assert [(d.version, d.sha256, d.verdicts) for d in res.draft_protocols] == [("9.9.9", proto.sha256, 2)]
        monkeypatch.setitem(RELEASED, "9.9.9", file_sha256(draft))
        res = store.verify(tmp_path / "keys")  # type: ignore[attr-defined]
        assert res.ok and res.draft_verdicts == 0 and res.draft_protocols == []
    finally:
        store.close()  # type: ignore[attr-defined]


def test_store_verify_cli_says_draft_and_fails_only_under_require_released(
        draft: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "d.sqlite"
    with open_store(db) as store:
        _draft_store(store, load_protocol())
    keys = ["--key-dir", str(tmp_path / "keys")]
    assert main(["store", "verify", "--db", str(db), *keys]) == 0
    out = capsys.readouterr().out
    assert "2 verdict(s) measured under a draft (unreleased) protocol: 9.9.9" in out
    assert main(["store", "verify", "--db", str(db), *keys, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["draft_verdicts"] == 2 and data["all_released"] is False
    assert data["draft_protocols"][0]["version"] == "9.9.9" and "signed" in data     # old keys kept
    assert main(["store", "verify", "--db", str(db), *keys, "--require-released"]) == 2
    assert "--require-released" in capsys.readouterr().err
    assert main(["store", "verify", "--db", str(db), *keys, "--require-released", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["all_released"] is False
    monkeypatch.setitem(RELEASED, "9.9.9", file_sha256(draft))
    assert main(["store", "verify", "--db", str(db), *keys, "--require-released"]) == 0
    assert "draft" not in capsys.readouterr().out
