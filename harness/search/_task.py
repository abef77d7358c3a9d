"""Random search on a named task: load it, open one measurement session, search, record.

Kernel tasks declare their knob space and render candidates themselves (``task.knob_space``,
``task.render_candidate``); every candidate is measured by :func:`harness.evaluate.evaluate_candidate`,
the same call the LLM tuner's submissions go through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.campaigns import CampaignError, CampaignRecorder, CampaignSummary
from harness.records import Backend, SubjectKind
from harness.search._random import SearchSpace
from harness.search._run import TUNER_SPEC, check_resumed_sequence, run_random_search
from harness.search._space import KnobSpace, KnobSpaceError
from harness.store import SqliteStore
from protocol import Protocol


def random_search_task(task: str, *, store: SqliteStore, protocol: Protocol, budget: int, seed: int,
                       backend: Backend = "cpu", campaign_id: str | None = None,
                       preregistration_id: str | None = None, arm: str | None = None,
                       on_iteration: Callable[[int, dict[str, Any], Any], None] | None = None) -> CampaignSummary:
    """Run the seeded random-search baseline on a native kernel task (or a task file with a knob
    space), or on an engine task over its flag space.

    Raises:
        TaskError / EngineTaskError: the task does not load.
        KnobSpaceError: the task declares no knob space, so there is nothing to search.
        DeviceUnavailableError: ``backend`` cannot run here.
    """
    from harness.engines.task import is_engine_task

    if is_engine_task(task):
        return _engine_search(task, store=store, protocol=protocol, budget=budget, seed=seed, backend=backend,
                              campaign_id=campaign_id, preregistration_id=preregistration_id, arm=arm,
                              on_iteration=on_iteration)
    from harness.evaluate import evaluate_candidate
    from harness.session import open_measurement_session
    from harness.tasks import load_task

    loaded = load_task(task)
    if not loaded.knob_space:
        raise KnobSpaceError(f"task {loaded.id} declares no knob space (ATB_META['knobs']); random search needs one")
    space = KnobSpace.coerce(loaded.knob_space)
    if campaign_id is not None:
        from harness.device import device_fingerprint

        prior = _check_resume(store, protocol, campaign_id, task_id=loaded.id, kind="kernel", budget=budget,
                              seed=seed, backend=backend, preregistration_id=preregistration_id, arm=arm,
                              space=space, render=loaded.render_candidate,
                              device_sha256=lambda: device_fingerprint(backend, protocol).sha256)
        if prior is not None:
            return prior
    with open_measurement_session(store, backend, protocol, note=f"random search on {loaded.id}") as ctx:
        return run_random_search(
            task_id=loaded.id, kind="kernel", space=space, render=loaded.render_candidate,
            evaluate=lambda source: evaluate_candidate(task, source, store=store, session=ctx, protocol=protocol),
            store=store, protocol=protocol, session_id=ctx.session_id, budget=budget, seed=seed,
            campaign_id=campaign_id, preregistration_id=preregistration_id, arm=arm,
            config={"backend": backend, "knob_space": space.model_dump(mode="json")}, on_iteration=on_iteration)


def _engine_search(task: str, *, store: SqliteStore, protocol: Protocol, budget: int, seed: int, backend: Backend,
                   campaign_id: str | None, preregistration_id: str | None, arm: str | None,
                   on_iteration: Callable[[int, dict[str, Any], Any], None] | None) -> CampaignSummary:
    """Random search over an engine task's flag space, each trial through the engine harness."""
    from harness.engines.evaluate import render_candidate
    from harness.engines.search import run_engine_random_search
    from harness.engines.session import open_engine_session
    from harness.engines.task import load_engine_task

    t = load_engine_task(task)
    if campaign_id is not None:
        from harness.engines.session import engine_fingerprint

        prior = _check_resume(store, protocol, campaign_id, task_id=t.id, kind="engine", budget=budget, seed=seed,
                              backend=backend, preregistration_id=preregistration_id, arm=arm,
                              space=t.flag_space(), render=render_candidate,
                              device_sha256=lambda: engine_fingerprint(backend).sha256)
        if prior is not None:
            return prior
    session = open_engine_session(store, protocol, backend, note=f"random search on {t.id}")
    summary: CampaignSummary = run_engine_random_search(
        t, store=store, protocol=protocol, session=session.session_id, budget=budget, seed=seed,
        campaign_id=campaign_id, preregistration_id=preregistration_id, arm=arm, backend=backend,
        on_iteration=on_iteration)
    return summary


def _check_resume(store: SqliteStore, protocol: Protocol, campaign_id: str, *, task_id: str, kind: SubjectKind,
                  budget: int, seed: int, backend: Backend, preregistration_id: str | None, arm: str | None,
                  space: SearchSpace, render: Callable[[dict[str, Any]], str],
                  device_sha256: Callable[[], str]) -> CampaignSummary | None:
    """Everything a resume can be refused for, checked before a measurement session is opened, so a
    refused resume leaves no session and no verdict behind. Returns the stored summary when the
    campaign has already finished (nothing to measure), else None.

    A campaign id the store lacks is not a resume: the search starts a new campaign under that id.

    Raises:
        CampaignError: another protocol, task, seed, budget, registration, backend or device.
        IterationConflict: a stored candidate is not what the seed proposes (the space or renderer changed).
    """
    if not store.query("SELECT 1 FROM campaigns WHERE id = ?", (campaign_id,)):
        return None
    rec = CampaignRecorder.check_resume(store, protocol, campaign_id, task_id=task_id, kind=kind, tuner_spec=TUNER_SPEC,
                                        seed=seed, budget=budget, preregistration_id=preregistration_id, arm=arm)
    stored_backend = rec.info.config.get("backend")
    if stored_backend is not None and stored_backend != backend:
        raise CampaignError(f"campaign {campaign_id} measures on backend {stored_backend!r}, not {backend!r}; "
                            "resume it with the same --backend")
    if rec.finished():
        return rec.summary()
    check_resumed_sequence(rec, space, render, seed)
    if device_sha256() != rec.info.device_sha256:
        raise CampaignError(f"campaign {campaign_id} was measured on device {rec.info.device_sha256[:12]}…, and this "
                            "machine's fingerprint differs: a campaign resumes only on the device it started on")
    return None
