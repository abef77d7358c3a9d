"""One rule suite, two stores: every ingest and append-only rule holds on SQLite and on PostgreSQL.

The ``store_backend`` fixture gives each test a fresh store of one kind, a *raw* connection to the same
database (what a script bypassing the Python API would use, with ``?`` placeholders on both), and a
raw chained writer (it also computes the hash chain, so a refusal below is a rule's, never a missing
chain column). SQL is dialect-neutral where it can be; the upsert forms differ per dialect and are
listed per dialect. PostgreSQL tests need a server (``pg_url`` in conftest.py: skipped locally without
one, a failure under CI=true). Store's own SQLite tests stay in test_store_rules.py / test_store_tamper.py.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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
from harness.store import IngestRejected
from harness.store._chain import CHAINED_TABLES, insert_chained, row_hash
from harness.store._protocol import ResultStore
from harness.tuning.campaigns import CampaignRecorder
from harness.verdict.gates import gate_names
from protocol import load_protocol

PROTO = load_protocol()
REF = PROTO.ref()
SEEDS = list(range(101, 101 + PROTO.seeds.paired_seeds))
CAND = sha256_text("candidate")
BASE = sha256_text("baseline")
PASS = [{"name": n, "passed": True, "detail": ""} for n in gate_names()]
ALL_GATES = [GateResult(name=n, passed=True) for n in gate_names()]
SPEEDUP = 1.5   # baseline samples are SPEEDUP x the candidate's, so a raw verdict's ratio 1.5 agrees


@dataclass
class Backend:
    """A store of one kind, with a raw connection to its database."""

    name: str
    store: Any
    raw: Any                                   # .execute(sql, params) with ? placeholders
    error: type[BaseException]                 # what a raw refusal raises
    chained: Callable[[str, dict[str, Any]], None]
    upserts: list[str]                         # statements that try to replace a stored row: {table} {cols} {marks} {set}
    closers: list[Callable[[], None]] = field(default_factory=list)

    def refused(self, rule: str, fn: Callable[[], Any]) -> None:
        before = {t: self.count(t) for t in ("verdicts", "measurements", "measurement_sets", "iterations")}
        with pytest.raises(self.error, match=f"atb_rule:{rule}"):
            fn()
        assert {t: self.count(t) for t in before} == before, "a refused insert changed stored rows"

    def count(self, table: str) -> int:
        return int(self.raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _sqlite_backend(tmp_path: Path) -> Backend:
    from harness.store import connect, open_store

    store = open_store(tmp_path / "atb.sqlite")
    raw = connect(store.path)
    return Backend("sqlite", store, raw, sqlite3.DatabaseError, lambda t, r: insert_chained(raw, t, r),
                   ["INSERT OR REPLACE INTO {table} ({cols}) VALUES ({marks})",
                    "REPLACE INTO {table} ({cols}) VALUES ({marks})",
                    "INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT DO UPDATE SET {set}",
                    "INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT DO NOTHING"],
                   [raw.close, store.close])


def _pg_backend(url: str) -> Backend:
    import psycopg

    from harness.store import open_store
    from harness.store._postgres import PgExecutor, insert_chained_pg

    store = open_store(url)
    conn = psycopg.connect(url, autocommit=True)
    raw = PgExecutor(conn)
    return Backend("postgresql", store, raw, psycopg.Error, lambda t, r: insert_chained_pg(raw, t, r),
                   ["INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT ({key}) DO UPDATE SET {set}",
                    "INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT DO NOTHING"],
                   [conn.close, store.close])


@pytest.fixture(params=["sqlite", "postgresql"])
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        b = _sqlite_backend(tmp_path)
    else:
        b = _pg_backend(request.getfixturevalue("pg_db"))
    try:
        yield b
    finally:
        for close in b.closers:
            close()


def _fp(name: str = "cpu-a") -> DeviceFingerprint:
    return DeviceFingerprint(backend="cpu", cpu_model=name, cpu_count=2, torch_version="2.13.0")


@pytest.fixture
def session(store_backend: Backend) -> str:
    return str(store_backend.store.open_session(_fp(), REF))


def _dev(b: Backend, session: str) -> str:
    return str(b.store.session(session)["device_sha256"])


def _set(b: Backend, session: str, arm: str, seeds: list[int], *, kind: str = "kernel", task: str = "relu",
         subject: str | None = None, values: list[float] | None = None) -> str:
    vals = values or [x * (SPEEDUP if arm == "baseline" else 1.0) for x in (1000.0, 1010.0)]
    ms = MeasurementSet(session_id=session, device_sha256=_dev(b, session), protocol=REF, task_id=task,
                        subject_sha256=subject or (CAND if arm == "candidate" else BASE), arm=arm,  # type: ignore[arg-type]
                        kind=kind, unit="ns" if kind == "kernel" else "requests_per_s",  # type: ignore[arg-type]
                        samples=[MeasurementSample(seed=s, values=vals) for s in seeds])
    with b.store.transaction() as c:
        b.store._insert_measurement_set(c, ms)
    return ms.id


def _verdict_row(session: str, device: str, cset: str | None, bset: str | None, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": f"v-{sha256_text(utc_now() + repr(over))[:12]}", "session_id": session, "device_sha256": device,
        "task_id": "relu", "kind": "kernel", "candidate_sha256": CAND, "baseline_sha256": BASE,
        "baseline_label": "eager-reference", "status": "accepted", "correct": 1, "reason": "",
        "ratio": 1.5, "ci_low": 1.4, "ci_high": 1.6, "candidate_set_id": cset, "baseline_set_id": bset,
        "gates_json": json.dumps(PASS), "detail_json": "{}", "protocol_version": REF.version,
        "protocol_sha256": REF.sha256, "created_at": utc_now()}
    row.update(over)
    return row


def _pair(b: Backend, session: str, seeds: list[int] = SEEDS) -> tuple[str, str, str]:
    return _dev(b, session), _set(b, session, "candidate", seeds), _set(b, session, "baseline", seeds)


# ---------------------------------------------------------------------- the protocol itself
def test_both_stores_implement_the_result_store_protocol(store_backend: Backend) -> None:
    assert isinstance(store_backend.store, ResultStore)


# ---------------------------------------------------------------------- verdict rules (test_store_rules.py)
def test_valid_verdict_enters_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s, id="v-ok"))
    assert b.store.verdict("v-ok").seeds == SEEDS


def test_verdict_without_paired_seeds_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev = _dev(b, session)
    c, s = _set(b, session, "candidate", SEEDS), _set(b, session, "baseline", SEEDS[:-1] + [999])
    b.refused("unpaired_seeds", lambda: b.chained("verdicts", _verdict_row(session, dev, c, s)))


def test_engine_result_without_paired_seeds_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev = _dev(b, session)
    c = _set(b, session, "candidate", SEEDS, kind="engine")
    s = _set(b, session, "baseline", SEEDS[1:], kind="engine")
    b.refused("unpaired_seeds", lambda: b.chained("verdicts", _verdict_row(
        session, dev, c, s, kind="engine", baseline_label="engine-default")))


def test_verdict_with_fewer_paired_seeds_than_protocol_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session, SEEDS[: PROTO.seeds.paired_seeds - 1])
    b.refused("too_few_paired_seeds", lambda: b.chained("verdicts", _verdict_row(session, dev, c, s)))


def test_ratio_across_device_fingerprints_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    other = b.store.open_session(_fp("cpu-b"), REF)
    dev = _dev(b, session)
    c, s = _set(b, session, "candidate", SEEDS), _set(b, other, "baseline", SEEDS)
    b.refused("cross_device_ratio", lambda: b.chained("verdicts", _verdict_row(session, dev, c, s)))


def test_ratio_across_measurement_sessions_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    second = b.store.open_session(_fp(), REF)
    dev = _dev(b, session)
    c, s = _set(b, session, "candidate", SEEDS), _set(b, second, "baseline", SEEDS)
    b.refused("cross_session_ratio", lambda: b.chained("verdicts", _verdict_row(session, dev, c, s)))


def test_row_without_protocol_digest_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.refused("missing_protocol_digest",
              lambda: b.chained("verdicts", _verdict_row(session, dev, c, s, protocol_sha256=None)))
    b.refused("missing_protocol_digest", lambda: b.raw.execute(
        "INSERT INTO measurement_sets (id, session_id, device_sha256, task_id, subject_sha256, arm, kind, unit, "
        "created_at) VALUES ('m-x', ?, ?, 'relu', ?, 'candidate', 'kernel', 'ns', ?)", (session, dev, CAND, utc_now())))


def test_row_with_unknown_protocol_digest_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.refused("unknown_protocol_digest",
              lambda: b.chained("verdicts", _verdict_row(session, dev, c, s, protocol_sha256="0" * 64)))


@pytest.mark.parametrize("gates", [None, "[]", '{"identity": true}', "not json"])
def test_verdict_without_gate_results_cannot_enter_db(store_backend: Backend, session: str, gates: str | None) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.refused("verdict_without_gate_results",
              lambda: b.chained("verdicts", _verdict_row(session, dev, c, s, gates_json=gates)))


def test_malformed_gate_result_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    bad = json.dumps([{"name": g["name"], "passed": "yes"} for g in PASS])
    b.refused("malformed_gate_result", lambda: b.chained("verdicts", _verdict_row(session, dev, c, s, gates_json=bad)))


def test_accepted_verdict_with_a_failed_gate_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    gates = json.dumps([g if g["name"] != "input_mutation" else {"name": "input_mutation", "passed": False,
                                                                 "detail": "input 0 changed"} for g in PASS])
    b.refused("accepted_with_failed_gate", lambda: b.chained("verdicts", _verdict_row(session, dev, c, s, gates_json=gates)))
    b.chained("verdicts", _verdict_row(session, dev, c, s, gates_json=gates, status="rejected", id="v-rej"))
    assert b.store.verdict("v-rej").status == "rejected"


def test_accepted_but_incorrect_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.refused("accepted_but_incorrect", lambda: b.chained("verdicts", _verdict_row(session, dev, c, s, correct=0)))


def test_ratio_without_measurements_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev = _dev(b, session)
    b.refused("ratio_without_measurements", lambda: b.chained("verdicts", _verdict_row(session, dev, None, None)))


def test_ratio_outside_its_interval_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.refused("ratio_outside_interval",
              lambda: b.chained("verdicts", _verdict_row(session, dev, c, s, ci_low=1.51, ci_high=1.6)))


def test_quarantine_without_reason_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.refused("quarantine_without_reason", lambda: b.chained("verdicts", _verdict_row(
        session, dev, c, s, status="quarantined", ratio=1.5, ci_low=1.4, ci_high=1.6)))


def test_arm_mismatch_cannot_enter_db(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.refused("arm_mismatch", lambda: b.chained("verdicts", _verdict_row(session, dev, s, c)))


# ---------------------------------------------------------------------- append-only, sealing, REPLACE/upsert
def test_stored_rows_cannot_be_changed_or_deleted(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s, id="v-keep"))
    for stmt in ("UPDATE verdicts SET ratio = 99 WHERE id = 'v-keep'", "DELETE FROM measurements",
                 "UPDATE protocols SET paired_seeds_required = 1", "DELETE FROM verdicts"):
        with pytest.raises(b.error, match="atb_rule:append_only"):
            b.raw.execute(stmt)
    assert b.store.verdict("v-keep").ratio == 1.5


def test_postgres_truncate_is_refused_too(store_backend: Backend, session: str) -> None:
    """TRUNCATE skips row triggers in PostgreSQL (SQLite has no TRUNCATE: its DELETE is refused above)."""
    b = store_backend
    if b.name != "postgresql":
        pytest.skip("TRUNCATE is PostgreSQL's; SQLite has none")
    for table in CHAINED_TABLES:
        with pytest.raises(b.error, match="atb_rule:append_only"):
            b.raw.execute(f"TRUNCATE {table} CASCADE")
    assert b.count("sessions") == 1


def test_seeds_cannot_be_added_to_a_set_a_verdict_uses(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s))
    b.refused("measurement_set_sealed", lambda: b.chained("measurements", {
        "set_id": c, "seed": 7, "samples_json": "[1.0]", "protocol_version": REF.version, "protocol_sha256": REF.sha256}))


def _row(b: Backend, table: str, where: str, params: tuple[Any, ...]) -> dict[str, Any]:
    r = b.raw.execute(f"SELECT * FROM {table} WHERE {where}", params).fetchone()
    names = [d[0] for d in b.raw.execute(f"SELECT * FROM {table} WHERE {where}", params).description]
    return dict(zip(names, tuple(r)))


def test_replace_or_upsert_of_a_stored_verdict_is_refused(store_backend: Backend, session: str) -> None:
    """Issue 14: REPLACE turned a rejected verdict accepted. Every dialect's way to replace a row is refused."""
    b = store_backend
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s, id="v-r", status="rejected", correct=0, reason="gate"))
    row = _row(b, "verdicts", "id = ?", ("v-r",))
    row.update(status="accepted", correct=1, reason="")
    cols, marks = ", ".join(row), ", ".join("?" * len(row))
    for stmt in b.upserts:
        sql = stmt.format(table="verdicts", cols=cols, marks=marks, key="id", set="status = 'accepted', correct = 1")
        b.refused("duplicate_key", lambda sql=sql: b.raw.execute(sql, list(row.values())))
    assert b.store.verdict("v-r").status == "rejected"
    assert b.store.verify().ok


