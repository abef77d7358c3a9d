"""The graph's nodes (each a function of the state returning a partial update) and its routers.

One iteration: ``observe`` -> ``call_model`` -> (``run_tools`` -> ``call_model``)* -> ``submit`` ->
``record``; then ``route`` starts the next iteration or ends the run. Side effects live in the
context (provider, toolbox, evaluator, sinks), never in the state.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime

from transcripts import IterationStartData, ModelTurnData, ToolCallData

from atb_agent._iteration import encode_files, force_submission, measure_submission
from atb_agent.evaluation import IterationUsageCounts, VerdictSummary
from atb_agent.graph._context import AgentContext
from atb_agent.graph._prompts import observation
from atb_agent.graph._text_protocol import TEXT_PROTOCOL_FENCED_PYTHON_STOP
from atb_agent.graph._state import TunerState, zero_usage


def observe(state: TunerState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """Open an iteration: the task (first) or the last verdict, as a user message."""
    ctx = runtime.context
    last = state["last_verdict"]
    text = observation(state["iteration"], state["budget"], ctx.task_brief, last,
                       VerdictSummary.model_validate(last).for_model() if last else None, ctx.prompt_variant)
    ctx.transcript.append("iteration_start", IterationStartData(iteration=state["iteration"], observation=text))
    return {"messages": [*state["messages"], {"role": "user", "content": text}], "pending_tool_calls": [],
            "tool_calls_this_iteration": 0, "iteration_usage": zero_usage(), "submission": None, "verdict": None,
            "transcript_seq": ctx.transcript.next_seq}


def call_model(state: TunerState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """One model call (one HTTP exchange, recorded by the transport) and its truncation verdict."""
    ctx = runtime.context
    ctx.exchanges.iteration = state["iteration"]
    ctx.exchanges.call_index = state["model_calls"]
    turn = ctx.provider.complete(ctx.system_prompt, state["messages"], ctx.tools, ctx.max_output_tokens)
    ctx.transcript.append("model_turn", ModelTurnData(
        call_index=state["model_calls"], iteration=state["iteration"], stop_reason=turn.stop_reason, text=turn.text,
        tool_calls=[c.model_dump() for c in turn.tool_calls], input_tokens=turn.input_tokens,
        output_tokens=turn.output_tokens, truncation=turn.truncation))
    truncated = int(turn.truncation.truncated)
    usage = dict(state["iteration_usage"])
    usage["tokens_in"] += turn.input_tokens
    usage["tokens_out"] += turn.output_tokens
    usage["model_calls"] += 1
    usage["truncated_calls"] += truncated
    message = turn.assistant_message()
    if ctx.text_protocol == TEXT_PROTOCOL_FENCED_PYTHON_STOP:
        # did the server end the reply itself (its stop sequence or end of text), uncut by the cap? Kept
        # beside the message (no provider sends it) for the text protocol; other runs' state is unchanged
        message["stopped"] = turn.stop_reason == "stop" and not turn.truncation.truncated
    return {"messages": [*state["messages"], message],
            "pending_tool_calls": [c.model_dump() for c in turn.tool_calls],
            "model_calls": state["model_calls"] + 1, "truncated_calls": state["truncated_calls"] + truncated,
            "iteration_usage": usage, "transcript_seq": ctx.transcript.next_seq}


def run_tools(state: TunerState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """Run the last turn's tool calls in the sandbox, up to the per-iteration cap.

    A ``submit`` ends the iteration: calls after it in the same turn are answered, not run. Calls past
    the cap are answered with an error and the workspace is then submitted as it stands.
    """
    ctx = runtime.context
    used = state["tool_calls_this_iteration"]
    results: list[dict[str, Any]] = []
    submission: dict[str, Any] | None = None
    for call in state["pending_tool_calls"]:
        if submission is not None:
            content, is_error, submitted = "not run: your submission ended this iteration", True, None
        elif used >= ctx.max_tool_calls_per_iteration:
            content = (f"not run: the cap of {ctx.max_tool_calls_per_iteration} tool calls per iteration is reached; "
                       "the workspace is submitted as it stands")
            is_error, submitted = True, None
        else:
            outcome = ctx.toolbox.call(call["name"], call["arguments"])
            content, is_error, submitted = outcome.content, outcome.is_error, outcome.submitted
            used += 1
            files = ctx.inbox.take()
            if files is not None:
                submission = {"forced": False, "files_b64": encode_files(files)}
        ctx.transcript.append("tool_call", ToolCallData(
            iteration=state["iteration"], call_id=call["id"], name=call["name"], arguments=call["arguments"],
            content=content, is_error=is_error, submitted=submitted))
        results.append({"id": call["id"], "content": content, "is_error": is_error})
    return {"messages": [*state["messages"], {"role": "tool", "results": results}], "pending_tool_calls": [],
            "tool_calls_this_iteration": used, "submission": submission, "transcript_seq": ctx.transcript.next_seq}


def submit(state: TunerState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """Hand the iteration's submission to the evaluator (the harness): one verdict per iteration."""
    ctx = runtime.context
    submission = state["submission"] or force_submission(ctx.toolbox, ctx.inbox, ctx.transcript, state["iteration"])
    verdict = measure_submission(ctx.evaluator, ctx.transcript, state["iteration"], submission)
    return {"submission": submission, "verdict": verdict.model_dump(mode="json"), "transcript_seq": ctx.transcript.next_seq}


