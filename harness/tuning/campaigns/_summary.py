"""Best-so-far and the run summary, computed over usable iterations only."""

from __future__ import annotations

from collections import Counter

from harness.store import ResultStore
from harness.tuning.campaigns._models import CampaignSummary, IterationRecord
from harness.tuning.campaigns._store import get_campaign, get_iterations, get_outcome
from harness.tuning.campaigns._usability import reason_category


def best_so_far(iterations: list[IterationRecord], budget: int) -> list[float | None]:
    """Best usable speedup after each iteration slot ``0..budget-1`` (None until the first usable one).

    A slot with no stored iteration (a run that stopped early) carries the best so far unchanged.
    """
    by_idx = {it.idx: it for it in iterations}
    best: float | None = None
    out: list[float | None] = []
    for i in range(budget):
        it = by_idx.get(i)
        if it is not None and it.usable and it.speedup is not None and (best is None or it.speedup > best):
            best = it.speedup
        out.append(best)
    return out


def best_usable(iterations: list[IterationRecord]) -> IterationRecord | None:
    """The usable iteration with the highest speedup (the earliest on a tie)."""
    best: IterationRecord | None = None
    for it in sorted(iterations, key=lambda x: x.idx):
        if it.usable and it.speedup is not None and (best is None or it.speedup > (best.speedup or 0.0)):
            best = it
    return best


def truncated_fraction(iterations: list[IterationRecord]) -> float:
    calls = sum(it.usage.model_calls for it in iterations)
    return (sum(it.usage.truncated_calls for it in iterations) / calls) if calls else 0.0


def summarize(store: ResultStore, campaign_id: str) -> CampaignSummary:
    """The stored run, summarised. Raises NotFound for an unknown campaign."""
    info = get_campaign(store, campaign_id)
    its = get_iterations(store, campaign_id)
    best = best_usable(its)
    reasons = Counter(reason_category(it.unusable_reason) for it in its if not it.usable)
    return CampaignSummary(
        campaign=info, iterations_recorded=len(its), usable_iterations=sum(1 for it in its if it.usable),
        candidate_sequence=[it.candidate_sha256 for it in its],
        best_speedup=best.speedup if best else None,
        best_ci=(best.ci_low, best.ci_high) if best and best.ci_low is not None and best.ci_high is not None else None,
        best_iteration=best.idx if best else None,
        best_candidate_sha256=best.candidate_sha256 if best else None,
        unusable_reasons=dict(sorted(reasons.items())),
        tokens_in=sum(it.usage.tokens_in for it in its), tokens_out=sum(it.usage.tokens_out for it in its),
        cost_usd=sum(it.usage.cost_usd for it in its), truncated_fraction=truncated_fraction(its),
        outcome=get_outcome(store, campaign_id))
