"""Running the tuner graph under a checkpointer (SQLite, or PostgreSQL beside a PostgreSQL store), and
resuming a killed run.

LangGraph checkpoints the state after every node. A run killed mid-node loses only that node's
update: on resume the node runs again from the last checkpoint. Iterations are stored idempotently
per index (the campaign recorder), and the iteration counter advances only after the store holds
the iteration, so none is lost or stored twice. Transcript records written by the lost node are
voided by a ``resume`` record (the file stays append-only), so replay sees the run as if it had
never been interrupted. The sandbox of the killed run is gone, so the resumed run's fresh workspace
is first rebuilt by re-running the recorded tool calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from transcripts import ResumeData, ToolCallData, read_transcript

from atb_agent._checkpointer import CheckpointTarget, is_postgres, open_checkpointer
from atb_agent.graph import AgentContext, TunerState, build_graph, initial_state
from harness.records import utc_now


def recursion_limit(budget: int, max_tool_calls: int) -> int:
    """Supersteps one run may take: per iteration observe, submit, record and a model call plus a
    tool step per tool call, with room to spare."""
    return budget * (2 * max_tool_calls + 8) + 16


def rebuild_workspace(ctx: AgentContext, upto_seq: int) -> int:
    """Bring a fresh sandbox workspace to where the checkpoint left it by re-running, unrecorded, the
    tool calls the transcript holds before ``upto_seq`` (voided ones excluded). Submissions made on
    the way are discarded: they were measured before the interruption. Returns the calls re-run."""
    done = 0
    for env in read_transcript(ctx.transcript.path).live:
        if env.seq >= upto_seq or env.kind != "tool_call":
            continue
        call = ToolCallData.model_validate(env.data)
        ctx.toolbox.call(call.name, call.arguments)
        ctx.inbox.take()
        done += 1
    return done


def checkpointed_transcript_seq(checkpoint_path: CheckpointTarget, thread_id: str) -> int | None:
    """The transcript position the last checkpoint of ``thread_id`` stands at (records from there on
    will be voided on resume), or None when the thread has no checkpoint. ``checkpoint_path`` is a
    SQLite file or a PostgreSQL URL (:mod:`atb_agent._checkpointer`)."""
    if not is_postgres(checkpoint_path) and not Path(checkpoint_path).exists():
        return None
    with open_checkpointer(checkpoint_path) as saver:
        graph = build_graph().compile(checkpointer=saver)
        snapshot = graph.get_state({"configurable": {"thread_id": thread_id}})
        if not snapshot.values:
            return None
        return int(cast(TunerState, snapshot.values)["transcript_seq"])


def replayed_calls_before(transcript_path: Path, upto_seq: int) -> int:
    """Model calls a replay tuner had been served before ``upto_seq`` (live records only): where a
    resumed replay's cursor must stand so its next request meets the next recorded call."""
    return sum(1 for env in read_transcript(transcript_path).live if env.kind == "model_call" and env.seq < upto_seq)


def run_graph(ctx: AgentContext, *, checkpoint_path: CheckpointTarget, thread_id: str, budget: int) -> TunerState:
    """Run (or resume) the graph for ``thread_id`` to the end of its budget and return the final state.

    A thread with a checkpoint is resumed; a finished thread is returned as is. Checkpoints are
    written synchronously (``durability="sync"``): a node's update is on disk (or committed on the
    server) before the next starts. ``checkpoint_path`` is a SQLite file or a PostgreSQL URL.

    Raises:
        whatever a node raises (ProviderError, transcripts.RequestMismatch, ...); the checkpoint keeps
        everything up to the last completed node, so the same call resumes the run.
    """
    with open_checkpointer(checkpoint_path) as saver:
        graph = build_graph().compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": thread_id},
                       "recursion_limit": recursion_limit(budget, ctx.max_tool_calls_per_iteration)}
        snapshot = graph.get_state(config)
        if snapshot.values:
            state = cast(TunerState, snapshot.values)
            if state["iteration"] >= state["budget"]:
                return state
            seq = int(state["transcript_seq"])
            rebuild_workspace(ctx, seq)
            if ctx.transcript.next_seq > seq:
                ctx.transcript.append("resume", ResumeData(abandoned_from=seq, abandoned_to=ctx.transcript.next_seq - 1,
                                                           resumed_at=utc_now()))
            result = graph.invoke(None, config, context=ctx, durability="sync")
        else:
            result = graph.invoke(initial_state(budget, ctx.transcript.next_seq), config, context=ctx,
                                  durability="sync")
        return cast(TunerState, result)
