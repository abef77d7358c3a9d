"""Replaying an MCP call log: every logged tool call re-executed against a fresh sandbox and harness.

There is no model to replay (the agent was external), so the log's tool calls *are* the run: they are
issued again, in order, to a fresh ToolBox; each ``submit`` hands the rebuilt workspace to the harness,
which measures it afresh. What is checked:

* each ``submit`` copies out files that hash-equal the logged ones (else :class:`ReplayDivergence`:
  the same calls did not rebuild the same candidate);
* each other call's result matches the logged one (``run_in_sandbox`` by its error flag only: its
  output carries wall times); a difference is reported, not fatal;
* the verdict sequence: each fresh verdict beside the logged one, ``moved`` when the status changed or
  the speedup moved by more than ``protocol.noise.noise_floor``.

A ``resume`` record in the log means another server process took the campaign up (a restart, or a client
that opens a session per call) in a fresh sandbox; the replay moves to a fresh sandbox at that point too.
A ``kept`` resume loaded the workspace folder (the workspace as the previous process left it): the replay
carries its own previous sandbox's files over the same way and checks their digest against the logged
one. A ``rebuilt`` resume re-applied the logged file writes, and so does the replay.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from atb_agent.errors import ReplayDivergence
from atb_agent.mcp._campaign import restore_workspace
from atb_agent.mcp._log import ToolCallRecord, read_call_log
from atb_agent.mcp._workspace import load_into, manifest_sha256, snapshot

# (submit callback, task brief) -> a fresh toolbox on a fresh sandbox
McpToolBoxFactory = Callable[[Callable[[dict[str, bytes]], dict[str, Any]], str], Any]

_OUTPUT_UNSTABLE = ("run_in_sandbox", "submit")   # their text carries wall times / fresh verdicts


class McpVerdictMove(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    iteration: int = Field(description="1-based iteration of the campaign")
    recorded_status: str
    replayed_status: str
    recorded_speedup: float | None
    replayed_speedup: float | None
    speedup_change: float | None = Field(default=None, description="replayed / recorded - 1")
    status_changed: bool
    moved: bool = Field(description="the status changed, or the speedup moved by more than protocol.noise.noise_floor")


class McpReplayReport(BaseModel):
    """What ``atb replay`` prints for an MCP call log."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    kind: str = "mcp"
    log: str
    campaign_id: str
    tuner: str
    task: str
    clients: list[str]
    records: int
    tool_calls_logged: int
    tool_calls_replayed: int
    tool_calls_skipped: int = Field(description="calls the server refused before they ran (budget spent, unknown tool)")
    tool_output_differences: list[str]
    submissions_checked: int
    verdicts: list[McpVerdictMove]
    recorded_statuses: list[str]
    replayed_statuses: list[str]
    same_statuses: bool
    verdicts_within_noise: bool
    noise_floor: float
    finished: bool = Field(description="the logged campaign reached its end record")
    protocol_sha256_recorded: str
    protocol_sha256_now: str


def _files_of(content: str) -> dict[str, str] | None:
    try:
        files = json.loads(content).get("files")
    except (ValueError, AttributeError):
        return None
    return dict(files) if isinstance(files, dict) else None


