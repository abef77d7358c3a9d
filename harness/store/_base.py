"""``StoreBase``: what the SQLite and PostgreSQL results stores share, above their two dialects.

Why a shared base under the protocol: both stores hold the same tables, rules and store-wide hash chain,
and every record-level method (protocols and their expected gates, devices, sessions, ceilings, tasks,
candidates, measurement sets, verdicts, quarantine reviews, reports, the campaign tables' typed rows, the
chain head and its checkpoint) is the same SQL over either database (``json_extract`` is a function of
``schema_pg.sql``; ``?`` placeholders are translated by the PostgreSQL dialect). Written once here, the
two can no more drift apart in what they store than in the rules that check it. LangGraph keeps its
checkpoint savers this way: ``SqliteSaver`` and ``BasePostgresSaver`` are siblings under
``BaseCheckpointSaver``, and one conformance suite holds both.

A dialect (:class:`harness.store.SqliteStore`, ``harness.store._postgres.PostgresStore``) supplies only the
plumbing: opening and checking the schema, the connection, a write transaction, the chained insert of one
row (:meth:`StoreBase._insert`), ``query`` and ``verify``. Neither dialect subclasses the other.
Callers outside ``harness/store/`` never name either class: they open a store with ``open_store(url)``
and type against :class:`harness.store.ResultStore` (``tests/test_store_constructors.py``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

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
from harness.store._chain import CHAINED_TABLES, MAX_SEQ_SQL, ColumnSpec
from harness.store._errors import NotFound, StoreError
from harness.store._read_models import (CampaignRow, CeilingsSummary, IterationCounts, IterationRow, OutcomeRow,
                                        PreregistrationRow)
from protocol import Protocol, ProtocolRef

if TYPE_CHECKING:
    from harness.store._verify import StoreVerification


class StoreBase(ABC):
    """The record-level methods of every results store, written once over the dialect's plumbing.

    Every write is one transaction; a refused write raises ``IngestRejected(rule)`` and changes nothing.
    ``path`` names the store in messages: the SQLite file, or the server URL without its password.
    """

    path: Path | str
    _specs: dict[str, list[ColumnSpec]]

    # ------------------------------------------------------------------ the dialect's plumbing
    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Any]:
        """One atomic write under the store's write lock, yielding an executor of ``?``-placeholder SQL.

        Raises:
            IngestRejected: a rule refused a statement in it; everything in it was rolled back.
        """

    @abstractmethod
    def _insert(self, conn: Any, table: str, row: dict[str, Any]) -> None:
        """Insert one row as the chain's next link (inside :meth:`transaction`).

        Raises:
            StoreError: no such table, or the stored row does not hash as written; rolled back.
        """

    @abstractmethod
    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[Any]:
        """Rows of one read, readable by position and by column name."""

    @abstractmethod
    def verify(self, key_dir: Path | str | None = None) -> StoreVerification:
        """Every check of the schema, the chain, the rules and the signed checkpoints; writes nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    def session(self, session_id: str) -> Any:
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
    def _insert_measurement_set(self, c: Any, ms: MeasurementSet) -> None:
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

    def _verdict_from_row(self, r: Any) -> Verdict:
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


__all__ = ["StoreBase"]
