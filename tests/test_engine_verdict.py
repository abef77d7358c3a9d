"""Engine verdicts: gates, ratio and interval from trial facts, and the store's ingest rules for
kind='engine' rows (paired seeds, unit, baseline label). Trials are built from plain facts, so these
tests need no engine; the real-engine path is in test_engine_llamacpp.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.engines import EngineProbe, load_engine_task, render_config
from harness.measure.serving.client import RequestResult, WorkloadRun
from harness.measure.serving.metrics import compute_metrics
from harness.measure.serving.trial import ArmResult, EngineTrial
from harness.measure.serving.session import open_engine_session
from harness.verdict.engine import BASELINE_LABEL, evaluate_engine_candidate, record_engine_trial
from harness.verdict.engine import judge_engine_trial as judge_trial
from harness.records import MeasurementSample, MeasurementSet, Verdict, GateResult, sha256_text
from harness.store import IngestRejected, ResultStore, open_store
from protocol import load_protocol

PROTO = load_protocol()
SEEDS = [101, 202, 303, 404, 505]
N = 6
PROBE = EngineProbe(engine="llama-server", pinned_version="test", version_text="version: 1 (test)",
                    help_sha256=sha256_text("help"), flags_in_help=["--parallel"])


def _arm(arm: str, rps: dict[int, float], text=lambda s, i: f"out-{s}-{i}", tokens=lambda s, i: 8,
         fail=lambda s, i: False, config: dict | None = None) -> ArmResult:
    runs = []
    for seed in SEEDS:
        results = []
        for i in range(N):
            if fail(seed, i):
                results.append(RequestResult(index=i, ok=False, error="empty completion"))
            else:
                results.append(RequestResult(index=i, ok=True, text=text(seed, i), completion_tokens=tokens(seed, i),
                                             ttft_s=0.01, e2e_s=0.05))
        ok = sum(r.ok for r in results)
        runs.append(WorkloadRun(seed=seed, results=results, duration_s=max(ok, 1) / rps[seed]))
    return ArmResult(arm=arm, config=config or {}, argv=["llama-server"], ready_s=0.5, runs=runs,
                     metrics=[compute_metrics(r) for r in runs])


def _trial(candidate: ArmResult | None, baseline: ArmResult | None = None, **kw) -> EngineTrial:
    base = baseline or _arm("baseline", {s: 10.0 + (s % 7) * 0.1 for s in SEEDS})
    return EngineTrial(task_id="llamacpp-tiny", engine="llama-server", seeds=SEEDS, probe=PROBE,
                       model_sha256="0" * 64, baseline=base, candidate=candidate, **kw)


def _gate(j, name: str) -> GateResult:
    return next(g for g in j.gates if g.name == name)


@pytest.fixture()
def store(tmp_path: Path) -> ResultStore:
    return open_store(str(tmp_path / "atb.sqlite"))


def test_same_config_reads_one_and_is_accepted() -> None:
    rps = {s: 10.0 + (s % 7) * 0.1 for s in SEEDS}
    j = judge_trial(_trial(_arm("candidate", rps)), PROTO)
    assert j.status == "accepted" and j.correct
    assert j.ratio == pytest.approx(1.0) and j.ci is not None and j.ci[0] <= 1.0 <= j.ci[1]


def test_faster_config_with_same_outputs_is_accepted_with_its_ratio() -> None:
    rps = {s: 2 * (10.0 + (s % 7) * 0.1) for s in SEEDS}
    j = judge_trial(_trial(_arm("candidate", rps)), PROTO)
    assert j.status == "accepted" and j.ratio == pytest.approx(2.0)


def test_empty_completions_cannot_look_fast() -> None:
    rps = {s: 30.0 for s in SEEDS}
    j = judge_trial(_trial(_arm("candidate", rps, fail=lambda s, i: i % 3 == 0)), PROTO)
    assert j.status == "rejected" and not j.correct
    assert not _gate(j, "failed_requests").passed and "failed 10/30" in _gate(j, "failed_requests").detail
    assert not _gate(j, "output_match").passed


def test_truncated_completions_are_rejected() -> None:
    rps = {s: 30.0 for s in SEEDS}
    cand = _arm("candidate", rps, text=lambda s, i: f"out-{s}", tokens=lambda s, i: 2)
    j = judge_trial(_trial(cand), PROTO)
    assert j.status == "rejected" and not j.correct
    assert not _gate(j, "output_length").passed and "30 candidate completions shorter" in _gate(j, "output_length").detail
    assert not _gate(j, "output_match").passed


def test_output_match_threshold_comes_from_the_protocol() -> None:
    need = PROTO.engine.output_match_min_fraction
    rps = {s: 10.0 for s in SEEDS}
    # one differing completion out of 30 stays above a 0.9 bar; half differing does not
    one = judge_trial(_trial(_arm("candidate", rps, text=lambda s, i: "x" if (s, i) == (101, 0) else f"out-{s}-{i}")), PROTO)
    half = judge_trial(_trial(_arm("candidate", rps, text=lambda s, i: "x" if i % 2 else f"out-{s}-{i}")), PROTO)
    assert (29 / 30 >= need) == _gate(one, "output_match").passed
    assert not _gate(half, "output_match").passed


def test_broken_baseline_fails_its_own_gate() -> None:
    rps = {s: 10.0 for s in SEEDS}
    base = _arm("baseline", rps, fail=lambda s, i: s == 303 and i == 1)
    j = judge_trial(_trial(_arm("candidate", rps), baseline=base), PROTO)
    assert j.status == "rejected" and not _gate(j, "baseline_requests").passed


def test_anomalous_ratio_is_quarantined() -> None:
    rps = {s: 10.0 * (PROTO.gates.anomaly_speedup + 5) for s in SEEDS}
    j = judge_trial(_trial(_arm("candidate", rps)), PROTO)
    assert j.status == "quarantined" and j.reason.startswith("anomaly")


def test_launch_failure_is_rejected_with_the_engine_log() -> None:
    j = judge_trial(_trial(None, launch_error="llama-server exited with status 1 before it was ready",
                           launch_log="error: invalid argument: --ubatch-size"), PROTO)
    assert j.status == "rejected" and j.ratio is None
    assert [g.name for g in j.gates] == ["engine_launch"]
    assert "invalid argument: --ubatch-size" in j.gates[0].detail


def test_engine_ratio_is_seeded_and_contains_the_ratio() -> None:
    from harness.verdict.engine import engine_ratio

    c = {s: 10.0 + (s % 3) * 0.4 for s in SEEDS}
    trial = _trial(_arm("candidate", c))
    r1 = engine_ratio(trial, PROTO)
    assert r1 is not None and r1 == engine_ratio(trial, PROTO)
    b = trial.baseline.throughput_by_seed()
    assert r1.ci_low <= r1.ratio <= r1.ci_high and r1.ratio == pytest.approx(sum(c.values()) / sum(b.values()))
    assert engine_ratio(_trial(None, launch_error="x"), PROTO) is None


def test_record_stores_engine_sets_with_paired_seeds(store: ResultStore) -> None:
    task = load_engine_task("llamacpp-tiny")
    session = open_engine_session(store, PROTO)
    rps = {s: 12.0 for s in SEEDS}
    text = render_config({"parallel": 4})
    res = record_engine_trial(task, text, {"parallel": 4}, _trial(_arm("candidate", rps, config={"parallel": 4})),
                              store=store, session=session, protocol=PROTO)
    assert res.verdict == "accepted" and res.speedup is not None and res.usable_ci in (True, False)
    v = store.verdict(res.verdict_id)
    assert v.kind == "engine" and v.baseline_label == BASELINE_LABEL and v.seeds == SEEDS
    assert v.candidate_sha256 == sha256_text(text) and store.candidate_content(v.candidate_sha256) == text
    assert store.candidate_content(v.baseline_sha256) == render_config({})
    units = store.query("SELECT DISTINCT unit, kind FROM measurement_sets")
    assert [tuple(u) for u in units] == [("requests_per_s", "engine")]
    assert store.measurement_set_samples(v.candidate_set_id) == {s: [12.0] for s in SEEDS}
    assert v.detail["engine_version"] == "version: 1 (test)"


def _sets(session_id: str, device: str, cand_seeds: list[int], base_seeds: list[int]) -> tuple[MeasurementSet, MeasurementSet]:
    ref = PROTO.ref()
    mk = lambda arm, seeds: MeasurementSet(session_id=session_id, device_sha256=device, protocol=ref,  # noqa: E731
                                           task_id="llamacpp-tiny", subject_sha256="1" * 64, arm=arm, kind="engine",
                                           unit="requests_per_s",
                                           samples=[MeasurementSample(seed=s, values=[10.0]) for s in seeds])
    return mk("candidate", cand_seeds), mk("baseline", base_seeds)


@pytest.mark.parametrize("cand_seeds, base_seeds, rule", [
    (SEEDS, [1, 2, 3, 4, 5], "unpaired_seeds"),
    (SEEDS[:2], SEEDS[:2], "too_few_paired_seeds"),
])
def test_store_refuses_unpaired_engine_results(store: ResultStore, cand_seeds, base_seeds, rule) -> None:
    session = open_engine_session(store, PROTO)
    device = store.session(session.session_id)["device_sha256"]
    cset, bset = _sets(session.session_id, device, cand_seeds, base_seeds)
    v = Verdict(session_id=session.session_id, device_sha256=device, protocol=PROTO.ref(), task_id="llamacpp-tiny",
                kind="engine", candidate_sha256="1" * 64, baseline_sha256="2" * 64, baseline_label=BASELINE_LABEL,
                status="accepted", correct=True, ratio=1.0, ci_low=0.9, ci_high=1.1, candidate_set_id=cset.id,
                baseline_set_id=bset.id, gates=[GateResult(name="engine_launch", passed=True)])
    with pytest.raises(IngestRejected) as err:
        store.add_verdict(v, cset, bset)
    assert err.value.rule == rule
    assert not store.query("SELECT 1 FROM measurement_sets")


def test_config_outside_the_flag_space_is_a_stored_rejection(store: ResultStore) -> None:
    session = open_engine_session(store, PROTO)
    res = evaluate_engine_candidate("llamacpp-tiny", '{"threads": 64}', store=store, session=session, protocol=PROTO)
    assert res.verdict == "rejected" and res.gates[0].name == "flag_space" and "must lie in" in res.reason
    assert store.verdict(res.verdict_id).status == "rejected"
    res2 = evaluate_engine_candidate("llamacpp-tiny", '{"spec_ngram_mod_n_min": 4}', store=store,
                                     session=session.session_id, protocol=PROTO)
    assert "needs spec_type='ngram-mod'" in res2.reason


def test_seed_score_is_the_median_repetition() -> None:
    runs = []
    for rep, rps in enumerate([10.0, 1.0, 11.0]):  # one repetition hit a burst of other load
        results = [RequestResult(index=i, ok=True, text="t", completion_tokens=8, ttft_s=0.01, e2e_s=0.05)
                   for i in range(N)]
        runs.append(WorkloadRun(seed=7, rep=rep, results=results, duration_s=N / rps))
    arm = ArmResult(arm="candidate", config={}, argv=["x"], runs=runs, metrics=[compute_metrics(r) for r in runs])
    assert arm.throughput_by_seed() == {7: pytest.approx(10.0)}
    assert [round(v, 6) for v in arm.throughputs_by_seed()[7]] == [10.0, 1.0, 11.0]


def test_submission_file_and_brief() -> None:
    from harness.engines import FlagSpaceError
    from harness.tuning.subjects._engine import ENGINE_CANDIDATE_FILE, config_text_from_files, engine_brief

    assert config_text_from_files({ENGINE_CANDIDATE_FILE: b'{"parallel": 2}'}) == '{"parallel": 2}'
    with pytest.raises(FlagSpaceError, match="no flags.json was submitted"):
        config_text_from_files({"candidate.py": b""})
    brief = engine_brief(load_engine_task("llamacpp-tiny"))
    assert "- parallel (int, 1..8" in brief and ENGINE_CANDIDATE_FILE in brief and "engine-default" not in brief
