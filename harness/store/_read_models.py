"""Typed rows that the store's read methods return for the campaign, iteration, outcome, registration
and task tables, and the summary of a device's stored ceilings.

Why here and not in ``harness.tuning.campaigns``: the store is the only place that writes SQL (issue 18;
``tests/test_sql_in_store.py`` holds every module outside ``harness/store/`` to that), so it reads the
tables and hands back typed rows; ``harness.science.prereg``, ``harness.tuning.compare``,
``harness.tuning.reports`` and the sweep turn them into their own records. ``harness.tuning.campaigns``
keeps no second model of a campaign: :class:`CampaignRow` is its campaign record too. The store cannot
import those modules (they import the store), so these rows are its own: one field per stored column,
JSON columns decoded (``config_json`` -> ``config``, ``detail_json`` -> ``detail``...), nothing computed.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from harness.records import SubjectKind


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CampaignRow(_Row):
    """One ``campaigns`` row: one tuning run, a tuner spending a budget of iterations on one task in one
    session. The one model of a campaign: the store reads it back and ``harness.tuning.campaigns`` builds
    it to write one (``CampaignRecorder.open``) and hands it on (``get_campaign``, ``CampaignSummary``).

    ``protocol_version``/``protocol_sha256`` are never None in a stored row: the schema's
    ``campaigns_protocol_stamp`` rule (``missing_protocol_digest``) refuses a row without them.
    ``config`` is ``config_json`` decoded; an object when written through the API (the schema checks
    only that it is JSON, so readers that must not fail on a raw-written row test for a dict).
    """

    id: str
    task_id: str
    kind: SubjectKind
    tuner_spec: str
    seed: int
    budget: int
    session_id: str
    device_sha256: str
    preregistration_id: str | None = None
    arm: str | None = None
    config: Any = Field(default_factory=dict)
    protocol_version: str
    protocol_sha256: str
    created_at: str


class IterationRow(_Row):
    """One ``iterations`` row with the numbers of the verdict it records (None/empty without one)."""

    campaign_id: str
    idx: int
    candidate_sha256: str | None
    verdict_id: str | None
    usable: bool
    unusable_reason: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    model_calls: int
    truncated_calls: int
    detail: dict[str, Any]
    protocol_version: str | None
    protocol_sha256: str | None
    created_at: str
    verdict_ratio: float | None
    verdict_ci_low: float | None
    verdict_ci_high: float | None
    verdict_gates: list[dict[str, Any]]          # the verdict's gates_json decoded; [] without a verdict
    verdict_confinement: dict[str, Any]          # the verdict's detail "confinement"; {} when absent


class IterationCounts(NamedTuple):
    """How many iterations a campaign has stored, and how many of them are usable."""

    recorded: int
    usable: int


class OutcomeRow(_Row):
    """One ``campaign_outcomes`` row."""

    campaign_id: str
    status: Literal["completed", "infrastructure_defect", "aborted"]
    truncated_fraction: float
    reason: str
    detail: dict[str, Any]
    protocol_version: str | None
    protocol_sha256: str | None
    created_at: str


class PreregistrationRow(_Row):
    """One ``preregistrations`` row (its digest is the caller's to check against the spec)."""

    id: str
    spec: Any                         # spec_json decoded: an object when written through harness.science.prereg
    spec_sha256: str
    protocol_version: str | None
    protocol_sha256: str | None
    created_at: str


class CeilingsSummary(_Row):
    """The maximum of every ``ceilings`` row stored for one device fingerprint, and how many rows there are
    (one per session that measured or took ceilings on the device)."""

    bytes_per_s: float
    flops_per_s: float
    rows: int


__all__ = ["CampaignRow", "CeilingsSummary", "IterationCounts", "IterationRow", "OutcomeRow", "PreregistrationRow"]
