"""Red team for the results store (issue 14): each attack the issue lists, tried as an attacker would.

Every test names its attack. Each one passed, or went unnoticed, on the store before issue 14; now the
database refuses it, or the tampering is detected: ``verify()`` / ``atb store verify`` name the row,
the next open refuses a store whose triggers were dropped, and compare/report/remeasure/retest exit 2.

Attackers use a plain ``sqlite3`` connection (``connect``), exactly what a script or a leftover
process with the store's path would use. ``insert_chained`` stands for the strongest raw writer: one
that also computes the hash chain, so what refuses its rows is a rule, not a missing column.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from atb_agent.cli import main
from harness.records import GateResult, MeasurementSample, MeasurementSet, Verdict, sha256_text, utc_now
from harness.store import (
    SCHEMA_VERSION,
    IngestRejected,
    ResultStore,
    StoreSchemaVersionError,
    StoreTampered,
    connect,
    open_store,
    verify_path,
)
from harness.store._chain import CHAINED_TABLES, head, insert_chained, row_hash
from harness.store._sqlite_schema import unique_keys
from harness.tuning.campaigns import CampaignRecorder
from harness.verdict.gates import gate_names
from test_campaign_support import PROTO, REF, SEEDS, build_campaign, make_verdict, open_session

ALL_PASS = [{"name": n, "passed": True, "detail": ""} for n in gate_names()]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "atb.sqlite"


@pytest.fixture
def store(db: Path) -> Iterator[ResultStore]:
    s = open_store(db)
    yield s
    s.close()


@pytest.fixture
def raw(store: ResultStore) -> Iterator[sqlite3.Connection]:
    conn = connect(store.path)
    yield conn
    conn.close()


def _two_runs(store: ResultStore) -> tuple[str, str, str]:
    sid = open_session(store)
    a = build_campaign(store, sid, [1.1, None], tag="a")
    b = build_campaign(store, sid, [1.2, 1.3], tag="b")
    return sid, a, b


def _refused(rule: str, fn: Any) -> None:
    with pytest.raises(sqlite3.DatabaseError, match=f"atb_rule:{rule}"):
        fn()


def _verdict_row(store: ResultStore, vid: str) -> dict[str, Any]:
    r = store.query("SELECT * FROM verdicts WHERE id = ?", (vid,))[0]
    return {k: r[k] for k in r.keys()}


def _cols(row: dict[str, Any]) -> tuple[str, str]:
    return ", ".join(row), ", ".join("?" * len(row))


# ---------------------------------------------------------------- INSERT OR REPLACE past append-only
@pytest.mark.parametrize("verb", ["INSERT OR REPLACE INTO", "REPLACE INTO"])
def test_attack_replace_turns_a_rejected_verdict_accepted_is_refused(store: ResultStore, raw: sqlite3.Connection,
                                                                     verb: str) -> None:
    """Issue 14: REPLACE deleted the old row without firing delete triggers; rejected became accepted."""
    sid = open_session(store)
    vid = make_verdict(store, sid, "slow", 0.936, status="rejected", correct=False, reason="gate failed")
    row = _verdict_row(store, vid)
    row.update(status="accepted", correct=1, ratio=5.0, ci_low=4.9, ci_high=5.1, reason="")
    cols, marks = _cols(row)
    _refused("duplicate_key", lambda: raw.execute(f"{verb} verdicts ({cols}) VALUES ({marks})", list(row.values())))
    assert store.verdict(vid).status == "rejected" and store.verdict(vid).ratio == pytest.approx(0.936)
    assert store.verify().ok


def test_attack_upsert_rewrites_a_ratio_is_refused(store: ResultStore, raw: sqlite3.Connection) -> None:
    sid = open_session(store)
    vid = make_verdict(store, sid, "x", 1.2)
    row = _verdict_row(store, vid)
    cols, marks = _cols(row)
    for tail in ("ON CONFLICT(id) DO UPDATE SET ratio = 5.0", "ON CONFLICT DO NOTHING"):
        _refused("duplicate_key", lambda tail=tail: raw.execute(
            f"INSERT INTO verdicts ({cols}) VALUES ({marks}) {tail}", list(row.values())))
    assert store.verdict(vid).ratio == 1.2


def test_attack_replace_makes_an_iteration_usable_is_refused(store: ResultStore, raw: sqlite3.Connection) -> None:
    """Issue 14: an iteration became usable by REPLACE; `atb compare` then showed it."""
    sid, a, _ = _two_runs(store)
    r = store.query("SELECT * FROM iterations WHERE campaign_id = ? AND idx = 1", (a,))[0]
    row = {k: r[k] for k in r.keys()}
    good = make_verdict(store, sid, "forged best", 5.0)
    row.update(verdict_id=good, usable=1, unusable_reason="")
    del row["id"]   # a fresh rowid, the conflict is on (campaign_id, idx)
    cols, marks = _cols(row)
    _refused("duplicate_key", lambda: raw.execute(f"REPLACE INTO iterations ({cols}) VALUES ({marks})",
                                                  list(row.values())))
    assert not store.query("SELECT usable FROM iterations WHERE campaign_id = ? AND idx = 1", (a,))[0][0]


def test_replace_is_refused_on_every_key_of_every_table(store: ResultStore, raw: sqlite3.Connection) -> None:
    """Every table, every PRIMARY KEY / UNIQUE key and the rowid: REPLACE of a stored row is refused."""
    sid, a, _ = _two_runs(store)
    store.add_report("anchor", "x", {"k": 1}, REF)
    seen = 0
    for table in CHAINED_TABLES:
        rows = store.query(f"SELECT rowid AS rid, * FROM {table} LIMIT 1")
        if not rows:
            continue
        r = {k: rows[0][k] for k in rows[0].keys()}
        rid = r.pop("rid")
        for key in [("rowid",), *unique_keys()[table]]:
            row = dict(r)
            if key == ("rowid",):
                row["rowid"] = rid
            cols, marks = _cols(row)
            _refused("duplicate_key", lambda: raw.execute(f"INSERT OR REPLACE INTO {table} ({cols}) VALUES ({marks})",
                                                          list(row.values())))
            seen += 1
    assert seen >= len(CHAINED_TABLES) and store.verify().ok


# ---------------------------------------------------------------- the candidate that rewrote its verdict
def test_attack_leftover_process_rewrites_a_stored_verdict_is_detected(store: ResultStore, db: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 14: after `atb eval` returned, a detached process replaced 0.936x by 3.000x in the store.

    UPDATE and REPLACE are refused; an attacker who drops the trigger, edits, and restores the trigger
    exactly is caught by the hash chain: compare and report exit 2 naming the verdict."""
    sid, a, b = _two_runs(store)
    vid = store.query("SELECT verdict_id FROM iterations WHERE campaign_id = ? AND idx = 0", (b,))[0][0]
    store.close()
    conn = connect(db)
    trig = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'verdicts_no_update'").fetchone()[0]
    _refused("append_only", lambda: conn.execute("UPDATE verdicts SET ratio = 3.0 WHERE id = ?", (vid,)))
    conn.execute("DROP TRIGGER verdicts_no_update")
    conn.execute("UPDATE verdicts SET ratio = 3.0, ci_low = 2.9, ci_high = 3.1 WHERE id = ?", (vid,))
    conn.execute(trig)
    conn.close()
    v = verify_path(db)
    assert not v.ok
    first = v.problems[0]
    assert (first.kind, first.table, first.key) == ("row_hash", "verdicts", vid)
    assert main(["compare", a, b, "--db", str(db), "--json"]) == 2
    err = json.loads(capsys.readouterr().out)
    assert "StoreTampered" in err["error"] and f"verdicts {vid}" in err["error"] and "row_hash" in err["error"]
    assert main(["report", a, b, "--out", str(db.parent / "r"), "--db", str(db)]) == 2
    assert f"verdicts {vid}" in capsys.readouterr().err


