"""Replaying a transcript: the same SDK code path, fed the recorded bytes, checked at every step.

What replay checks, in order of the run:

* every model request is byte-identical to the recorded one after header normalisation
  (``transcripts._normalise``); the first difference raises :class:`ReplayDivergence` naming the call
  index and the field (``body.messages[3].content``, ``url``, ``header:NAME``...);
* the model's tool calls (which come from the recorded responses) are the recorded ones, and they are
  executed again in a fresh workspace; the recorded tool results are what the model is shown (so the
  requests stay identical) and any difference in a re-executed result is reported, not fatal;
* the files submitted at each iteration hash-equal the recorded ones (a difference is a divergence);
* with recorded measurement the recorded verdicts are served to the graph (the model must be shown
  what it was shown), but they are *re-checked* against signed evidence, never against themselves
  (issue 27): the campaign's iterations and verdicts in the store it was recorded into (``--db``, else
  the store beside the transcript, ``<dir>/transcripts/<id>.jsonl`` -> ``<dir>/*.sqlite``), which must
  verify (chain, rules, checkpoints) and hold those rows under a checkpoint signed by the trusted key.
  A recorded verdict the signed rows contradict is a divergence; one with no signed row to compare is
  not reproduced (``verdict_evidence`` says why). A transcript is keyless: a forged one (verdicts changed,
  request bodies patched to match, chain recomputed) replays byte-for-byte, so its own records prove
  nothing about its verdicts;
* with fresh measurement the harness measures each submission again and the report says how verdicts
  moved (the model is still shown the recorded verdicts, so its requests stay byte-identical);
* the run makes exactly as many model calls as were recorded.

``ok`` is true when the replay matched and its verdicts were re-derived (fresh measurement, or signed
evidence that agrees), or, for a transcript labelled ``scripted`` (a test fixture, not a real model's
run), when there is no evidence to check: its verdicts then stand unreproduced, and say so.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from transcripts import (
    RecordingExhausted,
    ReplayCursor,
    RequestMismatch,
    SubmissionData,
    ToolCallData,
    Transcript,
    TranscriptWriter,
    read_transcript,
)

from atb_agent.errors import ReplayDivergence
from atb_agent.evaluation import Evaluator, MemoryIterationSink, VerdictSummary, file_hashes
from atb_agent.graph import SubmissionInbox, ToolBoxLike
from atb_agent.tuners import TuningEnvironment, graph_tuner_from_header

ToolBoxFactory = Callable[[SubmissionInbox, str], ToolBoxLike]  # (submit callback, task brief) -> toolbox


class ReplayedOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str
    is_error: bool
    submitted: dict[str, Any] | None = None


def _arguments_text(arguments: str | dict[str, Any]) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True)


class ReplayToolBox:
    """Runs each tool call for real (to rebuild the workspace) but answers with the recorded result."""

    def __init__(self, inner: ToolBoxLike, recorded: list[ToolCallData]) -> None:
        self.inner = inner
        self.recorded = recorded
        self.position = 0
        self.output_differences: list[str] = []

    def openai_tools(self) -> list[dict[str, Any]]:
        return self.inner.openai_tools()

    def anthropic_tools(self) -> list[dict[str, Any]]:
        return self.inner.anthropic_tools()

    def call(self, name: str, arguments: str | dict[str, Any]) -> ReplayedOutcome:
        """Raises ReplayDivergence when the call is not the next recorded one."""
        index = self.position
        if index >= len(self.recorded):
            raise ReplayDivergence(-1, f"tool call #{index}", f"the replay made a tool call {name!r} beyond the "
                                   f"{len(self.recorded)} recorded")
        want = self.recorded[index]
        args = _arguments_text(arguments)
        if (want.name, want.arguments) != (name, args):
            raise ReplayDivergence(-1, f"tool call #{index}", f"recorded {want.name}({want.arguments[:120]}), "
                                   f"replayed {name}({args[:120]})")
        self.position = index + 1
        real = self.inner.call(name, arguments)
        if (real.content, real.is_error) != (want.content, want.is_error):
            self.output_differences.append(f"tool call #{index} ({name}, iteration {want.iteration}): the re-executed "
                                           "result differs from the recorded one")
        return ReplayedOutcome(content=want.content, is_error=want.is_error, submitted=real.submitted)


class RecordedEvaluator:
    """Serves the recorded verdicts ("replay with recorded measurement")."""

    def __init__(self, transcript: Transcript) -> None:
        self.by_iteration = {v.iteration: VerdictSummary.model_validate(v.verdict) for v in transcript.verdicts()}

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        if iteration not in self.by_iteration:
            raise ReplayDivergence(-1, f"verdict of iteration {iteration}", "the transcript records no verdict for it")
        return self.by_iteration[iteration]


class FreshEvaluator:
    """Re-measures each submission with the harness ("replay with fresh measurement") but answers the
    graph with the recorded verdict: the model must be shown what it was shown, or every later request
    would differ. The fresh verdicts are kept for the report."""

    def __init__(self, harness: Evaluator, recorded: RecordedEvaluator) -> None:
        self.harness = harness
        self.recorded = recorded
        self.fresh: dict[int, VerdictSummary] = {}

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        self.fresh[iteration] = self.harness.evaluate(iteration, files)
        return self.recorded.evaluate(iteration, files)


class ReplayTunerEvaluator:
    """``replay:PATH`` as a tuner: every submission is measured afresh by the harness (that verdict is
    what the campaign stores), but the model is shown the verdict text it was shown when the transcript
    was recorded, so its next request stays byte-identical to the recording."""

    def __init__(self, harness: Evaluator, recorded: RecordedEvaluator) -> None:
        self.harness = harness
        self.recorded = recorded

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        fresh = self.harness.evaluate(iteration, files)
        shown = self.recorded.evaluate(iteration, files).for_model()
        return fresh.model_copy(update={"shown_to_model": shown})


class CheckingEvaluator:
    """Checks each submission's file hashes against the recording, then delegates."""

    def __init__(self, inner: Evaluator, recorded: list[SubmissionData]) -> None:
        self.inner = inner
        self.by_iteration = {s.iteration: s for s in recorded}
        self.checked: list[int] = []

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        want = self.by_iteration.get(iteration)
        got = file_hashes(files)
        if want is None:
            raise ReplayDivergence(-1, f"workspace files of iteration {iteration}", "the recording has no submission here")
        if want.files != got:
            changed = sorted(p for p in set(want.files) | set(got) if want.files.get(p) != got.get(p))
            raise ReplayDivergence(-1, f"workspace files of iteration {iteration}",
                                   f"files whose hashes differ from the recording: {changed}")
        self.checked.append(iteration)
        return self.inner.evaluate(iteration, files)