def test_replace_is_refused_on_every_key_of_every_table(store_backend: Backend, session: str) -> None:
    """Every table with a stored row, every PRIMARY KEY / UNIQUE key: re-inserting the row is refused."""
    from harness.store._sqlite_schema import unique_keys

    b = store_backend
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s, id="v-k"))
    b.store.add_report("anchor", "x", {"k": 1}, REF)
    seen = 0
    for table in CHAINED_TABLES:
        got = b.raw.execute(f"SELECT * FROM {table} LIMIT 1")
        r = got.fetchone()
        if r is None:
            continue
        row = dict(zip([d[0] for d in got.description], tuple(r)))
        for key in unique_keys()[table]:
            if table == "protocols" and key == ("version",):
                continue   # its own rule, protocol_version_taken, answers first
            cols, marks = ", ".join(row), ", ".join("?" * len(row))
            sql = b.upserts[-1].format(table=table, cols=cols, marks=marks, key=", ".join(key), set="")
            b.refused("duplicate_key", lambda sql=sql, row=row: b.raw.execute(sql, list(row.values())))
            seen += 1
    assert seen >= len(CHAINED_TABLES) - 2 and b.store.verify().ok


def test_second_digest_for_a_held_protocol_version_is_refused(store_backend: Backend) -> None:
    b = store_backend
    b.refused("protocol_version_taken", lambda: b.chained("protocols", {
        "sha256": "f" * 64, "version": REF.version, "paired_seeds_required": 1, "registered_at": utc_now()}))
    assert b.store.query("SELECT paired_seeds_required FROM protocols")[0][0] == PROTO.seeds.paired_seeds


