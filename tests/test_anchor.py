"""External anchors: the shipped file is pinned, judging follows the registration rules, `atb anchor` works."""

from __future__ import annotations

import json
import shutil
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from atb_agent.cli import main
from harness.science.anchors import (
    ANCHORS_LOCK_PATH,
    ANCHORS_PATH,
    Anchor,
    AnchorsError,
    ExpectedDivergence,
    PriorMeasurement,
    judge,
    load_anchors,
    relock,
    run_anchors,
)
from harness.store import open_store
from protocol import load_protocol

NOW = datetime(2026, 12, 2, 14, 0, tzinfo=timezone.utc)


def _anchor(expected: float = 100.0, divergence: dict | None = None) -> Anchor:
    raw = {
        "id": "test-anchor", "description": "a test figure", "unit": "ratio", "expected": expected,
        "device": {"backend": "cpu"}, "measure": {"kind": "matmul_rate_ratio", "n": 64, "dtype": "float32",
                                                  "over_dtype": "float64"},
        "source": {"title": "t", "url": "u", "states": "s"},
        "expected_divergence": divergence,
    }
    return Anchor.model_validate(raw)


DIV = {"factor": 0.8, "reason": "a divergence explained well before anything was measured", "registered": "2026-11-30"}


def test_shipped_anchors_are_pinned_and_cite_a_source() -> None:
    loaded = load_anchors()
    assert loaded.sha256 == json.loads(ANCHORS_LOCK_PATH.read_text())["sha256"]
    ids = [a.id for a in loaded.file.anchors]
    assert {"h200-hbm3e-copy-bandwidth", "h200-sxm-bf16-dense-matmul"} <= set(ids)
    for a in loaded.file.anchors:
        assert a.source.url.startswith("https://") and a.source.states
        if a.expected_divergence is not None:
            assert a.expected_divergence.registered <= date.today()


def test_an_unlocked_edit_is_refused(tmp_path: Path) -> None:
    path, lock = tmp_path / "anchors.yaml", tmp_path / "anchors.lock.json"
    shutil.copy(ANCHORS_PATH, path)
    shutil.copy(ANCHORS_LOCK_PATH, lock)
    load_anchors(path, lock)
    path.write_text(path.read_text().replace("factor: 0.90", "factor: 0.70", 1))
    with pytest.raises(AnchorsError, match="without re-locking"):
        load_anchors(path, lock)
    first = json.loads(lock.read_text())["sha256"]
    digest = relock(path, lock)
    assert load_anchors(path, lock).sha256 == digest
    history = [e["sha256"] for e in json.loads(lock.read_text())["history"]]
    assert history[-2:] == [first, digest]  # the earlier digest stays visible


def test_judge_bands() -> None:
    default = load_protocol().anchors.default_band
    assert judge(_anchor(), 105.0, default, [], NOW).outcome == "agrees"
    assert judge(_anchor(), 85.0, default, [], NOW).outcome == "unexplained_divergence"
    explained = judge(_anchor(divergence=DIV), 82.0, default, [], NOW)
    assert explained.outcome == "explained_divergence" and explained.explanation == "preregistered"
    far = judge(_anchor(divergence=DIV), 60.0, default, [], NOW)
    assert far.outcome == "unexplained_divergence" and "pre-registered" in far.detail


def test_an_explanation_written_after_the_first_measurement_is_post_hoc() -> None:
    default = 0.10
    div = ExpectedDivergence.model_validate(DIV)
    # the first stored measurement carried no explanation: adding one afterwards does not count
    priors = [PriorMeasurement(measured_at="2026-11-29T10:00:00+00:00", explanation_sha256=None)]
    res = judge(_anchor(divergence=DIV), 82.0, default, priors, NOW)
    assert res.explanation == "post_hoc" and res.outcome == "unexplained_divergence"
    # the same explanation, present at the first measurement: pre-registered
    priors = [PriorMeasurement(measured_at="2026-12-01T10:00:00+00:00", explanation_sha256=div.sha256)]
    assert judge(_anchor(divergence=DIV), 82.0, default, priors, NOW).outcome == "explained_divergence"
    # a registration date after the first measurement (even if the text matches) is post hoc
    priors = [PriorMeasurement(measured_at="2026-11-20T10:00:00+00:00", explanation_sha256=div.sha256)]
    assert judge(_anchor(divergence=DIV), 82.0, default, priors, NOW).explanation == "post_hoc"
    # a registration dated in the future is post hoc
    future = {**DIV, "registered": (NOW.date() + timedelta(days=3)).isoformat()}
    assert judge(_anchor(divergence=future), 82.0, default, [], NOW).explanation == "post_hoc"


def _small_anchors(tmp_path: Path, divergence: dict | None) -> tuple[Path, Path]:
    """A one-anchor file measuring a small fp32/fp64 matmul ratio here (fast), locked."""
    path, lock = tmp_path / "anchors.yaml", tmp_path / "anchors.lock.json"
    doc = {"schema": 1, "anchors": [{
        "id": "small-ratio", "description": "fp32 over fp64 matmul rate at n=96",
        "device": {"backend": "cpu"}, "measure": {"kind": "matmul_rate_ratio", "n": 96, "dtype": "float32",
                                                  "over_dtype": "float64"},
        "unit": "ratio", "expected": 1000.0, "source": {"title": "t", "url": "https://example.org", "states": "s"},
        "expected_divergence": divergence}]}
    path.write_text(yaml.safe_dump(doc))
    relock(path, lock)
    return path, lock


def test_store_history_makes_a_later_explanation_post_hoc(tmp_path: Path) -> None:
    """Measured first without an explanation, then 'explained' with a backdated registration:
    the store remembers the first measurement, so the explanation does not count."""
    store = open_store(tmp_path / "atb.sqlite")
    path, lock = _small_anchors(tmp_path, None)
    first = run_anchors(store, "cpu", anchors=load_anchors(path, lock))
    assert [r.outcome for r in first.results] == ["unexplained_divergence"]
    measured = first.results[0].measured
    backdated = {"factor": measured / 1000.0, "reason": "written after seeing the measurement, backdated",
                 "registered": "2026-01-01"}
    path, lock = _small_anchors(tmp_path, backdated)
    second = run_anchors(store, "cpu", anchors=load_anchors(path, lock))
    res = second.results[0]
    assert res.explanation == "post_hoc" and res.outcome == "unexplained_divergence"
    assert second.anchors_sha256 != first.anchors_sha256
    stored = store.reports("anchor")
    assert [r["body"]["anchors_sha256"] for r in stored] == [first.anchors_sha256, second.anchors_sha256]


def test_atb_anchor_cpu_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "atb.sqlite"
    code = main(["anchor", "--device", "cpu", "--db", str(db), "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    payload = json.loads(out)  # exactly one JSON object on stdout
    assert payload["backend"] == "cpu" and payload["anchors_sha256"] == load_anchors().sha256
    assert "h200-sxm-bf16-dense-matmul" in payload["not_applicable"]
    for r in payload["results"]:
        assert r["outcome"] in ("agrees", "explained_divergence", "unexplained_divergence")
        assert r["measured"] > 0 and r["low"] < r["expected"] < r["high"]
    with open_store(db) as store:
        assert [r["id"] for r in store.reports("anchor")] == [payload["report_id"]]


def test_atb_anchor_cuda_without_a_gpu_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    code = main(["anchor", "--device", "cuda", "--db", str(tmp_path / "atb.sqlite"), "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 2 and payload["ok"] is False and "cuda" in payload["error"].lower()
