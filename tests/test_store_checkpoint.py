"""Issue 27, item 2: a forged store must not pass `atb store verify` (nor `atb verify-verdict`).

Each test is one of the red team's breaks, done as they did it: drop (SQLite) or disable (PostgreSQL)
the triggers, edit, recompute every later hash, restore the triggers. The attacker has file (or server)
access but not the checkpoint key (its folder is the test's own, ``ATB_KEY_DIR``). Before signed
checkpoints every one of these stores verified (the chain and the rules hold after a recompute); the
assertions that only ``checkpoint`` problems are found show that the chain alone no longer decides.
Run on SQLite and on PostgreSQL (``pg_db`` from conftest.py; skipped locally without a server).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.records import DeviceFingerprint, MeasurementSample, MeasurementSet, sha256_text, utc_now
from harness.store._chain import CHAINED_TABLES, GENESIS, MAX_SEQ_SQL, insert_chained, row_at, row_hash
from harness.tuning.campaigns import CampaignRecorder
from harness.verdict.gates import gate_names
from protocol import load_protocol

PROTO = load_protocol()
REF = PROTO.ref()
SEEDS = list(range(101, 101 + PROTO.seeds.paired_seeds))
PASS = [{"name": n, "passed": True, "detail": ""} for n in gate_names()]


class Attacked:
    """A signed store of one kind, and what an attacker with raw access (no key) can do to it."""

    def __init__(self, kind: str, store: Any, raw: Any, url: str) -> None:
        self.kind, self.store, self.raw, self.url = kind, store, raw, url
        self._saved_triggers: list[str] = []

    # ---- the attacker's tools
    def triggers_off(self) -> None:
        if self.kind == "sqlite":
            rows = self.raw.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
            self._saved_triggers = [str(r[1]) for r in rows]
            for r in rows:
                self.raw.execute(f'DROP TRIGGER "{r[0]}"')
        else:
            for t in CHAINED_TABLES:
                self.raw.execute(f"ALTER TABLE {t} DISABLE TRIGGER USER")

    def triggers_on(self) -> None:
        if self.kind == "sqlite":
            for sql in self._saved_triggers:
                self.raw.execute(sql)
        else:
            for t in CHAINED_TABLES:
                self.raw.execute(f"ALTER TABLE {t} ENABLE TRIGGER USER")

    def head_seq(self) -> int:
        return int(self.raw.execute(MAX_SEQ_SQL + " AS chain").fetchone()[0])

    def recompute_from(self, first: int) -> None:
        """Recompute every row_hash from chain position ``first`` to the end (triggers must be off)."""
        prev = GENESIS if first == 1 else str(row_at(self.raw, first - 1)[1]["row_hash"])  # type: ignore[index]
        for seq in range(first, self.head_seq() + 1):
            found = row_at(self.raw, seq)
            assert found is not None
            table, row = found
            digest = row_hash(prev, table, row)
            self.raw.execute(f"UPDATE {table} SET row_hash = ? WHERE chain_seq = ?", (digest, seq))
            prev = digest

    def delete_from(self, first: int) -> None:
        """Cut the chain back: delete every row at position ``first`` or later (no recompute needed)."""
        for t in reversed(CHAINED_TABLES):          # children before the rows they refer to
            self.raw.execute(f"DELETE FROM {t} WHERE chain_seq >= ?", (first,))

    def seq_of(self, table: str, where: str, params: tuple[Any, ...]) -> int:
        return int(self.raw.execute(f"SELECT chain_seq FROM {table} WHERE {where}", params).fetchone()[0])

    def append_chained(self, table: str, row: dict[str, Any]) -> None:
        if self.kind == "sqlite":
            insert_chained(self.raw, table, row)
        else:
            from harness.store._postgres import insert_chained_pg

            insert_chained_pg(self.raw, table, row)

    def verify(self) -> Any:
        return self.store.verify()


@pytest.fixture
def key_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "keys"
    monkeypatch.setenv("ATB_KEY_DIR", str(d))
    return d


def _fp() -> DeviceFingerprint:
    return DeviceFingerprint(backend="cpu", cpu_model="cpu-a", cpu_count=2, torch_version="2.13.0")


def _set(store: Any, session: str, device: str, arm: str, factor: float = 1.0) -> MeasurementSet:
    vals = [x * (1.5 if arm == "baseline" else 1.0) * factor for x in (1000.0, 1010.0)]
    ms = MeasurementSet(session_id=session, device_sha256=device, protocol=REF, task_id="relu",
                        subject_sha256=sha256_text(arm), arm=arm, kind="kernel", unit="ns",  # type: ignore[arg-type]
                        samples=[MeasurementSample(seed=s, values=vals, round_lengths=[2]) for s in SEEDS])
    return ms


def _verdict_row(vid: str, session: str, device: str, cset: str, bset: str, ratio: float = 1.5) -> dict[str, Any]:
    return {"id": vid, "session_id": session, "device_sha256": device, "task_id": "relu", "kind": "kernel",
            "candidate_sha256": sha256_text("candidate"), "baseline_sha256": sha256_text("baseline"),
            "baseline_label": "eager-reference", "status": "accepted", "correct": 1, "reason": "",
            "ratio": ratio, "ci_low": ratio - 0.1, "ci_high": ratio + 0.1, "candidate_set_id": cset,
            "baseline_set_id": bset, "gates_json": json.dumps(PASS), "detail_json": "{}",
            "protocol_version": REF.version, "protocol_sha256": REF.sha256, "created_at": utc_now()}


def _add_verdict(store: Any, session: str, device: str, vid: str) -> None:
    c, b = _set(store, session, device, "candidate"), _set(store, session, device, "baseline")
    with store.transaction() as x:
        store._insert_measurement_set(x, c)
        store._insert_measurement_set(x, b)
        store._insert(x, "verdicts", _verdict_row(vid, session, device, c.id, b.id))


def _fill(store: Any) -> str:
    """Two verdicts in a campaign of two iterations, finished (the campaign-end hook signs the head)."""
    session = str(store.open_session(_fp(), REF))
    device = str(store.session(session)["device_sha256"])
    _add_verdict(store, session, device, "v-1")
    _add_verdict(store, session, device, "v-2")
    rec = CampaignRecorder.open(store, PROTO, task_id="relu", kind="kernel", tuner_spec="random", seed=1, budget=2,
                                session_id=session, campaign_id="run-1")
    rec.record(0, verdict_id="v-1")
    rec.record(1, verdict_id="v-2")
    rec.finish()
    assert rec.checkpoint is not None, "the campaign end signed no checkpoint"
    return session


@pytest.fixture(params=["sqlite", "postgresql"])
def attacked(request: pytest.FixtureRequest, tmp_path: Path, key_dir: Path) -> Iterator[Attacked]:
    if request.param == "sqlite":
        from harness.store import connect, open_store

        path = tmp_path / "atb.sqlite"
        store: Any = open_store(path)
        raw: Any = connect(path)
        a = Attacked("sqlite", store, raw, str(path))
        closers = [raw.close, store.close]
    else:
        import psycopg

        from harness.store import open_store
        from harness.store._postgres import PgExecutor

        url = request.getfixturevalue("pg_db")
        store = open_store(url)
        conn = psycopg.connect(url, autocommit=True)
        a = Attacked("postgresql", store, PgExecutor(conn), url)
        closers = [conn.close, store.close]
    try:
        a.session = _fill(a.store)  # type: ignore[attr-defined]
        yield a
    finally:
        for close in closers:
            close()


def _kinds(result: Any) -> set[str]:
    return {p.kind for p in result.problems}


# ---------------------------------------------------------------------- the honest store
def test_campaign_end_checkpoint_covers_the_campaign(attacked: Attacked, key_dir: Path) -> None:
    v = attacked.verify()
    assert v.ok, v.problems
    cp = v.checkpoint
    assert cp is not None and cp.checkpoints == 1 and cp.unsigned_rows == 0 and cp.logged_heads == 1
    assert cp.covered_seq == attacked.seq_of("campaign_outcomes", "campaign_id = ?", ("run-1",))
    assert cp.key_dir == str(key_dir) and cp.key_id is not None


def test_key_is_made_outside_the_store_with_owner_only_permissions(attacked: Attacked, key_dir: Path) -> None:
    key = key_dir / "checkpoint_ed25519.key"
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_dir.stat().st_mode) & 0o077 == 0
    log = (key_dir / "signed_heads.jsonl").read_text().splitlines()
    assert len(log) == 1 and json.loads(log[0])["head_seq"] > 1
    # a key others can read is refused when signing, with the fix in the message
    from harness.store import CheckpointKeyError

    os.chmod(key, 0o644)
    with pytest.raises(CheckpointKeyError, match="chmod 600"):
        attacked.store.checkpoint()


# ---------------------------------------------------------------------- the red team's breaks
def test_middle_row_rewrite_with_recomputed_chain_is_detected(attacked: Attacked) -> None:
    a = attacked
    vid_seq = a.seq_of("verdicts", "id = ?", ("v-1",))
    cset = str(a.raw.execute("SELECT candidate_set_id FROM verdicts WHERE id = ?", ("v-1",)).fetchone()[0])
    first_sample = a.seq_of("measurements", "set_id = ? AND seed = ?", (cset, SEEDS[0]))
    a.triggers_off()
    for m in a.raw.execute("SELECT id, samples_json FROM measurements WHERE set_id = ?", (cset,)).fetchall():
        vals = [x / 3 for x in json.loads(m[1])]
        a.raw.execute("UPDATE measurements SET samples_json = ? WHERE id = ?", (json.dumps(vals), m[0]))
    a.raw.execute("UPDATE verdicts SET ratio = ratio * 3, ci_low = ci_low * 3, ci_high = ci_high * 3 WHERE id = ?",
                  ("v-1",))
    a.recompute_from(min(first_sample, vid_seq))
    a.triggers_on()
    v = a.verify()
    assert not v.ok and _kinds(v) == {"checkpoint"}, v.problems   # the chain and the rules hold: only the signature tells
    assert any("rewritten" in p.detail for p in v.problems)


def test_rewrite_that_also_deletes_every_checkpoint_is_detected_by_the_log(attacked: Attacked) -> None:
    a = attacked
    vid_seq = a.seq_of("verdicts", "id = ?", ("v-2",))
    cp_seq = a.seq_of("reports", "kind = ?", ("store_checkpoint",))
    a.triggers_off()
    a.raw.execute("UPDATE verdicts SET reason = ? WHERE id = ?", ("re-measured, no change", "v-2"))
    a.raw.execute("DELETE FROM reports WHERE kind = ?", ("store_checkpoint",))
    assert cp_seq == a.head_seq() + 1          # the checkpoint was the last row: nothing to renumber
    a.recompute_from(vid_seq)
    a.triggers_on()
    v = a.verify()
    assert not v.ok and _kinds(v) == {"checkpoint"}, v.problems
    assert v.checkpoint is not None and v.checkpoint.checkpoints == 0 and v.checkpoint.logged_heads == 1


def test_deleting_only_the_checkpoints_is_detected(attacked: Attacked) -> None:
    a = attacked
    a.triggers_off()
    a.raw.execute("DELETE FROM reports WHERE kind = ?", ("store_checkpoint",))
    a.triggers_on()
    v = a.verify()
    assert not v.ok and _kinds(v) == {"checkpoint"}, v.problems
    assert any("checkpoints were deleted" in p.detail for p in v.problems)


def test_newest_row_deletion_is_detected(attacked: Attacked) -> None:
    """A verdict stored after the campaign and signed on demand; then it (the newest verdict) is deleted
    with everything after it: no hash needs recomputing."""
    a = attacked
    device = str(a.store.session(a.session)["device_sha256"])  # type: ignore[attr-defined]
    _add_verdict(a.store, a.session, device, "v-3")  # type: ignore[attr-defined]
    a.store.checkpoint()
    assert a.verify().ok
    v3 = a.seq_of("verdicts", "id = ?", ("v-3",))
    a.triggers_off()
    a.delete_from(v3)
    a.triggers_on()
    v = a.verify()
    assert not v.ok and _kinds(v) == {"checkpoint"}, v.problems
    assert any("truncated" in p.detail for p in v.problems)


def test_tail_truncation_is_detected(attacked: Attacked) -> None:
    a = attacked
    cut = a.seq_of("campaigns", "id = ?", ("run-1",))
    a.triggers_off()
    a.delete_from(cut)
    a.triggers_on()
    v = a.verify()
    assert not v.ok and _kinds(v) == {"checkpoint"}, v.problems


def test_fabricated_appended_rows_are_visibly_unsigned(attacked: Attacked, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli import main

    a = attacked
    device = str(a.store.session(a.session)["device_sha256"])  # type: ignore[attr-defined]
    c, b = _set(a.store, a.session, device, "candidate", 1 / 3), _set(a.store, a.session, device, "baseline")  # type: ignore[attr-defined]
    for ms in (c, b):
        a.append_chained("measurement_sets", {
            "id": ms.id, "session_id": ms.session_id, "device_sha256": ms.device_sha256, "task_id": "relu",
            "subject_sha256": ms.subject_sha256, "arm": ms.arm, "kind": "kernel", "unit": "ns",
            "created_at": utc_now(), "protocol_version": REF.version, "protocol_sha256": REF.sha256})
        for s in ms.samples:
            a.append_chained("measurements", {
                "set_id": ms.id, "seed": s.seed, "samples_json": json.dumps(s.values), "round_lengths_json": "[2]",
                "protocol_version": REF.version, "protocol_sha256": REF.sha256})
    a.append_chained("verdicts", _verdict_row("v-forged", a.session, device, c.id, b.id, ratio=4.5))  # type: ignore[attr-defined]
    v = a.verify()
    assert v.ok, v.problems                       # appended rows are legitimately unsigned...
    cp = v.checkpoint
    assert cp is not None and cp.unsigned_rows == 2 + 2 * len(SEEDS) + 1   # ...and counted as such
    assert cp.unsigned_by_table == {"measurement_sets": 2, "measurements": 2 * len(SEEDS), "verdicts": 1}
    assert "rows after the newest checkpoint (unsigned)" in cp.line()
    if a.kind == "sqlite":                        # the CLI: --require-signed fails, verify-verdict does not vouch
        assert main(["store", "verify", "--db", a.url, "--require-signed"]) == 2
        capsys.readouterr()
        assert main(["verify-verdict", "v-forged", "--db", a.url, "--json"]) in (1, 2)
        out = capsys.readouterr().out
        if out.strip():
            assert json.loads(out)["store"]["signed"] is False


def test_fake_campaign_is_outside_every_signature(attacked: Attacked) -> None:
    a = attacked
    ref = {"protocol_version": REF.version, "protocol_sha256": REF.sha256, "created_at": utc_now()}
    device = str(a.store.session(a.session)["device_sha256"])  # type: ignore[attr-defined]
    a.append_chained("campaigns", {"id": "run-forged", "task_id": "relu", "kind": "kernel",
                                   "tuner_spec": "openai:gpt-forged", "seed": 1, "budget": 1,
                                   "session_id": a.session, "device_sha256": device, **ref})  # type: ignore[attr-defined]
    a.append_chained("iterations", {"campaign_id": "run-forged", "idx": 0, "verdict_id": "v-1",
                                    "candidate_sha256": sha256_text("candidate"), "usable": 1, **ref})
    # the attacker signs it with a key of their own: that checkpoint is not trusted
    from harness.store._checkpoint import Checkpoint, message_for
    from harness.store._signing import load_or_create_signing_key

    theirs = load_or_create_signing_key(Path(a.url).parent / "attacker-keys" if a.kind == "sqlite"
                                        else Path(os.environ["ATB_KEY_DIR"]).parent / "attacker-keys")
    seq = a.head_seq()
    head = str(row_at(a.raw, seq)[1]["row_hash"])  # type: ignore[index]
    store_id = str(row_at(a.raw, 1)[1]["row_hash"])  # type: ignore[index]
    forged = Checkpoint(store_id=store_id, head_seq=seq, head_hash=head, signed_at=utc_now(), key_id=theirs.key_id,
                        public_key=theirs.public.raw.hex(),
                        signature=theirs.sign(message_for(store_id, seq, head, "x", theirs.key_id)))
    a.append_chained("reports", {"id": "report-forged", "kind": "store_checkpoint", "subject": store_id,
                                 "body_json": forged.model_dump_json(), **ref})
    v = a.verify()
    assert v.ok, v.problems
    cp = v.checkpoint
    assert cp is not None and cp.untrusted_checkpoints == 1 and cp.checkpoints == 1
    assert cp.unsigned_by_table == {"campaigns": 1, "iterations": 1}   # the real campaign stays covered
    # claiming the trusted key's id without its signature is a forgery, named as one
    trusted = v.checkpoint.key_id
    bad = forged.model_copy(update={"key_id": trusted})
    a.append_chained("reports", {"id": "report-forged-2", "kind": "store_checkpoint", "subject": store_id,
                                 "body_json": bad.model_dump_json(), **ref})
    v = a.verify()
    assert not v.ok and _kinds(v) == {"checkpoint"} and "does not verify" in v.problems[0].detail


def test_store_checkpoint_cli_signs_on_demand(attacked: Attacked, capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli import main

    a = attacked
    capsys.readouterr()
    assert main(["store", "checkpoint", "--db", a.url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["head_seq"] > 1 and out["signature_id"].startswith(out["key_id"])
    assert main(["store", "verify", "--db", a.url, "--json", "--require-signed"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] and res["signed"] and res["checkpoint"]["checkpoints"] == 2
    assert main(["store", "checkpoint", "--db", str(Path(a.url).parent / "nope.sqlite") if a.kind == "sqlite"
                 else "sqlite:///nope/none.sqlite"]) == 2


def test_verify_verdict_does_not_agree_with_a_forged_store(attacked: Attacked,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The red team's 3.30x: samples / 3, ratio recomputed from them, chain recomputed. The recomputation
    matches the forged samples; the store's checkpoint does not."""
    from atb_agent.cli import main

    a = attacked
    capsys.readouterr()
    a.triggers_off()
    a.raw.execute("UPDATE verdicts SET reason = ? WHERE id = ?", ("edited", "v-1"))
    a.recompute_from(a.seq_of("verdicts", "id = ?", ("v-1",)))
    a.triggers_on()
    code = main(["verify-verdict", "v-1", "--db", a.url, "--json"])
    out = capsys.readouterr().out
    assert code != 0
    if code == 1:     # recomputed, and the store's standing said with it
        st = json.loads(out)["store"]
        assert st["verified"] is False and "checkpoint" in (st["first_problem"] or "")