def test_api_refusal_is_typed_and_names_the_rule(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev = _dev(b, session)
    good_c, good_b = _set(b, session, "candidate", SEEDS), _set(b, session, "baseline", SEEDS)
    v = Verdict(session_id=session, device_sha256=dev, protocol=REF, task_id="relu", candidate_sha256=CAND,
                baseline_sha256=BASE, baseline_label="eager-reference", status="accepted", correct=True,
                ratio=1.5, ci_low=1.4, ci_high=1.6, candidate_set_id=good_c, baseline_set_id=good_b, gates=ALL_GATES)
    b.store.add_verdict(v)
    before = b.store.query("SELECT count(*) FROM measurements")[0][0]
    cand = MeasurementSet(session_id=session, device_sha256=dev, protocol=REF, task_id="relu", subject_sha256=CAND,
                          arm="candidate", samples=[MeasurementSample(seed=s, values=[5.0]) for s in SEEDS])
    base = MeasurementSet(session_id=session, device_sha256=dev, protocol=REF, task_id="relu", subject_sha256=BASE,
                          arm="baseline", samples=[MeasurementSample(seed=s + 1000, values=[5.0]) for s in SEEDS])
    bad = v.model_copy(update={"id": "v-bad", "candidate_set_id": cand.id, "baseline_set_id": base.id})
    with pytest.raises(IngestRejected) as info:
        b.store.add_verdict(bad, cand, base)
    assert info.value.rule == "unpaired_seeds"
    assert b.store.query("SELECT count(*) FROM measurements")[0][0] == before
    assert not b.store.query("SELECT 1 FROM measurement_sets WHERE id = ?", (cand.id,))
    assert b.store.verdict(v.id).ratio == 1.5


# ---------------------------------------------------------------------- gate set, samples, sets (issue 14)
@pytest.mark.parametrize("gates, rule", [
    ([{"name": "anomaly", "passed": True}], "incomplete_gate_set"),
    (PASS[:-1], "incomplete_gate_set"),
    (PASS + [{"name": "made_up_gate", "passed": True}], "unknown_gate"),
    (PASS + PASS[:1], "duplicate_gate"),
])
def test_verdict_with_one_gate_or_a_made_up_gate_is_refused(store_backend: Backend, session: str,
                                                            gates: list[dict[str, Any]], rule: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.refused(rule, lambda: b.chained("verdicts", _verdict_row(session, dev, c, s, gates_json=json.dumps(gates))))


def test_ratio_that_contradicts_its_samples_is_refused(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev = _dev(b, session)
    c = _set(b, session, "candidate", SEEDS, values=[1e9, 1.1e9])
    s = _set(b, session, "baseline", SEEDS, values=[1000.0, 1010.0])
    b.refused("ratio_contradicts_samples",
              lambda: b.chained("verdicts", _verdict_row(session, dev, c, s, ratio=3.0, ci_low=2.9, ci_high=3.1)))
    honest = 1005.0 / 1.05e9
    b.chained("verdicts", _verdict_row(session, dev, c, s, ratio=honest, ci_low=honest * 0.99, ci_high=honest * 1.01,
                                       status="rejected", correct=0, reason="slow"))


def test_throughput_ratio_bounds_use_candidate_over_baseline(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev = _dev(b, session)
    c = _set(b, session, "candidate", SEEDS, kind="engine", values=[20.0, 21.0])
    s = _set(b, session, "baseline", SEEDS, kind="engine", values=[10.0, 10.5])
    egates = json.dumps([{"name": n, "passed": True} for n in (
        "engine_launch", "engine_alive", "failed_requests", "baseline_requests", "output_match", "output_length",
        "anomaly")])
    over = dict(kind="engine", baseline_label="engine-default", gates_json=egates)
    b.refused("ratio_contradicts_samples", lambda: b.chained("verdicts", _verdict_row(
        session, dev, c, s, ratio=0.5, ci_low=0.49, ci_high=0.51, **over)))
    b.chained("verdicts", _verdict_row(session, dev, c, s, ratio=2.0, ci_low=1.95, ci_high=2.05, **over))


@pytest.mark.parametrize("samples", ['[-5, "abc", null]', "[-5]", '["3"]', "[null]", "[0]", "[1e999]", "[[1]]", "[true]"])
def test_malformed_samples_are_refused(store_backend: Backend, session: str, samples: str) -> None:
    b = store_backend
    dev = _dev(b, session)
    with b.store.transaction() as c:
        b.store._insert(c, "measurement_sets", {
            "id": "ms-x", "session_id": session, "device_sha256": dev, "task_id": "relu", "subject_sha256": CAND,
            "arm": "candidate", "kind": "kernel", "unit": "ns", "created_at": utc_now(),
            "protocol_version": REF.version, "protocol_sha256": REF.sha256})
    b.refused("malformed_samples", lambda: b.chained("measurements", {
        "set_id": "ms-x", "seed": 1, "samples_json": samples, "protocol_version": REF.version,
        "protocol_sha256": REF.sha256}))


@pytest.mark.parametrize("lengths", ["[2, 3]", "[4, 0]", "[1.5, 2.5]", '["4"]', "[-1, 5]", "[]", "{}"])
def test_malformed_round_lengths_are_refused(store_backend: Backend, session: str, lengths: str) -> None:
    """Issue 18: round boundaries split a seed's samples into non-empty consecutive blocks."""
    b = store_backend
    dev = _dev(b, session)
    with b.store.transaction() as c:
        b.store._insert(c, "measurement_sets", {
            "id": "ms-r", "session_id": session, "device_sha256": dev, "task_id": "relu", "subject_sha256": CAND,
            "arm": "candidate", "kind": "kernel", "unit": "ns", "created_at": utc_now(),
            "protocol_version": REF.version, "protocol_sha256": REF.sha256})
    row = {"set_id": "ms-r", "seed": 1, "samples_json": "[1.0, 2.0, 3.0, 4.0]", "protocol_version": REF.version,
           "protocol_sha256": REF.sha256}
    if lengths == "{}":   # not an array: the column's CHECK (the rule looks only into arrays)
        with pytest.raises(b.error, match="round_lengths_json"):
            b.chained("measurements", {**row, "round_lengths_json": lengths})
    else:
        b.refused("malformed_round_lengths", lambda: b.chained("measurements", {**row, "round_lengths_json": lengths}))
    b.chained("measurements", {**row, "round_lengths_json": "[1, 3]"})
    b.chained("measurements", {**row, "seed": 2})   # a row without boundaries (stored before schema 3)
    ms = b.store.measurement_set("ms-r")
    assert [(s.seed, s.round_lengths, s.blocks()) for s in ms.samples] == [
        (1, [1, 3], [[1.0], [2.0, 3.0, 4.0]]), (2, None, [[1.0, 2.0, 3.0, 4.0]])]
    assert b.store.verify().ok


def test_measurement_set_reused_or_under_another_candidate_is_refused(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s))
    b.refused("measurement_set_subject_mismatch", lambda: b.chained("verdicts", _verdict_row(
        session, dev, c, s, candidate_sha256=sha256_text("other"))))
    b.refused("measurement_set_reused", lambda: b.chained("verdicts", _verdict_row(session, dev, c, s)))


def _quarantined(b: Backend, session: str, text: str) -> str:
    cand = b.store.add_candidate(text, "kernel", REF)
    dev = _dev(b, session)
    c = _set(b, session, "candidate", SEEDS, subject=cand, values=[10.0])
    s = _set(b, session, "baseline", SEEDS, values=[400.0])
    gates = json.dumps([{"name": n, "passed": n != "anomaly"} for n in gate_names()])
    row = _verdict_row(session, dev, c, s, candidate_sha256=cand, status="quarantined", reason="anomaly",
                       ratio=40.0, ci_low=39.0, ci_high=41.0, gates_json=gates)
    b.chained("verdicts", row)
    return str(row["id"])


def test_quarantine_review_rules(store_backend: Backend, session: str) -> None:
    b = store_backend
    q = _quarantined(b, session, "suspicious")
    with pytest.raises(IngestRejected) as e:
        b.store.add_quarantine_review(q, True, "trust me", None, REF)
    assert e.value.rule == "cleared_without_extended_pass"
    other = _quarantined(b, session, "another candidate")
    for ext in (q, other):
        with pytest.raises(IngestRejected) as e:
            b.store.add_quarantine_review(q, True, "wrong extended verdict", ext, REF)
        assert e.value.rule == "cleared_without_extended_pass"
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s, id="v-plain"))
    with pytest.raises(IngestRejected) as e:
        b.store.add_quarantine_review("v-plain", False, "not quarantined", None, REF)
    assert e.value.rule == "review_of_unquarantined_verdict"
    assert b.store.effective_status(q) == "quarantined"
    ext = _quarantined(b, session, "suspicious")
    b.store.add_quarantine_review(q, True, "extended pass cleared it", ext, REF)
    assert b.store.effective_status(q) == "accepted" and b.store.verify().ok


# ---------------------------------------------------------------------- campaigns and iterations
def _campaign(b: Backend, session: str, cid: str = "c1", budget: int = 2) -> None:
    b.chained("campaigns", {
        "id": cid, "task_id": "relu", "kind": "kernel", "tuner_spec": "random", "seed": 1, "budget": budget,
        "session_id": session, "device_sha256": _dev(b, session), "protocol_version": REF.version,
        "protocol_sha256": REF.sha256, "created_at": utc_now()})


def test_usable_iteration_needs_an_accepted_verdict_and_the_budget(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s, id="v-r", status="rejected", correct=0))
    _campaign(b, session)
    b.refused("usable_iteration_not_accepted", lambda: b.raw.execute(
        "INSERT INTO iterations (campaign_id, idx, verdict_id, usable, protocol_version, protocol_sha256, created_at) "
        "VALUES ('c1', 0, 'v-r', 1, ?, ?, ?)", (REF.version, REF.sha256, utc_now())))
    b.refused("iteration_over_budget", lambda: b.raw.execute(
        "INSERT INTO iterations (campaign_id, idx, verdict_id, usable, unusable_reason, protocol_version, "
        "protocol_sha256, created_at) VALUES ('c1', 2, 'v-r', 0, 'rejected', ?, ?, ?)",
        (REF.version, REF.sha256, utc_now())))


