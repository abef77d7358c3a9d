"""``run_campaign``: what ``atb run`` calls for every tuner spec.

For ``random`` it delegates to the harness's seeded random search (``random_search_task``). For the LLM tuners
(``openai:``/``anthropic:``), ``replay:PATH`` and entry-point tuners it opens one measurement session,
a campaign in the store, a sandbox with the tools, and a transcript, then lets the tuner spend the
budget. An interrupted run (killed, or stopped by an error) stays open: calling ``run_campaign`` again
with ``resume=CAMPAIGN_ID`` continues from the graph's checkpoint, storing every iteration once, in a
measurement session of its own attached to the campaign (same device, same protocol; each verdict's
ratio stays within one session). A ``replay:PATH`` run resumes too: its recorded-call cursor is put
where the checkpoint stands. A resume that is refused opens no session.
The finished campaign is marked an infrastructure defect when too many model calls were truncated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from transcripts import EndData, HeaderData, TranscriptWriter, read_transcript

from atb_agent._engine_support import (
    engine_campaign_config, engine_model_brief, engine_tool_brief, is_engine, load_campaign_task,
    open_engine_campaign_session, subject_kind,
)
from atb_agent.errors import CampaignError
from atb_agent.evaluation import Evaluator, StoreIterationSink
from atb_agent.graph import SubmissionInbox, ToolBoxLike
from atb_agent.tuners import (
    Tuner,
    TuningEnvironment,
    campaign_config_of,
    graph_tuner_from_header,
    parse_spec,
    resolve_tuner,
    tool_definitions_sha256,
)
from harness.records import utc_now


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


@dataclass
class CampaignPaths:
    transcript: Path
    checkpoints: Path


def default_paths(store_path: Path, campaign_id: str) -> CampaignPaths:
    """Transcripts and checkpoints live beside the store: ``<dir>/transcripts/<id>.jsonl`` and
    ``<dir>/checkpoints.sqlite``."""
    base = store_path.resolve().parent
    return CampaignPaths(transcript=base / "transcripts" / f"{campaign_id}.jsonl", checkpoints=base / "checkpoints.sqlite")


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


def _tuner_for(spec: str, base_url: str | None) -> Tuner:
    parsed = parse_spec(spec)
    if parsed.kind != "replay":
        return resolve_tuner(spec, base_url=base_url)
    header = read_transcript(parsed.arg).header
    if header.provider not in ("openai", "anthropic"):
        raise CampaignError(f"{parsed.arg} records provider {header.provider!r}; only openai and anthropic "
                            "transcripts can be replayed as a tuner")
    return graph_tuner_from_header(spec, header)


def run_campaign(task: str | Path, tuner_spec: str, budget: int, seed: int, store_path: str | Path, *,
                 base_url: str | None = None, resume: str | None = None, services: CampaignServices | None = None,
                 transcript_path: Path | None = None, checkpoint_path: Path | None = None,
                 scripted: bool = False, label: str = "", backend: str = "cpu",
                 preregistration_id: str | None = None, arm: str | None = None,
                 config: dict[str, Any] | None = None) -> Any:
    """Run (or resume) one tuning campaign and return its stored :class:`harness.campaigns.CampaignSummary`.

    ``scripted`` marks the transcript as coming from scripted model turns (tests, fixtures).
    ``preregistration_id``/``arm`` make the campaign an arm of a pre-registered A/B; ``config`` is stored
    with the campaign. ``random`` runs :func:`harness.search.random_search_task` (``services`` unused).

    Raises:
        TunerSpecError: the spec names no tuner. MissingApiKeyError: the provider's key is unset.
        CampaignError: ``resume`` names a campaign of another task, spec or budget, or a replay
            transcript is not replayable.
        ProviderError, ReplayDivergence: a model call failed; the campaign stays open for ``resume``.
        HarnessError: from the harness (unknown task, device unavailable...).
    """
    from harness.campaigns import CampaignRecorder
    from harness.store import SqliteStore
    from protocol import load_protocol

    if budget <= 0:
        raise CampaignError(f"the budget must be a positive number of iterations, not {budget}")
    proto = load_protocol()
    store_file = Path(store_path)
    if parse_spec(tuner_spec).kind == "random":
        from harness.search import random_search_task

        with SqliteStore(store_file) as random_store:
            return random_search_task(str(task), store=random_store, protocol=proto, budget=budget, seed=seed,
                                      backend=backend, campaign_id=resume,  # type: ignore[arg-type]
                                      preregistration_id=preregistration_id, arm=arm)
    t = load_campaign_task(task)
    tuner = _tuner_for(tuner_spec, base_url)        # a bad spec or a missing key fails before anything is opened
    store = SqliteStore(store_file)
    svc = services or HarnessServices(backend)
    if isinstance(svc, BindsTask):
        svc.bind_task(t)
    try:
        if resume is not None:
            recorder = CampaignRecorder.resume(store, proto, resume)
            info = recorder.info
            if (info.task_id, info.tuner_spec, info.budget, info.seed) != (t.id, tuner_spec, budget, seed):
                raise CampaignError(f"campaign {resume} is task {info.task_id!r}, tuner {info.tuner_spec!r}, budget "
                                    f"{info.budget}, seed {info.seed}; resume it with the same arguments")
            if recorder.finished():
                return recorder.summary()          # nothing left to measure: open no session
            # A resumed run measures in a session of its own (the killed run's workers are gone), on the
            # campaign's device, attached to the campaign before anything is measured in it.
            recorder.attach_session(svc.open_session(store, proto, info.session_id))
        else:
            session_id = svc.open_session(store, proto, None)
            extra = engine_campaign_config(t) if is_engine(t) else {}
            recorder = CampaignRecorder.open(store, proto, task_id=t.id, kind=subject_kind(t), tuner_spec=tuner_spec,
                                             seed=seed, budget=budget, session_id=session_id,
                                             preregistration_id=preregistration_id, arm=arm,
                                             config={**(config or {}), **extra, **campaign_config_of(tuner),
                                                     "base_url": base_url or "",
                                                     "scripted": scripted})
        paths = default_paths(store_file, recorder.campaign_id)
        inbox = SubmissionInbox()
        brief = task_brief(t)
        toolbox = svc.toolbox(t, brief, inbox)
        writer = TranscriptWriter(transcript_path or paths.transcript)
        if writer.next_seq == 0:
            who = tuner.identity()
            writer.append("header", HeaderData(
                scripted=scripted, label=label, tuner_spec=tuner_spec, provider=who.provider, model=who.model,
                base_url=who.base_url, task=t.id, task_brief=brief, budget=budget, seed=seed,
                campaign_id=recorder.campaign_id, protocol_version=proto.version, protocol_sha256=proto.sha256,
                max_output_tokens=proto.agent.max_output_tokens,
                max_tool_calls_per_iteration=proto.agent.max_tool_calls_per_iteration,
                tool_definitions_sha256=tool_definitions_sha256(toolbox), created_at=utc_now(),
                text_protocol=who.text_protocol, prompt=who.prompt, model_server=who.model_server))
        replay = None
        evaluator = svc.evaluator(t, store, proto)
        if parse_spec(tuner_spec).kind == "replay":
            from atb_agent.replay import RecordedEvaluator, ReplayToolBox, ReplayTunerEvaluator
            from transcripts import ReplayCursor

            recorded = read_transcript(parse_spec(tuner_spec).arg)
            replay = ReplayCursor(recorded.model_calls())
            if resume is not None:
                # The graph resumes from its checkpoint: the recorded calls served before it are done.
                from atb_agent._runner import checkpointed_transcript_seq, replayed_calls_before

                at = checkpointed_transcript_seq(checkpoint_path or paths.checkpoints, recorder.campaign_id)
                if at is not None:
                    replay.served = replayed_calls_before(writer.path, at)
            toolbox = ReplayToolBox(toolbox, recorded.tool_calls())
            evaluator = ReplayTunerEvaluator(evaluator, RecordedEvaluator(recorded))
        env = TuningEnvironment(
            campaign_id=recorder.campaign_id, task_id=t.id, task_brief=brief, budget=budget, seed=seed, toolbox=toolbox,
            inbox=inbox, evaluator=evaluator, iterations=StoreIterationSink(recorder),
            transcript=writer, checkpoint_path=checkpoint_path or paths.checkpoints,
            max_output_tokens=proto.agent.max_output_tokens,
            max_tool_calls_per_iteration=proto.agent.max_tool_calls_per_iteration,
            model_timeout_s=proto.agent.model_timeout_s, replay=replay,
            recorded_so_far=set(recorder.recorded()))
        counts = tuner.run(env)
        outcome = recorder.finish(detail={"transcript": str(writer.path), "model_calls": counts.model_calls,
                                          "truncated_calls": counts.truncated_calls})
        writer.append("end", EndData(status=outcome.status, iterations=counts.iterations, model_calls=counts.model_calls,
                                     truncated_calls=counts.truncated_calls, truncated_fraction=outcome.truncated_fraction,
                                     reason=outcome.reason))
        return recorder.summary()
    finally:
        svc.close()
        store.close()


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
