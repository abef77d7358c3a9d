"""Everything a report shows, read from the store only (never from a tuner's own logs)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.errors import HarnessError, IncomparableError
from harness.store import NotFound, SqliteStore, newest_checkpoint
from harness.tuning.campaigns import (
    CampaignSummary, IterationRecord, best_so_far, get_iterations, list_campaigns, summarize,
)
from harness.tuning.compare import ComparisonResult, compare_runs
from protocol import Protocol


class ReportError(HarnessError):
    """The report cannot be made: unknown run ids, or an output folder that cannot be written."""


class ArmData(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    label: str
    summary: CampaignSummary
    iterations: list[IterationRecord]
    curve: list[float | None]
    retests: list[dict[str, Any]]
    device: dict[str, Any]


class ReportData(BaseModel):
    model_config = ConfigDict(frozen=True)

    title: str
    arms: list[ArmData]
    comparison: ComparisonResult | None
    comparison_refusal: str | None
    ab_outcomes: list[dict[str, Any]]
    checkpoint: dict[str, Any] | None = None   # the signed head the report was written under (issue 27)


def _retests(store: SqliteStore, summary: CampaignSummary) -> list[dict[str, Any]]:
    """Held-out retest reports about this run or its best candidate (kind 'retest')."""
    keys = {summary.campaign.id, summary.best_candidate_sha256}
    out = []
    for r in store.reports("retest"):
        body = r["body"] if isinstance(r["body"], dict) else {}
        if r["subject"] in keys or body.get("run") in keys or body.get("campaign_id") in keys:
            out.append(r)
    return out


def collect(store: SqliteStore, run_ids: list[str], protocol: Protocol) -> ReportData:
    """Gather the runs named (a registration id stands for all runs claiming it).

    Raises:
        ReportError: an id names neither a run nor a registration.
    """
    ids: list[str] = []
    ab: list[dict[str, Any]] = []
    title_parts = []
    for rid in run_ids:
        if store.campaign(rid) is not None:
            ids.append(rid)
            title_parts.append(rid)
        elif store.preregistration(rid) is not None:
            claimed = list_campaigns(store, preregistration_id=rid)
            ids.extend(c.id for c in claimed)
            ab.extend(store.reports("ab_outcome", rid))
            title_parts.append(f"A/B {rid}")
        else:
            raise ReportError(f"{rid!r} is neither a run nor a registration in {store.path}")
    arms: list[ArmData] = []
    for cid in ids:
        s = summarize(store, cid)
        its = get_iterations(store, cid)
        try:
            device = store.device(s.campaign.device_sha256).model_dump(mode="json")
        except NotFound:
            device = {}
        label = f"{s.campaign.arm + ': ' if s.campaign.arm else ''}{s.campaign.tuner_spec} (seed {s.campaign.seed})"
        arms.append(ArmData(label=label, summary=s, iterations=its, curve=best_so_far(its, s.campaign.budget),
                            retests=_retests(store, s), device=device))
    comparison = refusal = None
    if len(ids) == 2:
        try:
            # a draft is shown at the top of the report (and in the comparison's protocol_draft), not refused
            comparison = compare_runs(store, ids[0], ids[1], protocol, allow_draft=True)
        except IncomparableError as exc:
            refusal = str(exc)
    cp = newest_checkpoint(store)
    signed = None if cp is None else {"head_seq": cp.head_seq, "head_hash": cp.head_hash,
                                      "signature_id": cp.signature_id, "signed_at": cp.signed_at,
                                      "store_head_seq": store.chain_head()[0]}
    return ReportData(title=", ".join(title_parts), arms=arms, comparison=comparison, comparison_refusal=refusal,
                      ab_outcomes=ab, checkpoint=signed)