def test_iteration_for_another_tasks_verdict_is_refused(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev = _dev(b, session)
    c = _set(b, session, "candidate", SEEDS, task="gelu")
    s = _set(b, session, "baseline", SEEDS, task="gelu")
    b.chained("verdicts", _verdict_row(session, dev, c, s, id="v-g", task_id="gelu"))
    _campaign(b, session)
    b.refused("iteration_verdict_other_task", lambda: b.chained("iterations", {
        "campaign_id": "c1", "idx": 0, "verdict_id": "v-g", "usable": 1, "created_at": utc_now(),
        "protocol_version": REF.version, "protocol_sha256": REF.sha256}))


def test_completed_outcome_needs_its_iterations(store_backend: Backend, session: str) -> None:
    b = store_backend
    rec = CampaignRecorder.open(b.store, PROTO, task_id="relu", kind="kernel", tuner_spec="random", seed=1,
                                budget=50, session_id=session)
    b.refused("completed_short_of_budget", lambda: b.chained("campaign_outcomes", {
        "campaign_id": rec.campaign_id, "status": "completed", "created_at": utc_now(),
        "protocol_version": REF.version, "protocol_sha256": REF.sha256}))
    out = rec.finish()
    assert out.status == "aborted"
    b.refused("iteration_after_outcome", lambda: b.chained("iterations", {
        "campaign_id": rec.campaign_id, "idx": 0, "usable": 0, "unusable_reason": "late",
        "created_at": utc_now(), "protocol_version": REF.version, "protocol_sha256": REF.sha256}))


def test_campaign_on_another_device_than_its_session_is_refused(store_backend: Backend, session: str) -> None:
    b = store_backend
    other = b.store.add_device(_fp("cpu-z"), REF)
    b.refused("session_device_mismatch", lambda: b.chained("campaigns", {
        "id": "c-x", "task_id": "relu", "kind": "kernel", "tuner_spec": "random", "seed": 1, "budget": 2,
        "session_id": session, "device_sha256": other, "protocol_version": REF.version,
        "protocol_sha256": REF.sha256, "created_at": utc_now()}))


# ---------------------------------------------------------------------- the chain
def test_chain_order_is_enforced(store_backend: Backend, session: str) -> None:
    b = store_backend
    seq = max(int(r[0] or 0) for r in (b.raw.execute(f"SELECT max(chain_seq) FROM {t}").fetchone()
                                        for t in CHAINED_TABLES))
    row = {"id": "r-bad", "kind": "k", "subject": "s", "body_json": "{}", "protocol_version": REF.version,
           "protocol_sha256": REF.sha256, "created_at": utc_now(), "chain_seq": seq + 5, "row_hash": "a" * 64}
    cols, marks = ", ".join(row), ", ".join("?" * len(row))
    b.refused("chain_order", lambda: b.raw.execute(f"INSERT INTO reports ({cols}) VALUES ({marks})", list(row.values())))


def test_every_row_carries_a_link_of_one_store_wide_chain(store_backend: Backend, session: str) -> None:
    b = store_backend
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s))
    rows: list[tuple[int, str, dict[str, Any]]] = []
    for t in CHAINED_TABLES:
        for r in b.store.query(f"SELECT * FROM {t}"):
            rows.append((int(r["chain_seq"]), t, {k: r[k] for k in r.keys()}))
    rows.sort(key=lambda x: x[0])
    assert [s for s, _, _ in rows] == list(range(1, len(rows) + 1))
    prev = "0" * 64
    for _, t, row in rows:
        assert row["row_hash"] == row_hash(prev, t, row)
        prev = row["row_hash"]
    v = b.store.verify()
    assert v.ok and v.rows_checked == len(rows) and v.head_hash == prev


