"""The PostgreSQL store against a real server: concurrent writers, tamper evidence, the URL factory.

The rule suite shared with SQLite is tests/test_store_conformance.py; this file holds what only a
server store has: many processes writing at once (no iteration lost or stored twice, one unbroken
chain), a first open raced by several processes (the schema is created once), and the ways its owner
can switch rules off (disabled triggers, an altered rule function), which the next open refuses.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest

from harness.records import DeviceFingerprint, sha256_text, utc_now
from harness.store import IngestRejected, SqliteStore, StoreError, StoreTampered
from harness.store._open import open_store, sqlite_path, store_kind
from protocol import load_protocol

REF = load_protocol().ref()
WORKERS = 4
ITERATIONS = 6


def _fp() -> DeviceFingerprint:
    return DeviceFingerprint(backend="cpu", cpu_model="pg-test", cpu_count=2, torch_version="2.13.0")


def _writer(url: str, worker: int, shared_campaign: str, barrier: Any) -> dict[str, int]:
    """One worker process: its own campaign, plus a campaign every worker races to fill."""
    from harness.tuning.campaigns import CampaignRecorder, IterationConflict
    from protocol import load_protocol

    proto = load_protocol()
    barrier.wait()                                   # every worker opens the store at the same moment
    store = open_store(url)
    stored = raced = 0
    try:
        sid = store.open_session(_fp(), proto.ref(), note=f"worker {worker}")   # one device row for all
        own = CampaignRecorder.open(store, proto, task_id="relu", kind="kernel", tuner_spec="random", seed=worker,
                                    budget=ITERATIONS, session_id=sid, campaign_id=f"run-own-{worker}")
        try:
            shared = CampaignRecorder.open(store, proto, task_id="relu", kind="kernel", tuner_spec="random", seed=0,
                                           budget=ITERATIONS, session_id=sid, campaign_id=shared_campaign)
        except IngestRejected as exc:               # another worker created it between check and insert
            assert exc.rule in ("duplicate_key", "duplicate"), exc
            shared = CampaignRecorder.resume(store, proto, shared_campaign)
        for i in range(ITERATIONS):
            own.record(i, verdict_id=None, candidate_sha256=sha256_text(f"own {worker} {i}"), built=False,
                       no_verdict_reason="did not build")
            stored += 1
            store.add_report("pg_concurrency", f"worker {worker}", {"i": i}, proto.ref())
            try:
                shared.record(i, verdict_id=None, candidate_sha256=sha256_text(f"shared {i}"), built=False,
                              no_verdict_reason="did not build")
            except (IngestRejected, IterationConflict):
                raced += 1                           # another worker stored it first: never twice
        return {"stored": stored, "raced": raced}
    finally:
        store.close()


def test_concurrent_writers_lose_and_duplicate_nothing(pg_db: str) -> None:
    from harness.store._chain import CHAINED_TABLES

    ctx = mp.get_context("spawn")
    barrier = ctx.Manager().Barrier(WORKERS)
    with ctx.Pool(WORKERS) as pool:
        results = pool.starmap(_writer, [(pg_db, w, "run-shared", barrier) for w in range(WORKERS)])
    assert sum(r["stored"] for r in results) == WORKERS * ITERATIONS
    store = open_store(pg_db)
    try:
        for w in range(WORKERS):
            idx = [r[0] for r in store.query("SELECT idx FROM iterations WHERE campaign_id = ? ORDER BY idx",
                                             (f"run-own-{w}",))]
            assert idx == list(range(ITERATIONS)), f"worker {w}'s iterations: {idx}"
        shared = [r[0] for r in store.query("SELECT idx FROM iterations WHERE campaign_id = 'run-shared' ORDER BY idx")]
        assert shared == list(range(ITERATIONS)), f"the raced campaign holds {shared}"
        assert store.query("SELECT count(*) FROM reports WHERE kind = 'pg_concurrency'")[0][0] == WORKERS * ITERATIONS
        assert store.query("SELECT count(*) FROM devices")[0][0] == 1
        assert store.query("SELECT count(*) FROM protocols")[0][0] == 1
        seqs = sorted(int(r[0]) for t in CHAINED_TABLES for r in store.query(f"SELECT chain_seq FROM {t}"))
        assert seqs == list(range(1, len(seqs) + 1)), "the chain has a gap or a repeated position"
        v = store.verify()
        assert v.ok, v.first_problem
    finally:
        store.close()


def _opener(url: str, barrier: Any) -> int:

    barrier.wait()
    s = open_store(url)
    n = int(s.query("SELECT count(*) FROM protocols")[0][0])
    s.close()
    return n


def test_a_first_open_raced_by_several_processes_creates_the_schema_once(pg_db: str) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Manager().Barrier(3)
    with ctx.Pool(3) as pool:
        assert pool.starmap(_opener, [(pg_db, barrier)] * 3) == [1, 1, 1]


def _raw(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def test_disabled_triggers_are_refused_at_open_and_an_edited_row_is_found_by_verify(pg_db: str) -> None:

    store = open_store(pg_db)
    sid = store.open_session(_fp(), REF)
    store.add_report("note", "x", {"v": 1}, REF)
    store.close()
    with _raw(pg_db) as conn:
        conn.execute("ALTER TABLE sessions DISABLE TRIGGER USER")
        conn.execute("UPDATE sessions SET note = 'forged' WHERE id = %s", (sid,))
    with pytest.raises(StoreTampered, match="disabled"):
        open_store(pg_db)
    with _raw(pg_db) as conn:
        conn.execute("ALTER TABLE sessions ENABLE TRIGGER USER")
    store = open_store(pg_db)                   # the head row is intact, so the open passes...
    try:
        v = store.verify()                          # ...and verify names the edited row
        assert not v.ok and any(p.kind == "row_hash" and p.table == "sessions" for p in v.problems), v.problems
    finally:
        store.close()


def test_an_altered_rule_function_is_tampering(pg_db: str) -> None:

    open_store(pg_db).close()
    with _raw(pg_db) as conn:
        conn.execute("CREATE OR REPLACE FUNCTION atb_rules_iterations() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN RETURN NEW; END $$")
    with pytest.raises(StoreTampered, match="atb_rules_iterations"):
        open_store(pg_db)


def test_a_dropped_rule_trigger_is_tampering(pg_db: str) -> None:

    open_store(pg_db).close()
    with _raw(pg_db) as conn:
        conn.execute("DROP TRIGGER atb4_rules ON verdicts")
    with pytest.raises(StoreTampered, match="atb4_rules"):
        open_store(pg_db)


def test_a_deleted_row_breaks_the_chain(pg_db: str) -> None:

    store = open_store(pg_db)
    for i in range(4):
        store.add_report("note", str(i), {"i": i}, REF)
    store.close()
    with _raw(pg_db) as conn:
        conn.execute("ALTER TABLE reports DISABLE TRIGGER USER")
        conn.execute("DELETE FROM reports WHERE subject = '1'")      # not next to the head: open's cheap check passes
        conn.execute("ALTER TABLE reports ENABLE TRIGGER USER")
    store = open_store(pg_db)
    try:
        v = store.verify()
        assert not v.ok and any(p.kind == "chain" for p in v.problems), v.problems
    finally:
        store.close()


def test_open_store_picks_the_store_by_url(tmp_path: Path, pg_db: str) -> None:
    from harness.store._postgres import PostgresStore

    assert store_kind(tmp_path / "a.sqlite") == "sqlite"
    assert store_kind("sqlite:///x.db") == "sqlite" and sqlite_path("sqlite:///x.db") == Path("x.db")
    assert store_kind(pg_db) == "postgresql"
    with pytest.raises(StoreError, match="unknown store scheme"):
        store_kind("mysql://u@h/db")
    s = open_store(str(tmp_path / "a.sqlite"))
    assert isinstance(s, SqliteStore) and not isinstance(s, PostgresStore)
    s.close()
    p = open_store(pg_db.replace("postgresql://", "postgresql://", 1))
    assert isinstance(p, PostgresStore) and "@" in str(p.path)
    p.close()
    with pytest.raises(StoreError, match="cannot connect"):
        open_store("postgresql://postgres@127.0.0.1:1/nothing")


def test_a_password_never_reaches_messages(pg_db: str) -> None:
    from harness.store._postgres import redact

    assert redact("postgresql://atb:s3cret@db.example:5432/atb") == "postgresql://atb@db.example:5432/atb"
    assert "s3cret" not in redact("postgresql://atb:s3cret@h/db")


def test_rows_read_back_like_sqlite_rows(pg_db: str) -> None:
    """Callers index rows by position and by name, and get ints (not Decimals) from integer aggregates."""

    store = open_store(pg_db)
    try:
        store.add_report("note", "s", {"a": 1}, REF)
        r = store.query("SELECT kind, subject, sum(chain_seq) AS total FROM reports GROUP BY kind, subject")[0]
        assert r[0] == r["kind"] == "note" and r["subject"] == "s"
        assert isinstance(r["total"], int) and dict(r) == {"kind": "note", "subject": "s", "total": r["total"]}
        assert store.query("SELECT 1 WHERE 'a%' LIKE ?", ("a%",))[0][0] == 1     # % and ? both survive
        assert utc_now() and sha256_text("x")
    finally:
        store.close()


def test_every_sqlite_rule_has_its_postgres_twin() -> None:
    """Drift guard: a rule added to schema.sql (or its generated triggers) without its port to
    schema_pg.sql fails here, naming the rule."""
    import re

    from harness.store._pg_schema import schema_pg_sql
    from harness.store._sqlite_schema import schema_sql

    rules = lambda sql: set(re.findall(r"atb_rule:([a-z_]+):", sql))  # noqa: E731
    missing = rules(schema_sql()) - rules(schema_pg_sql())
    assert not missing, f"rules of schema.sql with no PostgreSQL port: {sorted(missing)}"


def test_tables_and_columns_match_the_sqlite_schema(pg_db: str) -> None:
    from harness.store._chain import CHAINED_TABLES
    from harness.store._sqlite_schema import unique_keys
    from harness.store._verify import reference_database

    mem = reference_database()
    store = open_store(pg_db)
    try:
        for t in CHAINED_TABLES:
            want = [str(r[1]) for r in mem.execute(f"PRAGMA table_info({t})")]
            got = [str(r[0]) for r in store.query(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = ? ORDER BY ordinal_position", (t,))]
            assert got == want, f"{t}: PostgreSQL columns {got}, SQLite {want}"
            pg_keys = {tuple(str(c) for c in r[0]) for r in store.query(
                "SELECT array_agg(a.attname ORDER BY k.ord) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indrelid "
                "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
                "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
                "WHERE c.relname = ? AND i.indisunique GROUP BY i.indexrelid", (t,))}
            assert set(unique_keys()[t]) <= pg_keys, f"{t}: unique keys {unique_keys()[t]} vs {pg_keys}"
    finally:
        store.close()
        mem.close()
