"""Campaign recording: usable iterations, idempotent resume, outcomes and truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.store import IngestRejected, ResultStore, open_store
from harness.tuning.campaigns import (
    CampaignError, CampaignRecorder, IterationConflict, IterationUsage, best_so_far, get_iterations, summarize,
)
from test_campaign_support import PROTO, TASK, build_campaign, make_verdict, open_session


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    return open_store(tmp_path / "atb.sqlite")


def _rec(store: ResultStore, sid: str, budget: int = 5, **kw: object) -> CampaignRecorder:
    return CampaignRecorder.open(store, PROTO, task_id=TASK, kind="kernel", tuner_spec="random", seed=1,
                                 budget=budget, session_id=sid, **kw)  # type: ignore[arg-type]


def test_usable_needs_accepted_correct_gates_and_a_tight_interval(store: ResultStore) -> None:
    sid = open_session(store)
    rec = _rec(store, sid, budget=6)
    bar = PROTO.usability.ci_relative_halfwidth_max
    cases = [
        make_verdict(store, sid, "good", 1.3, halfwidth=bar / 2),
        make_verdict(store, sid, "wide", 1.9, halfwidth=bar * 2),
        make_verdict(store, sid, "wrong", None, status="rejected", correct=False, reason="max abs err 3.0"),
        make_verdict(store, sid, "cheat", 2.0, status="rejected", failed_gate="escape"),
        make_verdict(store, sid, "anom", 40.0, status="quarantined", reason="anomalous speedup"),
    ]
    got = [rec.record(i, verdict_id=v) for i, v in enumerate(cases)]
    got.append(rec.record(5, verdict_id=None, no_verdict_reason="the model called no submit tool"))
    assert [g.usable for g in got] == [True, False, False, False, False, False]
    cats = [g.unusable_reason.split(":")[0] for g in got]
    assert cats == ["", "ci_too_wide", "incorrect", "gate_failed", "quarantined", "no_submission"]
    assert "escape" in got[3].unusable_reason
    s = summarize(store, rec.campaign_id)
    # the wide-interval 1.9x and the quarantined 40x never become the best
    assert s.best_speedup == pytest.approx(1.3) and s.usable_iterations == 1 and s.best_iteration == 0


def test_recording_is_idempotent_and_a_diverging_resume_is_refused(store: ResultStore) -> None:
    sid = open_session(store)
    rec = _rec(store, sid)
    v0 = make_verdict(store, sid, "a", 1.1)
    first = rec.record(0, verdict_id=v0)
    again = CampaignRecorder.resume(store, PROTO, rec.campaign_id).record(0, verdict_id=v0)
    assert again == first and len(get_iterations(store, rec.campaign_id)) == 1
    with pytest.raises(IterationConflict):
        rec.record(0, verdict_id=make_verdict(store, sid, "b", 1.2))
    assert rec.next_index() == 1


def test_open_with_a_stored_id_resumes_only_with_the_same_parameters(store: ResultStore) -> None:
    sid = open_session(store)
    rec = _rec(store, sid)
    assert _rec(store, sid, campaign_id=rec.campaign_id).campaign_id == rec.campaign_id
    with pytest.raises(CampaignError, match="other parameters"):
        _rec(store, sid, budget=9, campaign_id=rec.campaign_id)


def test_budget_session_and_task_are_enforced(store: ResultStore) -> None:
    sid = open_session(store)
    other = open_session(store)
    rec = _rec(store, sid, budget=2)
    with pytest.raises(CampaignError, match="outside the budget"):
        rec.record(2, verdict_id=None)
    with pytest.raises(CampaignError, match="session"):
        rec.record(0, verdict_id=make_verdict(store, other, "c", 1.2))
    with pytest.raises(CampaignError, match="task"):
        rec.record(0, verdict_id=make_verdict(store, sid, "d", 1.2, task="gelu"))


def test_a_raw_usable_row_without_an_accepted_verdict_is_refused_by_the_store(store: ResultStore) -> None:
    sid = open_session(store)
    rec = _rec(store, sid)
    vid = make_verdict(store, sid, "w", None, status="rejected", correct=False)
    with pytest.raises(IngestRejected) as e, store.transaction() as c:
        c.execute("INSERT INTO iterations (campaign_id, idx, verdict_id, usable, protocol_version, "
                  "protocol_sha256, created_at) VALUES (?,?,?,?,?,?,?)",
                  (rec.campaign_id, 0, vid, 1, PROTO.version, PROTO.sha256, "now"))
    assert e.value.rule == "usable_iteration_not_accepted"


def test_truncated_run_is_an_infrastructure_defect(store: ResultStore) -> None:
    sid = open_session(store)
    # 10 calls per iteration, 3 truncated in the first: 3/30 = 10% > the protocol's cap
    cid = build_campaign(store, sid, [1.1, 1.2, 1.3], tuner="openai:scripted", calls=10, truncated=3)
    s = summarize(store, cid)
    assert PROTO.truncation.max_truncated_fraction < 0.1
    assert s.outcome is not None and s.outcome.status == "infrastructure_defect"
    assert s.truncated_fraction == pytest.approx(0.1) and "truncated" in s.outcome.reason
    assert s.tokens_in == 3000


def test_finished_campaign_takes_no_more_iterations(store: ResultStore) -> None:
    sid = open_session(store)
    cid = build_campaign(store, sid, [1.1, 1.2, 1.3], budget=3)   # 'completed' needs the whole budget stored
    rec = CampaignRecorder.resume(store, PROTO, cid)
    assert rec.finish().status == "completed"       # idempotent
    with pytest.raises(CampaignError, match="finished"):
        rec.record(1, verdict_id=None)
    with pytest.raises(CampaignError, match="already finished"):
        rec.finish("aborted", reason="stopped by hand")


def test_best_so_far_counts_usable_iterations_only(store: ResultStore) -> None:
    sid = open_session(store)
    rec = _rec(store, sid, budget=4)
    rec.record(0, verdict_id=make_verdict(store, sid, "p", 1.2))
    rec.record(1, verdict_id=make_verdict(store, sid, "q", 3.0, halfwidth=0.5))   # too noisy
    rec.record(2, verdict_id=make_verdict(store, sid, "r", 1.5), usage=IterationUsage(tokens_in=5))
    assert best_so_far(get_iterations(store, rec.campaign_id), 4) == [1.2, 1.2, 1.5, 1.5]


def test_a_resumed_run_measures_in_an_attached_session_on_the_same_device(store: ResultStore) -> None:
    """Issue 14: a killed run's resume opens a new session. It joins the campaign (same device, same
    protocol) before anything is measured; a verdict from a session the campaign never attached, or
    a session on another device, is still refused. Each verdict's ratio stays inside its own session."""
    sid = open_session(store)
    rec = _rec(store, sid, budget=3)
    rec.record(0, verdict_id=make_verdict(store, sid, "a", 1.1))
    resumed_session = open_session(store)
    stray = open_session(store)
    elsewhere = open_session(store, device="another-cpu")
    again = CampaignRecorder.check_resume(store, PROTO, rec.campaign_id, task_id=TASK, tuner_spec="random", seed=1,
                                          budget=3)
    with pytest.raises(CampaignError, match="another device|device it started on"):
        again.attach_session(elsewhere)
    again.attach_session(resumed_session)
    again.attach_session(resumed_session)                  # idempotent
    assert again.sessions() == [sid, resumed_session]
    assert again.record(1, verdict_id=make_verdict(store, resumed_session, "b", 1.2)).idx == 1
    with pytest.raises(CampaignError, match="session"):
        again.record(2, verdict_id=make_verdict(store, stray, "c", 1.3))
    again.finish()
    with pytest.raises(CampaignError, match="finished"):
        again.attach_session(stray)


def test_check_resume_refuses_other_parameters_and_writes_nothing(store: ResultStore) -> None:
    sid = open_session(store)
    rec = _rec(store, sid, budget=3)
    before = [store.query(f"SELECT count(*) FROM {t}")[0][0] for t in ("sessions", "reports", "campaigns")]
    for wrong in ({"budget": 4}, {"seed": 2}, {"task_id": "gelu"}, {"tuner_spec": "openai:x"}):
        with pytest.raises(CampaignError, match="same arguments"):
            CampaignRecorder.check_resume(store, PROTO, rec.campaign_id, **wrong)
    after = [store.query(f"SELECT count(*) FROM {t}")[0][0] for t in ("sessions", "reports", "campaigns")]
    assert before == after