def test_the_same_rows_hash_alike_in_both_stores(tmp_path: Path, pg_db: str) -> None:
    """Both stores hash a row as SQLite stores it: the same content gives the same row hash, so a store's
    history can be moved between them and still verify."""
    from harness.store import open_store

    heads = []
    for store in (open_store(tmp_path / "a.sqlite"), open_store(pg_db)):
        try:
            rows = []
            for t in CHAINED_TABLES:
                for r in store.query(f"SELECT * FROM {t}"):
                    d = {k: r[k] for k in r.keys()}
                    d.pop("registered_at", None)
                    d.pop("created_at", None)
                    d.pop("row_hash", None)
                    rows.append((t, json.dumps(d, sort_keys=True)))
            heads.append(sorted(rows))
        finally:
            store.close()
    assert heads[0] == heads[1] and heads[0]


# ---------------------------------------------------------------------- typed reads (issue 18: only the store writes SQL)
def _claimed_campaigns(b: Backend, session: str) -> tuple[str, str, dict[str, Any]]:
    """Campaign A (two iterations: one with an accepted verdict, one without a verdict; finished) and
    campaign B (claiming registration reg-1, no iterations). Returns their ids and A's verdict detail."""
    from harness.tuning.campaigns import IterationUsage

    dev, c, s = _pair(b, session)
    detail = {"confinement": {"candidate": "bwrap", "baseline": "unconfined:test"}, "roofline_fraction": 0.5}
    b.chained("verdicts", _verdict_row(session, dev, c, s, id="v-1", detail_json=json.dumps(detail),
                                       ci_low=1.49, ci_high=1.51))    # narrow enough to be usable
    a = CampaignRecorder.open(b.store, PROTO, task_id="relu", kind="kernel", tuner_spec="random", seed=7, budget=2,
                              session_id=session, config={"sweep_campaign": "sw|relu|random|7"}, campaign_id="run-a")
    a.record(0, verdict_id="v-1", usage=IterationUsage(tokens_in=5, tokens_out=3, cost_usd=0.25, model_calls=1))
    a.record(1, verdict_id=None, built=False, no_verdict_reason="did not build", detail={"note": "x"})
    a.finish()
    spec = {"id": "reg-1", "arms": ["treatment", "control"]}
    b.chained("preregistrations", {"id": "reg-1", "spec_sha256": sha256_text(json.dumps(spec)),
                                   "spec_json": json.dumps(spec), "protocol_version": REF.version,
                                   "protocol_sha256": REF.sha256, "created_at": utc_now()})
    CampaignRecorder.open(b.store, PROTO, task_id="relu", kind="kernel", tuner_spec="openai:m", seed=1, budget=3,
                          session_id=session, preregistration_id="reg-1", arm="treatment", campaign_id="run-b")
    return "run-a", "run-b", detail


