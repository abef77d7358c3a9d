"""`compare_runs`: usable iterations, noise, refusals and saturation, on campaigns built through the recorder."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import IncomparableError
from harness.store import ResultStore, open_store
from harness.tuning.campaigns import CampaignRecorder
from harness.tuning.compare import compare_runs
from test_campaign_support import PROTO, build_campaign, open_session

NOISE = PROTO.noise.noise_floor
K = PROTO.saturation.early_iterations


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    return open_store(tmp_path / "atb.sqlite")


def test_llm_like_run_beats_a_sparse_random_run_beyond_noise(store: ResultStore) -> None:
    sid = open_session(store)
    # random: 2 usable of 6, slow climb; llm: 5 usable of 6 reaching 1.6x
    rnd = build_campaign(store, sid, [None, 1.05, None, None, 1.2, None], tag="r")
    llm = build_campaign(store, sid, [1.1, 1.3, 1.45, None, 1.6, 1.58], tuner="openai:scripted", tag="l")
    c = compare_runs(store, rnd, llm, PROTO)
    assert (c.a.usable_iterations, c.b.usable_iterations) == (2, 5)
    assert c.verdict == "b_better" and c.beyond_noise and c.relative_difference == pytest.approx(1.6 / 1.2 - 1)
    assert c.b.iterations_to_reach_other_best == 2        # 1.3 >= 1.2 at the second iteration
    assert c.a.iterations_to_reach_other_best is None
    assert c.a.best_ci == pytest.approx((1.2 * 0.99, 1.2 * 1.01))


def test_difference_inside_the_noise_floor_is_not_a_win(store: ResultStore) -> None:
    sid = open_session(store)
    a = build_campaign(store, sid, [1.0, 1.0, 1.0, 1.5, 1.5], tag="a")
    b = build_campaign(store, sid, [1.0, 1.0, 1.0, 1.0, 1.5 * (1 + NOISE / 2)], tag="b")
    c = compare_runs(store, a, b, PROTO)
    assert c.verdict == "within_noise" and not c.beyond_noise and not c.saturation.saturated


def test_overlapping_intervals_are_not_beyond_noise(store: ResultStore) -> None:
    sid = open_session(store)
    a = build_campaign(store, sid, [1.0, 1.0, 1.0, 1.5], tag="a", halfwidth=0.045)
    b = build_campaign(store, sid, [1.0, 1.0, 1.0, 1.6], tag="b", halfwidth=0.045)
    c = compare_runs(store, a, b, PROTO)
    assert c.intervals_overlap is True and c.verdict == "within_noise"


def test_a_shared_early_wall_is_uninformative_not_null(store: ResultStore) -> None:
    sid = open_session(store)
    wall = 2.48
    a = build_campaign(store, sid, [wall] * 5, tag="a")
    b = build_campaign(store, sid, [wall * 1.005] + [wall] * 4, tag="b")
    c = compare_runs(store, a, b, PROTO)
    assert c.saturation.saturated and c.verdict == "uninformative_saturated"
    assert "shared wall" in c.explanation and "not evidence" in c.explanation


def test_a_late_equal_finish_is_not_saturated(store: ResultStore) -> None:
    sid = open_session(store)
    a = build_campaign(store, sid, [1.0] * K + [2.0, 2.0], tag="a")
    b = build_campaign(store, sid, [1.0] * K + [1.0, 2.0], tag="b")
    assert compare_runs(store, a, b, PROTO).saturation.saturated is False


def test_baseline_near_the_roofline_floor_is_saturated(store: ResultStore) -> None:
    sid = open_session(store)
    a = build_campaign(store, sid, [1.01, 1.02], tag="a")
    rec = CampaignRecorder.open(store, PROTO, task_id="relu", kind="kernel", tuner_spec="x", seed=1, budget=2,
                                session_id=sid)
    from harness.records import MeasurementSample, MeasurementSet, Verdict, GateResult, sha256_text
    from harness.verdict.gates import gate_names
    dev = store.session(sid)["device_sha256"]
    cand = store.add_candidate("roof", "kernel", PROTO.ref())
    seeds = list(range(PROTO.seeds.paired_seeds))
    cs = MeasurementSet(session_id=sid, device_sha256=dev, protocol=PROTO.ref(), task_id="relu",
                        subject_sha256=cand, arm="candidate", samples=[MeasurementSample(seed=s, values=[1.0]) for s in seeds])
    bs = MeasurementSet(session_id=sid, device_sha256=dev, protocol=PROTO.ref(), task_id="relu",
                        subject_sha256=sha256_text("b"), arm="baseline", samples=[MeasurementSample(seed=s, values=[1.3]) for s in seeds])
    v = Verdict(session_id=sid, device_sha256=dev, protocol=PROTO.ref(), task_id="relu", candidate_sha256=cand,
                baseline_sha256=sha256_text("b"), baseline_label="eager", status="accepted", correct=True,
                ratio=1.3, ci_low=1.29, ci_high=1.31, candidate_set_id=cs.id, baseline_set_id=bs.id,
                gates=[GateResult(name=n, passed=True) for n in gate_names()],
                # as harness.verdict.evaluate stores it: the candidate's fraction and both median times
                detail={"roofline_fraction": 0.9, "candidate_median_ns": 1000.0, "baseline_median_ns": 1100.0})
    rec.record(0, verdict_id=store.add_verdict(v, cs, bs))
    rec.record(1, verdict_id=None, candidate_sha256=sha256_text("none"), no_verdict_reason="no submission")
    rec.finish()
    c = compare_runs(store, a, rec.campaign_id, PROTO)
    assert c.saturation.saturated and "roofline" in c.saturation.reason and c.verdict == "uninformative_saturated"


def test_different_devices_tasks_budgets_and_defects_are_refused(store: ResultStore) -> None:
    s1, s2 = open_session(store, "cpu-one"), open_session(store, "cpu-two")
    a = build_campaign(store, s1, [1.1, 1.2], tag="a")
    other_dev = build_campaign(store, s2, [1.1, 1.2], tag="b")
    other_task = build_campaign(store, s1, [1.1, 1.2], tag="c", task="gelu")
    other_budget = build_campaign(store, s1, [1.1, 1.2, 1.3], tag="d")
    defect = build_campaign(store, s1, [1.1, 1.2], tag="e", tuner="openai:x", calls=4, truncated=4)
    unfinished = build_campaign(store, s1, [1.1], budget=2, tag="f", finish=False)
    for other, why in [(other_dev, "device fingerprints"), (other_task, "different tasks"),
                       (other_budget, "budgets differ"), (defect, "infrastructure_defect"), (a, "twice"),
                       (unfinished, "has not finished")]:
        with pytest.raises(IncomparableError, match=why):
            compare_runs(store, a, other, PROTO)


def test_one_arm_without_usable_iterations(store: ResultStore) -> None:
    sid = open_session(store)
    a = build_campaign(store, sid, [None, None], tag="a")
    b = build_campaign(store, sid, [1.1, None], tag="b")
    c = compare_runs(store, a, b, PROTO)
    assert c.verdict == "b_better" and "no usable iteration" in c.explanation
