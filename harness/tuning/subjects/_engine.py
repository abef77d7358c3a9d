"""A serving-engine task as a :class:`~harness.tuning.subjects.Subject`: its candidates are flag
configurations (``flags.json``), measured by the engine trial and judged by
:func:`harness.verdict.engine.evaluate_engine_candidate` against the same engine's default launch, in an
engine session (the engine fingerprint: an LLM run and a random run of the same engine task on this
machine share a device, so ``atb compare`` may relate them).

The tuner's view of the task lives here too: :func:`engine_brief` (what an LLM tuner reads), the file it
submits (:data:`ENGINE_CANDIDATE_FILE`) and how its text is read back (:func:`config_text_from_files`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.engines._errors import EngineNotBuilt, FlagSpaceError
from harness.engines.flags import FlagSpace, render_config
from harness.engines.task import EngineTask, load_engine_task
from harness.measure.serving.session import engine_fingerprint, open_engine_session
from harness.records import Backend, DeviceFingerprint, SubjectKind, canonical_json
from harness.tuning.subjects._protocol import NoCandidate, SessionPurpose, SubjectSession, ToolBrief
from harness.verdict.engine import EngineEvalResult, evaluate_engine_candidate

if TYPE_CHECKING:
    from harness.store import ResultStore
    from harness.verdict.result import VerdictResult
    from protocol import Protocol

# The workspace file an LLM tuner writes its flag configuration to (its `set_flags`-style submission).
ENGINE_CANDIDATE_FILE = "flags.json"


def engine_brief(task: EngineTask) -> str:
    """The task as a tuner reads it: engine, workload, each tunable flag with its range, the constraints,
    and how to submit. No measured number appears here: the harness measures."""
    import json

    space = task.flag_space()
    lines = [
        f"Engine task {task.id}: tune the launch flags of {task.engine} for request throughput (requests/s).",
        task.description.strip(),
        f"Workload: {json.dumps(task.workload.model_dump(mode='json'), sort_keys=True)}.",
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


def config_text_from_files(files: Mapping[str, bytes]) -> str:
    """The flag configuration a tuner submitted: the text of ``ENGINE_CANDIDATE_FILE`` in its workspace.

    Raises:
        FlagSpaceError: the file is missing or not UTF-8 text (the message says what to write where).
    """
    data = files.get(ENGINE_CANDIDATE_FILE)
    if data is None:
        raise FlagSpaceError(f"no {ENGINE_CANDIDATE_FILE} was submitted; write a JSON object of flag -> value "
                             f"to {ENGINE_CANDIDATE_FILE} (submitted files: {sorted(files)[:8]})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FlagSpaceError(f"{ENGINE_CANDIDATE_FILE} is not UTF-8 text: {exc}") from exc


@dataclass(frozen=True)
class EngineSubjectSession:
    """An engine session: a store session on a fingerprinted machine. It holds no workers (each trial
    launches its own engine processes), so closing it has nothing to stop."""

    session_id: str
    fingerprint: DeviceFingerprint

    def close(self) -> None:
        return None


class EngineSubject:
    """A loaded :class:`~harness.engines.EngineTask` (``.task``) as a subject."""

    kind: SubjectKind = "engine"
    #: what a verdict's ratio is, in words (reports label their axes with it)
    ratio_label = "throughput ratio over the engine's default (x)"
    candidate_file = ENGINE_CANDIDATE_FILE
    sandbox_mounts_torch = False

    def __init__(self, task: EngineTask) -> None:
        self.task = task

    @classmethod
    def load(cls, name_or_path: str | Path) -> EngineSubject:
        """Raises: EngineTaskError: no such engine task, or its file is malformed."""
        return cls(load_engine_task(name_or_path))

    @property
    def id(self) -> str:
        return self.task.id

    @property
    def source(self) -> str:
        return canonical_json(self.task.model_dump(mode="json"))

    @property
    def sha256(self) -> str:
        return self.task.sha256

    def __repr__(self) -> str:
        return f"EngineSubject({self.id!r})"

    # -------------------------------------------------------------- what the tuner is told
    def model_brief(self) -> str:
        return (f"{engine_brief(self.task)}\n\nUse `set_flags` to write {ENGINE_CANDIDATE_FILE} (it validates the "
                "flags against the space and the constraints), then call `submit`.")

    def tool_brief(self, text: str) -> ToolBrief:
        """The tools take the harness's own :class:`FlagSpace` (no copy to drift), so ``set_flags``
        validates exactly as the harness will."""
        return ToolBrief(text=text, task_id=self.id, kind="engine", candidate_file=ENGINE_CANDIDATE_FILE,
                         flag_space=self.search_space())

    # -------------------------------------------------------------- the search problem
    def search_space(self) -> FlagSpace:
        return self.task.flag_space()

    def render(self, config: dict[str, Any]) -> str:
        return render_config(config)

    def campaign_config(self) -> dict[str, Any]:
        """The same keys in an LLM campaign and in the random-search baseline, so the two arms of a
        comparison describe the task alike."""
        return {"engine": self.task.engine, "task_sha256": self.task.sha256}

    def search_config(self) -> dict[str, Any]:
        return {}

    # -------------------------------------------------------------- measuring
    def check_ready(self) -> None:
        """The engine must be present before a campaign is opened: a missing binary is a setup error
        the user can fix, not an iteration that fails."""
        adapter = self.task.adapter()
        missing = adapter.missing_reason()
        if missing is not None:
            raise EngineNotBuilt(f"engine task {self.id}: {missing}; {adapter.install_hint()}")

    def device_sha256(self, backend: Backend, protocol: Protocol) -> str:
        return engine_fingerprint(backend).sha256

    def open_session(self, store: ResultStore, protocol: Protocol, backend: Backend, *,
                     purpose: SessionPurpose, resume_session_id: str | None = None) -> SubjectSession:
        """A new engine session, or for a resume the campaign's own one (nothing to restart in it)."""
        if resume_session_id is not None:
            return EngineSubjectSession(session_id=resume_session_id, fingerprint=engine_fingerprint(backend))
        who = "random search" if purpose == "random-search" else "llm tuner"
        opened = open_engine_session(store, protocol, backend, note=f"{who} on {self.id}")
        return EngineSubjectSession(session_id=opened.session_id, fingerprint=opened.fingerprint)

    def candidate_from_files(self, files: Mapping[str, bytes]) -> str:
        if ENGINE_CANDIDATE_FILE not in files:
            raise NoCandidate(f"the submitted workspace has no {ENGINE_CANDIDATE_FILE}; call set_flags to write it, "
                              "then submit", built=True)
        try:
            return config_text_from_files(files)
        except FlagSpaceError as exc:
            raise NoCandidate(str(exc), built=False) from exc

    def evaluate(self, session: SubjectSession, candidate: str, *, store: ResultStore,
                 protocol: Protocol) -> EngineEvalResult:
        """A configuration outside the flag space, one that does not launch or one whose outputs differ
        from the default's is a rejected verdict (stored), never an exception.

        Raises (the machine or setup is broken, not the candidate): EngineNotBuilt, EngineLaunchFailed
        (the *default* launch failed), IngestRejected."""
        return evaluate_engine_candidate(self.task, candidate, store=store, session=session.session_id,
                                         protocol=protocol)

    def verdict_detail(self, result: VerdictResult) -> dict[str, Any]:
        assert isinstance(result, EngineEvalResult), f"an engine subject's result, not {type(result).__name__}"
        return {"kind": "engine", "engine": result.engine, "baseline_label": result.baseline_label,
                "config": result.config}


__all__ = ["ENGINE_CANDIDATE_FILE", "EngineSubject", "EngineSubjectSession", "config_text_from_files",
           "engine_brief"]