def test_campaign_tables_read_back_as_typed_rows(store_backend: Backend, session: str) -> None:
    from harness.store import CampaignRow, IterationCounts

    b = store_backend
    st = b.store
    a, bb, detail = _claimed_campaigns(b, session)
    row = st.campaign(a)
    assert isinstance(row, CampaignRow) and st.campaign("run-none") is None
    assert (row.id, row.task_id, row.kind, row.tuner_spec, row.seed, row.budget, row.session_id, row.device_sha256,
            row.preregistration_id, row.arm, row.config, row.protocol_sha256) == (
        a, "relu", "kernel", "random", 7, 2, session, _dev(b, session), None, None,
        {"sweep_campaign": "sw|relu|random|7"}, REF.sha256)
    claimed = st.campaign(bb)
    assert claimed is not None
    assert (claimed.preregistration_id, claimed.arm, claimed.config) == ("reg-1", "treatment", {})
    assert [r.id for r in st.campaigns()] == [a, bb]
    assert [r.id for r in st.campaigns("reg-1")] == [bb] and st.campaigns("reg-none") == []

    its = st.iterations(a)
    assert [i.idx for i in its] == [0, 1] and st.iterations(bb) == []
    first, second = its
    assert (first.verdict_id, first.usable, first.unusable_reason, first.verdict_ratio, first.verdict_ci_low,
            first.verdict_ci_high) == ("v-1", True, "", 1.5, 1.49, 1.51)
    usage = (first.tokens_in, first.tokens_out, first.cost_usd, first.model_calls, first.truncated_calls)
    assert usage == (5, 3, 0.25, 1, 0)
    assert first.candidate_sha256 == CAND and first.verdict_gates == PASS
    assert first.verdict_confinement == detail["confinement"] and first.detail == {}
    assert (second.verdict_id, second.usable, second.verdict_ratio) == (None, False, None)
    assert second.unusable_reason == "not_built: did not build"
    assert second.verdict_gates == [] and second.verdict_confinement == {} and second.detail == {"note": "x"}
    assert st.iteration_verdict_details(a) == [detail] and st.iteration_verdict_details(bb) == []

    counts = st.iteration_counts()
    assert counts == {a: IterationCounts(recorded=2, usable=1)} and isinstance(counts[a].usable, int)
    out = st.campaign_outcome(a)
    assert out is not None and out.campaign_id == a and st.campaign_outcome(bb) is None
    assert st.outcome_statuses() == {a: out.status}

    reg = st.preregistration("reg-1")
    assert reg is not None and reg.spec == {"id": "reg-1", "arms": ["treatment", "control"]}
    assert reg.protocol_sha256 == REF.sha256 and st.preregistration("reg-none") is None
    assert st.preregistrations() == [reg]