# ---------------------------------------------------------------- tampering leaves a trace
def test_attack_drop_trigger_then_update_is_not_silently_repaired(store: ResultStore, db: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 14: DROP TRIGGER, UPDATE; the next `atb` start recreated the triggers and used the forged value.

    Now the next open refuses, naming the trigger, and does not recreate it."""
    sid, a, b = _two_runs(store)
    store.close()
    conn = connect(db)
    conn.execute("DROP TRIGGER verdicts_no_update")
    conn.execute("UPDATE verdicts SET ratio = 5.0")
    conn.close()
    with pytest.raises(StoreTampered, match="trigger verdicts_no_update is missing"):
        open_store(db)
    conn = connect(db)
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'verdicts_no_update'").fetchall()
    conn.close()
    v = verify_path(db)
    assert v.problems[0].kind == "schema_object" and "verdicts_no_update" in v.problems[0].detail
    assert any(p.kind == "row_hash" and p.table == "verdicts" for p in v.problems)
    for argv in (["compare", a, b], ["remeasure", a], ["retest", a, "--backend", "cpu"]):
        assert main([*argv, "--db", str(db), "--json"]) == 2, argv
        assert "verdicts_no_update" in json.loads(capsys.readouterr().out)["error"]


def test_an_edited_newest_row_is_refused_at_the_next_open(store: ResultStore, db: Path) -> None:
    """The writer checks the chain's head on every open: it does not append onto a forged row."""
    rid = store.add_report("anchor", "subject", {"speedup": 1.0}, REF)
    store.close()
    conn = connect(db)
    conn.execute("DROP TRIGGER reports_no_update")
    conn.execute("UPDATE reports SET body_json = '{\"speedup\": 9.0}' WHERE id = ?", (rid,))
    conn.execute(SqliteStore_trigger("reports_no_update"))
    conn.close()
    with pytest.raises(StoreTampered, match="reports .*row_hash does not match"):
        open_store(db)


def test_an_altered_trigger_is_tampering(store: ResultStore, db: Path) -> None:
    store.close()
    conn = connect(db)
    conn.execute("DROP TRIGGER verdict_rules")
    conn.execute("CREATE TRIGGER verdict_rules BEFORE INSERT ON verdicts BEGIN SELECT 1; END")
    conn.close()
    with pytest.raises(StoreTampered, match="trigger verdict_rules differs"):
        open_store(db)


def test_a_row_slipped_in_without_the_rules_is_detected_even_with_a_recomputed_chain(store: ResultStore,
                                                                                    db: Path) -> None:
    """The strongest raw writer: drops the rules, inserts a forged verdict with a correct hash chain, and
    restores the rules. Verification replays every row through the rules and names it."""
    sid = open_session(store)
    cand = store.add_candidate("forged", "kernel", REF)
    store.close()
    conn = connect(db)
    rule_sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'verdict_rules'").fetchone()[0]
    conn.execute("DROP TRIGGER verdict_rules")
    insert_chained(conn, "verdicts", {
        "id": "v-forged", "session_id": sid, "device_sha256": store_device(conn, sid), "task_id": "relu",
        "kind": "kernel", "candidate_sha256": cand, "baseline_sha256": sha256_text("b"), "baseline_label": "eager",
        "status": "accepted", "correct": 1, "ratio": 3.0, "ci_low": 2.9, "ci_high": 3.1,
        "gates_json": json.dumps([{"name": "identity", "passed": True}]), "protocol_version": REF.version,
        "protocol_sha256": REF.sha256, "created_at": utc_now()})
    conn.execute(rule_sql)
    conn.close()
    v = verify_path(db)
    assert not v.ok and [(p.kind, p.table, p.key) for p in v.problems] == [("rule", "verdicts", "v-forged")]
    assert "ratio_without_measurements" in v.problems[0].detail


def store_device(conn: sqlite3.Connection, sid: str) -> str:
    return str(conn.execute("SELECT device_sha256 FROM sessions WHERE id = ?", (sid,)).fetchone()[0])


def test_a_deleted_row_breaks_the_chain(store: ResultStore, db: Path) -> None:
    _two_runs(store)
    seq = store.query("SELECT chain_seq FROM candidates ORDER BY chain_seq LIMIT 1")
    gone = int(seq[0][0])
    store.close()
    conn = connect(db)
    conn.execute("DROP TRIGGER candidates_no_delete")
    conn.execute("DELETE FROM candidates WHERE chain_seq = ?", (gone,))
    conn.execute(SqliteStore_trigger("candidates_no_delete"))
    conn.close()
    v = verify_path(db)
    chain = [p for p in v.problems if p.kind == "chain"]
    assert chain and chain[0].chain_seq == gone + 1 and "deleted" in chain[0].detail


def SqliteStore_trigger(name: str) -> str:  # noqa: N802 - the shipped definition of a trigger
    from harness.store._verify import expected_objects

    sql = expected_objects()[("trigger", name)]
    assert sql is not None
    return sql


def test_attack_future_schema_version_is_refused_never_rewritten(store: ResultStore, db: Path) -> None:
    """Issue 14: a DB with a future user_version was rewritten to 1."""
    store.close()
    conn = connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 7}")
    conn.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with pytest.raises(StoreSchemaVersionError, match="newer"):
        open_store(db)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    conn = connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 7
    conn.close()
    assert verify_path(db).problems[0].kind == "schema_version"


