"""Engine (flag) tasks through the LLM tuner: loading either kind of task, the engine session a
campaign measures in, and the tools' view of an engine task.

A kernel campaign and an engine campaign differ in three places only: the measurement session (an
engine session carries the engine fingerprint, so an LLM run and a random run of the same engine task
on this machine share a device and ``atb compare`` may relate them), what the tools know (the flag
space, so ``set_flags`` is offered and writes ``flags.json``), and the evaluation call. Everything else
(graph, transcript, recorder, store) is the same code for both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from harness.engines import (
    ENGINE_CANDIDATE_FILE, EngineNotBuilt, EngineSession, EngineTask, engine_brief, engine_fingerprint,
    engine_search_space, is_engine_task, load_engine_task, open_engine_session,
)
from harness.records import Backend
from harness.store import SqliteStore
from protocol import Protocol
from tools import TaskBrief

from atb_agent.errors import CampaignError

SubjectKind = Literal["kernel", "engine"]


def load_campaign_task(task: str | Path) -> Any:
    """The task a campaign tunes: an :class:`EngineTask` for an engine task name or file, else the
    kernel harness's task (native name or KernelBench-format path).

    Raises:
        EngineTaskError: an engine task file is malformed. TaskError: no kernel task of that name.
    """
    if is_engine_task(task):
        return load_engine_task(task)
    from harness.tasks import load_task

    return load_task(task)


def is_engine(task: object) -> bool:
    """Whether a loaded task is an engine task (its candidate is a flag configuration)."""
    return isinstance(task, EngineTask)


def subject_kind(task: object) -> SubjectKind:
    """The store's subject kind of a loaded task's candidates."""
    return "engine" if is_engine(task) else "kernel"


def engine_campaign_config(task: EngineTask) -> dict[str, Any]:
    """What an engine campaign stores about its task beside the tuner's config (the same keys as the
    random-search baseline stores, so the two arms of a comparison describe the task alike)."""
    return {"engine": task.engine, "task_sha256": task.sha256}


def engine_model_brief(task: EngineTask) -> str:
    """The engine task as the model reads it, plus how to deliver with the tools."""
    return (f"{engine_brief(task)}\n\nUse `set_flags` to write {ENGINE_CANDIDATE_FILE} (it validates the flags "
            "against the space and the constraints), then call `submit`.")


def engine_tool_brief(task: EngineTask, text: str) -> TaskBrief:
    """The tools' view of an engine task. The tools take the harness's own :class:`FlagSpace` (no
    copy to drift), so ``set_flags`` validates exactly as the harness will."""
    return TaskBrief(text=text, task_id=task.id, kind="engine", candidate_file=ENGINE_CANDIDATE_FILE,
                     flag_space=engine_search_space(task))


def open_engine_campaign_session(store: SqliteStore, protocol: Protocol, task: EngineTask, backend: Backend,
                                 resume_session_id: str | None) -> EngineSession:
    """A new engine session for ``task``, or for a resume the campaign's own one (same fingerprint).

    The engine must be present before a campaign is opened: a missing binary is a setup error the user
    can fix, not an iteration that fails.

    Raises:
        EngineNotBuilt: the engine's executable is not on this machine (the message says how to get it).
        CampaignError: the resumed session ran on another device fingerprint.
    """
    missing = task.adapter().missing_reason()
    if missing is not None:
        raise EngineNotBuilt(f"engine task {task.id}: {missing}; {task.adapter().install_hint()}")
    if resume_session_id is None:
        return open_engine_session(store, protocol, backend, note=f"llm tuner on {task.id}")
    fp = engine_fingerprint(backend)
    if store.session(resume_session_id)["device_sha256"] != fp.sha256:
        raise CampaignError(f"session {resume_session_id} ran on another device fingerprint; a campaign "
                            "resumes only on the device it started on")
    return EngineSession(session_id=resume_session_id, fingerprint=fp)
