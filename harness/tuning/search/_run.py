"""Random search as a tuner: sequential trials through the same harness path as the LLM tuner.

Each trial renders one proposed configuration into a candidate (a kernel file or an engine's flag
configuration), hands it to the harness's evaluation function and records the verdict through
:class:`CampaignRecorder`. Nothing here measures or judges: the evaluation function and the store do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.records import SubjectKind, sha256_text
from harness.store import ResultStore
from harness.tuning.campaigns import CampaignRecorder, CampaignSummary, IterationConflict
from harness.tuning.search._random import RandomSearch, SearchSpace
from protocol import Protocol

TUNER_SPEC = "random"


def _field(result: Any, name: str) -> Any:
    if isinstance(result, dict):
        return result.get(name)
    return getattr(result, name, None)


def run_random_search(*, task_id: str, kind: SubjectKind, space: SearchSpace,
                      render: Callable[[dict[str, Any]], str], evaluate: Callable[[str], Any],
                      store: ResultStore, protocol: Protocol, session_id: str, budget: int, seed: int,
                      campaign_id: str | None = None, preregistration_id: str | None = None,
                      arm: str | None = None, config: dict[str, Any] | None = None,
                      on_iteration: Callable[[int, dict[str, Any], Any], None] | None = None) -> CampaignSummary:
    """Spend ``budget`` sequential trials on seeded random proposals and return the stored summary.

    ``evaluate(source)`` must return the harness's result for one candidate (``verdict_id`` and
    ``reason`` are read from it); a crashing candidate is a rejected verdict, not an exception. Passing
    the ``campaign_id`` of an unfinished run resumes it: recorded iterations are checked against the
    seed's sequence and skipped, so none is lost or stored twice.

    Raises:
        IterationConflict: a resumed run's stored candidate differs from the seed's proposal.
        CampaignError, IngestRejected: from the recorder (see :meth:`CampaignRecorder.record`).
    """
    rec = CampaignRecorder.open(store, protocol, task_id=task_id, kind=kind, tuner_spec=TUNER_SPEC, seed=seed,
                                budget=budget, session_id=session_id, preregistration_id=preregistration_id,
                                arm=arm, config=config, campaign_id=campaign_id)
    check_resumed_sequence(rec, space, render, seed)
    search = RandomSearch(space, seed)
    done = rec.recorded()
    for idx in range(budget):
        knobs = search.propose()
        source = render(knobs)
        digest = sha256_text(source)
        if idx in done:
            continue
        measured = unrecorded_verdict(rec, digest)
        if measured is not None:
            # A run killed after this iteration's verdict was stored, before the iteration was: the
            # verdict was measured for this campaign, in one of its sessions, for this very candidate.
            rec.record(idx, verdict_id=measured, detail={"knobs": knobs, "candidate_sha256": digest,
                                                         "verdict_measured_before_resume": True})
            if on_iteration is not None:
                on_iteration(idx, knobs, {"verdict_id": measured, "measured_before_resume": True})
            continue
        result = evaluate(source)
        verdict_id = _field(result, "verdict_id")
        rec.record(idx, verdict_id=verdict_id, candidate_sha256=None if verdict_id else digest,
                   no_verdict_reason=str(_field(result, "reason") or "the harness returned no verdict"),
                   detail={"knobs": knobs, "candidate_sha256": digest})
        if on_iteration is not None:
            on_iteration(idx, knobs, result)
    rec.finish()
    return rec.summary()


def check_resumed_sequence(rec: CampaignRecorder, space: SearchSpace, render: Callable[[dict[str, Any]], str],
                           seed: int) -> None:
    """Check every stored iteration's candidate against the seed's proposal for that index.

    Run it before a resumed search opens a session (it measures nothing), so a changed knob space or
    renderer is refused without leaving a session behind.

    Raises:
        IterationConflict: a stored candidate is not what ``seed`` proposes at its index.
    """
    done = rec.recorded()
    if not done:
        return
    search = RandomSearch(space, seed)
    for idx in range(max(done) + 1):
        digest = sha256_text(render(search.propose()))
        stored = done.get(idx)
        if stored is None:
            continue
        want = stored.detail.get("candidate_sha256") or stored.candidate_sha256
        if want not in (None, digest):
            raise IterationConflict(
                f"iteration {idx} of {rec.campaign_id} stored candidate {want}, but seed {seed} proposes "
                f"{digest}: the knob space or the task's renderer changed; start a new campaign")


def unrecorded_verdict(rec: CampaignRecorder, candidate_sha256: str) -> str | None:
    """A verdict for ``candidate_sha256`` measured in one of the campaign's sessions that no iteration
    records (the run was killed between storing the verdict and storing its iteration), or None."""
    return rec.store.unrecorded_verdict_id(rec.sessions(), rec.info.task_id, candidate_sha256)
