"""Issue 18: "a stored verdict recomputes exactly" is backed by a test. A store gets real kernel verdicts
(CPU, native tasks, one measurement session) and an engine verdict (from trial facts); EVERY verdict in
it with a ratio is recomputed from its stored samples and round boundaries with the one estimator, bit
for bit, in process and through ``atb verify-verdict``. A tampered sample is reported as a mismatch."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from atb_agent.cli import main
from atb_agent.cli._verify import recompute
from harness.verdict.evaluate import evaluate_candidate
from harness.measure.session import open_measurement_session
from harness.store import open_store
from harness.tasks import load_task
from protocol import load_protocol

P = load_protocol()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from test_engine_verdict import SEEDS, _arm, _trial  # noqa: E402 - the engine tests' trial builder

    from harness.engines import load_engine_task, render_config
    from harness.measure.serving.session import open_engine_session
    from harness.verdict.engine import record_engine_trial

    db = tmp_path_factory.mktemp("verify") / "atb.sqlite"
    store = open_store(db)
    results: list[Any] = []
    relu, softmax = load_task("relu"), load_task("softmax")
    with open_measurement_session(store, "cpu", P, note="verify-verdict test") as ctx:
        for task, src in (("relu", relu.render_candidate({"impl": "clamp", "layout": "keep"})),
                          ("relu", relu.start_source()),
                          ("softmax", softmax.start_source()),
                          ("relu", relu.start_source().replace("return", "return 1.0 + 0 *", 1))):
            results.append(evaluate_candidate(task, src, store=store, session=ctx, protocol=P))
    session = open_engine_session(store, P)
    cfg = {"parallel": 4}
    eng = record_engine_trial(load_engine_task("llamacpp-tiny"), render_config(cfg), cfg,
                              _trial(_arm("candidate", {s: 11.0 + (s % 5) * 0.3 for s in SEEDS}, config=cfg)),
                              store=store, session=session, protocol=P)
    store.close()
    yield {"db": str(db), "kernel": results, "engine": eng}


def _all_verdicts(db: str) -> list[tuple[str, float | None]]:
    conn = sqlite3.connect(db)
    try:
        return [(str(r[0]), r[1]) for r in conn.execute("SELECT id, ratio FROM verdicts ORDER BY chain_seq")]
    finally:
        conn.close()


def test_every_verdict_in_the_store_recomputes_bit_for_bit(made: dict[str, Any]) -> None:
    rows = _all_verdicts(made["db"])
    with_ratio = [vid for vid, ratio in rows if ratio is not None]
    assert len(with_ratio) >= 4, rows  # three kernel verdicts with a ratio and the engine verdict
    with open_store(made["db"]) as store:
        kinds = set()
        for vid in with_ratio:
            out = recompute(store, vid)
            assert out["match"], out
            assert out["recomputed"] == out["stored"]
            kinds.add(out["unit"])
            cset = store.measurement_set(store.verdict(vid).candidate_set_id or "")
            if cset.unit == "ns":  # kernel samples carry their round boundaries, several rounds each
                assert all(s.round_lengths and len(s.round_lengths) > 1 for s in cset.samples)
                assert out["n_pairs"] == sum(len(s.round_lengths or ()) for s in cset.samples)
        assert kinds == {"ns", "requests_per_s"}
        # the figures the evaluation handed back are the recomputed ones, bit for bit
        for res in made["kernel"]:
            if res.speedup is not None:
                got = recompute(store, res.verdict_id)["recomputed"]
                assert (got["ratio"], got["ci_low"], got["ci_high"]) == (res.speedup, *res.speedup_ci)


def test_cli_verify_verdict_matches(made: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    vid = made["kernel"][0].verdict_id
    assert main(["verify-verdict", vid, "--db", made["db"], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] is True and out["differs"] == [] and out["verdict_id"] == vid
    assert main(["verify-verdict", made["engine"].verdict_id, "--db", made["db"]]) == 0
    assert capsys.readouterr().out.startswith("match: verdict ")


def test_cli_verify_verdict_bad_input(made: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["verify-verdict", "verdict-nope", "--db", made["db"], "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and "verdict-nope" in out["error"]
    assert main(["verify-verdict", "verdict-nope", "--db", str(tmp_path / "none.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no results store" in err and not (tmp_path / "none.sqlite").exists()
    no_ratio = [r for r in made["kernel"] if r.speedup is None]
    assert no_ratio, "the wrong candidate gets a verdict without a ratio"
    assert main(["verify-verdict", no_ratio[0].verdict_id, "--db", made["db"]]) == 2
    assert "no ratio to recompute" in capsys.readouterr().err


def _tamper(db: str, set_id: str, factor: float) -> None:
    """Edit every stored sample of one measurement set behind the store's back (append-only trigger dropped
    and put back). Every row, not one: a single row's edit moved no figure in one CI run (its rounds' ratios
    sat on one side of the median, and which row comes first by id varies between runs), while scaling all
    of a candidate's times by ``factor`` scales every paired ratio, and so the median, by ``1 / factor``."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        trig = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'measurements_no_update'").fetchone()[0]
        rows = conn.execute("SELECT id, samples_json FROM measurements WHERE set_id = ?", (set_id,)).fetchall()
        assert rows, f"no stored samples in set {set_id}"
        conn.execute("DROP TRIGGER measurements_no_update")
        for rid, samples in rows:
            conn.execute("UPDATE measurements SET samples_json = ? WHERE id = ?",
                         (json.dumps([v * factor for v in json.loads(samples)]), rid))
        conn.execute(trig)
    finally:
        conn.close()


