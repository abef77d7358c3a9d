"""Engine tasks as a search problem: the flag space a tuner searches, and random search over it.

The random-search baseline and the LLM tuner meet an engine task through the same three things as a
kernel task: a space with ``sample(rng)`` / ``validate_config(config)`` (the task's
:class:`~harness.engines.flags.FlagSpace`), ``render_candidate(config) -> text``, and an evaluation
function of the candidate text that returns the harness's result.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.engines.evaluate import EngineEvalResult, evaluate_engine_candidate, render_candidate
from harness.engines.flags import FlagSpace
from harness.engines.session import HasSessionId, session_id_of
from harness.engines.task import EngineTask, load_engine_task
from harness.store import SqliteStore
from protocol import Protocol


def engine_search_space(task: str | Path | EngineTask) -> FlagSpace:
    """The tunable flag space of an engine task (what random search samples, what a tuner may set)."""
    t = task if isinstance(task, EngineTask) else load_engine_task(task)
    return t.flag_space()


def engine_evaluator(task: EngineTask, *, store: SqliteStore, session: HasSessionId | str, protocol: Protocol,
                     progress: Callable[[str], None] | None = None) -> Callable[[str], EngineEvalResult]:
    """``evaluate(config_text)`` bound to one task, store and session."""
    def evaluate(text: str) -> EngineEvalResult:
        return evaluate_engine_candidate(task, text, store=store, session=session, protocol=protocol,
                                         progress=progress)
    return evaluate


def run_engine_random_search(task: str | Path | EngineTask, *, store: SqliteStore, protocol: Protocol,
                             session: HasSessionId | str, budget: int, seed: int,
                             campaign_id: str | None = None, preregistration_id: str | None = None,
                             arm: str | None = None, backend: str | None = None,
                             on_iteration: Callable[[int, dict[str, Any], Any], None] | None = None,
                             progress: Callable[[str], None] | None = None) -> Any:
    """Seeded random search over an engine task's flags, in an engine session the caller already holds,
    through the campaign recorder; returns the stored ``CampaignSummary`` (see
    :func:`harness.tuning.search.run_random_search` for what it raises). ``backend``, when given, is recorded
    in the campaign's config (a resume is checked against it).

    Not the path ``atb search`` takes: :func:`harness.tuning.search.random_search_task` reaches an engine task
    through :class:`harness.tuning.subjects.EngineSubject` (it opens its own session and records the same
    config keys). The only caller left is ``tests/test_engine_llamacpp.py``, which searches inside a
    session it opened itself; kept for it as a ``harness.engines`` export."""
    from harness.tuning.search._run import run_random_search

    t = task if isinstance(task, EngineTask) else load_engine_task(task)
    config: dict[str, Any] = {"backend": backend} if backend is not None else {}
    config.update({"engine": t.engine, "task_sha256": t.sha256})
    return run_random_search(task_id=t.id, kind="engine", space=t.flag_space(), render=render_candidate,
                             evaluate=engine_evaluator(t, store=store, session=session, protocol=protocol,
                                                       progress=progress),
                             store=store, protocol=protocol, session_id=session_id_of(session), budget=budget,
                             seed=seed, campaign_id=campaign_id, preregistration_id=preregistration_id, arm=arm,
                             on_iteration=on_iteration, config=config)


# The workspace file an LLM tuner writes its flag configuration to (its `set_flags`-style submission).
ENGINE_CANDIDATE_FILE = "flags.json"


def engine_brief(task: str | Path | EngineTask) -> str:
    """The task as a tuner reads it: engine, workload, each tunable flag with its range, the constraints,
    and how to submit. No measured number appears here: the harness measures."""
    import json

    t = task if isinstance(task, EngineTask) else load_engine_task(task)
    space = t.flag_space()
    lines = [
        f"Engine task {t.id}: tune the launch flags of {t.engine} for request throughput (requests/s).",
        t.description.strip(),
        f"Workload: {json.dumps(t.workload.model_dump(mode='json'), sort_keys=True)}.",
        "Every candidate is measured against the same engine's default launch (no flags) in the same "
        "session, on paired workload seeds; temperature-0 completions must match the default's.",
        f"Submit a JSON object of flag -> value in {ENGINE_CANDIDATE_FILE}; flags left out keep the engine "
        "default. Tunable flags:",
    ]
    for f in space.flags:
        rng = f"{f.low:g}..{f.high:g}" if f.low is not None else ("|".join(f.choices) if f.choices else "true|false")
        lines.append(f"- {f.name} ({f.type}, {rng}; engine default {f.default}): {f.help}")
    for c in space.constraints:
        lines.append(f"- constraint: {json.dumps(c.model_dump(), sort_keys=True)}")
    return "\n".join(lines)


def config_text_from_files(files: dict[str, bytes]) -> str:
    """The flag configuration a tuner submitted: the text of ``ENGINE_CANDIDATE_FILE`` in its workspace.

    Raises:
        FlagSpaceError: the file is missing or not UTF-8 text (the message says what to write where).
    """
    from harness.engines._errors import FlagSpaceError

    data = files.get(ENGINE_CANDIDATE_FILE)
    if data is None:
        raise FlagSpaceError(f"no {ENGINE_CANDIDATE_FILE} was submitted; write a JSON object of flag -> value "
                             f"to {ENGINE_CANDIDATE_FILE} (submitted files: {sorted(files)[:8]})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FlagSpaceError(f"{ENGINE_CANDIDATE_FILE} is not UTF-8 text: {exc}") from exc
