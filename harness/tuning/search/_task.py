"""Random search on a named task: load its subject, open one measurement session, search, record.

The seeded random-search baseline meets every subject (kernel or engine task) through the
:class:`harness.tuning.subjects.Subject` protocol only: its search space and renderer, its measurement session
and evaluation (the same call the LLM tuner's submissions go through), and what its campaigns store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, runtime_checkable
from typing import Protocol as _Interface

from harness.records import Backend, SubjectKind
from harness.store import ResultStore
from harness.tuning.campaigns import CampaignError, CampaignRecorder, CampaignSummary
from harness.tuning.search._random import SearchSpace
from harness.tuning.search._run import TUNER_SPEC, check_resumed_sequence, run_random_search
from harness.tuning.subjects import Subject, load_subject
from protocol import Protocol


def random_search_task(task: str | Path | Subject, *, store: ResultStore, protocol: Protocol, budget: int, seed: int,
                       backend: Backend = "cpu", campaign_id: str | None = None,
                       preregistration_id: str | None = None, arm: str | None = None,
                       on_iteration: Callable[[int, dict[str, Any], Any], None] | None = None) -> CampaignSummary:
    """Run the seeded random-search baseline on a task (a name, a task file, or a loaded subject): a
    native kernel task or a task file with a knob space, a KernelBench-format file over the module
    space of ``backend`` (:mod:`harness.tasks._module_space`), or an engine task over its flag space.

    Raises:
        TaskError / EngineTaskError: the task does not load.
        KnobSpaceError: the task has no space on ``backend`` (a module space on mlx), so there is nothing to search.
        DeviceUnavailableError: ``backend`` cannot run here.
    """
    subject = on_backend(load_subject(task) if isinstance(task, (str, Path)) else task, backend)
    space = subject.search_space()
    if campaign_id is not None:
        prior = _check_resume(store, protocol, campaign_id, task_id=subject.id, kind=subject.kind, budget=budget,
                              seed=seed, backend=backend, preregistration_id=preregistration_id, arm=arm,
                              space=space, render=subject.render,
                              device_sha256=lambda: subject.device_sha256(backend, protocol),
                              search_config=subject.search_config)
        if prior is not None:
            return prior
    session = subject.open_session(store, protocol, backend, purpose="random-search")
    try:
        return run_random_search(
            task_id=subject.id, kind=subject.kind, space=space, render=subject.render,
            evaluate=lambda text: subject.evaluate(session, text, store=store, protocol=protocol),
            store=store, protocol=protocol, session_id=session.session_id, budget=budget, seed=seed,
            campaign_id=campaign_id, preregistration_id=preregistration_id, arm=arm,
            config={"backend": backend, **subject.search_config(), **subject.campaign_config()},
            on_iteration=on_iteration)
    finally:
        session.close()


@runtime_checkable
class BackendBound(_Interface):
    """A subject whose search space depends on the backend it is measured on (a kernel task searched over
    the module space: CUDA-only knobs exist only on CUDA). An optional capability, not a subject kind."""

    def on_backend(self, backend: Backend) -> Subject: ...


def on_backend(subject: Subject, backend: Backend) -> Subject:
    """``subject`` with its search space fixed to ``backend``'s where it has such a dependence, else itself."""
    return subject.on_backend(backend) if isinstance(subject, BackendBound) else subject


def _check_resume(store: ResultStore, protocol: Protocol, campaign_id: str, *, task_id: str, kind: SubjectKind,
                  budget: int, seed: int, backend: Backend, preregistration_id: str | None, arm: str | None,
                  space: SearchSpace, render: Callable[[dict[str, Any]], str],
                  device_sha256: Callable[[], str],
                  search_config: Callable[[], dict[str, Any]] | None = None) -> CampaignSummary | None:
    """Everything a resume can be refused for, checked before a measurement session is opened, so a
    refused resume leaves no session and no verdict behind. Returns the stored summary when the
    campaign has already finished (nothing to measure), else None.

    A campaign id the store lacks is not a resume: the search starts a new campaign under that id.

    Raises:
        CampaignError: another protocol, task, seed, budget, registration, backend or device, or another
            stored search space or module-space renderer than ``search_config`` gives now.
        IterationConflict: a stored candidate is not what the seed proposes (the space or renderer changed).
    """
    if store.campaign(campaign_id) is None:
        return None
    rec = CampaignRecorder.check_resume(store, protocol, campaign_id, task_id=task_id, kind=kind, tuner_spec=TUNER_SPEC,
                                        seed=seed, budget=budget, preregistration_id=preregistration_id, arm=arm)
    stored_backend = rec.info.config.get("backend")
    if stored_backend is not None and stored_backend != backend:
        raise CampaignError(f"campaign {campaign_id} measures on backend {stored_backend!r}, not {backend!r}; "
                            "resume it with the same --backend")
    if rec.finished():
        return rec.summary()
    if search_config is not None:
        # the space a campaign searches and how its points render are part of its config: an unfinished
        # campaign resumed under another (a changed module-space renderer, facts counted differently)
        # would mix two searches, even where the iterations stored so far still match
        now = search_config()
        changed = sorted(k for k in ("knob_space", "module_space")
                         if k in rec.info.config and rec.info.config.get(k) != now.get(k))
        if changed:
            raise CampaignError(f"campaign {campaign_id} searched another {' and '.join(changed)} than this code and "
                                "task give (the space or its renderer changed); start a new campaign")
    check_resumed_sequence(rec, space, render, seed)
    if device_sha256() != rec.info.device_sha256:
        raise CampaignError(f"campaign {campaign_id} was measured on device {rec.info.device_sha256[:12]}…, and this "
                            "machine's fingerprint differs: a campaign resumes only on the device it started on")
    return None