def test_a_tampered_sample_is_a_mismatch(made: dict[str, Any], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    db = str(tmp_path / "tampered.sqlite")
    shutil.copy(made["db"], db)
    res = next(r for r in made["kernel"] if r.speedup is not None)
    with open_store(db) as store:
        cset_id = store.verdict(res.verdict_id).candidate_set_id
    assert cset_id is not None
    _tamper(db, cset_id, 0.5)   # the candidate's times halved: every round's ratio doubles
    code = main(["verify-verdict", res.verdict_id, "--db", db, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["match"] is False and "ratio" in out["differs"], out
    assert out["recomputed"]["ratio"] == pytest.approx(2 * out["stored"]["ratio"], rel=1e-9)
    assert main(["verify-verdict", res.verdict_id, "--db", db]) == 1
    assert capsys.readouterr().out.startswith("MISMATCH: verdict ")
    # the other verdicts still recompute; and the store's own check names the edited row
    with open_store(db) as store:
        assert recompute(store, made["engine"].verdict_id)["match"]
        problems = store.verify().problems
    assert any(p.kind == "row_hash" and p.table == "measurements" for p in problems)


# ---------------------------------------------------------------- a schema-2 store (before round boundaries)
def _v2_statements() -> list[str]:
    """schema.sql as it was at version 2: without round_lengths_json and its rule."""
    import re

    from harness.store._verify import schema_statements

    out = []
    for st in schema_statements():
        st = re.sub(r"    -- Round boundaries \(schema 3\).*?json_array_length\(round_lengths_json\) > 0\)\),\n", "", st,
                    flags=re.S)
        st = re.sub(r"    -- Round boundaries split the samples.*?json_array_length\(NEW\.samples_json\) END;\n", "", st,
                    flags=re.S)
        out.append(st)
    assert not any("round_lengths" in st[st.index("CREATE"):] for st in out)  # (the header comment may say it)
    return out


def _as_schema_2(src: str, dst: str) -> None:
    """Copy every row of ``src`` (none with round boundaries) into a new schema-2 file, chain intact."""
    from harness.store._chain import CHAINED_TABLES

    old = sqlite3.connect(src)
    new = sqlite3.connect(dst, isolation_level=None)
    try:
        for st in _v2_statements():
            new.execute(st)
        new.execute("PRAGMA user_version = 2")
        rows = []
        for t in CHAINED_TABLES:
            cur = old.execute(f"SELECT * FROM {t}")
            names = [d[0] for d in cur.description]
            rows += [(dict(zip(names, r))["chain_seq"], t, dict(zip(names, r))) for r in cur]
        for _, t, row in sorted(rows, key=lambda x: x[0]):
            assert row.pop("round_lengths_json", None) is None, "a schema-2 row has no round lengths"
            new.execute(f"INSERT INTO {t} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    finally:
        old.close()
        new.close()


def test_a_schema_2_store_upgrades_in_place_keeping_every_row_and_hash(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from test_engine_verdict import SEEDS, _arm, _trial  # noqa: E402

    from harness.engines import load_engine_task, render_config
    from harness.measure.serving.session import open_engine_session
    from harness.verdict.engine import record_engine_trial
    from harness.store import SCHEMA_VERSION, verify_path

    src, dst = tmp_path / "v3.sqlite", tmp_path / "v2.sqlite"
    with open_store(src) as store:
        cfg = {"parallel": 2}
        eng = record_engine_trial(load_engine_task("llamacpp-tiny"), render_config(cfg), cfg,
                                  _trial(_arm("candidate", {s: 9.0 + (s % 3) * 0.4 for s in SEEDS}, config=cfg)),
                                  store=store, session=open_engine_session(store, P), protocol=P)
        before = store.verify()
    assert before.ok
    _as_schema_2(str(src), str(dst))
    v2 = verify_path(dst)
    assert not v2.ok and v2.problems[0].kind == "schema_version" and "upgrades it in place" in v2.problems[0].detail
    with open_store(dst) as store:   # opening upgrades
        after = store.verify()
        assert after.ok, after.first_problem
        assert (after.schema_version, after.rows_checked) == (SCHEMA_VERSION, before.rows_checked)
        assert after.head_hash == before.head_hash   # every row kept its hash
        assert recompute(store, eng.verdict_id)["match"]
    assert main(["verify-verdict", eng.verdict_id, "--db", str(dst)]) == 0
    capsys.readouterr()


def test_a_tampered_schema_2_store_is_not_upgraded(tmp_path: Path) -> None:
    from harness.store import StoreTampered

    src, dst = tmp_path / "v3.sqlite", tmp_path / "v2.sqlite"
    open_store(src).close()
    _as_schema_2(str(src), str(dst))
    conn = sqlite3.connect(dst, isolation_level=None)
    conn.execute("DROP TRIGGER verdicts_no_update")
    conn.close()
    with pytest.raises(StoreTampered, match="verdicts_no_update"):
        open_store(dst)
    conn = sqlite3.connect(dst)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2   # left as it was
    conn.close()


def test_a_schema_2_postgres_store_upgrades_in_place(pg_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The server store: a database at version 2 (no round_lengths_json) gains the column on open;
    every row keeps its hash, a verdict recomputes, and rows with round lengths can be written."""
    import psycopg
    from test_engine_verdict import SEEDS, _arm, _trial  # noqa: E402

    from harness.engines import load_engine_task, render_config
    from harness.measure.serving.session import open_engine_session
    from harness.verdict.engine import record_engine_trial
    from harness.store import open_store

    store = open_store(pg_db)
    cfg = {"parallel": 2}
    eng = record_engine_trial(load_engine_task("llamacpp-tiny"), render_config(cfg), cfg,
                              _trial(_arm("candidate", {s: 9.0 + (s % 3) * 0.4 for s in SEEDS}, config=cfg)),
                              store=store, session=open_engine_session(store, P), protocol=P)
    before = store.verify()
    store.close()
    assert before.ok, before.first_problem
    with psycopg.connect(pg_db, autocommit=True) as conn:   # back to version 2
        conn.execute("ALTER TABLE measurements DROP COLUMN round_lengths_json")
        conn.execute("CREATE OR REPLACE FUNCTION atb_schema_version() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 2 $$")
    store = open_store(pg_db)
    try:
        after = store.verify()
        assert after.ok, after.first_problem
        assert (after.rows_checked, after.head_hash) == (before.rows_checked, before.head_hash)
        assert recompute(store, eng.verdict_id)["match"]
    finally:
        store.close()
    assert main(["verify-verdict", eng.verdict_id, "--db", pg_db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["match"] is True
