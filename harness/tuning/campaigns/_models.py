"""Pydantic records of iterations, outcomes and summaries of campaigns, as read back from the store.

A campaign itself is the store's :class:`harness.store.CampaignRow` (one model of a ``campaigns`` row).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.store import CampaignRow

OutcomeStatus = Literal["completed", "infrastructure_defect", "aborted"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IterationUsage(_Frozen):
    """Model usage in one iteration (all zero for the random-search baseline)."""

    tokens_in: int = Field(default=0, ge=0)
    tokens_out: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0)
    model_calls: int = Field(default=0, ge=0)
    truncated_calls: int = Field(default=0, ge=0)


class IterationRecord(_Frozen):
    """One stored iteration. ``speedup`` and its interval come from the verdict, against the honest baseline."""

    campaign_id: str
    idx: int
    candidate_sha256: str | None
    verdict_id: str | None
    usable: bool
    unusable_reason: str
    usage: IterationUsage
    status: str | None = None            # the verdict's effective status, None without a verdict
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    gates: list[dict[str, Any]] = Field(default_factory=list)
    confinement: dict[str, str] = Field(default_factory=dict)  # per arm, from the verdict ("unconfined:..." shows)
    detail: dict[str, Any] = Field(default_factory=dict)
    created_at: str


class CampaignOutcome(_Frozen):
    campaign_id: str
    status: OutcomeStatus
    truncated_fraction: float
    reason: str
    detail: dict[str, Any] = Field(default_factory=dict)
    created_at: str


class CampaignSummary(_Frozen):
    """What ``atb run`` reports: the candidate sequence, usable count and the best usable speedup."""

    campaign: CampaignRow
    iterations_recorded: int
    usable_iterations: int
    candidate_sequence: list[str | None]
    best_speedup: float | None
    best_ci: tuple[float, float] | None
    best_iteration: int | None
    best_candidate_sha256: str | None
    unusable_reasons: dict[str, int]
    tokens_in: int
    tokens_out: int
    cost_usd: float
    truncated_fraction: float
    outcome: CampaignOutcome | None