def replay_call_log(path: Path | str, *, toolbox_factory: McpToolBoxFactory, evaluator: Any) -> McpReplayReport:
    """Re-execute the MCP call log at ``path`` and return the report; ``evaluator`` measures afresh.

    Raises:
        McpLogError / McpLogTampered: the log cannot be read or fails verification.
        ReplayDivergence: a ``submit`` copied out other files than the logged ones, or one the log
            says succeeded failed (or the other way round).
    """
    from protocol import load_protocol

    log = read_call_log(path)
    header = log.header
    proto = load_protocol()
    fresh: dict[int, Any] = {}
    state: dict[str, int] = {"iteration": 0}

    def submit(files: dict[str, bytes]) -> dict[str, Any]:
        verdict = evaluator.evaluate(state["iteration"], files)
        fresh[state["iteration"]] = verdict
        return verdict.model_dump(mode="json", exclude={"shown_to_model"})

    differences: list[str] = []
    replayed = skipped = checked = 0
    before: list[ToolCallRecord] = []
    toolbox: Any = None
    for number, (resume, segment) in enumerate(log.resumed_segments()):
        kept = snapshot(toolbox.sandbox) if resume is not None and resume.workspace == "kept" else None
        toolbox = toolbox_factory(submit, header.task_brief)     # closes the previous segment's sandbox
        if resume is not None and resume.workspace == "kept":
            # the server loaded the workspace folder into its fresh sandbox: the same files, from the
            # replay's own previous sandbox (effects of run_in_sandbox included, as they were live)
            load_into(toolbox.sandbox, kept or {})
            if kept is None or manifest_sha256(kept) != resume.workspace_sha256:
                differences.append(f"resume {number}: the replayed workspace is not the one the server kept")
        elif resume is not None:
            _, failed = restore_workspace(toolbox, before)
            differences.extend(f"restoring the workspace at resume {number}: {f}" for f in failed)
        for call in segment:
            before.append(call)
            if not call.ran:
                skipped += 1
                continue
            state["iteration"] = call.iteration
            out = toolbox.call(call.name, call.arguments)
            replayed += 1
            logged_text = call.content[0] if call.content else ""
            if call.name == "submit":
                if out.is_error != call.is_error:
                    raise ReplayDivergence(-1, f"submit, tool call #{call.call_index}",
                                           f"logged {'an error' if call.is_error else 'a submission'}, replayed "
                                           f"{'an error' if out.is_error else 'a submission'}: {out.content[:200]}")
                if not out.is_error:
                    got = _files_of(out.content)
                    if call.submitted_files is not None and got != call.submitted_files:
                        changed = sorted(p for p in set(got or {}) | set(call.submitted_files)
                                         if (got or {}).get(p) != call.submitted_files.get(p))
                        raise ReplayDivergence(-1, f"workspace files of iteration {call.iteration + 1}",
                                               f"files whose hashes differ from the log: {changed}")
                    checked += 1
            elif out.is_error != call.is_error or (call.name not in _OUTPUT_UNSTABLE and out.content != logged_text):
                differences.append(f"tool call #{call.call_index} ({call.name}): the re-executed result differs "
                                   "from the logged one")
    moves: list[McpVerdictMove] = []
    recorded = {c.iteration: c.verdict for c in log.tool_calls() if c.verdict is not None}
    for idx in sorted(recorded):
        was, now = recorded[idx], fresh.get(idx)
        was_speed = was.get("speedup")
        now_status = now.status if now is not None else "not_replayed"
        now_speed = now.speedup if now is not None else None
        change = (now_speed / was_speed - 1.0) if now_speed is not None and was_speed else None
        status_changed = was.get("status") != now_status
        speed_moved = (was_speed is None) != (now_speed is None) or (
            change is not None and abs(change) > proto.noise.noise_floor)
        moves.append(McpVerdictMove(iteration=idx + 1, recorded_status=str(was.get("status")),
                                    replayed_status=now_status, recorded_speedup=was_speed, replayed_speedup=now_speed,
                                    speedup_change=change, status_changed=status_changed,
                                    moved=status_changed or speed_moved))
    return McpReplayReport(
        ok=True, log=str(path), campaign_id=header.campaign_id, tuner=header.tuner_spec, task=header.task,
        clients=sorted({f"{c.name}/{c.version} ({c.transport}, protocol {c.protocol_version})" for c in log.clients()}),
        records=len(log.entries), tool_calls_logged=len(log.tool_calls()), tool_calls_replayed=replayed,
        tool_calls_skipped=skipped, tool_output_differences=differences, submissions_checked=checked, verdicts=moves,
        recorded_statuses=[m.recorded_status for m in moves], replayed_statuses=[m.replayed_status for m in moves],
        same_statuses=not any(m.status_changed for m in moves), verdicts_within_noise=not any(m.moved for m in moves),
        noise_floor=proto.noise.noise_floor, finished=log.end is not None,
        protocol_sha256_recorded=header.protocol_sha256, protocol_sha256_now=proto.sha256)


__all__ = ["McpReplayReport", "McpToolBoxFactory", "McpVerdictMove", "replay_call_log"]
