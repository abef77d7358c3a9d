"""The read side of ``atb view``: view records built from the store's typed read methods only.

Why a cache, and why it is sound: every result table is append-only (the schema refuses UPDATE and
DELETE), so a campaign's iterations are fixed once counted; a campaign's summary is cached under the
key (campaign id, iterations stored, outcome), which any new row changes. The whole store is read
through one connection guarded by one lock: SQLite connections are not for concurrent use, and pages
are served from a thread pool.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from harness.records import GateResult
from harness.store import CampaignRow, IterationRow, NotFound, ResultStore
from harness.tuning.campaigns import best_so_far, get_iterations
import protocol
from protocol import is_released_digest

from atb_agent.view._models import (ABView, ArmLine, CampaignCard, DiffLine, GateLine, IterationView, KBCell, KBRow,
                                    Provenance, SweepCard, VerdictView)

AB_OUTCOME = "ab_outcome"             # harness.science.prereg.record_outcome's report kind
PREREG_DIR = Path(protocol.__file__).resolve().parent / "preregistrations"
SWEEP_REPORT = "sweep"                 # atb_agent.sweep._ledger.SWEEP_KIND (not imported: Ray stays unloaded)
SWEEP_CONFIG_KEY = "sweep_id"
KERNELBENCH_PREFIX = "kb:"             # harness.tasks: a KernelBench file's task id is kb:<stem>:<digest>


def confinement_label(arms: dict[str, Any]) -> str:
    """One word for a verdict's per-arm confinement: confined, unconfined:<why>, or not recorded."""
    if not arms:
        return "not recorded"
    for arm, value in sorted(arms.items()):
        text = str(value)
        if text.startswith("unconfined") or not text:
            return f"unconfined:{arm}:{text.split(':', 1)[-1] or 'empty'}"
    return "confined"


def provenance(version: str | None, sha: str | None, *, confinement: dict[str, Any] | None = None,
               certified: bool | None = None, signed: bool | None = None) -> Provenance:
    return Provenance(protocol_version=version, protocol_sha256=sha, draft=not (sha and is_released_digest(sha)),
                      confinement=confinement_label(confinement) if confinement is not None else "",
                      certified=certified, signed=signed)


