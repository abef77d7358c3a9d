"""`atb report`: a self-contained HTML page and readable PNGs, from the store only."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from atb_agent.cli import main
from harness.store import open_store
from harness.tuning.reports import ReportError, build_report
from test_campaign_support import PROTO, build_campaign, make_verdict, open_session


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, str, str]:
    db = tmp_path / "atb.sqlite"
    with open_store(db) as store:
        sid = open_session(store)
        a = build_campaign(store, sid, [None, 1.05, None, 1.2, None], tag="a")
        b = build_campaign(store, sid, [1.1, 1.3, None, 1.5, 1.45], tuner="openai:scripted", tag="b",
                           calls=2, truncated=0)
        store.add_report("retest", b, {"run": b, "held_out": True, "home_ratio": 1.5, "held_out_ratio": 1.2,
                                        "held_out_backend": "mlx", "label": "held out on mlx"}, PROTO.ref())
    return db, a, b


def test_report_writes_html_and_pngs_with_everything_a_reader_needs(runs: tuple[Path, str, str], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    db, a, b = runs
    out = tmp_path / "rep"
    assert main(["report", a, b, "--out", str(out), "--db", str(db), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["comparison_verdict"] == "b_better"
    page = (out / "report.html").read_text()
    for png in ("best_so_far.png", "usability.png"):
        w, h = _png_size(out / png)
        assert w >= 600 and h >= 150
    # self-contained: images inline, no external references
    assert page.count("data:image/png;base64,") == 2 and not re.search(r"(src|href)=['\"]https?:", page)
    assert PROTO.sha256 in page and "cpu_model" in page                   # protocol digest, device fingerprint
    assert "2 / 5" in page and "4 / 5" in page                             # usable iterations per arm
    assert "Gate log" in page and "incorrect" in page and "truncated calls" in page
    # run a has no held-out leg and says so; run b's retest is shown
    assert page.count("no held-out retest leg") == 1 and "held-out on mlx 1.200x" in page


def test_report_labels_gate_failures_and_wide_intervals(tmp_path: Path) -> None:
    store = open_store(tmp_path / "atb.sqlite")
    sid = open_session(store)
    from harness.tuning.campaigns import CampaignRecorder
    rec = CampaignRecorder.open(store, PROTO, task_id="relu", kind="kernel", tuner_spec="random", seed=3, budget=3,
                                session_id=sid)
    rec.record(0, verdict_id=make_verdict(store, sid, "g", 5.0, status="rejected", failed_gate="escape"))
    rec.record(1, verdict_id=make_verdict(store, sid, "w", 1.4, halfwidth=0.2))
    rec.record(2, verdict_id=make_verdict(store, sid, "ok", 1.1))
    rec.finish()
    files = build_report(store, [rec.campaign_id], tmp_path / "r", PROTO)
    page = Path(files.html).read_text()
    assert "escape FAILED" in page and "ci_too_wide" in page and files.comparison_verdict is None


def test_incomparable_runs_are_reported_as_such(tmp_path: Path) -> None:
    store = open_store(tmp_path / "atb.sqlite")
    a = build_campaign(store, open_session(store, "one"), [1.1], tag="a")
    b = build_campaign(store, open_session(store, "two"), [1.2], tag="b")
    page = Path(build_report(store, [a, b], tmp_path / "r", PROTO).html).read_text()
    assert "cannot be compared" in page and "device fingerprints" in page and "they differ" in page


def test_unknown_run_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(tmp_path / "atb.sqlite")
    with pytest.raises(ReportError, match="neither a run nor a registration"):
        build_report(store, ["run-nope"], tmp_path / "r", PROTO)
    assert main(["report", "run-nope", "--out", str(tmp_path / "r"), "--db", str(tmp_path / "atb.sqlite"),
                 "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["ok"] is False


HOSTILE = "<script>alert('x&y\"')</script>"


def test_hostile_strings_from_the_store_are_escaped(tmp_path: Path) -> None:
    """Task ids, tuner specs and reasons come from whoever wrote the store: the page escapes them all
    (jinja2 autoescape), so none of them can become markup or script."""
    store = open_store(tmp_path / "atb.sqlite")
    sid = open_session(store)
    from harness.tuning.campaigns import CampaignRecorder
    rec = CampaignRecorder.open(store, PROTO, task_id=HOSTILE, kind="kernel", tuner_spec=HOSTILE, seed=3, budget=2,
                                session_id=sid)
    rec.record(0, verdict_id=make_verdict(store, sid, "bad", None, status="rejected", correct=False,
                                          task=HOSTILE, reason=HOSTILE))
    rec.record(1, verdict_id=make_verdict(store, sid, "ok", 1.1, task=HOSTILE))
    rec.finish(status="aborted", reason=HOSTILE)
    store.add_report("retest", rec.campaign_id, {"run": rec.campaign_id, "held_out": True, "home_ratio": 1.1,
                                                 "held_out_ratio": 1.0, "held_out_backend": HOSTILE,
                                                 "label": HOSTILE}, PROTO.ref())
    page = Path(build_report(store, [rec.campaign_id], tmp_path / "r", PROTO).html).read_text()
    assert "<script" not in page and "alert('x" not in page
    escaped = "&lt;script&gt;alert(&#39;x&amp;y&#34;&#39;)&lt;/script&gt;"
    # the arm label (runs table and gate log), the outcome reason, the unusable reason, the retest leg
    assert page.count(escaped) >= 5, page


def test_the_report_template_environment_autoescapes() -> None:
    from harness.tuning.reports._html import _environment

    env = _environment()
    assert env.autoescape is True
    assert env.from_string("{{ x }}").render(x=HOSTILE) == "&lt;script&gt;alert(&#39;x&amp;y&#34;&#39;)&lt;/script&gt;"
