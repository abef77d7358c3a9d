"""Pre-registration: immutable specs, claims checked, and the treatment-delivery checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.science.prereg import (
    ABSpec, ArmRecording, PreregistrationError, RegistrationEdited, check_treatment_delivery, claimed_runs,
    decide, load_spec, record_outcome, register,
)
from harness.store import IngestRejected, ResultStore, connect, open_store
from test_campaign_support import PROTO, build_campaign, open_session

EXAMPLE = Path(__file__).resolve().parents[1] / "protocol" / "preregistrations" / "example-hint-ab.yaml"
MARKER = "ATB-TREATMENT: prefer vectorised torch ops"


def _spec(**over: object) -> ABSpec:
    data = load_spec(EXAMPLE).model_dump(mode="json")
    data.update({"id": "t-ab", "task": "relu", "treatment_marker": MARKER, "budget": 4, "seeds": [1, 2],
                 "decision_rule": {"min_seed_wins": 2}})
    data.update(over)
    return ABSpec.model_validate(data)


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    return open_store(tmp_path / "atb.sqlite")


def _req(text: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "system", "content": text}]}).encode()


def test_example_spec_loads_and_fits_the_protocol(store: ResultStore) -> None:
    spec = load_spec(EXAMPLE)
    reg = register(store, spec, PROTO)
    assert reg.spec_sha256 == spec.digest and len(reg.spec_sha256) == 64


def test_registering_the_same_spec_twice_is_idempotent_and_an_edit_is_refused(store: ResultStore) -> None:
    first = register(store, _spec(), PROTO)
    assert register(store, _spec(), PROTO) == first
    with pytest.raises(RegistrationEdited, match="cannot be edited"):
        register(store, _spec(budget=5), PROTO)
    assert register(store, _spec(id="t-ab-2", budget=5), PROTO).id == "t-ab-2"   # a new id is a new registration


def test_the_store_itself_refuses_an_edit_of_a_registration(store: ResultStore) -> None:
    register(store, _spec(), PROTO)
    raw = connect(store.path)
    import sqlite3
    with pytest.raises(sqlite3.DatabaseError, match="append_only"):
        raw.execute("UPDATE preregistrations SET spec_json = '{}' WHERE id = 't-ab'")


def test_a_spec_with_another_usability_bar_is_refused(store: ResultStore) -> None:
    bars = {"ci_relative_halfwidth_max": PROTO.usability.ci_relative_halfwidth_max * 2, "min_usable_iterations": 1}
    with pytest.raises(PreregistrationError, match="usability bar"):
        register(store, _spec(usability=bars), PROTO)


def test_claims_must_match_the_registration(store: ResultStore) -> None:
    spec = _spec()
    reg = register(store, spec, PROTO)
    sid = open_session(store)
    build_campaign(store, sid, [1.1] * 4, tuner=spec.control.tuner, seed=1, preregistration_id=reg.id,
                   arm=spec.control.name)
    assert len(claimed_runs(store, reg)) == 1
    build_campaign(store, sid, [1.1] * 3, tuner=spec.control.tuner, seed=2, preregistration_id=reg.id,
                   arm=spec.control.name, tag="short")
    with pytest.raises(PreregistrationError, match="budget 3"):
        claimed_runs(store, reg)


def test_unregistered_claim_is_refused_by_the_store(store: ResultStore) -> None:
    sid = open_session(store)
    with pytest.raises(IngestRejected) as e:
        build_campaign(store, sid, [1.0], preregistration_id="never-registered", arm="control")
    assert e.value.rule == "unknown_preregistration"


def _recordings(spec: ABSpec, treat_text: str, ctrl_text: str, same_trajectory: bool = False
                ) -> tuple[list[ArmRecording], list[ArmRecording]]:
    t = [ArmRecording(campaign_id=f"t{s}", seed=s, requests=[_req(treat_text)] * 3, responses=[b"r1", b"r2"],
                      candidates=["a", "b"]) for s in spec.seeds]
    c = [ArmRecording(campaign_id=f"c{s}", seed=s, requests=[_req(ctrl_text)] * 3,
                      responses=[b"r1", b"r2"] if same_trajectory else [b"x1", b"x2"], candidates=["a", "b"])
         for s in spec.seeds]
    return t, c


def test_delivered_treatment_passes_the_checkpoint() -> None:
    spec = _spec()
    t, c = _recordings(spec, "You tune kernels. " + MARKER, "You tune kernels.")
    check = check_treatment_delivery(spec, t, c)
    assert check.delivered and check.evidence["per_seed"][0]["treatment_requests_with_marker"] == 3


def test_a_treatment_that_never_reaches_the_model_is_void() -> None:
    spec = _spec()
    t, c = _recordings(spec, "You tune kernels.", "You tune kernels.")
    check = check_treatment_delivery(spec, t, c)
    assert not check.delivered and any("did not reach the model" in r for r in check.void_reasons)


def test_marker_in_the_control_or_identical_trajectories_is_void() -> None:
    spec = _spec()
    t, c = _recordings(spec, MARKER, MARKER)
    assert any("contaminated" in r for r in check_treatment_delivery(spec, t, c).void_reasons)
    t, c = _recordings(spec, MARKER, "plain", same_trajectory=True)
    assert any("byte-identical" in r for r in check_treatment_delivery(spec, t, c).void_reasons)


def test_marker_is_found_json_escaped() -> None:
    spec = _spec(treatment_marker='say "vectorise"\nplease')
    t, c = _recordings(spec, 'x say "vectorise"\nplease', "plain")
    assert check_treatment_delivery(spec, t, c).delivered


def test_decide_voids_an_undelivered_ab_whatever_its_numbers(store: ResultStore) -> None:
    spec = _spec(primary_metric="best_speedup")
    reg = register(store, spec, PROTO)
    sid = open_session(store)
    runs: dict[tuple[str, int], str] = {}
    for seed in spec.seeds:
        runs[("c", seed)] = build_campaign(store, sid, [1.0, 1.05, 1.1, 1.1], tuner=spec.control.tuner, seed=seed,
                                           preregistration_id=reg.id, arm=spec.control.name, tag="c")
        runs[("t", seed)] = build_campaign(store, sid, [1.0, 1.3, 1.6, 1.7], tuner=spec.treatment.tuner, seed=seed,
                                           preregistration_id=reg.id, arm=spec.treatment.name, tag="t")
    good_t, good_c = _recordings(spec, MARKER, "plain")
    delivered = decide(store, reg, PROTO, check_treatment_delivery(spec, good_t, good_c))
    assert delivered.status == "treatment_wins", delivered.explanation
    bad_t, bad_c = _recordings(spec, "plain", "plain")
    void = decide(store, reg, PROTO, check_treatment_delivery(spec, bad_t, bad_c))
    assert void.status == "void" and "did not reach the model" in void.explanation
    rid = record_outcome(store, void, PROTO)
    assert store.reports("ab_outcome", reg.id)[0]["id"] == rid


def test_usable_iterations_metric_counts_usable_rows(store: ResultStore) -> None:
    spec = _spec(decision_rule={"min_seed_wins": 2, "min_usable_difference": 2})
    reg = register(store, spec, PROTO)
    sid = open_session(store)
    for seed in spec.seeds:
        build_campaign(store, sid, [None, None, None, 1.1], tuner=spec.control.tuner, seed=seed,
                       preregistration_id=reg.id, arm=spec.control.name, tag="c")
        build_campaign(store, sid, [1.0, None, 1.05, 1.1], tuner=spec.treatment.tuner, seed=seed,
                       preregistration_id=reg.id, arm=spec.treatment.name, tag="t")
    t, c = _recordings(spec, MARKER, "plain")
    out = decide(store, reg, PROTO, check_treatment_delivery(spec, t, c))
    assert out.status == "treatment_wins" and "control 1 vs treatment 3" in out.seeds[0].detail