class ViewData:
    """Reads the store for the pages; every method takes the store lock itself."""

    def __init__(self, store: ResultStore) -> None:
        self.store = store
        self.lock = threading.RLock()
        self._cards: dict[tuple[str, int, str | None], CampaignCard] = {}
        self._signed: tuple[tuple[int, str], int | None] | None = None

    def signed_seq(self) -> int | None:
        """The chain_seq the newest trusted checkpoint signs (None: none), cached per chain head: checking
        each checkpoint's signature costs tens of milliseconds on a store with a hundred of them."""
        from harness.store import newest_checkpoint

        with self.reading() as s:
            head = s.chain_head()
            if self._signed is None or self._signed[0] != head:
                cp = newest_checkpoint(s)
                self._signed = (head, cp.head_seq if cp is not None else None)
            return self._signed[1]

    @contextmanager
    def reading(self) -> Iterator[ResultStore]:
        with self.lock:
            yield self.store

    # ------------------------------------------------------------------ head (live updates)
    def head(self) -> tuple[int, str]:
        with self.reading() as s:
            return s.chain_head()

    # ------------------------------------------------------------------ campaigns
    def _card(self, row: CampaignRow, recorded: int, usable: int, outcome: str | None) -> CampaignCard:
        key = (row.id, recorded, outcome)
        hit = self._cards.get(key)
        if hit is not None:
            return hit
        best: IterationRow | None = None
        if usable:
            for it in self.store.iterations(row.id):
                # a usable iteration has an accepted verdict (rule usable_iteration_not_accepted)
                if it.usable and it.verdict_ratio is not None and (best is None or it.verdict_ratio > (best.verdict_ratio or 0)):
                    best = it
        ci = (best.verdict_ci_low, best.verdict_ci_high) if (
            best and best.verdict_ci_low is not None and best.verdict_ci_high is not None) else None
        config = row.config if isinstance(row.config, dict) else {}
        sweep = config.get(SWEEP_CONFIG_KEY)
        card = CampaignCard(
            id=row.id, task_id=row.task_id, kind=row.kind, tuner_spec=row.tuner_spec, seed=row.seed,
            budget=row.budget, arm=row.arm, preregistration_id=row.preregistration_id,
            sweep_id=sweep if isinstance(sweep, str) else None, created_at=row.created_at, recorded=recorded,
            usable=usable, outcome=outcome, best_speedup=best.verdict_ratio if best else None, best_ci=ci,
            best_idx=best.idx if best else None,
            provenance=provenance(row.protocol_version, row.protocol_sha256,
                                  confinement=best.verdict_confinement if best else None,
                                  certified=True if best else None))
        self._cards[key] = card
        return card

    def campaign_cards(self, preregistration_id: str | None = None) -> list[CampaignCard]:
        """Every campaign (newest first), with progress and best usable speedup."""
        with self.reading() as s:
            rows = s.campaigns(preregistration_id)
            counts = s.iteration_counts()
            outcomes = s.outcome_statuses()
        cards = []
        for r in rows:
            n, u = counts.get(r.id, (0, 0))
            with self.reading():         # per campaign, so another page's reads interleave with a cold pass
                cards.append(self._card(r, n, u, outcomes.get(r.id)))
        return sorted(cards, key=lambda c: c.created_at, reverse=True)

    def sweeps(self, cards: list[CampaignCard]) -> list[SweepCard]:
        """The sweeps the store registered, with how many of their campaigns started and finished."""
        with self.reading() as s:
            regs = s.reports(SWEEP_REPORT)
        out: list[SweepCard] = []
        for r in regs:
            body = r["body"] if isinstance(r["body"], dict) else {}
            mine = [c for c in cards if c.sweep_id == r["subject"]]
            spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
            planned = len(body.get("campaigns") or [])
            budget = int(spec.get("budget") or 0) if isinstance(spec, dict) else 0
            out.append(SweepCard(
                id=str(r["subject"]), spec_sha256=str(body.get("spec_sha256", "")), planned=planned,
                started=len(mine), finished=sum(1 for c in mine if c.outcome == "completed"),
                iterations=sum(c.recorded for c in mine), budget_total=budget * planned,
                registered_at=str(body.get("registered_at", r.get("created_at", ""))),
                provenance=provenance(mine[0].provenance.protocol_version if mine else None,
                                      mine[0].provenance.protocol_sha256 if mine else None)))
        return out

    def campaign(self, campaign_id: str) -> tuple[CampaignCard, list[IterationView], list[float | None], dict[str, Any]]:
        """A campaign's card, its iteration rows, its best-so-far curve and its outcome (dict, {} if running).

        Raises:
            NotFound: no such campaign.
        """
        with self.reading() as s:
            row = s.campaign(campaign_id)
            if row is None:
                raise NotFound(f"no campaign {campaign_id!r} in this store")
            records = get_iterations(s, campaign_id)  # type: ignore[arg-type]
            outcome = s.campaign_outcome(campaign_id)
            card = self._card(row, len(records), sum(1 for r in records if r.usable),
                              outcome.status if outcome else None)
        views = [IterationView(
            idx=r.idx, verdict_id=r.verdict_id, candidate_sha256=r.candidate_sha256, status=r.status,
            usable=r.usable, unusable_reason=r.unusable_reason, speedup=r.speedup, ci_low=r.ci_low,
            ci_high=r.ci_high, gates_failed=[str(g.get("name")) for g in r.gates if not g.get("passed")],
            model_calls=r.usage.model_calls, truncated_calls=r.usage.truncated_calls,
            tokens_in=r.usage.tokens_in, tokens_out=r.usage.tokens_out,
            provenance=provenance(row.protocol_version, row.protocol_sha256,
                                  confinement=r.confinement if r.verdict_id else None,
                                  certified=(r.usable and r.status == "accepted") if r.verdict_id else None))
            for r in records]
        curve = best_so_far(records, row.budget)
        return card, views, curve, (outcome.model_dump(mode="json") if outcome else {})

    # ------------------------------------------------------------------ verdicts and iterations
    def verdict(self, verdict_id: str, *, usable: bool | None = None) -> VerdictView:
        """Raises NotFound for an unknown verdict."""
        with self.reading() as s:
            v = s.verdict(verdict_id)
            effective = s.effective_status(verdict_id)
            seq = s.verdict_chain_seq(verdict_id)
            cand: list[float] = []
            base: list[float] = []
            unit = "ns"
            if v.candidate_set_id:
                ms = s.measurement_set(v.candidate_set_id)
                unit = ms.unit
                cand = [x for sample in ms.samples for x in sample.values]
            if v.baseline_set_id:
                base = [x for sample in s.measurement_set(v.baseline_set_id).samples for x in sample.values]
            covered = self.signed_seq()
        arms = v.detail.get("confinement") if isinstance(v.detail.get("confinement"), dict) else {}
        gates = [GateLine(name=g.name, passed=g.passed, detail=g.detail) for g in v.gates
                 if isinstance(g, GateResult)]
        return VerdictView(
            id=v.id, task_id=v.task_id, status=v.status, effective_status=effective, correct=v.correct,
            reason=v.reason, ratio=v.ratio, ci_low=v.ci_low, ci_high=v.ci_high,
            ci_relative_halfwidth=v.ci_relative_halfwidth, baseline_label=v.baseline_label, session_id=v.session_id,
            device_sha256=v.device_sha256, candidate_sha256=v.candidate_sha256, seeds=list(v.seeds), gates=gates,
            confinement_arms={str(k): str(x) for k, x in (arms or {}).items()}, created_at=v.created_at,
            chain_seq=seq, candidate_samples=cand, baseline_samples=base, unit=unit,
            provenance=provenance(v.protocol.version, v.protocol.sha256, confinement=arms or {},
                                  certified=(usable and effective == "accepted") if usable is not None else None,
                                  signed=(covered is not None and seq is not None and seq <= covered)),
            detail={k: x for k, x in v.detail.items() if k != "confinement"})

    def candidate(self, sha256: str | None) -> str | None:
        if not sha256:
            return None
        with self.reading() as s:
            try:
                return s.candidate_content(sha256)
            except NotFound:
                return None

    # ------------------------------------------------------------------ A/B and KernelBench
    def registrations(self, cards: list[CampaignCard]) -> list[ABView]:
        """Every registration in the store, run or not, newest first."""
        with self.reading() as s:
            outcomes = s.reports(AB_OUTCOME)
            ids = {r.id for r in s.preregistrations()}
        out = [v for v in (self.registration(rid, cards, outcomes) for rid in sorted(ids)) if v is not None]
        return sorted(out, key=lambda r: (r.created_at, r.id), reverse=True)

    def registration(self, reg_id: str, cards: list[CampaignCard],
                     outcomes: list[dict[str, Any]] | None = None) -> ABView | None:
        """One registration with its arms, its claiming campaigns and where its delivery checkpoint stands;
        None when the store holds no such id."""
        with self.reading() as s:
            row = s.preregistration(reg_id)
            if outcomes is None:
                outcomes = s.reports(AB_OUTCOME, reg_id)
        if row is None:
            return None
        spec = row.spec if isinstance(row.spec, dict) else {"spec": row.spec}
        mine = sorted([c for c in cards if c.preregistration_id == reg_id], key=lambda c: (c.seed, c.arm or ""))
        seeds = [int(x) for x in spec.get("seeds") or [] if isinstance(x, int)]
        arms = [_arm_line(role, spec.get(role), mine) for role in ("control", "treatment")]
        reg_outcomes = [o for o in outcomes if o["subject"] == reg_id]
        delivery, text = _delivery_state(reg_outcomes, mine, owed=len(seeds) * 2)
        budget = spec.get("budget")
        return ABView(id=row.id, spec=spec, spec_sha256=row.spec_sha256, created_at=row.created_at,
                      provenance=provenance(row.protocol_version, row.protocol_sha256), campaigns=mine,
                      outcomes=reg_outcomes, arms=arms, seeds=seeds,
                      budget=budget if isinstance(budget, int) else None, delivery=delivery, delivery_text=text)

    @staticmethod
    def kernelbench(cards: list[CampaignCard]) -> tuple[list[KBRow], list[str]]:
        """Rows per KernelBench problem, columns per arm (the A/B arm, else the tuner spec)."""
        rows: dict[str, KBRow] = {}
        arms: set[str] = set()
        for c in sorted(cards, key=lambda c: (c.task_id, c.seed)):
            if not c.task_id.startswith(KERNELBENCH_PREFIX):
                continue
            problem = c.task_id.split(":")[1] if c.task_id.count(":") >= 2 else c.task_id
            arm = c.arm or c.tuner_spec
            arms.add(arm)
            row = rows.setdefault(c.task_id, KBRow(problem=problem, task_id=c.task_id, cells={}))
            row.cells.setdefault(arm, []).append(KBCell(
                campaign_id=c.id, best_speedup=c.best_speedup, best_ci=c.best_ci, usable=c.usable,
                recorded=c.recorded, budget=c.budget, outcome=c.outcome, provenance=c.provenance))
        return sorted(rows.values(), key=lambda r: r.problem), sorted(arms)


