"""Reading and writing the campaign tables of a :class:`ResultStore`.

The tables, and the rules that refuse bad rows (a usable iteration without an accepted verdict, an
iteration past the budget, a verdict for another task, a registration the store lacks), are in
``harness/store/schema.sql``; this module only builds rows and turns the store's typed rows (its read
methods: ``iterations``, ``campaign_outcome``) into pydantic records; a campaign is the store's own
:class:`CampaignRow` (``campaign``, ``campaigns``), read and written as it is. It writes no SQL. Every row is written through ``ResultStore.append`` so it takes its place in the store's
hash chain.
"""

from __future__ import annotations

from typing import Any

from harness.records import canonical_json, utc_now
from harness.store import CampaignRow, NotFound, ResultStore
from harness.tuning.campaigns._models import CampaignOutcome, IterationRecord, IterationUsage
from protocol import ProtocolRef


def insert_row(store: ResultStore, table: str, row: dict[str, Any]) -> None:
    """Insert one row in its own transaction, as the next link of the store's hash chain.

    Raises:
        IngestRejected: a rule of the schema refused the row; nothing was written.
    """
    store.append(table, row)


def stamp(ref: ProtocolRef) -> dict[str, str]:
    return {"protocol_version": ref.version, "protocol_sha256": ref.sha256}


def add_campaign(store: ResultStore, info: CampaignRow) -> None:
    insert_row(store, "campaigns", {
        "id": info.id, "task_id": info.task_id, "kind": info.kind, "tuner_spec": info.tuner_spec,
        "seed": info.seed, "budget": info.budget, "session_id": info.session_id,
        "device_sha256": info.device_sha256, "preregistration_id": info.preregistration_id,
        "arm": info.arm, "config_json": canonical_json(info.config),
        "protocol_version": info.protocol_version, "protocol_sha256": info.protocol_sha256,
        "created_at": info.created_at})


def get_campaign(store: ResultStore, campaign_id: str) -> CampaignRow:
    """Raises NotFound naming the store when there is no such campaign."""
    row = store.campaign(campaign_id)
    if row is None:
        raise NotFound(f"no campaign (run) {campaign_id!r} in {store.path}; `atb run` prints run ids")
    return row


def list_campaigns(store: ResultStore, *, preregistration_id: str | None = None) -> list[CampaignRow]:
    return store.campaigns(preregistration_id)


def get_iterations(store: ResultStore, campaign_id: str) -> list[IterationRecord]:
    """Every stored iteration of a campaign, in index order, joined with its verdict's numbers."""
    return [IterationRecord(
        campaign_id=r.campaign_id, idx=r.idx, candidate_sha256=r.candidate_sha256, verdict_id=r.verdict_id,
        usable=r.usable, unusable_reason=r.unusable_reason,
        usage=IterationUsage(tokens_in=r.tokens_in, tokens_out=r.tokens_out, cost_usd=r.cost_usd,
                             model_calls=r.model_calls, truncated_calls=r.truncated_calls),
        status=(store.effective_status(r.verdict_id) if r.verdict_id else None),
        speedup=r.verdict_ratio, ci_low=r.verdict_ci_low, ci_high=r.verdict_ci_high, gates=r.verdict_gates,
        confinement=r.verdict_confinement, detail=r.detail, created_at=r.created_at)
        for r in store.iterations(campaign_id)]


def get_outcome(store: ResultStore, campaign_id: str) -> CampaignOutcome | None:
    r = store.campaign_outcome(campaign_id)
    if r is None:
        return None
    return CampaignOutcome(campaign_id=r.campaign_id, status=r.status, truncated_fraction=r.truncated_fraction,
                           reason=r.reason, detail=r.detail, created_at=r.created_at)


def add_outcome(store: ResultStore, outcome: CampaignOutcome, ref: ProtocolRef) -> None:
    insert_row(store, "campaign_outcomes", {
        "campaign_id": outcome.campaign_id, "status": outcome.status,
        "truncated_fraction": outcome.truncated_fraction, "reason": outcome.reason,
        "detail_json": canonical_json(outcome.detail), "created_at": outcome.created_at, **stamp(ref)})


def now() -> str:
    return utc_now()
