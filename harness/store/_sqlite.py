"""The SQLite results store: one file, WAL, foreign keys on, ingest rules inside the database.

Why rules live in SQL and not (only) in Python: a result that bypasses this module, a raw INSERT from
a script or another tool, must meet the same bar. The Python layer only translates the database's
refusals into :class:`IngestRejected` with the rule's name. A server database can replace this file by
implementing :class:`harness.store.ResultStore` with the same tables and rules.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
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
from harness.store._errors import IngestRejected, NotFound, StoreError
from protocol import Protocol, ProtocolRef

SCHEMA_VERSION = 1

# Tables whose rows must carry a known protocol digest, and that are append-only.
STAMPED_TABLES = (
    "devices", "sessions", "ceilings", "tasks", "candidates", "measurement_sets", "measurements",
    "verdicts", "quarantine_reviews", "preregistrations", "campaigns", "iterations",
    "campaign_outcomes", "reports",
)
APPEND_ONLY_TABLES = ("protocols",) + STAMPED_TABLES

_RULE_RE = re.compile(r"atb_rule:(?P<rule>[a-z_]+): (?P<msg>.*)")


def _stamp_triggers(table: str) -> str:
    return f"""
CREATE TRIGGER IF NOT EXISTS {table}_protocol_stamp BEFORE INSERT ON {table}
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:missing_protocol_digest: every {table} row must carry protocol_version and protocol_sha256')
    WHERE NEW.protocol_sha256 IS NULL OR NEW.protocol_version IS NULL;
    SELECT RAISE(ABORT, 'atb_rule:unknown_protocol_digest: {table} row carries a protocol digest the store does not know')
    WHERE NOT EXISTS (SELECT 1 FROM protocols WHERE sha256 = NEW.protocol_sha256 AND version = NEW.protocol_version);
END;
"""


def _append_only_triggers(table: str) -> str:
    return f"""
CREATE TRIGGER IF NOT EXISTS {table}_no_update BEFORE UPDATE ON {table}
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:append_only: {table} rows cannot be changed once stored');
END;
CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table}
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:append_only: {table} rows cannot be deleted');
END;
"""


def schema_sql() -> str:
    """The full schema: tables and rules from schema.sql plus the generated stamp/append-only triggers."""
    base = resources.files("harness.store").joinpath("schema.sql").read_text()
    generated = "".join(_stamp_triggers(t) for t in STAMPED_TABLES)
    generated += "".join(_append_only_triggers(t) for t in APPEND_ONLY_TABLES)
    return base + generated


def translate(exc: sqlite3.Error) -> StoreError:
    """Turn a database refusal into a typed error naming the rule."""
    text = str(exc)
    m = _RULE_RE.search(text)
    if m:
        return IngestRejected(m.group("rule"), m.group("msg"))
    if isinstance(exc, sqlite3.IntegrityError):
        if "FOREIGN KEY" in text:
            return IngestRejected("foreign_key", "a row refers to a device, session, set or verdict that is not stored")
        if "UNIQUE" in text:
            return IngestRejected("duplicate", text)
        if "CHECK" in text or "NOT NULL" in text:
            return IngestRejected("constraint", text)
    return StoreError(f"store error: {text}")


def connect(path: Path | str) -> sqlite3.Connection:
    """Open a connection with the settings every user of the file must have (foreign keys on)."""
    conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


class SqliteStore:
    """The embedded results store. Every write is one transaction; a refused write changes nothing."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = connect(self.path)
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.executescript(schema_sql())
            self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the results store at {self.path}: {exc}") from exc
        self._register_known_protocols()

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

    def _insert(self, conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(row.values()))

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
        """Make a verified protocol known to the store (idempotent)."""
        ref = protocol.ref()
        if not self.query("SELECT 1 FROM protocols WHERE sha256 = ?", (ref.sha256,)):
            with self.transaction() as c:
                c.execute(
                    "INSERT INTO protocols (sha256, version, paired_seeds_required, registered_at) VALUES (?,?,?,?)",
                    (ref.sha256, ref.version, protocol.seeds.paired_seeds, utc_now()),
                )
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