def test_a_campaign_is_one_model_written_and_read_back(store_backend: Backend, session: str) -> None:
    """One model of a campaigns row (issue 29 item 5): the recorder builds the store's CampaignRow, the
    store reads the same model back, and the campaigns layer hands it on unchanged (no second record)."""
    import harness.tuning.campaigns as campaigns
    from harness.store import CampaignRow
    from harness.tuning.campaigns import get_campaign, list_campaigns, summarize

    st = store_backend.store
    rec = CampaignRecorder.open(st, PROTO, task_id="relu", kind="kernel", tuner_spec="random", seed=3, budget=2,
                                session_id=session, config={"backend": "cpu", "knobs": [1, {"a": None}]},
                                campaign_id="run-one")
    bare = CampaignRecorder.open(st, PROTO, task_id="relu", kind="kernel", tuner_spec="random", seed=4, budget=1,
                                 session_id=session, campaign_id="run-bare")
    assert type(rec.info) is CampaignRow and type(bare.info) is CampaignRow
    assert st.campaign("run-one") == rec.info and st.campaign("run-bare") == bare.info
    assert (bare.info.preregistration_id, bare.info.arm, bare.info.config) == (None, None, {})
    assert (rec.info.protocol_version, rec.info.protocol_sha256) == (REF.version, REF.sha256)
    assert get_campaign(st, "run-one") == rec.info
    assert sorted(list_campaigns(st), key=lambda r: r.id) == [bare.info, rec.info]
    assert summarize(st, "run-one").campaign == rec.info
    assert CampaignRecorder.resume(st, PROTO, "run-one").info == rec.info
    assert not hasattr(campaigns, "CampaignInfo")
    assert list(CampaignRow.model_fields) == [      # one field per stored column, in the table's order
        "id", "task_id", "kind", "tuner_spec", "seed", "budget", "session_id", "device_sha256",
        "preregistration_id", "arm", "config", "protocol_version", "protocol_sha256", "created_at"]


