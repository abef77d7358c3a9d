"""The store's ingest rules live in the database: raw SQL that bypasses Python is refused too.

Each rule has its own named test. Every refused insert must leave the rows already stored intact.
Raw inserts that should succeed go through ``insert_chained``: a raw-SQL writer that also computes the
hash chain, so a refusal below is the rule's, never a missing chain column.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.records import (
    DeviceFingerprint,
    GateResult,
    MeasurementSample,
    MeasurementSet,
    Verdict,
    sha256_text,
    utc_now,
)
from harness.store import IngestRejected, ResultStore, connect, open_store
from harness.store._chain import insert_chained
from harness.verdict.gates import gate_names
from protocol import load_protocol

PROTO = load_protocol()
REF = PROTO.ref()
SEEDS = list(range(101, 101 + PROTO.seeds.paired_seeds))
CAND = sha256_text("candidate")
BASE = sha256_text("baseline")
PASS = [{"name": n, "passed": True, "detail": ""} for n in gate_names()]
ALL_GATES = [GateResult(name=n, passed=True) for n in gate_names()]
SPEEDUP = 1.5   # baseline samples are SPEEDUP x the candidate's, so the raw verdicts' ratio 1.5 agrees


def _fp(name: str = "cpu-a") -> DeviceFingerprint:
    return DeviceFingerprint(backend="cpu", cpu_model=name, cpu_count=2, torch_version="2.13.0")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultStore]:
    s = open_store(tmp_path / "atb.sqlite")
    yield s
    s.close()


@pytest.fixture
def raw(store: ResultStore) -> Iterator[sqlite3.Connection]:
    """A second, plain connection: what a script bypassing the Python API would use."""
    conn = connect(store.path)
    yield conn
    conn.close()


def _set(store: ResultStore, session: str, arm: str, seeds: list[int], *, kind: str = "kernel",
         task: str = "relu", device: str | None = None) -> str:
    dev = device or store.session(session)["device_sha256"]
    ms = MeasurementSet(session_id=session, device_sha256=dev, protocol=REF, task_id=task,
                        subject_sha256=CAND if arm == "candidate" else BASE, arm=arm, kind=kind,  # type: ignore[arg-type]
                        unit="ns" if kind == "kernel" else "requests_per_s",
                        samples=[MeasurementSample(seed=s, values=[x * (SPEEDUP if arm == "baseline" else 1.0)
                                                                   for x in (1000.0, 1010.0)]) for s in seeds])
    with store.transaction() as c:
        store._insert_measurement_set(c, ms)
    return ms.id


def _raw_verdict(conn: sqlite3.Connection, session: str, device: str, cset: str | None, bset: str | None,
                 **over: Any) -> None:
    row: dict[str, Any] = {
        "id": over.pop("id", f"v-{utc_now()}-{id(over)}"), "session_id": session, "device_sha256": device,
        "task_id": "relu", "kind": "kernel", "candidate_sha256": CAND, "baseline_sha256": BASE,
        "baseline_label": "eager-reference", "status": "accepted", "correct": 1, "reason": "",
        "ratio": 1.5, "ci_low": 1.4, "ci_high": 1.6, "candidate_set_id": cset, "baseline_set_id": bset,
        "gates_json": json.dumps(PASS), "detail_json": "{}", "protocol_version": REF.version,
        "protocol_sha256": REF.sha256, "created_at": utc_now(),
    }
    row.update(over)
    insert_chained(conn, "verdicts", row)


def _count(conn: sqlite3.Connection, table: str) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


@pytest.fixture
def session(store: ResultStore) -> str:
    return store.open_session(_fp(), REF)


def _refused(conn: sqlite3.Connection, rule: str, fn: Any) -> None:
    before = {t: _count(conn, t) for t in ("verdicts", "measurements", "measurement_sets")}
    with pytest.raises(sqlite3.DatabaseError, match=f"atb_rule:{rule}"):
        fn()
    assert {t: _count(conn, t) for t in before} == before, "a refused insert changed stored rows"


def test_valid_verdict_enters_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c, b = _set(store, session, "candidate", SEEDS), _set(store, session, "baseline", SEEDS)
    _raw_verdict(raw, session, dev, c, b, id="v-ok")
    assert store.verdict("v-ok").seeds == SEEDS


def test_verdict_without_paired_seeds_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c = _set(store, session, "candidate", SEEDS)
    b = _set(store, session, "baseline", SEEDS[:-1] + [999])
    _refused(raw, "unpaired_seeds", lambda: _raw_verdict(raw, session, dev, c, b))


def test_engine_result_without_paired_seeds_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c = _set(store, session, "candidate", SEEDS, kind="engine")
    b = _set(store, session, "baseline", SEEDS[1:], kind="engine")
    _refused(raw, "unpaired_seeds", lambda: _raw_verdict(raw, session, dev, c, b, kind="engine",
                                                        baseline_label="engine-default"))


def test_verdict_with_fewer_paired_seeds_than_protocol_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    few = SEEDS[: PROTO.seeds.paired_seeds - 1]
    c, b = _set(store, session, "candidate", few), _set(store, session, "baseline", few)
    _refused(raw, "too_few_paired_seeds", lambda: _raw_verdict(raw, session, dev, c, b))


def test_ratio_across_device_fingerprints_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    other = store.open_session(_fp("cpu-b"), REF)
    dev = store.session(session)["device_sha256"]
    c = _set(store, session, "candidate", SEEDS)
    b = _set(store, other, "baseline", SEEDS)
    _refused(raw, "cross_device_ratio", lambda: _raw_verdict(raw, session, dev, c, b))


def test_ratio_across_measurement_sessions_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    second = store.open_session(_fp(), REF)  # same device, another session
    dev = store.session(session)["device_sha256"]
    c = _set(store, session, "candidate", SEEDS)
    b = _set(store, second, "baseline", SEEDS)
    _refused(raw, "cross_session_ratio", lambda: _raw_verdict(raw, session, dev, c, b))


def test_row_without_protocol_digest_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c, b = _set(store, session, "candidate", SEEDS), _set(store, session, "baseline", SEEDS)
    _refused(raw, "missing_protocol_digest",
             lambda: _raw_verdict(raw, session, dev, c, b, protocol_sha256=None))
    _refused(raw, "missing_protocol_digest", lambda: raw.execute(
        "INSERT INTO measurement_sets (id, session_id, device_sha256, task_id, subject_sha256, arm, kind, unit, created_at) "
        "VALUES ('m-x', ?, ?, 'relu', ?, 'candidate', 'kernel', 'ns', ?)", (session, dev, CAND, utc_now())))


def test_row_with_unknown_protocol_digest_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c, b = _set(store, session, "candidate", SEEDS), _set(store, session, "baseline", SEEDS)
    _refused(raw, "unknown_protocol_digest",
             lambda: _raw_verdict(raw, session, dev, c, b, protocol_sha256="0" * 64))


def test_verdict_without_gate_results_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c, b = _set(store, session, "candidate", SEEDS), _set(store, session, "baseline", SEEDS)
    for empty in (None, "[]", '{"identity": true}'):
        _refused(raw, "verdict_without_gate_results",
                 lambda empty=empty: _raw_verdict(raw, session, dev, c, b, gates_json=empty))


def test_accepted_verdict_with_a_failed_gate_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c, b = _set(store, session, "candidate", SEEDS), _set(store, session, "baseline", SEEDS)
    gates = json.dumps([g if g["name"] != "input_mutation" else {"name": "input_mutation", "passed": False,
                                                                 "detail": "input 0 changed"} for g in PASS])
    _refused(raw, "accepted_with_failed_gate", lambda: _raw_verdict(raw, session, dev, c, b, gates_json=gates))
    # the same verdict, rejected, is a legitimate result and enters
    _raw_verdict(raw, session, dev, c, b, gates_json=gates, status="rejected", id="v-rej")
    assert store.verdict("v-rej").status == "rejected"


def test_ratio_without_measurements_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    _refused(raw, "ratio_without_measurements", lambda: _raw_verdict(raw, session, dev, None, None))


def test_quarantine_without_reason_cannot_enter_db(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c, b = _set(store, session, "candidate", SEEDS), _set(store, session, "baseline", SEEDS)
    _refused(raw, "quarantine_without_reason",
             lambda: _raw_verdict(raw, session, dev, c, b, status="quarantined", ratio=40.0, ci_low=39.0, ci_high=41.0))


def test_stored_rows_cannot_be_changed_or_deleted(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c, b = _set(store, session, "candidate", SEEDS), _set(store, session, "baseline", SEEDS)
    _raw_verdict(raw, session, dev, c, b, id="v-keep")
    with pytest.raises(sqlite3.DatabaseError, match="atb_rule:append_only"):
        raw.execute("UPDATE verdicts SET ratio = 99 WHERE id = 'v-keep'")
    with pytest.raises(sqlite3.DatabaseError, match="atb_rule:append_only"):
        raw.execute("DELETE FROM measurements")
    with pytest.raises(sqlite3.DatabaseError, match="atb_rule:append_only"):
        raw.execute("UPDATE protocols SET paired_seeds_required = 1")
    assert store.verdict("v-keep").ratio == 1.5


def test_seeds_cannot_be_added_to_a_set_a_verdict_uses(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c, b = _set(store, session, "candidate", SEEDS), _set(store, session, "baseline", SEEDS)
    _raw_verdict(raw, session, dev, c, b)
    with pytest.raises(sqlite3.DatabaseError, match="atb_rule:measurement_set_sealed"):
        raw.execute("INSERT INTO measurements (set_id, seed, samples_json, protocol_version, protocol_sha256) "
                    "VALUES (?, 7, '[1.0]', ?, ?)", (c, REF.version, REF.sha256))


def test_api_refusal_is_typed_and_names_the_rule(store: ResultStore, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    good_c = _set(store, session, "candidate", SEEDS)
    good_b = _set(store, session, "baseline", SEEDS)
    v = Verdict(session_id=session, device_sha256=dev, protocol=REF, task_id="relu", candidate_sha256=CAND,
                baseline_sha256=BASE, baseline_label="eager-reference", status="accepted", correct=True,
                ratio=1.5, ci_low=1.4, ci_high=1.6, candidate_set_id=good_c, baseline_set_id=good_b,
                gates=ALL_GATES)
    store.add_verdict(v)
    before = store.query("SELECT count(*) FROM measurements")[0][0]
    cand = MeasurementSet(session_id=session, device_sha256=dev, protocol=REF, task_id="relu",
                          subject_sha256=CAND, arm="candidate",
                          samples=[MeasurementSample(seed=s, values=[5.0]) for s in SEEDS])
    base = MeasurementSet(session_id=session, device_sha256=dev, protocol=REF, task_id="relu",
                          subject_sha256=BASE, arm="baseline",
                          samples=[MeasurementSample(seed=s + 1000, values=[5.0]) for s in SEEDS])
    bad = v.model_copy(update={"id": "v-bad", "candidate_set_id": cand.id, "baseline_set_id": base.id})
    with pytest.raises(IngestRejected) as info:
        store.add_verdict(bad, cand, base)
    assert info.value.rule == "unpaired_seeds"
    # the whole transaction rolled back: neither set nor its samples were kept, the old verdict stays
    assert store.query("SELECT count(*) FROM measurements")[0][0] == before
    assert not store.query("SELECT 1 FROM measurement_sets WHERE id = ?", (cand.id,))
    assert store.verdict(v.id).ratio == 1.5


def test_usable_iteration_needs_an_accepted_verdict(store: ResultStore, raw: sqlite3.Connection, session: str) -> None:
    dev = store.session(session)["device_sha256"]
    c, b = _set(store, session, "candidate", SEEDS), _set(store, session, "baseline", SEEDS)
    _raw_verdict(raw, session, dev, c, b, id="v-r", status="rejected", correct=0)
    insert_chained(raw, "campaigns", {
        "id": "c1", "task_id": "relu", "kind": "kernel", "tuner_spec": "random", "seed": 1, "budget": 2,
        "session_id": session, "device_sha256": dev, "protocol_version": REF.version, "protocol_sha256": REF.sha256,
        "created_at": utc_now()})
    with pytest.raises(sqlite3.DatabaseError, match="atb_rule:usable_iteration_not_accepted"):
        raw.execute("INSERT INTO iterations (campaign_id, idx, verdict_id, usable, protocol_version, protocol_sha256, "
                    "created_at) VALUES ('c1', 0, 'v-r', 1, ?, ?, ?)", (REF.version, REF.sha256, utc_now()))
    with pytest.raises(sqlite3.DatabaseError, match="atb_rule:iteration_over_budget"):
        raw.execute("INSERT INTO iterations (campaign_id, idx, verdict_id, usable, unusable_reason, protocol_version, "
                    "protocol_sha256, created_at) VALUES ('c1', 2, 'v-r', 0, 'rejected', ?, ?, ?)",
                    (REF.version, REF.sha256, utc_now()))
