"""Where a campaign's measurement and tools come from, and what the model is told about its task.

Kept apart from :mod:`atb_agent.campaign` (which runs a campaign) because the MCP server builds a
campaign of its own from the same services and brief: with both here, neither imports the other.

Everything here reads the task through :class:`harness.tuning.subjects.Subject` (from
:func:`harness.tuning.subjects.load_subject`): a kernel task and an engine task differ only behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from atb_agent.errors import CampaignError
from atb_agent.evaluation import Evaluator, VerdictSummary, summary_of_result
from harness.tuning.subjects import NoCandidate, Subject, SubjectSession

if TYPE_CHECKING:  # annotations only: atb_agent.graph pulls in LangGraph and the model SDKs (~2 s), which
    # `atb mcp serve` (one process per tool call for some clients) never needs
    from atb_agent.graph import ToolBoxLike


class CampaignServices(Protocol):
    """Where measurement and tools come from. :class:`HarnessServices` is the real one (the harness's
    measurement session and evaluation, the sandbox and its tools); tests may give scripted ones."""

    def open_session(self, store: Any, protocol: Any, resume_session_id: str | None) -> str:
        """Open a measurement session and return its id. For a resume, ``resume_session_id`` is the
        campaign's first session: refuse (before opening anything) when this device is not its device.
        The id returned may be a new session (the caller attaches it to the campaign) or that one."""
        ...

    def evaluator(self, task: Subject, store: Any, protocol: Any) -> Evaluator: ...

    def toolbox(self, task: Subject, brief: str,
                submit: Callable[[dict[str, bytes]], dict[str, Any]]) -> ToolBoxLike: ...

    def close(self) -> None: ...


@runtime_checkable
class BindsTask(Protocol):
    """Services whose measurement session is the subject's own (:class:`HarnessServices`: an engine
    task measures in an engine session). ``run_campaign`` binds the subject before ``open_session``."""

    def bind_task(self, task: Subject) -> None: ...


@runtime_checkable
class ReportsSandbox(Protocol):
    """Services that can say which sandbox their last :meth:`CampaignServices.toolbox` started
    (:class:`HarnessServices`): ``run_campaign`` records it on the campaign (issue 26)."""

    def sandbox_choice(self) -> dict[str, Any] | None: ...


def sandbox_choice_of(services: object) -> dict[str, Any] | None:
    """The sandbox ``services`` last started, as a campaign records it (:class:`ReportsSandbox`), or None
    when the services cannot say (a test's stand-in). ``run_campaign`` and ``atb mcp serve`` both use it."""
    return services.sandbox_choice() if isinstance(services, ReportsSandbox) else None


def task_brief(task: Subject) -> str:
    """What the model is told about the task (:meth:`Subject.model_brief`): for a kernel task the
    reference source and what to deliver, for an engine task the engine, workload and flag space."""
    return task.model_brief()


class SubjectEvaluator:
    """Measures a submitted workspace's candidate (the subject's ``candidate_file``) with the subject's
    own evaluation, every iteration in the campaign's one measurement session. A workspace without a
    readable candidate is a ``no_submission`` (nothing measured); a bad candidate is a rejected verdict."""

    def __init__(self, subject: Subject, store: Any, session: SubjectSession, protocol: Any) -> None:
        self.subject = subject
        self.store = store
        self.session = session
        self.protocol = protocol

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        """Raises what the subject's evaluation raises when the machine or setup is broken (not the
        candidate): EngineNotBuilt, EngineLaunchFailed, IngestRejected..."""
        try:
            candidate = self.subject.candidate_from_files(files)
        except NoCandidate as exc:
            return VerdictSummary(status="no_submission", built=exc.built, reason=exc.reason)
        result = self.subject.evaluate(self.session, candidate, store=self.store, protocol=self.protocol)
        return summary_of_result(result, self.subject.verdict_detail(result))


class HarnessServices:
    """The real services: the subject's measurement session and evaluation, and a sandbox with the
    tools of ``tools.ToolBox``. The subject is bound with :meth:`bind_task` before ``open_session``
    (its session is the subject's own: an engine task measures in an engine session)."""

    def __init__(self, backend: str = "cpu", sandbox_backend: str = "auto") -> None:
        self.backend = backend
        self.sandbox_backend = sandbox_backend
        self._session: SubjectSession | None = None
        self._sandbox: Any = None
        self._choice: dict[str, Any] | None = None
        self._subject: Subject | None = None

    def bind_task(self, task: Subject) -> None:
        """Say which subject the next session is for. Its kind's session is opened (an engine task's
        carries the engine fingerprint a random search of the same task also records)."""
        self._subject = task

    def open_session(self, store: Any, protocol: Any, resume_session_id: str | None) -> str:
        """A new measurement session for the bound subject. For a resume (``resume_session_id`` is the
        campaign's first session) the device must be the campaign's: its fingerprint is checked in this
        process before the session is opened, so a refused resume opens nothing. A kernel campaign's
        resumed run measures in a new session (the caller attaches it to the campaign); an engine
        campaign, whose session holds no workers, measures on in its own.

        Raises:
            CampaignError: no subject is bound, or the device's fingerprint differs from the resumed session's.
            EngineNotBuilt: the bound engine task's engine is not on this machine.
        """
        subject = self._subject
        if subject is None:
            raise CampaignError("bind_task(subject) before open_session: the session is the subject's own")
        subject.check_ready()
        if resume_session_id is not None:
            stored = store.session(resume_session_id)["device_sha256"]
            if stored != subject.device_sha256(self.backend, protocol):  # type: ignore[arg-type]
                raise CampaignError(f"session {resume_session_id} ran on another device fingerprint; a campaign "
                                    "resumes only on the device it started on")
        self._session = subject.open_session(store, protocol, self.backend,  # type: ignore[arg-type]
                                             purpose="tuner", resume_session_id=resume_session_id)
        return str(self._session.session_id)

    def evaluator(self, task: Subject, store: Any, protocol: Any) -> Evaluator:
        """Raises:
            CampaignError: no session is open, or it was opened for a subject of another kind.
        """
        if self._session is None or self._subject is None:
            raise CampaignError("open a measurement session before asking for an evaluator")
        if task.kind != self._subject.kind:
            raise CampaignError(f"task {task.id} is a {task.kind} task but the open session is not; call "
                                "bind_task(task) before open_session")
        return SubjectEvaluator(task, store, self._session, protocol)

    def toolbox(self, task: Subject, brief: str, submit: Callable[[dict[str, bytes]], dict[str, Any]]) -> ToolBoxLike:
        """A fresh sandbox (one per run; Docker by default) with the tools on it. An engine task's
        sandbox has no torch mounted (the model only writes flags; nothing there runs a kernel).

        Raises:
            SandboxUnavailableError, ImageMissingError, SandboxError: from :func:`sandbox.open_sandbox`.
        """
        from sandbox import open_sandbox
        from tools import TaskBrief, ToolBox

        if self._sandbox is not None:
            self._sandbox.close()
        self._sandbox, self._choice = None, None
        self._sandbox = open_sandbox(backend=self.sandbox_backend,  # type: ignore[arg-type]
                                     mount_torch=task.sandbox_mounts_torch)
        self._choice = {**self._sandbox.info().choice(), "requested": self.sandbox_backend}
        b = task.tool_brief(brief)
        tool_brief = TaskBrief(text=b.text, task_id=b.task_id, kind=b.kind, candidate_file=b.candidate_file,
                               flag_space=b.flag_space)
        return ToolBox(self._sandbox, tool_brief, submit)

    def sandbox_choice(self) -> dict[str, Any] | None:
        """The sandbox the last :meth:`toolbox` started, as the run records it: its ``info().choice()``
        (backend, root ``image`` or ``host``, image, root identity, every selection reason) and the
        backend ``requested``. None before a toolbox was made."""
        return None if self._choice is None else dict(self._choice)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._session is not None:
            self._session.close()
        self._session = None


__all__ = ["BindsTask", "CampaignServices", "HarnessServices", "ReportsSandbox", "SubjectEvaluator",
           "sandbox_choice_of", "task_brief"]
