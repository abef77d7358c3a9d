"""Reading and writing the campaign tables of a :class:`SqliteStore`.

The tables, and the rules that refuse bad rows (a usable iteration without an accepted verdict, an
iteration past the budget, a verdict for another task, a registration the store lacks), are in
``harness/store/schema.sql``; this module only builds rows and reads them back as pydantic records.
Every row is written through ``SqliteStore.append`` so it takes its place in the store's hash chain.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from harness.campaigns._models import CampaignInfo, CampaignOutcome, IterationRecord, IterationUsage
from harness.records import canonical_json, utc_now
from harness.store import NotFound, SqliteStore
from protocol import ProtocolRef


def insert_row(store: SqliteStore, table: str, row: dict[str, Any]) -> None:
    """Insert one row in its own transaction, as the next link of the store's hash chain.

    Raises:
        IngestRejected: a rule of the schema refused the row; nothing was written.
    """
    store.append(table, row)


def stamp(ref: ProtocolRef) -> dict[str, str]:
    return {"protocol_version": ref.version, "protocol_sha256": ref.sha256}


def _campaign(r: sqlite3.Row) -> CampaignInfo:
    return CampaignInfo(
        id=r["id"], task_id=r["task_id"], kind=r["kind"], tuner_spec=r["tuner_spec"], seed=r["seed"],
        budget=r["budget"], session_id=r["session_id"], device_sha256=r["device_sha256"],
        protocol_version=r["protocol_version"], protocol_sha256=r["protocol_sha256"],
        preregistration_id=r["preregistration_id"], arm=r["arm"], config=json.loads(r["config_json"]),
        created_at=r["created_at"])


def add_campaign(store: SqliteStore, info: CampaignInfo) -> None:
    insert_row(store, "campaigns", {
        "id": info.id, "task_id": info.task_id, "kind": info.kind, "tuner_spec": info.tuner_spec,
        "seed": info.seed, "budget": info.budget, "session_id": info.session_id,
        "device_sha256": info.device_sha256, "preregistration_id": info.preregistration_id,
        "arm": info.arm, "config_json": canonical_json(info.config),
        "protocol_version": info.protocol_version, "protocol_sha256": info.protocol_sha256,
        "created_at": info.created_at})


def get_campaign(store: SqliteStore, campaign_id: str) -> CampaignInfo:
    """Raises NotFound naming the store when there is no such campaign."""
    rows = store.query("SELECT * FROM campaigns WHERE id = ?", (campaign_id,))
    if not rows:
        raise NotFound(f"no campaign (run) {campaign_id!r} in {store.path}; `atb run` prints run ids")
    return _campaign(rows[0])


def list_campaigns(store: SqliteStore, *, preregistration_id: str | None = None) -> list[CampaignInfo]:
    if preregistration_id is None:
        rows = store.query("SELECT * FROM campaigns ORDER BY created_at")
    else:
        rows = store.query("SELECT * FROM campaigns WHERE preregistration_id = ? ORDER BY created_at",
                           (preregistration_id,))
    return [_campaign(r) for r in rows]


def get_iterations(store: SqliteStore, campaign_id: str) -> list[IterationRecord]:
    """Every stored iteration of a campaign, in index order, joined with its verdict's numbers."""
    rows = store.query(
        "SELECT i.*, v.status AS v_status, v.ratio AS v_ratio, v.ci_low AS v_lo, v.ci_high AS v_hi, "
        "v.gates_json AS v_gates, json_extract(v.detail_json, '$.confinement') AS v_confinement "
        "FROM iterations i LEFT JOIN verdicts v ON v.id = i.verdict_id "
        "WHERE i.campaign_id = ? ORDER BY i.idx", (campaign_id,))
    out: list[IterationRecord] = []
    for r in rows:
        out.append(IterationRecord(
            campaign_id=r["campaign_id"], idx=r["idx"], candidate_sha256=r["candidate_sha256"],
            verdict_id=r["verdict_id"], usable=bool(r["usable"]), unusable_reason=r["unusable_reason"],
            usage=IterationUsage(tokens_in=r["tokens_in"], tokens_out=r["tokens_out"], cost_usd=r["cost_usd"],
                                 model_calls=r["model_calls"], truncated_calls=r["truncated_calls"]),
            status=(store.effective_status(r["verdict_id"]) if r["verdict_id"] else None),
            speedup=r["v_ratio"], ci_low=r["v_lo"], ci_high=r["v_hi"],
            gates=json.loads(r["v_gates"]) if r["v_gates"] else [],
            confinement=json.loads(r["v_confinement"]) if r["v_confinement"] else {},
            detail=json.loads(r["detail_json"]), created_at=r["created_at"]))
    return out


def get_outcome(store: SqliteStore, campaign_id: str) -> CampaignOutcome | None:
    rows = store.query("SELECT * FROM campaign_outcomes WHERE campaign_id = ?", (campaign_id,))
    if not rows:
        return None
    r = rows[0]
    return CampaignOutcome(campaign_id=r["campaign_id"], status=r["status"],
                           truncated_fraction=r["truncated_fraction"], reason=r["reason"],
                           detail=json.loads(r["detail_json"]), created_at=r["created_at"])


def add_outcome(store: SqliteStore, outcome: CampaignOutcome, ref: ProtocolRef) -> None:
    insert_row(store, "campaign_outcomes", {
        "campaign_id": outcome.campaign_id, "status": outcome.status,
        "truncated_fraction": outcome.truncated_fraction, "reason": outcome.reason,
        "detail_json": canonical_json(outcome.detail), "created_at": outcome.created_at, **stamp(ref)})


def now() -> str:
    return utc_now()
