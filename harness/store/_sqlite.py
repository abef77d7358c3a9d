"""The SQLite results store: one file, WAL, foreign keys on, ingest rules inside the database.

Why rules live in SQL and not (only) in Python: a result that bypasses this module, a raw INSERT from
a script or another tool, must meet the same bar. The Python layer only translates the database's
refusals into :class:`IngestRejected` with the rule's name. A server database can replace this file by
implementing :class:`harness.store.ResultStore` with the same tables and rules.

Why a hash chain as well: any writer with file access can ``DROP TRIGGER``. Every row is written as the
next link of one store-wide chain (:mod:`harness.store._chain`), opening refuses a store whose schema
objects differ from ``schema.sql``, and :meth:`SqliteStore.verify` recomputes the chain and replays
every row through the rules (:mod:`harness.store._verify`), so tampering is named, never repaired.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.records import (
    DeviceCeilings,
    DeviceFingerprint,
    MeasurementSet,
    Verdict,
    canonical_json,
    new_id,
    sha256_text,
    utc_now,
)
from harness.store._chain import (
    CHAINED_TABLES,
    MAX_SEQ_SQL,
    ColumnSpec,
    column_specs,
    head,
    insert_chained,
    row_at,
    row_hash,
)
from harness.store._errors import IngestRejected, NotFound, StoreError, StoreSchemaVersionError, StoreTampered
from harness.store._read_models import (CampaignRow, CeilingsSummary, IterationCounts, IterationRow, OutcomeRow,
                                        PreregistrationRow)
from harness.store._sqlite_schema import (
    _KEYS_WITH_THEIR_OWN_RULE,
    APPEND_ONLY_TABLES,
    STAMPED_TABLES,
    schema_sql,
    translate,
    unique_keys,
)
from harness.store._verify import SCHEMA_VERSION as _SCHEMA_VERSION
from harness.store._verify import (
    StoreVerification,
    schema_problems,
    schema_statements,
    user_version,
    verify_connection,
    version_problem,
)
from protocol import Protocol, ProtocolRef

SCHEMA_VERSION = _SCHEMA_VERSION


def connect(path: Path | str) -> sqlite3.Connection:
    """Open a connection with the settings every user of the file must have (foreign keys on)."""
    conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


class SqliteStore:
    """The embedded results store. Every write is one transaction; a refused write changes nothing.

    Opening checks before it writes anything: a file of another schema version is refused and left
    untouched, and a file whose tables, indexes or triggers differ from ``schema.sql`` (a dropped
    trigger, say) or whose newest row breaks the hash chain is refused as tampered
    (:class:`StoreTampered`), never repaired. :meth:`verify` checks every row.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = connect(self.path)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the results store at {self.path}: {exc}") from exc
        try:
            self._open_schema()
            self.conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            self.conn.close()
            raise StoreError(f"cannot open the results store at {self.path}: {exc}") from exc
        except BaseException:
            self.conn.close()
            raise
        self._specs: dict[str, list[ColumnSpec]] = {}
        self._register_known_protocols()

    def _open_schema(self) -> None:
        """Create the schema in an empty file; otherwise check version, schema objects and chain head.

        Raises:
            StoreSchemaVersionError: another schema version (the file is not touched).
            StoreTampered: a table, index or trigger differs from schema.sql, or the head row's hash is wrong.
        """
        version = user_version(self.conn)
        if version == 0 and not self.query("SELECT 1 FROM sqlite_master LIMIT 1"):
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                if user_version(self.conn) == 0 and not self.query("SELECT 1 FROM sqlite_master LIMIT 1"):
                    for stmt in schema_statements():
                        self.conn.execute(stmt)
                    self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            version = user_version(self.conn)
        if version == 2:
            self._upgrade_from_2()
            version = user_version(self.conn)
        problem = version_problem(version)
        if problem is not None:
            raise StoreSchemaVersionError(f"results store {self.path}: {problem.detail}")
        objects = schema_problems(self.conn)
        if objects:
            raise StoreTampered(str(self.path), objects[0].line(), len(objects))
        self._check_head()

    # Schema 2 -> 3 changed these objects only: measurements gained round_lengths_json, and its insert
    # trigger the malformed_round_lengths rule.
    _CHANGED_IN_3 = (("table", "measurements"), ("trigger", "measurement_sealed"))

    def _upgrade_from_2(self) -> None:
        """Schema 2 -> 3 in place: rebuild ``measurements`` with ``round_lengths_json`` (NULL in every
        stored row; the chain leaves that NULL out of the hash, so every row keeps its hash) and
        re-create the triggers from ``schema.sql``.

        Refused, the file untouched, when any other table, index or trigger differs from ``schema.sql``:
        an upgrade must not repair a tampered store.

        Raises:
            StoreTampered: an object other than the two the upgrade changes differs from ``schema.sql``.
        """
        conn = self.conn
        other = [p for p in schema_problems(conn)
                 if not any(p.detail == f"{kind} {name} differs from its definition in schema.sql"
                            for kind, name in self._CHANGED_IN_3)]
        if other:
            raise StoreTampered(str(self.path), other[0].line(), len(other))
        cols = "id, set_id, seed, samples_json, protocol_version, protocol_sha256, chain_seq, row_hash"
        statements = schema_statements()
        create = [st for st in statements if "CREATE TABLE IF NOT EXISTS measurements (" in st]
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("PRAGMA legacy_alter_table = ON")
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if user_version(conn) == 2:
                    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                        conn.execute(f'DROP TRIGGER "{name}"')
                    conn.execute("ALTER TABLE measurements RENAME TO atb_measurements_v2")
                    conn.execute(create[0])
                    conn.execute(f"INSERT INTO measurements ({cols}) SELECT {cols} FROM atb_measurements_v2 ORDER BY id")
                    conn.execute("DROP TABLE atb_measurements_v2")
                    for stmt in statements:
                        conn.execute(stmt)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            conn.execute("PRAGMA legacy_alter_table = OFF")
            conn.execute("PRAGMA foreign_keys = ON")

    def _check_head(self) -> None:
        """The newest row must hash from its content and the row before it (a cheap check on every open)."""
        seq, stored, table = head(self.conn)
        if seq == 0 or table is None:
            return
        prev = "0" * 64
        if seq > 1:
            before = row_at(self.conn, seq - 1)
            if before is None:
                raise StoreTampered(str(self.path), f"chain_seq {seq - 1} is missing: a row was deleted")
            prev = str(before[1]["row_hash"])
        found = row_at(self.conn, seq)
        assert found is not None
        if row_hash(prev, table, found[1]) != stored:
            raise StoreTampered(str(self.path), f"{table} (chain_seq {seq}): row_hash does not match the row's "
                                "content: it was changed after it was written")

    def verify(self, key_dir: Path | str | None = None) -> StoreVerification:
        """Check schema version, every table/index/trigger against schema.sql, the hash chain, every
        rule on every row, and the signed checkpoints against ``key_dir``'s key and log (default
        ``$ATB_KEY_DIR`` or ``~/.config/autotunebench``). Writes nothing; never raises for what it finds
        (see ``problems``)."""
        return verify_connection(self.conn, str(self.path), key_dir)

    # ------------------------------------------------------------------ chain head (both stores: plain SQL)
    def chain_head(self) -> tuple[int, str]:
        """(chain_seq, row_hash) of the newest row; (0, 64 zeros) for an empty store."""
        seq = int(self.query(MAX_SEQ_SQL + " AS chain")[0][0])
        if seq == 0:
            return 0, "0" * 64
        digest = self.chain_row_hash(seq)
        if digest is None:
            raise StoreError(f"chain_seq {seq} is the largest in {self.path} but no table holds it")
        return seq, digest

    def chain_row_hash(self, seq: int) -> str | None:
        """The ``row_hash`` of the row at chain position ``seq`` (1 is the store's id), or None."""
        for t in CHAINED_TABLES:
            rows = self.query(f"SELECT row_hash FROM {t} WHERE chain_seq = ?", (seq,))
            if rows:
                return str(rows[0][0])
        return None

    def verdict_chain_seq(self, verdict_id: str) -> int | None:
        """The chain position of verdict ``verdict_id``'s row (what a checkpoint covers), or None."""
        rows = self.query("SELECT chain_seq FROM verdicts WHERE id = ?", (verdict_id,))
        return int(rows[0][0]) if rows else None

    def checkpoint(self, key_dir: Path | str | None = None) -> Any:
        """Sign the current head with the key in ``key_dir`` (made on first use) and store the checkpoint
        (:func:`harness.store._checkpoint.write_checkpoint`). Returns the ``Checkpoint``."""
        from harness.store._checkpoint import write_checkpoint

        return write_checkpoint(self, key_dir)

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "SqliteStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write; a refusal rolls everything in it back and raises IngestRejected."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise translate(exc) from exc
        try:
            yield self.conn
        except sqlite3.Error as exc:
            self.conn.execute("ROLLBACK")
            raise translate(exc) from exc
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    def _columns(self, table: str) -> list[ColumnSpec]:
        if table not in self._specs:
            self._specs[table] = column_specs(self.conn, table)
        return self._specs[table]

    def _insert(self, conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
        """Insert one row as the next link of the hash chain (call inside :meth:`transaction`).

        Raises:
            sqlite3.Error: a rule refused the row (``transaction`` turns it into IngestRejected).
            StoreError: the stored row does not hash as written (a bug in the writer); rolled back.
        """
        if table not in CHAINED_TABLES:
            raise StoreError(f"no table {table!r} in the results store")
        try:
            insert_chained(conn, table, row, self._columns(table))
        except ValueError as exc:
            raise StoreError(str(exc)) from exc

    def append(self, table: str, row: dict[str, Any]) -> None:
        """Insert one row in its own transaction (the chained write every module outside the store uses).

        Raises:
            IngestRejected: a rule of the schema refused the row; nothing was written.
        """
        with self.transaction() as c:
            self._insert(c, table, row)

    @staticmethod
    def _stamp(ref: ProtocolRef) -> dict[str, str]:
        return {"protocol_version": ref.version, "protocol_sha256": ref.sha256}

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[sqlite3.Row]:
        return list(self.conn.execute(sql, params))

    # ------------------------------------------------------------------ protocols
    def _register_known_protocols(self) -> None:
        """Register the current, digest-checked protocol.

        Only the protocol in force is registered, with its own paired-seed requirement: rows written
        under an older version stay readable because that version was registered when it was current,
        but no new row can claim a digest this store never saw in force.
        """
        from protocol import load_protocol

        self.register_protocol(load_protocol())

    def register_protocol(self, protocol: Protocol) -> ProtocolRef:
        """Make a verified protocol, and the gates a verdict under it must carry, known to the store (idempotent).

        Raises:
            IngestRejected: ``protocol_version_taken`` when the store holds another digest under this
                version (a re-drafted protocol needs a fresh store or a new version number).
        """
        from harness.store._gates import expected_gates

        ref = protocol.ref()
        have = {(r[0], r[1]) for r in self.query(
            "SELECT kind, name FROM expected_gates WHERE protocol_sha256 = ?", (ref.sha256,))}
        missing = [g for g in expected_gates() if (g[0], g[1]) not in have]
        known = bool(self.query("SELECT 1 FROM protocols WHERE sha256 = ?", (ref.sha256,)))
        if known and not missing:
            return ref
        with self.transaction() as c:
            if not known:
                self._insert(c, "protocols", {"sha256": ref.sha256, "version": ref.version,
                                              "paired_seeds_required": protocol.seeds.paired_seeds,
                                              "registered_at": utc_now()})
            for kind, name, required in missing:
                self._insert(c, "expected_gates", {"protocol_sha256": ref.sha256, "kind": kind, "name": name,
                                                   "required": required, "created_at": utc_now()})
        return ref

    # ------------------------------------------------------------------ devices and sessions
    def add_device(self, fp: DeviceFingerprint, ref: ProtocolRef) -> str:
        digest = fp.sha256
        if not self.query("SELECT 1 FROM devices WHERE sha256 = ?", (digest,)):
            with self.transaction() as c:
                self._insert(c, "devices", {
                    "sha256": digest, "backend": fp.backend,
                    "fingerprint_json": canonical_json(fp.model_dump(mode="json")),
                    "created_at": utc_now(), **self._stamp(ref),
                })
        return digest

    def device(self, sha256: str) -> DeviceFingerprint:
        rows = self.query("SELECT fingerprint_json FROM devices WHERE sha256 = ?", (sha256,))
        if not rows:
            raise NotFound(f"no device {sha256[:12]}… in {self.path}")
        return DeviceFingerprint.model_validate_json(rows[0][0])

    def open_session(self, fp: DeviceFingerprint, ref: ProtocolRef, note: str = "") -> str:
        """Start a measurement session: ratios are only ever taken within one."""
        device_sha = self.add_device(fp, ref)
        sid = new_id("session")
        with self.transaction() as c:
            self._insert(c, "sessions", {
                "id": sid, "device_sha256": device_sha, "started_at": utc_now(), "note": note,
                **self._stamp(ref),
            })
        return sid

    def session(self, session_id: str) -> sqlite3.Row:
        rows = self.query("SELECT * FROM sessions WHERE id = ?", (session_id,))
        if not rows:
            raise NotFound(f"no measurement session {session_id}")
        return rows[0]

    def add_ceilings(self, session_id: str, ceilings: DeviceCeilings, ref: ProtocolRef) -> None:
        sess = self.session(session_id)
        with self.transaction() as c:
            self._insert(c, "ceilings", {
                "session_id": session_id, "device_sha256": sess["device_sha256"],
                "bytes_per_s": ceilings.bytes_per_s, "flops_per_s": ceilings.flops_per_s,
                "method": ceilings.method, "created_at": utc_now(), **self._stamp(ref),
            })

    def ceilings_for_device(self, device_sha256: str) -> DeviceCeilings | None:
        """The most recent ceilings measured on this device fingerprint (cached across sessions)."""
        rows = self.query(
            "SELECT bytes_per_s, flops_per_s, method FROM ceilings WHERE device_sha256 = ? "
            "ORDER BY created_at DESC LIMIT 1", (device_sha256,))
        if not rows:
            return None
        r = rows[0]
        return DeviceCeilings(bytes_per_s=r[0], flops_per_s=r[1], method=r[2])

    def ceilings_summary(self, device_sha256: str) -> CeilingsSummary | None:
        """The maximum bytes/s and flops/s over every ceilings row stored for this device fingerprint, and
        how many rows there are; None when there is none."""
        rows = self.query("SELECT max(bytes_per_s), max(flops_per_s), count(*) FROM ceilings WHERE device_sha256 = ?",
                          (device_sha256,))
        if not rows or not rows[0][2]:
            return None
        return CeilingsSummary(bytes_per_s=float(rows[0][0]), flops_per_s=float(rows[0][1]), rows=int(rows[0][2]))

    # ------------------------------------------------------------------ tasks and candidates
    def add_task(self, task_id: str, kind: str, source_sha256: str, metadata: dict[str, Any], ref: ProtocolRef) -> None:
        if self.query("SELECT 1 FROM tasks WHERE id = ?", (task_id,)):
            return
        with self.transaction() as c:
            self._insert(c, "tasks", {
                "id": task_id, "kind": kind, "source_sha256": source_sha256,
                "metadata_json": canonical_json(metadata), "created_at": utc_now(), **self._stamp(ref),
            })

    def add_candidate(self, content: str, kind: str, ref: ProtocolRef) -> str:
        digest = sha256_text(content)
        if not self.query("SELECT 1 FROM candidates WHERE sha256 = ?", (digest,)):
            with self.transaction() as c:
                self._insert(c, "candidates", {
                    "sha256": digest, "kind": kind, "content": content, "created_at": utc_now(),
                    **self._stamp(ref),
                })
        return digest

    def candidate_content(self, sha256: str) -> str:
        rows = self.query("SELECT content FROM candidates WHERE sha256 = ?", (sha256,))
        if not rows:
            raise NotFound(f"no candidate {sha256[:12]}…")
        return str(rows[0][0])

    # ------------------------------------------------------------------ measurements and verdicts
    def _insert_measurement_set(self, c: sqlite3.Connection, ms: MeasurementSet) -> None:
        self._insert(c, "measurement_sets", {
            "id": ms.id, "session_id": ms.session_id, "device_sha256": ms.device_sha256,
            "task_id": ms.task_id, "subject_sha256": ms.subject_sha256, "arm": ms.arm, "kind": ms.kind,
            "unit": ms.unit, "created_at": utc_now(), **self._stamp(ms.protocol),
        })
        for s in ms.samples:
            self._insert(c, "measurements", {
                "set_id": ms.id, "seed": s.seed, "samples_json": json.dumps(s.values),
                "round_lengths_json": None if s.round_lengths is None else json.dumps(s.round_lengths),
                **self._stamp(ms.protocol),
            })

    def add_verdict(self, verdict: Verdict, candidate_set: MeasurementSet | None = None,
                    baseline_set: MeasurementSet | None = None) -> str:
        """Ingest a verdict with its two measurement sets in one transaction.

        Raises:
            IngestRejected: the database refused the verdict or a measurement; nothing was written.
        """
        with self.transaction() as c:
            for ms in (candidate_set, baseline_set):
                if ms is not None:
                    self._insert_measurement_set(c, ms)
            self._insert(c, "verdicts", {
                "id": verdict.id, "session_id": verdict.session_id, "device_sha256": verdict.device_sha256,
                "task_id": verdict.task_id, "kind": verdict.kind,
                "candidate_sha256": verdict.candidate_sha256, "baseline_sha256": verdict.baseline_sha256,
                "baseline_label": verdict.baseline_label, "status": verdict.status,
                "correct": int(verdict.correct), "reason": verdict.reason, "ratio": verdict.ratio,
                "ci_low": verdict.ci_low, "ci_high": verdict.ci_high,
                "candidate_set_id": verdict.candidate_set_id, "baseline_set_id": verdict.baseline_set_id,
                "gates_json": json.dumps([g.model_dump() for g in verdict.gates]),
                "detail_json": canonical_json(verdict.detail), "created_at": verdict.created_at,
                **self._stamp(verdict.protocol),
            })
        return verdict.id

    def verdict(self, verdict_id: str) -> Verdict:
        rows = self.query("SELECT * FROM verdicts WHERE id = ?", (verdict_id,))
        if not rows:
            raise NotFound(f"no verdict {verdict_id}")
        return self._verdict_from_row(rows[0])

    def _verdict_from_row(self, r: sqlite3.Row) -> Verdict:
        seeds: list[int] = []
        if r["candidate_set_id"]:
            seeds = [int(x[0]) for x in self.query(
                "SELECT seed FROM measurements WHERE set_id = ? ORDER BY seed", (r["candidate_set_id"],))]
        return Verdict(
            id=r["id"], session_id=r["session_id"], device_sha256=r["device_sha256"],
            protocol=ProtocolRef(version=r["protocol_version"], sha256=r["protocol_sha256"]),
            task_id=r["task_id"], kind=r["kind"], candidate_sha256=r["candidate_sha256"],
            baseline_sha256=r["baseline_sha256"], baseline_label=r["baseline_label"], status=r["status"],
            correct=bool(r["correct"]), reason=r["reason"], ratio=r["ratio"], ci_low=r["ci_low"],
            ci_high=r["ci_high"], seeds=seeds, candidate_set_id=r["candidate_set_id"],
            baseline_set_id=r["baseline_set_id"], gates=json.loads(r["gates_json"]),
            detail=json.loads(r["detail_json"]), created_at=r["created_at"],
        )

    def measurement_set_samples(self, set_id: str) -> dict[int, list[float]]:
        return {int(r[0]): json.loads(r[1]) for r in self.query(
            "SELECT seed, samples_json FROM measurements WHERE set_id = ? ORDER BY seed", (set_id,))}

    def measurement_set(self, set_id: str) -> MeasurementSet:
        """A stored measurement set with its samples in measuring order (the order a verdict's ratio
        paired them in) and their round boundaries (None for a row stored without them).

        Raises:
            NotFound: no such set.
        """
        rows = self.query("SELECT * FROM measurement_sets WHERE id = ?", (set_id,))
        if not rows:
            raise NotFound(f"no measurement set {set_id}")
        r = rows[0]
        samples = [{"seed": int(m["seed"]), "values": json.loads(m["samples_json"]),
                    "round_lengths": None if m["round_lengths_json"] is None else json.loads(m["round_lengths_json"])}
                   for m in self.query("SELECT seed, samples_json, round_lengths_json FROM measurements "
                                       "WHERE set_id = ? ORDER BY id", (set_id,))]
        return MeasurementSet.model_validate({
            "id": r["id"], "session_id": r["session_id"], "device_sha256": r["device_sha256"],
            "protocol": ProtocolRef(version=r["protocol_version"], sha256=r["protocol_sha256"]),
            "task_id": r["task_id"], "subject_sha256": r["subject_sha256"], "arm": r["arm"], "kind": r["kind"],
            "unit": r["unit"], "samples": samples})

    def add_quarantine_review(self, verdict_id: str, cleared: bool, reason: str,
                              extended_verdict_id: str | None, ref: ProtocolRef) -> None:
        with self.transaction() as c:
            self._insert(c, "quarantine_reviews", {
                "verdict_id": verdict_id, "cleared": int(cleared), "reason": reason,
                "extended_verdict_id": extended_verdict_id, "created_at": utc_now(), **self._stamp(ref),
            })

    def effective_status(self, verdict_id: str) -> str:
        """A quarantined verdict reads 'accepted' only after a review cleared it."""
        v = self.verdict(verdict_id)
        if v.status != "quarantined":
            return v.status
        rows = self.query(
            "SELECT cleared FROM quarantine_reviews WHERE verdict_id = ? ORDER BY id DESC LIMIT 1", (verdict_id,))
        return "accepted" if rows and rows[0][0] == 1 else "quarantined"

    # ------------------------------------------------------------------ generic evidence documents
    def add_report(self, kind: str, subject: str, body: dict[str, Any], ref: ProtocolRef) -> str:
        rid = new_id(kind)
        with self.transaction() as c:
            self._insert(c, "reports", {
                "id": rid, "kind": kind, "subject": subject, "body_json": canonical_json(body),
                "created_at": utc_now(), **self._stamp(ref),
            })
        return rid

    def reports(self, kind: str, subject: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT id, subject, body_json, created_at FROM reports WHERE kind = ?"
        params: list[Any] = [kind]
        if subject is not None:
            sql += " AND subject = ?"
            params.append(subject)
        return [{"id": r[0], "subject": r[1], "body": json.loads(r[2]), "created_at": r[3]}
                for r in self.query(sql + " ORDER BY created_at", params)]

    # ------------------------------------------------------------------ campaign tables and tasks, read
    # The typed reads of the modules outside the store (campaigns, compare, prereg, reports, retest,
    # search, the sweep): they write no SQL (tests/test_sql_in_store.py). Their rows are written with
    # ``append``, through the hash chain.
    @staticmethod
    def _campaign_row(r: Any) -> CampaignRow:
        return CampaignRow(
            id=r["id"], task_id=r["task_id"], kind=r["kind"], tuner_spec=r["tuner_spec"], seed=r["seed"],
            budget=r["budget"], session_id=r["session_id"], device_sha256=r["device_sha256"],
            preregistration_id=r["preregistration_id"], arm=r["arm"], config=json.loads(r["config_json"]),
            protocol_version=r["protocol_version"], protocol_sha256=r["protocol_sha256"], created_at=r["created_at"])

    def campaign(self, campaign_id: str) -> CampaignRow | None:
        """The stored campaign (tuning run) ``campaign_id``; None when there is none."""
        rows = self.query("SELECT * FROM campaigns WHERE id = ?", (campaign_id,))
        return self._campaign_row(rows[0]) if rows else None

    def campaigns(self, preregistration_id: str | None = None) -> list[CampaignRow]:
        """Every stored campaign, oldest first; only those claiming ``preregistration_id`` when given."""
        if preregistration_id is None:
            rows = self.query("SELECT * FROM campaigns ORDER BY created_at")
        else:
            rows = self.query("SELECT * FROM campaigns WHERE preregistration_id = ? ORDER BY created_at",
                              (preregistration_id,))
        return [self._campaign_row(r) for r in rows]

    def iterations(self, campaign_id: str) -> list[IterationRow]:
        """A campaign's stored iterations in index order, each with its verdict's ratio, interval, gates
        and confinement (the verdict's ``detail.confinement``)."""
        rows = self.query(
            "SELECT i.*, v.ratio AS v_ratio, v.ci_low AS v_lo, v.ci_high AS v_hi, v.gates_json AS v_gates, "
            "json_extract(v.detail_json, '$.confinement') AS v_confinement "
            "FROM iterations i LEFT JOIN verdicts v ON v.id = i.verdict_id "
            "WHERE i.campaign_id = ? ORDER BY i.idx", (campaign_id,))
        return [IterationRow(
            campaign_id=r["campaign_id"], idx=r["idx"], candidate_sha256=r["candidate_sha256"],
            verdict_id=r["verdict_id"], usable=bool(r["usable"]), unusable_reason=r["unusable_reason"],
            tokens_in=r["tokens_in"], tokens_out=r["tokens_out"], cost_usd=r["cost_usd"],
            model_calls=r["model_calls"], truncated_calls=r["truncated_calls"], detail=json.loads(r["detail_json"]),
            protocol_version=r["protocol_version"], protocol_sha256=r["protocol_sha256"], created_at=r["created_at"],
            verdict_ratio=r["v_ratio"], verdict_ci_low=r["v_lo"], verdict_ci_high=r["v_hi"],
            verdict_gates=json.loads(r["v_gates"]) if r["v_gates"] else [],
            verdict_confinement=json.loads(r["v_confinement"]) if r["v_confinement"] else {},
        ) for r in rows]

    def iteration_verdict_details(self, campaign_id: str) -> list[dict[str, Any]]:
        """The ``detail`` of every verdict an iteration of the campaign records, in iteration order."""
        return [json.loads(r[0]) for r in self.query(
            "SELECT v.detail_json FROM iterations i JOIN verdicts v ON v.id = i.verdict_id "
            "WHERE i.campaign_id = ? ORDER BY i.idx", (campaign_id,))]

    def unrecorded_verdict_id(self, session_ids: Sequence[str], task_id: str, candidate_sha256: str) -> str | None:
        """The oldest verdict for ``candidate_sha256`` on ``task_id`` measured in one of ``session_ids`` that
        no iteration records (a run killed between storing a verdict and its iteration), or None."""
        if not session_ids:
            return None
        marks = ", ".join("?" for _ in session_ids)
        rows = self.query(
            f"SELECT v.id FROM verdicts v WHERE v.session_id IN ({marks}) AND v.task_id = ? "
            "AND v.candidate_sha256 = ? AND NOT EXISTS (SELECT 1 FROM iterations i WHERE i.verdict_id = v.id) "
            "ORDER BY v.created_at, v.id LIMIT 1", (*session_ids, task_id, candidate_sha256))
        return str(rows[0][0]) if rows else None

    def iteration_counts(self) -> dict[str, IterationCounts]:
        """Campaign id -> (iterations stored, usable ones), for every campaign with an iteration."""
        return {str(r[0]): IterationCounts(int(r[1]), int(r[2] or 0)) for r in self.query(
            "SELECT campaign_id, count(*), sum(usable) FROM iterations GROUP BY campaign_id")}

    def campaign_outcome(self, campaign_id: str) -> OutcomeRow | None:
        """The campaign's outcome; None while it has not finished."""
        rows = self.query("SELECT * FROM campaign_outcomes WHERE campaign_id = ?", (campaign_id,))
        if not rows:
            return None
        r = rows[0]
        return OutcomeRow(
            campaign_id=r["campaign_id"], status=r["status"], truncated_fraction=r["truncated_fraction"],
            reason=r["reason"], detail=json.loads(r["detail_json"]), protocol_version=r["protocol_version"],
            protocol_sha256=r["protocol_sha256"], created_at=r["created_at"])

    def outcome_statuses(self) -> dict[str, str]:
        """Campaign id -> outcome status, for every finished campaign."""
        return {str(r[0]): str(r[1]) for r in self.query("SELECT campaign_id, status FROM campaign_outcomes")}

    def preregistration(self, reg_id: str) -> PreregistrationRow | None:
        """The stored pre-registration ``reg_id`` (its spec decoded, not re-checked); None when there is none."""
        rows = self.query("SELECT * FROM preregistrations WHERE id = ?", (reg_id,))
        return self._preregistration_row(rows[0]) if rows else None

    def preregistrations(self) -> list[PreregistrationRow]:
        """Every stored pre-registration, oldest first, run or not (``atb view`` lists them all)."""
        return [self._preregistration_row(r) for r in self.query("SELECT * FROM preregistrations ORDER BY created_at, id")]

    @staticmethod
    def _preregistration_row(r: Any) -> PreregistrationRow:
        return PreregistrationRow(
            id=r["id"], spec=json.loads(r["spec_json"]), spec_sha256=r["spec_sha256"],
            protocol_version=r["protocol_version"], protocol_sha256=r["protocol_sha256"], created_at=r["created_at"])

    def task_metadata(self, task_id: str) -> dict[str, Any] | None:
        """The metadata stored with task ``task_id`` (``add_task``); None when the task is not stored."""
        rows = self.query("SELECT metadata_json FROM tasks WHERE id = ?", (task_id,))
        if not rows:
            return None
        meta: dict[str, Any] = json.loads(rows[0][0])
        return meta

    def report_counts(self, kind: str) -> dict[str, int]:
        """Subject -> how many reports of ``kind`` are stored about it."""
        return {str(r[0]): int(r[1]) for r in self.query(
            "SELECT subject, count(*) FROM reports WHERE kind = ? GROUP BY subject", (kind,))}
