"""What the pages of ``atb view`` show: typed view records built from the store's read models.

Why separate records: a template should format, never compute; and every number a page shows travels
with its :class:`Provenance` (protocol digest, draft or released, confinement, certified), so a number
cannot be rendered without the flags the store recorded for it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class Provenance(_View):
    """Where a number came from, as the store recorded it.

    ``confinement`` is ``confined`` (every arm ran confined), ``unconfined:<why>`` (an arm did not),
    ``not recorded``, or empty where no verdict stands behind the number; ``certified`` is True for an accepted verdict of a usable iteration (what
    ``atb retest`` calls a certified result), None where it does not apply.
    """

    protocol_version: str | None
    protocol_sha256: str | None
    draft: bool
    confinement: str = ""
    certified: bool | None = None
    signed: bool | None = None        # the verdict's row is covered by a trusted signed checkpoint


class CampaignCard(_View):
    """One campaign with its progress and best usable speedup (the index, sweep and A/B tables)."""

    id: str
    task_id: str
    kind: str
    tuner_spec: str
    seed: int
    budget: int
    arm: str | None
    preregistration_id: str | None
    sweep_id: str | None
    created_at: str
    recorded: int
    usable: int
    outcome: str | None               # completed | infrastructure_defect | aborted | None (running)
    best_speedup: float | None
    best_ci: tuple[float, float] | None
    best_idx: int | None
    provenance: Provenance

    @property
    def progress(self) -> float:
        return self.recorded / self.budget if self.budget else 0.0


class SweepCard(_View):
    """A sweep registered in the store (a ``sweep`` report) and how far its campaigns have got."""

    id: str
    spec_sha256: str
    planned: int
    started: int
    finished: int
    iterations: int
    budget_total: int
    registered_at: str
    provenance: Provenance


class IterationView(_View):
    """One row of a campaign's iteration table."""

    idx: int
    verdict_id: str | None
    candidate_sha256: str | None
    status: str | None
    usable: bool
    unusable_reason: str
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    gates_failed: list[str]
    model_calls: int
    truncated_calls: int
    tokens_in: int
    tokens_out: int
    provenance: Provenance


class GateLine(_View):
    name: str
    passed: bool
    detail: str


class DiffLine(_View):
    kind: str                         # "add", "del", "ctx", "hunk"
    text: str


class VerdictView(_View):
    """A verdict with everything its page shows."""

    id: str
    task_id: str
    status: str
    effective_status: str
    correct: bool
    reason: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    ci_relative_halfwidth: float | None
    baseline_label: str
    session_id: str
    device_sha256: str
    candidate_sha256: str
    seeds: list[int]
    gates: list[GateLine]
    confinement_arms: dict[str, str]
    created_at: str
    chain_seq: int | None
    candidate_samples: list[float]
    baseline_samples: list[float]
    unit: str
    provenance: Provenance
    detail: dict[str, Any] = Field(default_factory=dict)


class TranscriptLine(_View):
    """One record of a transcript as the transcript page lays it out (anchor ``r<seq>``)."""

    seq: int
    kind: str
    iteration: int | None
    voided: bool
    title: str
    badges: list[str] = Field(default_factory=list)
    text: str = ""
    text_cut: int = 0                 # characters of ``text`` left out of the page (the file holds them)
    tool_calls: list[dict[str, str]] = Field(default_factory=list)
    verdict_id: str | None = None
    truncated: bool = False


class TranscriptView(_View):
    campaign_id: str
    path: str | None
    problem: str = ""                 # why no verified transcript is shown ("" when it is)
    intact: bool = False
    header: dict[str, Any] = Field(default_factory=dict)
    lines: list[TranscriptLine] = Field(default_factory=list)
    truncated_turns: int = 0
    model_turns: int = 0


class ArmLine(_View):
    """One arm of a registration as registered (its tuner, options and endpoint are part of the digest),
    and how many of the campaigns it owes (one per registered seed) are stored and finished."""

    role: Literal["control", "treatment"]
    name: str
    tuner: str
    config: dict[str, Any] = Field(default_factory=dict)
    base_url: str | None = None
    runs: int = 0                     # campaigns claiming this arm
    finished: int = 0                 # of which have an outcome


class ABView(_View):
    """A pre-registration, the campaigns claiming it, and its recorded outcomes with their delivery check.

    ``delivery`` is where its treatment-delivery checkpoint stands: ``not-run`` (no arm has a campaign
    yet), ``running`` (arms' campaigns stored, not all finished), ``undecided`` (every owed campaign
    finished, no outcome recorded yet), ``delivered`` / ``not-delivered`` (the newest outcome's check).
    """

    id: str
    spec: dict[str, Any]
    spec_sha256: str
    created_at: str
    provenance: Provenance
    campaigns: list[CampaignCard]
    outcomes: list[dict[str, Any]]
    arms: list[ArmLine] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=list)
    budget: int | None = None
    delivery: Literal["not-run", "running", "undecided", "delivered", "not-delivered"] = "not-run"
    delivery_text: str = "not run yet"


class KBCell(_View):
    campaign_id: str
    best_speedup: float | None
    best_ci: tuple[float, float] | None
    usable: int
    recorded: int
    budget: int
    outcome: str | None
    provenance: Provenance


class KBRow(_View):
    problem: str
    task_id: str
    cells: dict[str, list[KBCell]]


__all__ = ["ABView", "ArmLine", "CampaignCard", "DiffLine", "GateLine", "IterationView", "KBCell", "KBRow", "Provenance",
           "SweepCard", "TranscriptLine", "TranscriptView", "VerdictView"]