def test_an_old_schema_version_store_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    """Migration story: a version-1 store (no hash chain) cannot be verified; it is refused, untouched."""
    old = tmp_path / "old.sqlite"
    conn = sqlite3.connect(old)
    conn.execute("CREATE TABLE verdicts (id TEXT PRIMARY KEY)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with pytest.raises(StoreSchemaVersionError, match="re-create"):
        open_store(old)


# ---------------------------------------------------------------- ingest gaps, by raw SQL
def test_attack_second_digest_for_a_held_protocol_version_is_refused(store: ResultStore,
                                                                     raw: sqlite3.Connection) -> None:
    """Issue 14: a second digest named 1.0.0 with 1 paired seed could be inserted, or REPLACE swap the real one."""
    row = {"sha256": "f" * 64, "version": REF.version, "paired_seeds_required": 1, "registered_at": utc_now()}
    _refused("protocol_version_taken", lambda: insert_chained(raw, "protocols", row))
    real = store.query("SELECT * FROM protocols WHERE sha256 = ?", (REF.sha256,))[0]
    swap = {k: real[k] for k in real.keys()} | {"paired_seeds_required": 1}
    cols, marks = _cols(swap)
    _refused("duplicate_key", lambda: raw.execute(f"REPLACE INTO protocols ({cols}) VALUES ({marks})",
                                                  list(swap.values())))
    assert store.query("SELECT paired_seeds_required FROM protocols")[0][0] == PROTO.seeds.paired_seeds


def test_a_protocol_row_with_a_released_version_and_another_digest_fails_verify(tmp_path: Path) -> None:
    """A store built from the shipped schema by someone else, whose 1.0.0 row carries another digest
    (rules and chain all in order): verify names it from the constant in protocol/_released.py."""
    from harness.store._verify import schema_statements

    forged = tmp_path / "forged.sqlite"
    conn = connect(forged)
    for stmt in schema_statements():
        conn.execute(stmt)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    insert_chained(conn, "protocols", {"sha256": "e" * 64, "version": REF.version, "paired_seeds_required": 1,
                                       "registered_at": utc_now()})
    conn.close()
    v = verify_path(forged)
    assert [(p.kind, p.table, p.key) for p in v.problems] == [("released_protocol", "protocols", "e" * 64)]


def _sets(store: ResultStore, sid: str, cand: str, base: str, cand_ns: list[float], base_ns: list[float],
          ) -> tuple[MeasurementSet, MeasurementSet]:
    dev = store.session(sid)["device_sha256"]
    mk = lambda arm, subj, vals: MeasurementSet(  # noqa: E731
        session_id=sid, device_sha256=dev, protocol=REF, task_id="relu", subject_sha256=subj, arm=arm,
        samples=[MeasurementSample(seed=s, values=vals) for s in SEEDS])
    return mk("candidate", cand, cand_ns), mk("baseline", base, base_ns)


def _verdict(store: ResultStore, sid: str, cand: str, base: str, cs: MeasurementSet | None,
             bs: MeasurementSet | None, **over: Any) -> Verdict:
    fields: dict[str, Any] = dict(
        session_id=sid, device_sha256=store.session(sid)["device_sha256"], protocol=REF, task_id="relu",
        candidate_sha256=cand, baseline_sha256=base, baseline_label="eager-reference", status="accepted",
        correct=True, ratio=1.0, ci_low=0.99, ci_high=1.01, candidate_set_id=cs.id if cs else None,
        baseline_set_id=bs.id if bs else None, gates=[GateResult(name=n, passed=True) for n in gate_names()])
    fields.update(over)
    return Verdict(**fields)


@pytest.mark.parametrize("gates, rule", [
    ([{"name": "anomaly", "passed": True}], "incomplete_gate_set"),
    (ALL_PASS[:-1], "incomplete_gate_set"),
    (ALL_PASS + [{"name": "made_up_gate", "passed": True}], "unknown_gate"),
    ([{"name": "made_up_gate", "passed": True}], "unknown_gate"),
    (ALL_PASS + ALL_PASS[:1], "duplicate_gate"),
])
def test_attack_verdict_with_one_gate_or_a_made_up_gate_is_refused(store: ResultStore, raw: sqlite3.Connection,
                                                                   gates: list[dict[str, Any]], rule: str) -> None:
    """Issue 14: a verdict with one gate, or a made-up gate name, was stored."""
    sid = open_session(store)
    cand, base = store.add_candidate("g", "kernel", REF), sha256_text("b")
    cs, bs = _sets(store, sid, cand, base, [1000.0], [1500.0])
    with store.transaction() as c:
        store._insert_measurement_set(c, cs)
        store._insert_measurement_set(c, bs)
    v = _verdict(store, sid, cand, base, cs, bs, ratio=1.5, ci_low=1.49, ci_high=1.51)
    row = {"id": v.id, "session_id": sid, "device_sha256": v.device_sha256, "task_id": "relu", "kind": "kernel",
           "candidate_sha256": cand, "baseline_sha256": base, "baseline_label": "eager", "status": "accepted",
           "correct": 1, "ratio": 1.5, "ci_low": 1.49, "ci_high": 1.51, "candidate_set_id": cs.id,
           "baseline_set_id": bs.id, "gates_json": json.dumps(gates), "protocol_version": REF.version,
           "protocol_sha256": REF.sha256, "created_at": utc_now()}
    _refused(rule, lambda: insert_chained(raw, "verdicts", row))
    insert_chained(raw, "verdicts", row | {"gates_json": json.dumps(ALL_PASS)})   # the honest one enters
    assert store.verify().ok


def test_attack_ratio_that_contradicts_its_samples_is_refused(store: ResultStore) -> None:
    """Issue 14: ratio 3.0 stored while the samples said the candidate was 10^6 times slower."""
    sid = open_session(store)
    cand, base = store.add_candidate("slow", "kernel", REF), sha256_text("b")
    cs, bs = _sets(store, sid, cand, base, [1e9, 1.1e9], [1000.0, 1010.0])
    with pytest.raises(IngestRejected) as e:
        store.add_verdict(_verdict(store, sid, cand, base, cs, bs, ratio=3.0, ci_low=2.9, ci_high=3.1), cs, bs)
    assert e.value.rule == "ratio_contradicts_samples"
    assert not store.query("SELECT 1 FROM measurement_sets")
    # the ratio the samples do give is stored (per seed 1000/1.1e9 .. 1010/1e9)
    honest = 1005.0 / 1.05e9
    vid = store.add_verdict(_verdict(store, sid, cand, base, cs, bs, ratio=honest, ci_low=honest * 0.99,
                                     ci_high=honest * 1.01, status="rejected", correct=False, reason="slow"), cs, bs)
    assert store.verdict(vid).ratio == pytest.approx(honest)


def test_throughput_ratio_bounds_use_candidate_over_baseline(store: ResultStore) -> None:
    """Engine sets (requests/s, higher is better): ratio = candidate/baseline must lie in the samples' range."""
    sid = open_session(store)
    cand, base = store.add_candidate("{}", "engine", REF), store.add_candidate('{"x": 1}', "engine", REF)
    dev = store.session(sid)["device_sha256"]
    mk = lambda arm, subj, v: MeasurementSet(session_id=sid, device_sha256=dev, protocol=REF, task_id="eng",  # noqa: E731
                                             subject_sha256=subj, arm=arm, kind="engine", unit="requests_per_s",
                                             samples=[MeasurementSample(seed=s, values=v) for s in SEEDS])
    cs, bs = mk("candidate", cand, [20.0, 21.0]), mk("baseline", base, [10.0, 10.5])
    engine_gates = [GateResult(name=n, passed=True) for n in
                    ("engine_launch", "engine_alive", "failed_requests", "baseline_requests", "output_match",
                     "output_length", "anomaly")]
    over = dict(kind="engine", task_id="eng", gates=engine_gates)
    with pytest.raises(IngestRejected) as e:
        store.add_verdict(_verdict(store, sid, cand, base, cs, bs, ratio=0.5, ci_low=0.49, ci_high=0.51, **over), cs, bs)
    assert e.value.rule == "ratio_contradicts_samples"
    store.add_verdict(_verdict(store, sid, cand, base, cs, bs, ratio=2.0, ci_low=1.95, ci_high=2.05, **over), cs, bs)


@pytest.mark.parametrize("samples", ['[-5, "abc", null]', "[-5]", '["3"]', "[null]", "[0]", "[1e999]", "[[1]]",
                                     "[true]"])
def test_attack_malformed_samples_are_refused(store: ResultStore, raw: sqlite3.Connection, samples: str) -> None:
    """Issue 14: samples `[-5, "abc", null]` were stored."""
    sid = open_session(store)
    cs, _ = _sets(store, sid, sha256_text("c"), sha256_text("b"), [1.0], [1.0])
    with store.transaction() as c:
        store._insert(c, "measurement_sets", {
            "id": cs.id, "session_id": sid, "device_sha256": cs.device_sha256, "task_id": "relu",
            "subject_sha256": cs.subject_sha256, "arm": "candidate", "kind": "kernel", "unit": "ns",
            "created_at": utc_now(), "protocol_version": REF.version, "protocol_sha256": REF.sha256})
    _refused("malformed_samples", lambda: insert_chained(raw, "measurements", {
        "set_id": cs.id, "seed": 1, "samples_json": samples, "protocol_version": REF.version,
        "protocol_sha256": REF.sha256}))


def test_attack_measurement_set_reused_under_another_candidate_is_refused(store: ResultStore,
                                                                         raw: sqlite3.Connection) -> None:
    """Issue 14: one measurement set could be reused under another candidate's hash."""
    sid = open_session(store)
    fast = store.add_candidate("fast", "kernel", REF)
    other = store.add_candidate("other", "kernel", REF)
    base = sha256_text("b")
    cs, bs = _sets(store, sid, fast, base, [1000.0], [2000.0])
    store.add_verdict(_verdict(store, sid, fast, base, cs, bs, ratio=2.0, ci_low=1.9, ci_high=2.1), cs, bs)
    reuse = _verdict(store, sid, other, base, cs, bs, ratio=2.0, ci_low=1.9, ci_high=2.1)
    with pytest.raises(IngestRejected) as e:
        store.add_verdict(reuse)
    assert e.value.rule == "measurement_set_subject_mismatch"
    # the same candidate cannot claim the same sets twice either
    again = _verdict(store, sid, fast, base, cs, bs, ratio=2.0, ci_low=1.9, ci_high=2.1)
    with pytest.raises(IngestRejected) as e:
        store.add_verdict(again)
    assert e.value.rule == "measurement_set_reused"


def _quarantined(store: ResultStore, sid: str, text: str) -> str:
    cand, base = store.add_candidate(text, "kernel", REF), sha256_text("b")
    cs, bs = _sets(store, sid, cand, base, [10.0], [400.0])
    gates = [GateResult(name=n, passed=n != "anomaly") for n in gate_names()]
    return store.add_verdict(_verdict(store, sid, cand, base, cs, bs, status="quarantined", reason="anomaly",
                                      ratio=40.0, ci_low=39.0, ci_high=41.0, gates=gates), cs, bs)


def test_attack_quarantine_cleared_without_an_extended_verdict_is_refused(store: ResultStore) -> None:
    """Issue 14: a quarantine could be cleared with no extended verdict."""
    sid = open_session(store)
    q = _quarantined(store, sid, "suspicious")
    with pytest.raises(IngestRejected) as e:
        store.add_quarantine_review(q, True, "trust me", None, REF)
    assert e.value.rule == "cleared_without_extended_pass"
    other = _quarantined(store, sid, "another candidate")
    for ext in (q, other):   # itself, or another candidate's verdict
        with pytest.raises(IngestRejected) as e:
            store.add_quarantine_review(q, True, "wrong extended verdict", ext, REF)
        assert e.value.rule == "cleared_without_extended_pass"
    with pytest.raises(IngestRejected):   # a verdict that does not exist (foreign key)
        store.add_quarantine_review(q, True, "no such verdict", "no-such-verdict", REF)
    assert store.effective_status(q) == "quarantined"
    # a review that does not clear needs no extended verdict
    store.add_quarantine_review(q, False, "extended pass failed", None, REF)


def test_quarantine_cleared_with_a_passing_extended_verdict_of_the_same_candidate(store: ResultStore) -> None:
    sid = open_session(store)
    q = _quarantined(store, sid, "suspicious")
    cand = store.verdict(q).candidate_sha256
    base = sha256_text("b")
    bad_cs, bad_bs = _sets(store, sid, cand, base, [10.0], [400.0])
    gates = [GateResult(name=n, passed=n not in ("anomaly", "physical_limit")) for n in gate_names()]
    bad = store.add_verdict(_verdict(store, sid, cand, base, bad_cs, bad_bs, status="rejected", correct=True,
                                     reason="physical", ratio=40.0, ci_low=39.0, ci_high=41.0, gates=gates),
                            bad_cs, bad_bs)
    with pytest.raises(IngestRejected) as e:
        store.add_quarantine_review(q, True, "extended pass", bad, REF)
    assert e.value.rule == "cleared_without_extended_pass"
    ext = _quarantined(store, sid, "suspicious")       # the extended pass: quarantined again, all else passed
    store.add_quarantine_review(q, True, "extended pass cleared it", ext, REF)
    assert store.effective_status(q) == "accepted" and store.verify().ok


def test_attack_completed_outcome_without_its_iterations_is_refused(store: ResultStore,
                                                                     raw: sqlite3.Connection) -> None:
    """Issue 14: a campaign outcome claimed "completed" with 0 of 50 iterations."""
    sid = open_session(store)
    rec = CampaignRecorder.open(store, PROTO, task_id="relu", kind="kernel", tuner_spec="random", seed=1,
                                budget=50, session_id=sid)
    _refused("completed_short_of_budget", lambda: insert_chained(raw, "campaign_outcomes", {
        "campaign_id": rec.campaign_id, "status": "completed", "created_at": utc_now(),
        "protocol_version": REF.version, "protocol_sha256": REF.sha256}))
    # the recorder itself calls a short run what it is
    out = rec.finish()
    assert out.status == "aborted" and "0 of its 50" in out.reason
    _refused("iteration_after_outcome", lambda: insert_chained(raw, "iterations", {
        "campaign_id": rec.campaign_id, "idx": 0, "usable": 0, "unusable_reason": "late",
        "created_at": utc_now(), "protocol_version": REF.version, "protocol_sha256": REF.sha256}))


# ---------------------------------------------------------------- the chain itself and `atb store verify`
def test_every_row_carries_a_link_of_one_store_wide_chain(store: ResultStore) -> None:
    _two_runs(store)
    seqs: list[tuple[int, str, dict[str, Any]]] = []
    for t in CHAINED_TABLES:
        for r in store.query(f"SELECT * FROM {t}"):
            seqs.append((r["chain_seq"], t, {k: r[k] for k in r.keys()}))
    seqs.sort(key=lambda x: x[0])
    assert [s for s, _, _ in seqs] == list(range(1, len(seqs) + 1))
    prev = "0" * 64
    for _, t, row in seqs:
        assert row["row_hash"] == row_hash(prev, t, row)
        prev = row["row_hash"]
    assert head(store.conn)[:2] == (len(seqs), prev)
    v = store.verify()
    assert v.ok and v.rows_checked == len(seqs) and v.head_hash == prev


def test_store_verify_cli(store: ResultStore, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _two_runs(store)
    store.close()
    assert main(["store", "verify", "--db", str(db), "--json"]) == 0
    ok = json.loads(capsys.readouterr().out)
    assert ok["ok"] is True and ok["schema_version"] == SCHEMA_VERSION and ok["rows_checked"] > 0
    conn = connect(db)
    conn.execute("DROP TRIGGER reports_no_update")
    conn.close()
    assert main(["store", "verify", "--db", str(db), "--json"]) == 2
    bad = json.loads(capsys.readouterr().out)
    assert bad["ok"] is False and "reports_no_update" in bad["first_problem"]
    assert main(["store", "verify", "--db", str(db)]) == 2
    assert "reports_no_update" in capsys.readouterr().err
    assert main(["store", "verify", "--db", str(db.parent / "none.sqlite")]) == 2
    assert not (db.parent / "none.sqlite").exists()


def test_a_verified_store_still_serves_compare(store: ResultStore, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, a, b = _two_runs(store)
    store.close()
    assert main(["compare", a, b, "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["a"]["usable_iterations"] == 1
