"""Where a campaign's measurement and tools come from, and what the model is told about its task.

Kept apart from :mod:`atb_agent.campaign` (which runs a campaign) because the MCP server builds a
campaign of its own from the same services and brief: with both here, neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from atb_agent._engine_support import (
    engine_model_brief, engine_tool_brief, is_engine, open_engine_campaign_session, subject_kind,
)
from atb_agent.errors import CampaignError
from atb_agent.evaluation import Evaluator
from atb_agent.graph import ToolBoxLike


class CampaignServices(Protocol):
    """Where measurement and tools come from. :class:`HarnessServices` is the real one (the harness's
    measurement session and evaluation, the sandbox and its tools); tests may give scripted ones."""

    def open_session(self, store: Any, protocol: Any, resume_session_id: str | None) -> str:
        """Open a measurement session and return its id. For a resume, ``resume_session_id`` is the
        campaign's first session: refuse (before opening anything) when this device is not its device.
        The id returned may be a new session (the caller attaches it to the campaign) or that one."""
        ...

    def evaluator(self, task: Any, store: Any, protocol: Any) -> Evaluator: ...

    def toolbox(self, task: Any, brief: str, submit: Callable[[dict[str, bytes]], dict[str, Any]]) -> ToolBoxLike: ...

    def close(self) -> None: ...


@runtime_checkable
class BindsTask(Protocol):
    """Services whose measurement session depends on the task's kind (:class:`HarnessServices`: an
    engine task measures in an engine session). ``run_campaign`` binds the task before ``open_session``."""

    def bind_task(self, task: Any) -> None: ...


def task_brief(task: Any) -> str:
    """What the model is told about the task: for a kernel task the reference source and what to
    deliver, for an engine task the engine, workload and flag space (:func:`engine_model_brief`)."""
    from atb_agent.evaluation import CANDIDATE_FILE

    if is_engine(task):
        return engine_model_brief(task)
    about = task.meta.description or f"task {task.id}"
    return (f"Task {task.id}: {about}\n\nThe reference implementation (KernelBench format) is:\n\n"
            f"```python\n{task.source}\n```\n\nWrite `{CANDIDATE_FILE}` in the workspace defining `class ModelNew` "
            "with the same constructor and forward signature as `Model`, computing the same result faster, then call "
            "`submit`.")


class HarnessServices:
    """The real services: the harness's measurement session and evaluation, and a sandbox with the
    tools of ``tools.ToolBox``. A kernel task measures with ``evaluate_candidate`` in a kernel
    measurement session; an engine task (bound with :meth:`bind_task`) with
    ``evaluate_engine_candidate`` in an engine session, its tools offering ``set_flags``."""

    def __init__(self, backend: str = "cpu", sandbox_backend: str = "auto") -> None:
        self.backend = backend
        self.sandbox_backend = sandbox_backend
        self._session: Any = None
        self._sandbox: Any = None
        self._engine_task: Any = None

    def bind_task(self, task: Any) -> None:
        """Say which task the next session is for. Engine ratios are taken in an engine session (the
        engine fingerprint a random search of the same task also records), so the session's kind must
        be known before it is opened; a kernel task (the default) needs no binding."""
        self._engine_task = task if is_engine(task) else None

    def open_session(self, store: Any, protocol: Any, resume_session_id: str | None) -> str:
        """A new measurement session. For a resume (``resume_session_id`` is the campaign's first
        session) the device must be the campaign's: its fingerprint is checked in this process before
        the session is opened, so a refused resume opens nothing. A kernel campaign's resumed run
        measures in this new session (the caller attaches it to the campaign); an engine campaign,
        whose session holds no workers, measures on in its own.

        Raises:
            CampaignError: the device's fingerprint differs from the resumed session's.
            EngineNotBuilt: the bound engine task's engine is not on this machine.
        """
        if self._engine_task is not None:
            self._session = open_engine_campaign_session(store, protocol, self._engine_task,
                                                         self.backend, resume_session_id)  # type: ignore[arg-type]
            return str(self._session.session_id)
        from harness.device import device_fingerprint
        from harness.session import open_measurement_session

        if resume_session_id is not None:
            stored = store.session(resume_session_id)["device_sha256"]
            if stored != device_fingerprint(self.backend, protocol).sha256:  # type: ignore[arg-type]
                raise CampaignError(f"session {resume_session_id} ran on another device fingerprint; a campaign "
                                    "resumes only on the device it started on")
        self._session = open_measurement_session(store, self.backend, protocol)  # type: ignore[arg-type]
        return str(self._session.session_id)

    def evaluator(self, task: Any, store: Any, protocol: Any) -> Evaluator:
        """Raises:
            CampaignError: no session is open, or it is of the other kind than ``task`` (an engine
                task was not bound with :meth:`bind_task` before ``open_session``).
        """
        from atb_agent.evaluation import EngineEvaluator, HarnessEvaluator
        from harness.engines import EngineSession

        if self._session is None:
            raise CampaignError("open a measurement session before asking for an evaluator")
        if is_engine(task) != isinstance(self._session, EngineSession):
            raise CampaignError(f"task {task.id} is a {subject_kind(task)} task but the open session is not; call "
                                "bind_task(task) before open_session")
        if is_engine(task):
            return EngineEvaluator(task, store, self._session.session_id, protocol)
        return HarnessEvaluator(task.id if task.kind == "native" else str(task.path), store, self._session, protocol)

    def toolbox(self, task: Any, brief: str, submit: Callable[[dict[str, bytes]], dict[str, Any]]) -> ToolBoxLike:
        """A fresh sandbox (one per run; Docker by default) with the tools on it. An engine task's
        sandbox has no torch mounted (the model only writes flags; nothing there runs a kernel).

        Raises:
            SandboxUnavailableError, ImageMissingError, SandboxError: from :func:`sandbox.open_sandbox`.
        """
        from atb_agent.evaluation import CANDIDATE_FILE
        from sandbox import open_sandbox
        from tools import TaskBrief, ToolBox

        if self._sandbox is not None:
            self._sandbox.close()
        engine = is_engine(task)
        self._sandbox = open_sandbox(backend=self.sandbox_backend, mount_torch=not engine)  # type: ignore[arg-type]
        tool_brief = engine_tool_brief(task, brief) if engine else \
            TaskBrief(text=brief, task_id=task.id, candidate_file=CANDIDATE_FILE)
        return ToolBox(self._sandbox, tool_brief, submit)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._session is not None and hasattr(self._session, "close"):
            self._session.close()
        self._session = None


__all__ = ["BindsTask", "CampaignServices", "HarnessServices", "task_brief"]