class VerdictMove(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    iteration: int
    recorded_status: str
    replayed_status: str
    recorded_speedup: float | None
    replayed_speedup: float | None
    speedup_change: float | None = Field(default=None, description="replayed / recorded - 1")
    status_changed: bool
    moved: bool = Field(description="the status changed, or the speedup moved by more than protocol.noise.noise_floor")


class ReplayReport(BaseModel):
    """What ``atb replay`` prints."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    transcript: str
    scripted: bool
    provider: str
    model: str
    measurement: str = Field(description="recorded | fresh")
    records: int
    model_calls: int
    requests_identical: int
    tool_calls: int
    tool_output_differences: list[str]
    submissions_checked: int
    verdicts: list[VerdictMove]
    verdicts_reproduced: bool
    environment_differences: list[str]
    protocol_sha256_recorded: str
    protocol_sha256_now: str = Field(description="the protocol fresh measurement used (differs: verdicts may move)")
    verdict_evidence: str = Field(default="none", description=(
        "fresh (re-measured) | signed_store (re-checked against checkpoint-covered store rows) | none"))
    evidence_store: str | None = Field(default=None, description="the store the verdicts were checked against")
    evidence_checkpoint: str | None = Field(default=None, description="signature id of the checkpoint covering them")
    evidence_problems: list[str] = Field(default_factory=list,
                                         description="why the verdicts could not be re-derived (empty when they were)")


def find_evidence_store(transcript: Path, campaign_id: str, db: Path | str | None = None) -> Path | str | None:
    """The store to check a recorded replay's verdicts against: ``db`` when it holds the campaign (a
    ``postgresql://`` URL is taken as given), else a SQLite store beside the transcript that holds it
    (``atb run`` writes ``<dir>/transcripts/<id>.jsonl`` beside ``<dir>/<store>``); None when there is none."""
    from harness.store import sqlite_holds_campaign, store_kind
    from harness.store._open import sqlite_path

    if db is not None:
        if store_kind(db) == "postgresql":
            return db
        if sqlite_path(db).is_file() and sqlite_holds_campaign(sqlite_path(db), campaign_id):
            return sqlite_path(db)
    folder = transcript.resolve().parent
    for base in (folder.parent, folder):
        for cand in sorted(base.glob("*.sqlite")):
            if cand.name != "checkpoints.sqlite" and sqlite_holds_campaign(cand, campaign_id):
                return cand
    return None


def _signed_moves(recorded: dict[int, VerdictSummary], evidence: Any) -> tuple[list[VerdictMove], list[str]]:
    """Each recorded verdict against the signed store rows: a move where they differ; a problem where
    there is no signed row to compare with."""
    moves: list[VerdictMove] = []
    problems: list[str] = []
    for idx, was in sorted(recorded.items()):
        it = evidence.iterations.get(idx)
        if it is None:
            problems.append(f"iteration {idx}: the store holds no such iteration of campaign {evidence.campaign_id}")
            continue
        v = evidence.verdicts.get(it.verdict_id) if it.verdict_id is not None else None
        now_status = v.status if v is not None else "no_submission"
        now_speed = v.ratio if v is not None else None
        if not it.signed or (v is not None and not v.signed):
            problems.append(f"iteration {idx}: its store rows are after the newest checkpoint (unsigned)")
        if it.verdict_id != was.verdict_id:
            moves.append(VerdictMove(iteration=idx, recorded_status=was.status, replayed_status=now_status,
                                     recorded_speedup=was.speedup, replayed_speedup=now_speed, status_changed=True,
                                     moved=True))
            continue
        ci = (v.ci_low, v.ci_high) if v is not None and v.ci_low is not None and v.ci_high is not None else None
        was_ci = tuple(was.speedup_ci) if was.speedup_ci is not None else None
        status_changed = (was.status != now_status) if v is not None else was.status not in ("no_submission", "rejected")
        speed_moved = was.speedup != now_speed or (v is not None and was_ci != ci)
        change = (now_speed / was.speedup - 1.0) if now_speed is not None and was.speedup else None
        moves.append(VerdictMove(iteration=idx, recorded_status=was.status, replayed_status=now_status,
                                 recorded_speedup=was.speedup, replayed_speedup=now_speed, speedup_change=change,
                                 status_changed=status_changed, moved=status_changed or speed_moved))
    return moves, problems


def replay_transcript(path: Path | str, *, toolbox_factory: ToolBoxFactory, fresh_evaluator: Evaluator | None = None,
                      workdir: Path | None = None, evidence_db: Path | str | None = None,
                      key_dir: Path | str | None = None) -> ReplayReport:
    """Replay ``path`` and return the report; ``fresh_evaluator`` re-measures, else the recorded verdicts
    are re-checked against the signed store rows of ``evidence_db`` (default: the store beside the
    transcript; see :func:`find_evidence_store`), verified with ``key_dir``'s key and log.

    Raises:
        TranscriptTampered / TranscriptFormatError: the file fails verification (an edited transcript).
        ReplayDivergence: a request, tool call or file differs from the recording, or a recorded verdict
            differs from the signed store's row for it.
    """
    from protocol import load_protocol

    transcript = read_transcript(path)
    header = transcript.header
    if header.provider not in ("openai", "anthropic"):
        raise ReplayDivergence(-1, "header.provider", f"cannot replay provider {header.provider!r} "
                               "(only openai and anthropic transcripts replay through an SDK)")
    if transcript.end is None:
        raise ReplayDivergence(-1, "end record", f"{path} has no end record: the run it records did not finish "
                               "(resume it with `atb run ... --resume RUN`, then replay its transcript)")
    proto = load_protocol()
    cursor = ReplayCursor(transcript.model_calls())
    inbox = SubmissionInbox()
    tools = ReplayToolBox(toolbox_factory(inbox, header.task_brief), transcript.tool_calls())
    fresh = FreshEvaluator(fresh_evaluator, RecordedEvaluator(transcript)) if fresh_evaluator is not None else None
    checking = CheckingEvaluator(fresh or RecordedEvaluator(transcript), transcript.submissions())
    sink = MemoryIterationSink()
    with tempfile.TemporaryDirectory(prefix="atb-replay-", dir=workdir) as tmp:
        env = TuningEnvironment(
            campaign_id=f"{header.campaign_id}-replay", task_id=header.task, task_brief=header.task_brief,
            budget=header.budget, seed=header.seed, toolbox=tools, inbox=inbox, evaluator=checking, iterations=sink,
            transcript=TranscriptWriter(Path(tmp) / "replay.jsonl"), checkpoint_path=Path(tmp) / "checkpoints.sqlite",
            max_output_tokens=header.max_output_tokens,
            max_tool_calls_per_iteration=header.max_tool_calls_per_iteration,
            model_timeout_s=proto.agent.model_timeout_s, replay=cursor)
        tuner = graph_tuner_from_header(header.tuner_spec, header)
        try:
            tuner.run(env)
        except RequestMismatch as exc:
            detail = exc.detail
            if detail.startswith("body.tools"):
                detail += (" (the tool definitions differ from the recorded run's: it used another toolbox or "
                           "another version of the tools)")
            raise ReplayDivergence(exc.call_index, exc.field, detail) from exc
        except RecordingExhausted as exc:
            raise ReplayDivergence(exc.call_index, "number of model calls", str(exc)) from exc
    if not cursor.exhausted:
        raise ReplayDivergence(cursor.served, "number of model calls",
                               f"the replay made {cursor.served} calls, the recording holds {len(cursor.calls)}")
    if tools.position != len(tools.recorded):
        raise ReplayDivergence(-1, "number of tool calls",
                               f"the replay made {tools.position} tool calls, the recording holds {len(tools.recorded)}")
    recorded = {v.iteration: VerdictSummary.model_validate(v.verdict) for v in transcript.verdicts()}
    if fresh is None:
        return _recorded_report(path, transcript, cursor, tools, checking, recorded, proto.sha256,
                                evidence_db=evidence_db, key_dir=key_dir)
    moves = []
    for idx, row in sorted(sink.rows.items()):
        now = fresh.fresh[idx] if fresh is not None else VerdictSummary.model_validate(row["verdict"])
        was = recorded[idx]
        change = (now.speedup / was.speedup - 1.0) if now.speedup is not None and was.speedup else None
        status_changed = was.status != now.status
        speed_moved = (was.speedup is None) != (now.speedup is None) or (
            change is not None and abs(change) > proto.noise.noise_floor)
        moves.append(VerdictMove(iteration=idx, recorded_status=was.status, replayed_status=now.status,
                                 recorded_speedup=was.speedup, replayed_speedup=now.speedup, speedup_change=change,
                                 status_changed=status_changed, moved=status_changed or speed_moved))
    reproduced = not any(m.moved for m in moves) and len(moves) == len(recorded)
    return ReplayReport(
        ok=True, transcript=str(path), scripted=header.scripted, provider=header.provider, model=header.model,
        measurement="fresh", records=len(transcript.records),
        model_calls=len(cursor.calls), requests_identical=cursor.served, tool_calls=tools.position,
        tool_output_differences=tools.output_differences, submissions_checked=len(checking.checked), verdicts=moves,
        verdicts_reproduced=reproduced, environment_differences=cursor.environment_differences,
        protocol_sha256_recorded=header.protocol_sha256, protocol_sha256_now=proto.sha256, verdict_evidence="fresh")


def _recorded_report(path: Path | str, transcript: Transcript, cursor: ReplayCursor, tools: ReplayToolBox,
                     checking: CheckingEvaluator, recorded: dict[int, VerdictSummary], proto_sha: str, *,
                     evidence_db: Path | str | None, key_dir: Path | str | None) -> ReplayReport:
    """Recorded measurement: the verdicts re-checked against signed store rows (never against the
    transcript's own records).

    Raises:
        ReplayDivergence: a recorded verdict differs from the signed store's row for its iteration.
    """
    from harness.store import StoreError, campaign_evidence

    header = transcript.header
    moves: list[VerdictMove] = []
    problems: list[str] = []
    where: str | None = None
    signature: str | None = None
    source = find_evidence_store(Path(path), header.campaign_id, evidence_db)
    if source is None:
        problems.append(f"no store holding campaign {header.campaign_id} was given (--db) or found beside the "
                        "transcript: the recorded verdicts were not re-derived")
    else:
        try:
            ev = campaign_evidence(source, header.campaign_id, key_dir)
        except StoreError as exc:
            problems.append(f"the store {source} cannot be read: {exc}")
        else:
            where, signature = ev.store, ev.signature_id
            if not ev.verified:
                problems.append(f"the store {ev.store} fails verification: {ev.first_problem}")
            else:
                moves, unsigned = _signed_moves(recorded, ev)
                problems += unsigned
                if any(m.moved for m in moves):
                    raise ReplayDivergence(-1, "verdicts", "the recorded verdicts differ from the signed store's rows "
                                           f"({ev.store}, checkpoint {signature}): " + "; ".join(
                                               f"iteration {m.iteration} recorded {m.recorded_status} "
                                               f"{m.recorded_speedup!r}, stored {m.replayed_status} "
                                               f"{m.replayed_speedup!r}" for m in moves if m.moved))
    reproduced = not problems and len(moves) == len(recorded)
    return ReplayReport(
        ok=reproduced or (header.scripted and source is None), transcript=str(path), scripted=header.scripted,
        provider=header.provider, model=header.model, measurement="recorded", records=len(transcript.records),
        model_calls=len(cursor.calls), requests_identical=cursor.served, tool_calls=tools.position,
        tool_output_differences=tools.output_differences, submissions_checked=len(checking.checked), verdicts=moves,
        verdicts_reproduced=reproduced, environment_differences=cursor.environment_differences,
        protocol_sha256_recorded=header.protocol_sha256, protocol_sha256_now=proto_sha,
        verdict_evidence="signed_store" if reproduced else "none", evidence_store=where,
        evidence_checkpoint=signature, evidence_problems=problems)


def replay_mcp_log(path: Path | str, *, toolbox_factory: Callable[..., Any], evaluator: Evaluator) -> Any:
    """The MCP branch of ``atb replay``: an MCP call log (``atb mcp serve``) has no model calls to serve back,
    so its tool calls are re-executed against a fresh sandbox (``toolbox_factory(submit, brief)``) and
    every submission measured afresh by ``evaluator``. Returns an ``atb_agent.mcp.McpReplayReport``.

    Raises:
        McpLogError / McpLogTampered: the log cannot be read or fails verification.
        ReplayDivergence: a submission's files differ from the logged ones.
    """
    from atb_agent.mcp._replay import replay_call_log

    return replay_call_log(path, toolbox_factory=toolbox_factory, evaluator=evaluator)


__all__ = ["CheckingEvaluator", "find_evidence_store", "FreshEvaluator", "RecordedEvaluator", "ReplayReport", "ReplayToolBox", "ReplayedOutcome",
           "ToolBoxFactory", "VerdictMove", "replay_transcript"]
