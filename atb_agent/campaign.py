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
The tuner's sandbox is started before a new campaign is stored, so its config records which backend, over
whose root filesystem (the image's or the host's) and why (``config['sandbox']``, issue 26); a resumed
run's fresh sandbox is recorded beside it (``harness.tuning.campaigns.campaign_sandboxes`` reads both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transcripts import EndData, HeaderData, StoreCheckpointRef, TranscriptWriter, read_transcript

from atb_agent._checkpointer import CheckpointTarget, checkpoint_target
from atb_agent.campaign_spec import CampaignSpec
from atb_agent.errors import CampaignError
from atb_agent.evaluation import Evaluator, StoreIterationSink
from atb_agent.graph import SubmissionInbox, ToolBoxLike
from atb_agent.services import BindsTask, CampaignServices, HarnessServices, sandbox_choice_of, task_brief
from atb_agent.tuners import (
    ARM_CONFIG_KEYS,
    Tuner,
    TuningEnvironment,
    apply_arm_config,
    campaign_config_of,
    graph_tuner_from_header,
    parse_spec,
    resolve_tuner,
    tool_definitions_sha256,
)
from harness.records import utc_now

if TYPE_CHECKING:
    from harness.store import ResultStore
from harness.tuning.subjects import load_subject


@dataclass
class CampaignPaths:
    transcript: Path
    checkpoints: Path


TRANSCRIPTS_ENV = "ATB_TRANSCRIPTS_DIR"


def open_results_store(url: str | Path) -> ResultStore:
    """The results store ``url`` names (a SQLite path or ``sqlite:///PATH``, or ``postgresql://...``),
    typed as the one store protocol the campaign code takes (``SqliteStore`` and ``PostgresStore`` are
    siblings behind it).

    Raises:
        StoreError: an unknown scheme, an unreachable server, a file that cannot be opened.
    """
    from harness.store import open_store

    return open_store(url)


def transcripts_home(store: str | Path, transcripts_dir: Path | str | None = None) -> Path:
    """The folder that holds a store's ``transcripts/``: beside a SQLite file; for a PostgreSQL store
    (no file to sit beside) ``transcripts_dir``, else ``$ATB_TRANSCRIPTS_DIR``, else the working folder.

    Why a folder for a server store: the transcript is the run's byte-for-byte record and a resumed
    campaign appends to it, so every node that may resume a campaign must see it (a shared folder on
    a multi-node sweep; ``atb sweep`` hands its workers one absolute path).
    """
    import os

    from harness.store._open import sqlite_path, store_kind

    if transcripts_dir is not None:
        return Path(transcripts_dir).resolve()
    if store_kind(store) == "sqlite":
        return sqlite_path(store).resolve().parent
    return Path(os.environ.get(TRANSCRIPTS_ENV) or Path.cwd()).resolve()


def default_paths(store_path: str | Path, campaign_id: str, transcripts_dir: Path | str | None = None) -> CampaignPaths:
    """Transcripts and checkpoints live beside the store: ``<dir>/transcripts/<id>.jsonl`` and
    ``<dir>/checkpoints.sqlite`` (for a PostgreSQL store ``<dir>`` is :func:`transcripts_home`, and the
    graph checkpoints on the server instead: :func:`atb_agent._checkpointer.checkpoint_target`)."""
    base = transcripts_home(store_path, transcripts_dir)
    return CampaignPaths(transcript=base / "transcripts" / f"{campaign_id}.jsonl", checkpoints=base / "checkpoints.sqlite")


def _tuner_for(spec: str, base_url: str | None) -> Tuner:
    parsed = parse_spec(spec)
    if parsed.kind != "replay":
        return resolve_tuner(spec, base_url=base_url)
    header = read_transcript(parsed.arg).header
    if header.provider not in ("openai", "anthropic"):
        raise CampaignError(f"{parsed.arg} records provider {header.provider!r}; only openai and anthropic "
                            "transcripts can be replayed as a tuner")
    return graph_tuner_from_header(spec, header)