def _arm_line(role: Literal["control", "treatment"], arm: Any, campaigns: list[CampaignCard]) -> ArmLine:
    arm = arm if isinstance(arm, dict) else {}
    name = str(arm.get("name") or role)
    claimed = [c for c in campaigns if c.arm == name]
    config = arm.get("config")
    base_url = arm.get("base_url")
    return ArmLine(role=role, name=name, tuner=str(arm.get("tuner") or ""),
                   config=config if isinstance(config, dict) else {},
                   base_url=base_url if isinstance(base_url, str) else None,
                   runs=len(claimed), finished=sum(1 for c in claimed if c.outcome is not None))


def _delivery_state(outcomes: list[dict[str, Any]], campaigns: list[CampaignCard], owed: int
                    ) -> tuple[Literal["not-run", "running", "undecided", "delivered", "not-delivered"], str]:
    """Where a registration's treatment-delivery checkpoint stands (see :class:`ABView`)."""
    if outcomes:
        body = outcomes[-1]["body"] if isinstance(outcomes[-1]["body"], dict) else {}
        delivery = body.get("delivery")
        if isinstance(delivery, dict) and delivery.get("delivered"):
            return "delivered", f"delivered (outcome {body.get('status', '?')}, {outcomes[-1]['created_at']})"
        return "not-delivered", f"NOT delivered: comparison void (outcome {body.get('status', '?')})"
    if not campaigns:
        return "not-run", "not run yet"
    finished = sum(1 for c in campaigns if c.outcome is not None)
    if owed and finished >= owed:
        return "undecided", f"all {owed} arm campaigns finished; not checked yet (run `atb ab` to decide)"
    return "running", f"arms running: {finished} of {owed or len(campaigns)} campaigns finished; not checked yet"


def source_diff(before: str | None, after: str | None, context: int = 3) -> list[DiffLine]:
    """The candidate's source against the previous iteration's, as a unified diff (all added when first)."""
    if after is None:
        return []
    a = (before or "").splitlines()
    b = after.splitlines()
    out: list[DiffLine] = []
    for line in difflib.unified_diff(a, b, "previous", "this", n=context, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        kind = "hunk" if line.startswith("@@") else "add" if line.startswith("+") else \
            "del" if line.startswith("-") else "ctx"
        out.append(DiffLine(kind=kind, text=line))
    return out


__all__ = ["KERNELBENCH_PREFIX", "ViewData", "confinement_label", "provenance", "source_diff"]
