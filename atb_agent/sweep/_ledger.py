"""The sweep's own records in the results store: the sweep's registration and every campaign attempt.

Why in the store (as ``reports`` rows, stamped and append-only like every result) rather than in a
side file: a sweep spans machines, and the store is the one place all of them share. A restarted
driver reads from here which campaigns have finished (never run again) and which must resume.

A campaign's identity is (sweep id, task, tuner, seed), :attr:`CampaignKey.key`. Random search takes
the campaign id the sweep derives from the key; the LLM and entry-point tuners choose their own id,
so the key is written into the campaign's stored config (``sweep_campaign``) and found from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from atb_agent.sweep._errors import SweepError
from atb_agent.sweep._node import NodeFingerprint
from atb_agent.sweep._spec import CampaignKey, ResolvedSweep
from harness.records import utc_now
from protocol import ProtocolRef

if TYPE_CHECKING:
    from harness.store import ResultStore

SWEEP_KIND = "sweep"
ATTEMPT_KIND = "sweep_attempt"
CONFIG_KEY = "sweep_campaign"


class CampaignState(BaseModel):
    """What the store says about one campaign of the sweep."""

    model_config = ConfigDict(frozen=True)
    key: str
    campaign_id: str | None = None
    iterations: int = 0
    usable: int = 0
    outcome: str | None = None       # completed | infrastructure_defect | aborted | None (unfinished)
    attempts: int = 0


def register_sweep(store: ResultStore, sweep: ResolvedSweep, ref: ProtocolRef) -> bool:
    """Record the sweep once; return True when it was already stored (a restart).

    Raises:
        SweepError: a sweep of this id is stored with another spec (an edited spec kept its ``id``).
    """
    stored = store.reports(SWEEP_KIND, sweep.sweep_id)
    if stored:
        had = stored[0]["body"].get("spec_sha256")
        if had != sweep.spec_sha256:
            raise SweepError(f"sweep {sweep.sweep_id!r} is stored with another spec (digest {str(had)[:12]}…, this "
                             f"spec {sweep.spec_sha256[:12]}…): give the edited spec a new id")
        return True
    store.add_report(SWEEP_KIND, sweep.sweep_id, {
        "spec_sha256": sweep.spec_sha256, "spec": sweep.spec.model_dump(mode="json"),
        "campaigns": [k.key for k in sweep.campaigns], "registered_at": utc_now()}, ref)
    return False


def record_attempt(store: ResultStore, key: CampaignKey, *, campaign_id: str | None, node: NodeFingerprint,
                   pid: int, attempt_of: int, ref: ProtocolRef) -> str:
    """One row per time a worker takes up a campaign: which node and process, resuming what."""
    return str(store.add_report(ATTEMPT_KIND, key.key, {
        "sweep_id": key.sweep_id, "task_id": key.task_id, "tuner": key.tuner, "seed": key.seed,
        "campaign_id": campaign_id, "pid": pid, "attempt": attempt_of, "node": node.model_dump(mode="json"),
        "node_sha256": node.sha256, "started_at": utc_now()}, ref))


def attempts(store: ResultStore, key: CampaignKey) -> list[dict[str, Any]]:
    return list(store.reports(ATTEMPT_KIND, key.key))


def _sweep_campaign_ids(store: ResultStore, keys: list[CampaignKey]) -> dict[str, list[tuple[str, str]]]:
    """key -> [(campaign id, created_at)] for every stored campaign of these keys."""
    by_id = {k.campaign_id: k.key for k in keys}
    wanted = {k.key for k in keys}
    found: dict[str, list[tuple[str, str]]] = {}
    for row in store.campaigns():
        key = by_id.get(row.id)
        if key is None:
            key = row.config.get(CONFIG_KEY) if isinstance(row.config, dict) else None
        if key in wanted:
            found.setdefault(key, []).append((row.id, row.created_at))
    return found


def states(store: ResultStore, keys: list[CampaignKey]) -> dict[str, CampaignState]:
    """Every key's current campaign (the newest not aborted, else the newest) and its counts."""
    ids = _sweep_campaign_ids(store, keys)
    outcomes = store.outcome_statuses()
    counts = store.iteration_counts()
    tries = store.report_counts(ATTEMPT_KIND)
    out: dict[str, CampaignState] = {}
    for k in keys:
        cands = sorted(ids.get(k.key, []), key=lambda x: x[1])
        live = [c for c, _ in cands if outcomes.get(c) != "aborted"]
        cid = live[-1] if live else (cands[-1][0] if cands else None)
        n, u = counts.get(cid, (0, 0)) if cid else (0, 0)
        out[k.key] = CampaignState(key=k.key, campaign_id=cid, iterations=n, usable=u,
                                   outcome=outcomes.get(cid) if cid else None, attempts=tries.get(k.key, 0))
    return out


__all__ = ["ATTEMPT_KIND", "CONFIG_KEY", "SWEEP_KIND", "CampaignState", "attempts", "record_attempt",
           "register_sweep", "states"]
