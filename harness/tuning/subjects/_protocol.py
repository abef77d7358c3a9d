"""The :class:`Subject` protocol: what a campaign needs of the thing it tunes, whatever its kind.

Two kinds implement it: a kernel task (:class:`harness.tuning.subjects.KernelSubject`, a candidate is a
Python file defining ``ModelNew``) and a serving-engine task (:class:`harness.tuning.subjects.EngineSubject`,
a candidate is a flag configuration). Everything that differs between them lives behind these
methods, so the LLM campaign, its services, the sweep spec and the random-search baseline read one
interface and never ask which kind they hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from harness.errors import HarnessError
from harness.records import Backend, SubjectKind

if TYPE_CHECKING:
    from harness.engines.flags import FlagSpace
    from harness.store import ResultStore
    from harness.tuning.search._random import SearchSpace
    from harness.verdict.result import VerdictResult
    from protocol import Protocol as MeasurementProtocol

# Why a session is opened: each kind keeps the session note it has always stored for each purpose.
SessionPurpose = Literal["tuner", "random-search"]


class NoCandidate(HarnessError):
    """A submitted workspace holds nothing to measure (no candidate file, or not text). Not a verdict:
    nothing was measured. ``built`` is False when a file was there but unreadable."""

    def __init__(self, reason: str, *, built: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.built = built


@dataclass(frozen=True)
class ToolBrief:
    """What a tuner's tools know of the subject (the fields of ``tools.TaskBrief``, which the harness
    may not import): the text the model reads, the workspace file measured, and for an engine the
    flag space ``set_flags`` validates against."""

    text: str
    task_id: str
    kind: SubjectKind
    candidate_file: str
    flag_space: FlagSpace | None = None


class SubjectSession(Protocol):
    """A measurement session opened for a subject: its store id, and ``close`` (stops its workers)."""

    @property
    def session_id(self) -> str: ...

    def close(self) -> None: ...


@runtime_checkable
class Subject(Protocol):
    """What a campaign tunes. Build one with :func:`harness.tuning.subjects.load_subject`."""

    @property
    def kind(self) -> SubjectKind:
        """The stored subject kind of its candidates and campaigns (``"kernel"`` or ``"engine"``)."""
        ...

    @property
    def ratio_label(self) -> str:
        """What a verdict's ratio is, in words (a report's axis label)."""
        ...

    @property
    def id(self) -> str:
        """The task id the store files it under."""
        ...

    @property
    def source(self) -> str:
        """The subject's defining text (a kernel's reference source, an engine task's canonical JSON)."""
        ...

    @property
    def sha256(self) -> str:
        """The digest of :attr:`source` (what a sweep's identity records)."""
        ...

    @property
    def candidate_file(self) -> str:
        """The workspace file a tuner writes its candidate to."""
        ...

    @property
    def sandbox_mounts_torch(self) -> bool:
        """Whether the tuner's sandbox needs torch (to try kernels); an engine tuner only writes flags."""
        ...

    # -------------------------------------------------------------- what the tuner is told
    def model_brief(self) -> str:
        """The subject as the model reads it, and what to deliver where."""
        ...

    def tool_brief(self, text: str) -> ToolBrief:
        """The tools' view of the subject, ``text`` being what the model is told."""
        ...

    # -------------------------------------------------------------- the search problem
    def search_space(self) -> SearchSpace:
        """The space random search samples.

        Raises:
            KnobSpaceError: the subject declares none (a KernelBench file), so there is nothing to search.
        """
        ...

    def render(self, config: dict[str, Any]) -> str:
        """The candidate text of one point of :meth:`search_space`."""
        ...

    def campaign_config(self) -> dict[str, Any]:
        """What any campaign of this subject stores about it beside its tuner's config."""
        ...

    def search_config(self) -> dict[str, Any]:
        """What the random-search baseline stores about its space (beside ``backend`` and
        :meth:`campaign_config`)."""
        ...

    # -------------------------------------------------------------- measuring
    def check_ready(self) -> None:
        """Refuse, before a tuner campaign opens anything, what the user must fix first.

        Raises:
            EngineNotBuilt: an engine's executable is not on this machine.
        """
        ...

    def device_sha256(self, backend: Backend, protocol: MeasurementProtocol) -> str:
        """This machine's fingerprint digest as this subject's sessions record it (a resume must match)."""
        ...

    def open_session(self, store: ResultStore, protocol: MeasurementProtocol, backend: Backend, *,
                     purpose: SessionPurpose, resume_session_id: str | None = None) -> SubjectSession:
        """A measurement session for this subject's candidates. ``resume_session_id`` is a resumed
        campaign's session, already checked to be on this device: a subject whose session holds no
        workers measures on in it, one whose session does opens a new one."""
        ...

    def candidate_from_files(self, files: Mapping[str, bytes]) -> str:
        """The candidate text in a submitted workspace.

        Raises:
            NoCandidate: the workspace holds none (the reason says what to write where).
        """
        ...

    def evaluate(self, session: SubjectSession, candidate: str, *, store: ResultStore,
                 protocol: MeasurementProtocol) -> VerdictResult:
        """Measure ``candidate`` in ``session`` (a session this subject opened) and store the verdict.
        A bad candidate is a rejected result, never an exception."""
        ...

    def verdict_detail(self, result: VerdictResult) -> dict[str, Any]:
        """What the tuner's iteration record carries about a result beyond the shared verdict fields."""
        ...


__all__ = ["NoCandidate", "SessionPurpose", "Subject", "SubjectSession", "ToolBrief"]