def run_campaign(spec: CampaignSpec, *, services: CampaignServices | None = None,
                 on_iteration: Callable[[int, dict[str, Any], Any], None] | None = None) -> Any:
    """Run (or resume) the campaign ``spec`` describes and return its stored
    :class:`harness.tuning.campaigns.CampaignSummary`.

    ``services`` opens the measurement session, the sandbox and the evaluator (the harness's own by
    default; tests pass scripted ones). A ``random`` tuner runs :func:`harness.tuning.search.random_search_task`
    (``services`` unused; ``on_iteration(i, knobs, result)`` is told of each iteration). On PostgreSQL the
    graph checkpoints on the same server (LangGraph's ``PostgresSaver``) and the transcript goes under
    :func:`transcripts_home`.

    Raises:
        TunerSpecError: the spec names no tuner. MissingApiKeyError: the provider's key is unset.
        CampaignError: ``resume`` names a campaign of another task, spec or budget, or a replay
            transcript is not replayable.
        ProviderError, ReplayDivergence: a model call failed; the campaign stays open for ``resume``.
        HarnessError: from the harness (unknown task, device unavailable...).
    """
    from harness.tuning.campaigns import CampaignRecorder
    from protocol import load_protocol

    proto = load_protocol()
    store_file = spec.store_target
    task, tuner_spec, budget, seed, resume = spec.task, spec.tuner, spec.budget, spec.seed, spec.resume
    if parse_spec(tuner_spec).kind == "random":
        from harness.tuning.search import random_search_task

        with open_results_store(store_file) as random_store:
            return random_search_task(task, store=random_store, protocol=proto, budget=budget, seed=seed,
                                      backend=spec.backend, campaign_id=resume,  # type: ignore[arg-type]
                                      preregistration_id=spec.preregistration_id, arm=spec.arm,
                                      on_iteration=on_iteration)
    subject = load_subject(task) if isinstance(task, (str, Path)) else task
    base_url, config = spec.base_url, spec.config
    tuner = _tuner_for(tuner_spec, base_url)        # a bad spec or a missing key fails before anything is opened
    apply_arm_config(tuner, {k: v for k, v in (config or {}).items() if k in ARM_CONFIG_KEYS})
    store = open_results_store(store_file)
    svc = services or HarnessServices(spec.backend)
    if isinstance(svc, BindsTask):
        svc.bind_task(subject)
    inbox = SubmissionInbox()
    brief = task_brief(subject)
    try:
        if resume is not None:
            recorder = CampaignRecorder.resume(store, proto, resume)
            info = recorder.info
            if (info.task_id, info.tuner_spec, info.budget, info.seed) != (subject.id, tuner_spec, budget, seed):
                raise CampaignError(f"campaign {resume} is task {info.task_id!r}, tuner {info.tuner_spec!r}, budget "
                                    f"{info.budget}, seed {info.seed}; resume it with the same arguments")
            if recorder.finished():
                return recorder.summary()          # nothing left to measure: open no session
            # A resumed run measures in a session of its own (the killed run's workers are gone), on the
            # campaign's device, attached to the campaign before anything is measured in it.
            session_id = svc.open_session(store, proto, info.session_id)
            recorder.attach_session(session_id)
            toolbox = svc.toolbox(subject, brief, inbox)
            choice = sandbox_choice_of(svc)
            if choice is not None:          # this run's fresh sandbox, beside the first run's in the config
                recorder.note_sandbox(choice, session_id)
        else:
            session_id = svc.open_session(store, proto, None)
            # The sandbox starts before the campaign is stored, so the campaign's config records which
            # backend and root it runs over and why (issue 26); a sandbox that cannot start stores no campaign.
            toolbox = svc.toolbox(subject, brief, inbox)
            choice = sandbox_choice_of(svc)
            recorder = CampaignRecorder.open(store, proto, task_id=subject.id, kind=subject.kind, tuner_spec=tuner_spec,
                                             seed=seed, budget=budget, session_id=session_id,
                                             preregistration_id=spec.preregistration_id, arm=spec.arm,
                                             config={**(config or {}), **subject.campaign_config(),
                                                     **campaign_config_of(tuner), "base_url": base_url or "",
                                                     "scripted": spec.scripted,
                                                     **({"sandbox": choice} if choice is not None else {})})
        paths = default_paths(store_file, recorder.campaign_id, spec.transcripts_dir)
        checkpoints = spec.checkpoint_path or checkpoint_target(store_file, paths.checkpoints)
        writer = TranscriptWriter(spec.transcript_path or paths.transcript)
        if writer.next_seq == 0:
            _write_header(writer, tuner, tuner_spec, subject.id, brief, budget, seed, recorder.campaign_id, proto,
                          toolbox, scripted=spec.scripted, label=spec.label)
        replay = None
        evaluator = svc.evaluator(subject, store, proto)
        if parse_spec(tuner_spec).kind == "replay":
            replay, toolbox, evaluator = _replay_tuner_parts(tuner_spec, toolbox, evaluator, writer.path,
                                                             checkpoints,
                                                             recorder.campaign_id, resumed=resume is not None)
        env = TuningEnvironment(
            campaign_id=recorder.campaign_id, task_id=subject.id, task_brief=brief, budget=budget, seed=seed,
            toolbox=toolbox, inbox=inbox, evaluator=evaluator, iterations=StoreIterationSink(recorder),
            transcript=writer, checkpoint_path=checkpoints,
            max_output_tokens=proto.agent.max_output_tokens,
            max_tool_calls_per_iteration=proto.agent.max_tool_calls_per_iteration,
            model_timeout_s=proto.agent.model_timeout_s, replay=replay,
            recorded_so_far=set(recorder.recorded()))
        counts = tuner.run(env)
        outcome = recorder.finish(detail={"transcript": str(writer.path), "model_calls": counts.model_calls,
                                          "truncated_calls": counts.truncated_calls})
        cp = recorder.checkpoint
        signed = None if cp is None else StoreCheckpointRef(store_id=cp.store_id, head_seq=cp.head_seq,
                                                            head_hash=cp.head_hash, signature_id=cp.signature_id,
                                                            signed_at=cp.signed_at)
        writer.append("end", EndData(status=outcome.status, iterations=counts.iterations, model_calls=counts.model_calls,
                                     truncated_calls=counts.truncated_calls, truncated_fraction=outcome.truncated_fraction,
                                     reason=outcome.reason, checkpoint=signed))
        return recorder.summary()
    finally:
        svc.close()
        store.close()