def test_report_provenance_names_the_checkpoint(attacked: Attacked) -> None:
    from harness.tuning.reports._data import collect

    data = collect(attacked.store, ["run-1"], PROTO)
    v = attacked.verify()
    assert data.checkpoint is not None and v.checkpoint is not None
    assert (data.checkpoint["head_seq"], data.checkpoint["signature_id"]) == (v.checkpoint.covered_seq,
                                                                             v.checkpoint.signature_id)


# ---------------------------------------------------------------------- cost work (bench_checkpoint.py)
def test_checkpoint_signs_the_row_just_before_it(attacked: Attacked, key_dir: Path) -> None:
    """The PostgreSQL checkpoint reads the head under the write lock and appends right after it."""
    cp = attacked.store.checkpoint(key_dir)
    seq = attacked.seq_of("reports", "kind = ? AND body_json LIKE ?", ("store_checkpoint", f"%{cp.signature}%"))
    assert seq == cp.head_seq + 1
    assert attacked.verify().ok


def test_a_failed_postgresql_checkpoint_leaves_nothing_open(attacked: Attacked, key_dir: Path) -> None:
    if attacked.kind != "postgresql":
        pytest.skip("the three-round-trip checkpoint is the PostgreSQL store's")
    from psycopg.pq import TransactionStatus

    before = attacked.head_seq()

    def refuse(store_id: Any, seq: int, head_hash: str) -> Any:
        raise RuntimeError("signer failed")

    with pytest.raises(RuntimeError):
        attacked.store.append_signed_head(refuse)
    assert attacked.store.conn.info.transaction_status == TransactionStatus.IDLE
    assert attacked.head_seq() == before
    attacked.store.checkpoint(key_dir)          # the connection is still usable, the lock released
    assert attacked.head_seq() == before + 1 and attacked.verify().ok


def test_one_slipped_in_row_is_one_rule_problem(attacked: Attacked) -> None:
    """The replay no longer cascades: a refused row used to make every later row fail chain_order too."""
    attacked.triggers_off()
    cset, bset = attacked.raw.execute("SELECT candidate_set_id, baseline_set_id FROM verdicts WHERE id = 'v-1'").fetchone()
    device = str(attacked.store.session(attacked.session)["device_sha256"])  # type: ignore[attr-defined]
    row = _verdict_row("v-bad", attacked.session, device, cset, bset)  # type: ignore[attr-defined]
    row["gates_json"] = json.dumps([{**PASS[0], "passed": False}, *PASS[1:]])   # accepted with a failed gate
    attacked.append_chained("verdicts", row)
    attacked.triggers_on()
    attacked.store.add_report("after", "s", {"i": 1}, REF)
    attacked.store.add_report("after", "s", {"i": 2}, REF)
    rules = [p for p in attacked.verify().problems if p.kind == "rule"]
    assert len(rules) == 1 and rules[0].key == "v-bad", [p.line() for p in rules]
