"""Signed evidence of a campaign's verdicts: what a replay checks recorded verdicts against (issue 27).

Why: a transcript is hash-chained but keyless, so a forged one (verdicts changed, request bodies patched
to match, chain recomputed) replays byte-for-byte. A replay that claims its verdicts were reproduced
must therefore re-measure, or compare with rows the transcript's author cannot forge: the campaign's
iterations and verdicts in a store that verifies (chain, rules, checkpoints) and whose rows lie under a
checkpoint signed by the trusted key. This module reads those rows read-only; the replay decides.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.store._checkpoint import CheckpointReport
from harness.store._errors import StoreError


class EvidenceIteration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    idx: int
    verdict_id: str | None
    chain_seq: int
    signed: bool


class EvidenceVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    status: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    chain_seq: int
    signed: bool


class CampaignEvidence(BaseModel):
    """A campaign's iterations and verdicts as a verified store holds them, each marked signed or not."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    store: str
    verified: bool
    first_problem: str | None
    checkpoint: CheckpointReport | None
    campaign_id: str
    campaign_found: bool
    iterations: dict[int, EvidenceIteration]
    verdicts: dict[str, EvidenceVerdict]

    @property
    def signature_id(self) -> str | None:
        return self.checkpoint.signature_id if self.checkpoint is not None else None


_ITERATIONS = "SELECT idx, verdict_id, chain_seq FROM iterations WHERE campaign_id = ?"
_VERDICTS = ("SELECT v.id, v.status, v.ratio, v.ci_low, v.ci_high, v.chain_seq FROM verdicts v "
             "JOIN iterations i ON i.verdict_id = v.id WHERE i.campaign_id = ?")
_CAMPAIGN = "SELECT 1 FROM campaigns WHERE id = ?"


def _collect(run: Any, name: str, result: Any, campaign_id: str) -> CampaignEvidence:
    covered = result.checkpoint.covered_seq if result.checkpoint is not None else 0
    its = {int(r[0]): EvidenceIteration(idx=int(r[0]), verdict_id=r[1], chain_seq=int(r[2]),
                                        signed=int(r[2]) <= covered) for r in run(_ITERATIONS, (campaign_id,))}
    vs = {str(r[0]): EvidenceVerdict(id=str(r[0]), status=str(r[1]), ratio=r[2], ci_low=r[3], ci_high=r[4],
                                     chain_seq=int(r[5]), signed=int(r[5]) <= covered)
          for r in run(_VERDICTS, (campaign_id,))}
    return CampaignEvidence(store=name, verified=bool(result.ok), first_problem=result.first_problem,
                            checkpoint=result.checkpoint, campaign_id=campaign_id,
                            campaign_found=bool(run(_CAMPAIGN, (campaign_id,))), iterations=its, verdicts=vs)


def campaign_evidence(db: Any, campaign_id: str, key_dir: Path | str | None = None) -> CampaignEvidence:
    """The campaign's rows in ``db`` (a SQLite path, a ``postgresql://`` URL or an open store), after the
    store's full verification against ``key_dir``'s key and log. Writes nothing to a SQLite file.

    Raises:
        StoreError: no such store, or it cannot be read.
    """
    from harness.store._open import sqlite_path, store_kind
    from harness.store._verify import verify_path

    if not isinstance(db, (str, Path)):
        result = db.verify(key_dir)
        return _collect(lambda sql, p: db.query(sql, p), str(db.path), result, campaign_id)
    if store_kind(db) == "postgresql":
        from harness.store._open import open_store

        store = open_store(db)
        try:
            return campaign_evidence(store, campaign_id, key_dir)
        finally:
            store.close()
    path = sqlite_path(db)
    result = verify_path(path, key_dir)
    conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, isolation_level=None)
    try:
        return _collect(lambda sql, p: conn.execute(sql, p).fetchall(), str(path), result, campaign_id)
    except sqlite3.Error as exc:
        raise StoreError(f"{path} cannot be read as a results store: {exc}") from exc
    finally:
        conn.close()


def sqlite_holds_campaign(path: Path, campaign_id: str) -> bool:
    """Whether the SQLite file at ``path`` is a results store holding campaign ``campaign_id`` (read-only;
    False for anything that is not such a file)."""
    try:
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        return bool(conn.execute(_CAMPAIGN, (campaign_id,)).fetchall())
    except sqlite3.Error:
        return False
    finally:
        conn.close()


__all__ = ["CampaignEvidence", "EvidenceIteration", "EvidenceVerdict", "campaign_evidence", "sqlite_holds_campaign"]