def _write_header(writer: TranscriptWriter, tuner: Tuner, tuner_spec: str, task_id: str, brief: str, budget: int,
                  seed: int, campaign_id: str, proto: Any, toolbox: ToolBoxLike, *, scripted: bool, label: str) -> None:
    """The transcript's first entry: who tunes what, under which protocol, with which tools."""
    who = tuner.identity()
    writer.append("header", HeaderData(
        scripted=scripted, label=label, tuner_spec=tuner_spec, provider=who.provider, model=who.model,
        base_url=who.base_url, task=task_id, task_brief=brief, budget=budget, seed=seed,
        campaign_id=campaign_id, protocol_version=proto.version, protocol_sha256=proto.sha256,
        max_output_tokens=proto.agent.max_output_tokens,
        max_tool_calls_per_iteration=proto.agent.max_tool_calls_per_iteration,
        tool_definitions_sha256=tool_definitions_sha256(toolbox), created_at=utc_now(),
        text_protocol=who.text_protocol, prompt=who.prompt, model_server=who.model_server,
        system_prompt_suffix=who.system_prompt_suffix,
        request_seed=who.request_seed if who.model_server is not None and who.request_seed not in (None, seed) else None))


def _replay_tuner_parts(tuner_spec: str, toolbox: ToolBoxLike, evaluator: Evaluator, transcript: Path,
                        checkpoints: CheckpointTarget, campaign_id: str, *, resumed: bool) -> tuple[Any, ToolBoxLike, Evaluator]:
    """For ``replay:PATH`` as a tuner: the recorded-call cursor (put where the checkpoint stands when
    resumed), the toolbox serving recorded tool results, and the evaluator that measures afresh while
    the model is shown the recorded verdict."""
    from atb_agent.replay import RecordedEvaluator, ReplayToolBox, ReplayTunerEvaluator
    from transcripts import ReplayCursor

    recorded = read_transcript(parse_spec(tuner_spec).arg)
    replay = ReplayCursor(recorded.model_calls())
    if resumed:
        # The graph resumes from its checkpoint: the recorded calls served before it are done.
        from atb_agent._runner import checkpointed_transcript_seq, replayed_calls_before

        at = checkpointed_transcript_seq(checkpoints, campaign_id)
        if at is not None:
            replay.served = replayed_calls_before(transcript, at)
    return (replay, ReplayToolBox(toolbox, recorded.tool_calls()),
            ReplayTunerEvaluator(evaluator, RecordedEvaluator(recorded)))


__all__ = ["BindsTask", "CampaignPaths", "CampaignServices", "CampaignSpec", "HarnessServices", "default_paths", "run_campaign",
           "open_results_store", "task_brief", "transcripts_home"]