def test_unrecorded_verdict_task_metadata_and_report_counts(store_backend: Backend, session: str) -> None:
    b = store_backend
    st = b.store
    _claimed_campaigns(b, session)
    assert st.unrecorded_verdict_id([session], "relu", CAND) is None        # v-1 is recorded
    dev, c, s = _pair(b, session)
    b.chained("verdicts", _verdict_row(session, dev, c, s, id="v-2"))
    assert st.unrecorded_verdict_id([session], "relu", CAND) == "v-2"
    assert st.unrecorded_verdict_id(["session-other", session], "relu", CAND) == "v-2"
    assert st.unrecorded_verdict_id([], "relu", CAND) is None
    assert st.unrecorded_verdict_id([session], "gelu", CAND) is None
    assert st.unrecorded_verdict_id([session], "relu", BASE) is None

    st.add_task("t-meta", "kernel", "0" * 64, {"path": "/x/task.py", "n": 3}, REF)
    assert st.task_metadata("t-meta") == {"path": "/x/task.py", "n": 3} and st.task_metadata("t-none") is None

    for kind, subject in (("attempt", "s1"), ("attempt", "s1"), ("attempt", "s2"), ("other", "s1")):
        st.add_report(kind, subject, {}, REF)
    assert st.report_counts("attempt") == {"s1": 2, "s2": 1} and st.report_counts("none") == {}
    assert st.verify().ok


def test_ceilings_summary_is_the_maximum_over_a_devices_rows(store_backend: Backend, session: str) -> None:
    from harness.records import DeviceCeilings
    from harness.store import CeilingsSummary

    st = store_backend.store
    dev = _dev(store_backend, session)
    assert st.ceilings_summary(dev) is None
    st.add_ceilings(session, DeviceCeilings(bytes_per_s=2.0e12, flops_per_s=5.0e13, method="a"), REF)
    later = st.open_session(_fp(), REF)                                  # same fingerprint, another session
    st.add_ceilings(later, DeviceCeilings(bytes_per_s=3.0e12, flops_per_s=4.0e13, method="b"), REF)
    other = st.open_session(_fp("cpu-b"), REF)                            # another device: not counted
    st.add_ceilings(other, DeviceCeilings(bytes_per_s=9.0e12, flops_per_s=9.0e13, method="c"), REF)
    summary = st.ceilings_summary(dev)
    assert summary == CeilingsSummary(bytes_per_s=3.0e12, flops_per_s=5.0e13, rows=2)
    assert isinstance(summary.rows, int) and isinstance(summary.bytes_per_s, float)
    assert st.ceilings_summary(_dev(store_backend, other)) == CeilingsSummary(bytes_per_s=9.0e12, flops_per_s=9.0e13,
                                                                               rows=1)
    assert st.ceilings_summary("0" * 64) is None


def test_the_two_stores_are_siblings_over_one_core() -> None:
    """Issue 29: the record-level methods are written once (``StoreBase``), each dialect only supplies its
    plumbing, and neither store is a kind of the other (as LangGraph's savers under BaseCheckpointSaver)."""
    from harness.store import ResultStore, SqliteStore
    from harness.store._base import StoreBase
    from harness.store._postgres import PostgresStore

    assert issubclass(SqliteStore, StoreBase) and issubclass(PostgresStore, StoreBase)
    assert not issubclass(PostgresStore, SqliteStore) and not issubclass(SqliteStore, PostgresStore)
    for name in ("add_verdict", "verdict", "campaign", "iterations", "register_protocol", "checkpoint"):
        assert name not in vars(SqliteStore) and name in vars(StoreBase), name
    for cls in (SqliteStore, PostgresStore):
        missing = [m for m in dir(ResultStore) if not m.startswith("_") and m != "path" and not hasattr(cls, m)]
        assert not missing, f"{cls.__name__} lacks {missing}"