def record(state: TunerState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """Store the iteration (idempotent per index) and advance the iteration counter."""
    ctx = runtime.context
    verdict = VerdictSummary.model_validate(state["verdict"])
    usage = IterationUsageCounts(**state["iteration_usage"])
    forced = bool(state["submission"] and state["submission"]["forced"])
    row = ctx.iterations.record(state["iteration"], verdict, usage, {"forced_submission": forced})
    entry = {"iteration": state["iteration"], "verdict": state["verdict"], "row": row}
    return {"iteration": state["iteration"] + 1, "last_verdict": state["verdict"],
            "history": [*state["history"], entry], "transcript_seq": ctx.transcript.next_seq}


def text_protocol(state: TunerState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """The declared text protocol (see ``_text_protocol``): the turn's fenced Python block becomes the
    candidate file through the sandbox's ``write_file`` tool, and the end of the turn submits it through
    its ``submit`` tool. Both calls are recorded as tool calls under the protocol's call ids."""
    import json

    from atb_agent.graph._text_protocol import SUBMIT_CALL_ID, WRITE_CALL_ID, candidate_from_text

    ctx = runtime.context
    last = state["messages"][-1]
    code = candidate_from_text(last["text"], protocol=ctx.text_protocol, stopped=bool(last.get("stopped"))) or ""
    submission: dict[str, Any] | None = None
    calls = [(WRITE_CALL_ID, "write_file", {"content": code, "path": ctx.candidate_file}),
             (SUBMIT_CALL_ID, "submit", {})]
    for call_id, name, args in calls:
        arguments = json.dumps(args, sort_keys=True)
        outcome = ctx.toolbox.call(name, arguments)
        files = ctx.inbox.take()
        if files is not None:
            submission = {"forced": False, "files_b64": encode_files(files)}
        ctx.transcript.append("tool_call", ToolCallData(
            iteration=state["iteration"], call_id=call_id, name=name, arguments=arguments,
            content=outcome.content, is_error=outcome.is_error, submitted=outcome.submitted))
        if outcome.is_error:
            break
    return {"submission": submission, "tool_calls_this_iteration": state["tool_calls_this_iteration"] + len(calls),
            "transcript_seq": ctx.transcript.next_seq}


def after_model(state: TunerState, runtime: Runtime[AgentContext]) -> Literal["run_tools", "text_protocol", "submit"]:
    """Tool calls go to the sandbox (they take precedence); under the declared text protocol a turn
    without them but with a fenced Python block goes to ``text_protocol``; any other turn ends the
    iteration."""
    if state["pending_tool_calls"]:
        return "run_tools"
    if runtime.context.text_protocol:
        from atb_agent.graph._text_protocol import candidate_from_text

        last = state["messages"][-1]
        if candidate_from_text(last.get("text") or "", protocol=runtime.context.text_protocol,
                               stopped=bool(last.get("stopped"))) is not None:
            return "text_protocol"
    return "submit"


def after_tools(state: TunerState, runtime: Runtime[AgentContext]) -> Literal["call_model", "submit"]:
    """Back to the model unless the iteration has a submission or has used its tool-call cap."""
    if state["submission"] is not None:
        return "submit"
    if state["tool_calls_this_iteration"] >= runtime.context.max_tool_calls_per_iteration:
        return "submit"
    return "call_model"


def route(state: TunerState) -> Literal["observe", "__end__"]:
    """The budget check: another iteration while the budget lasts."""
    return "observe" if state["iteration"] < state["budget"] else "__end__"
