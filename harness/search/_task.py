"""Random search on a named task: load it, open one measurement session, search, record.

Kernel tasks declare their knob space and render candidates themselves (``task.knob_space``,
``task.render_candidate``); every candidate is measured by :func:`harness.evaluate.evaluate_candidate`,
the same call the LLM tuner's submissions go through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.campaigns import CampaignSummary
from harness.records import Backend
from harness.search._run import run_random_search
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
    from harness.engines.search import engine_evaluator
    from harness.engines.session import open_engine_session
    from harness.engines.task import load_engine_task

    t = load_engine_task(task)
    session = open_engine_session(store, protocol, backend, note=f"random search on {t.id}")
    return run_random_search(
        task_id=t.id, kind="engine", space=t.flag_space(), render=render_candidate,
        evaluate=engine_evaluator(t, store=store, session=session.session_id, protocol=protocol),
        store=store, protocol=protocol, session_id=session.session_id, budget=budget, seed=seed,
        campaign_id=campaign_id, preregistration_id=preregistration_id, arm=arm,
        config={"backend": backend, "engine": t.engine, "task_sha256": t.sha256}, on_iteration=on_iteration)
