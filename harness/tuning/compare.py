"""Comparing two tuning runs: usable iterations, best speedup with its interval, and noise.

The question a comparison answers is the paper's: does tuner B beat tuner A on the same task, device,
protocol and budget, by more than noise? Speedups are always against the honest baseline (each
verdict's ratio). Runs that cannot be compared are refused with :class:`IncomparableError` saying
why; a comparison in which both arms hit the same wall early, or whose baseline already sits near the
roofline floor, is *uninformative* (a saturated task), never a null result.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from harness.errors import IncomparableError
from harness.store import CampaignRow, ResultStore
from harness.tuning.campaigns import best_so_far, get_campaign, get_iterations, summarize
from protocol import Protocol, require_released

CompareVerdict = Literal["a_better", "b_better", "within_noise", "uninformative_saturated", "no_usable_result"]

# Keys under which a verdict's detail may carry the honest baseline's fraction of the roofline floor.
_BASELINE_ROOFLINE_KEYS = ("baseline_roofline_fraction", "baseline_roofline")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArmResult(_Frozen):
    campaign_id: str
    tuner_spec: str
    seed: int
    budget: int
    iterations_recorded: int
    usable_iterations: int
    best_speedup: float | None
    best_ci: tuple[float, float] | None
    best_iteration: int | None
    best_so_far: list[float | None]
    iterations_to_reach_other_best: int | None
    unusable_reasons: dict[str, int]
    outcome: str
    truncated_fraction: float
    tokens_in: int
    tokens_out: int
    cost_usd: float


class SaturationCheck(_Frozen):
    saturated: bool
    reason: str
    shared_wall: float | None
    early_iterations: int
    baseline_roofline_fraction: float | None


class ComparisonResult(_Frozen):
    task_id: str
    device_sha256: str
    protocol_sha256: str
    budget: int
    a: ArmResult
    b: ArmResult
    relative_difference: float | None     # best_b / best_a - 1
    intervals_overlap: bool | None
    beyond_noise: bool
    noise_floor: float
    verdict: CompareVerdict
    explanation: str
    saturation: SaturationCheck
    protocol_draft: bool = False          # measured and judged under a draft (unreleased) protocol (issue 27)


def check_comparable(a: CampaignRow, b: CampaignRow, store: ResultStore) -> None:
    """Refuse a pair of runs that no ratio can honestly relate.

    Raises:
        IncomparableError: same run twice, different tasks, device fingerprints, protocol digests or
            budgets, or either run unfinished, aborted or an infrastructure defect.
    """
    if a.id == b.id:
        raise IncomparableError(f"run {a.id} was given twice; compare two different runs")
    problems: list[str] = []
    if a.task_id != b.task_id:
        problems.append(f"they tune different tasks ({a.task_id!r} vs {b.task_id!r})")
    if a.device_sha256 != b.device_sha256:
        da, db = store.device(a.device_sha256), store.device(b.device_sha256)
        problems.append(f"they ran on different device fingerprints ({da.summary()} {a.device_sha256[:12]}… vs "
                        f"{db.summary()} {b.device_sha256[:12]}…); ratios do not transfer between devices")
    if a.protocol_sha256 != b.protocol_sha256:
        problems.append(f"they were measured under different protocol digests ({a.protocol_version} "
                        f"{a.protocol_sha256[:12]}… vs {b.protocol_version} {b.protocol_sha256[:12]}…)")
    if a.budget != b.budget:
        problems.append(f"their budgets differ ({a.budget} vs {b.budget} iterations); compare equal budgets")
    for run in (a, b):
        s = summarize(store, run.id)
        if s.outcome is None:
            problems.append(f"run {run.id} has not finished ({s.iterations_recorded} of {run.budget} iterations "
                            "recorded); resume it with `atb run ... --resume` first")
        elif s.outcome.status != "completed":
            problems.append(f"run {run.id} is excluded as {s.outcome.status}: {s.outcome.reason}")
    if problems:
        raise IncomparableError(f"runs {a.id} and {b.id} cannot be compared: " + "; ".join(problems))


def _reach(curve: list[float | None], target: float | None, noise: float) -> int | None:
    """Iterations (1-based count) until ``curve`` comes within noise of ``target``; None if never."""
    if target is None:
        return None
    for i, v in enumerate(curve):
        if v is not None and v >= target * (1.0 - noise):
            return i + 1
    return None


def _baseline_roofline(store: ResultStore, campaign_id: str) -> float | None:
    values: list[float] = []
    for detail in store.iteration_verdict_details(campaign_id):
        explicit = [float(detail[k]) for k in _BASELINE_ROOFLINE_KEYS if isinstance(detail.get(k), (int, float))]
        if explicit:
            values.append(explicit[0])
            continue
        # The verdict stores the candidate's fraction (floor / candidate time) and both median times:
        # the baseline's fraction is the same floor over the baseline's time.
        known = [x for x in (detail.get(k) for k in ("roofline_fraction", "candidate_median_ns", "baseline_median_ns"))
                 if isinstance(x, (int, float)) and x > 0]
        if len(known) == 3:
            frac, cand, base = known
            values.append(float(frac) * float(cand) / float(base))
    # issue 27: a fraction above 1.0 is a ceiling too low for the working set (a defect), never saturation
    values = [v for v in values if v <= 1.0]
    return max(values) if values else None


def _arm(store: ResultStore, info: CampaignRow, other_best: float | None, noise: float) -> ArmResult:
    s = summarize(store, info.id)
    curve = best_so_far(get_iterations(store, info.id), info.budget)
    return ArmResult(
        campaign_id=info.id, tuner_spec=info.tuner_spec, seed=info.seed, budget=info.budget,
        iterations_recorded=s.iterations_recorded, usable_iterations=s.usable_iterations,
        best_speedup=s.best_speedup, best_ci=s.best_ci, best_iteration=s.best_iteration, best_so_far=curve,
        iterations_to_reach_other_best=_reach(curve, other_best, noise), unusable_reasons=s.unusable_reasons,
        outcome=s.outcome.status if s.outcome else "unfinished", truncated_fraction=s.truncated_fraction,
        tokens_in=s.tokens_in, tokens_out=s.tokens_out, cost_usd=s.cost_usd)


def saturation(a: ArmResult, b: ArmResult, baseline_roofline: float | None, protocol: Protocol) -> SaturationCheck:
    """Is the task saturated for this pair: a shared early wall, or a baseline already near the roofline?"""
    k = protocol.saturation.early_iterations
    noise = protocol.noise.noise_floor
    frac_bar = protocol.saturation.roofline_fraction_saturated
    if baseline_roofline is not None and baseline_roofline >= frac_bar:
        return SaturationCheck(saturated=True, shared_wall=None, early_iterations=k,
                               baseline_roofline_fraction=baseline_roofline,
                               reason=f"the honest baseline already reaches {baseline_roofline:.0%} of the roofline "
                                      f"floor (saturated at >= {frac_bar:.0%}): little headroom is left to find")
    if a.best_speedup is None or b.best_speedup is None:
        return SaturationCheck(saturated=False, reason="", shared_wall=None, early_iterations=k,
                               baseline_roofline_fraction=baseline_roofline)
    wall = max(a.best_speedup, b.best_speedup)
    ea = a.best_so_far[k - 1] if len(a.best_so_far) >= k else None
    eb = b.best_so_far[k - 1] if len(b.best_so_far) >= k else None
    finals_close = abs(a.best_speedup / b.best_speedup - 1.0) <= noise
    early = ea is not None and eb is not None and min(ea, eb) >= wall * (1.0 - noise)
    if finals_close and early:
        return SaturationCheck(
            saturated=True, shared_wall=wall, early_iterations=k, baseline_roofline_fraction=baseline_roofline,
            reason=f"both arms reached a shared wall of {wall:.3f}x (within the {noise:.0%} noise floor) by "
                   f"iteration {k} and never moved past it: the task cannot separate the tuners")
    return SaturationCheck(saturated=False, reason="", shared_wall=wall, early_iterations=k,
                           baseline_roofline_fraction=baseline_roofline)


def compare_runs(store: ResultStore, run_a: str, run_b: str, protocol: Protocol, *,
                 allow_draft: bool = False) -> ComparisonResult:
    """Compare two stored runs.

    ``allow_draft`` lets a draft protocol (digest not released) judge the pair; the result then says
    ``protocol_draft``. Without it a draft is refused before the store is read.

    Raises:
        DraftProtocolRefused: the protocol is a draft and ``allow_draft`` is False
            (:func:`protocol.require_released`).
        NotFound: a run id is not in the store.
        IncomparableError: see :func:`check_comparable`.
    """
    require_released(protocol, f"compare runs {run_a} and {run_b}", allow_draft=allow_draft)
    ia, ib = get_campaign(store, run_a), get_campaign(store, run_b)
    check_comparable(ia, ib, store)
    if ia.protocol_sha256 != protocol.sha256:
        raise IncomparableError(
            f"runs {run_a} and {run_b} were recorded under protocol {ia.protocol_version} {ia.protocol_sha256[:12]}…, "
            f"but the loaded protocol is {protocol.version} {protocol.sha256[:12]}…: its noise floor and saturation "
            "bars would judge them by other rules; compare them under the protocol they were measured with")
    noise = protocol.noise.noise_floor
    sa, sb = summarize(store, run_a), summarize(store, run_b)
    a = _arm(store, ia, sb.best_speedup, noise)
    b = _arm(store, ib, sa.best_speedup, noise)
    roof = max((x for x in (_baseline_roofline(store, run_a), _baseline_roofline(store, run_b)) if x is not None),
               default=None)
    sat = saturation(a, b, roof, protocol)
    rel = overlap = None
    beyond = False
    if a.best_speedup is not None and b.best_speedup is not None:
        rel = b.best_speedup / a.best_speedup - 1.0
        if a.best_ci is not None and b.best_ci is not None:
            overlap = not (b.best_ci[0] > a.best_ci[1] or a.best_ci[0] > b.best_ci[1])
        beyond = abs(rel) > noise and overlap is False
    verdict: CompareVerdict
    if sat.saturated:
        verdict, why = "uninformative_saturated", sat.reason + "; this is not evidence that the tuners are equal"
    elif a.best_speedup is None and b.best_speedup is None:
        verdict, why = "no_usable_result", "neither run has a usable iteration"
    elif a.best_speedup is None or b.best_speedup is None:
        winner, loser = ("b", a) if a.best_speedup is None else ("a", b)
        verdict = "b_better" if winner == "b" else "a_better"
        why = f"run {loser.campaign_id} has no usable iteration in {loser.budget}"
    elif beyond:
        verdict = "b_better" if (rel or 0.0) > 0 else "a_better"
        why = (f"best speedups {a.best_speedup:.3f}x vs {b.best_speedup:.3f}x differ by {abs(rel or 0):.1%}, beyond "
               f"the {noise:.0%} noise floor, and their intervals do not overlap")
    else:
        verdict = "within_noise"
        reason = (f"{abs(rel or 0):.1%} is within the {noise:.0%} noise floor" if abs(rel or 0) <= noise
                  else "their confidence intervals overlap")
        why = f"best speedups {a.best_speedup:.3f}x vs {b.best_speedup:.3f}x: {reason}"
    return ComparisonResult(
        task_id=ia.task_id, device_sha256=ia.device_sha256, protocol_sha256=ia.protocol_sha256, budget=ia.budget,
        a=a, b=b, relative_difference=rel, intervals_overlap=overlap, beyond_noise=beyond, noise_floor=noise,
        verdict=verdict, explanation=why, saturation=sat, protocol_draft=protocol.draft)
