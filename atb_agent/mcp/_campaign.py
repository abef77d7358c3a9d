"""One campaign driven by an external agent over MCP: the synchronous core behind ``atb mcp serve``.

The MCP server (``_server``) only translates protocol messages; everything that touches the sandbox,
the harness or the store happens here, on one worker thread, one call at a time. The campaign is an
ordinary one (``CampaignRecorder``, one measurement session, every ``submit`` one iteration with one
harness verdict), so ``atb compare`` and ``atb report`` read it beside built-in tuners and random search.

Its tuner identity is only known once a client says who it is (``clientInfo`` in ``initialize``), so
the measurement session and the sandbox are opened at start but the campaign row is opened at the
first tool call: ``mcp:<client name>/<client version>``. A second client with another identity cannot
take over a claimed campaign. A client that goes away leaves the campaign open; ``--resume RUN``
reattaches it to its session and rebuilds the workspace from the logged file writes.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from atb_agent.errors import CampaignError
from atb_agent.mcp._log import (
    CallLogWriter, ClientRecord, EndRecord, LogHeader, ResumeRecord, ToolCallRecord, read_call_log,
)
from harness.records import utc_now

# Tools whose successful calls change the workspace's files: re-applied, in order, to rebuild a
# workspace (on resume, and by replay after a resume record). run_in_sandbox is not re-run: its
# effects are not part of what a client is promised to keep across a reconnect.
WORKSPACE_WRITERS = ("write_file", "edit_file", "set_flags")

BRIEF_URI = "atb://task/brief"
STATUS_URI = "atb://campaign/status"


class ClientIdentity(BaseModel):
    """Who is calling: the client's ``initialize`` ``clientInfo`` and how it is connected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    protocol_version: str = ""
    transport: str = ""

    @property
    def tuner_spec(self) -> str:
        def clean(text: str) -> str:
            return re.sub(r"\s+", "-", text.strip())[:100] or "unknown"

        return f"mcp:{clean(self.name)}/{clean(self.version)}"


class CallResult(BaseModel):
    """What the client is answered: text blocks, and whether the call failed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: list[str]
    is_error: bool = False
    structured: dict[str, Any] | None = None
    unknown_tool: bool = Field(default=False, description="no tool has this name: a protocol error, not a tool result")


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    input_schema: dict[str, Any] = Field(description="JSON schema generated from the tool's pydantic argument model")


def default_log_path(store_path: Path, campaign_id: str) -> Path:
    """Call logs live beside the store, like transcripts: ``<dir>/mcp_logs/<run id>.jsonl``."""
    return store_path.resolve().parent / "mcp_logs" / f"{campaign_id}.jsonl"


def restore_workspace(toolbox: Any, calls: list[ToolCallRecord]) -> tuple[int, list[str]]:
    """Re-apply the successful workspace-writing calls of ``calls`` in order; returns (re-applied, failures)."""
    done, failed = 0, []
    for c in calls:
        if c.ran and not c.is_error and c.name in WORKSPACE_WRITERS:
            out = toolbox.call(c.name, c.arguments)
            if out.is_error:
                failed.append(f"call #{c.call_index} {c.name}: {out.content[:200]}")
            else:
                done += 1
    return done, failed


class McpCampaign:
    """The campaign behind one ``atb mcp serve`` process. Not thread-safe: call it from one thread.

    Raises (from the constructor): TaskError/EngineTaskError (unknown task), CampaignError (a bad
    budget, or ``resume`` names a campaign of another task, budget or seed, or one already finished),
    NotFound (no such campaign), SandboxUnavailableError/ImageMissingError (no sandbox can start).
    """

    def __init__(self, task: str | Path, budget: int, seed: int, store_path: str | Path, *,
                 backend: str = "cpu", sandbox_backend: str = "auto", resume: str | None = None,
                 transport: str = "stdio", services: Any = None) -> None:
        from atb_agent.services import HarnessServices, task_brief
        from harness.store import SqliteStore
        from harness.tuning.campaigns import CampaignRecorder, get_outcome
        from harness.tuning.subjects import load_subject
        from protocol import load_protocol

        if budget <= 0:
            raise CampaignError(f"the budget must be a positive number of iterations, not {budget}")
        self.budget, self.seed, self.transport = budget, seed, transport
        self.backend, self.sandbox_backend = backend, sandbox_backend
        self.store_path = Path(store_path)
        self.protocol = load_protocol()
        self.task = load_subject(task)
        self.brief = task_brief(self.task)
        self.store = SqliteStore(self.store_path)
        self.services = services or HarnessServices(backend, sandbox_backend)
        self.recorder: Any = None
        self.log: CallLogWriter | None = None
        self._calls = 0
        self._last_client: ClientIdentity | None = None
        self._resumed: dict[str, Any] | None = None
        try:
            if hasattr(self.services, "bind_task"):
                self.services.bind_task(self.task)
            if resume is not None:
                self.recorder = CampaignRecorder.resume(self.store, self.protocol, resume)
                info = self.recorder.info
                if (info.task_id, info.budget, info.seed) != (self.task.id, budget, seed) or \
                        not info.tuner_spec.startswith("mcp:"):
                    raise CampaignError(f"campaign {resume} is task {info.task_id!r}, tuner {info.tuner_spec!r}, "
                                        f"budget {info.budget}, seed {info.seed}; resume an MCP campaign with its own "
                                        "task, --budget and --seed")
                if get_outcome(self.store, resume) is not None:
                    raise CampaignError(f"campaign {resume} has finished; start a new one without --resume")
                # A resumed run measures in a session of its own (the earlier process and its measuring
                # workers are gone), on the campaign's device, attached to the campaign before any measuring.
                self.session_id = self.services.open_session(self.store, self.protocol, info.session_id)
                if hasattr(self.recorder, "attach_session"):
                    self.recorder.attach_session(self.session_id)
            else:
                self.session_id = self.services.open_session(self.store, self.protocol, None)
            self.evaluator = self.services.evaluator(self.task, self.store, self.protocol)
            self.toolbox = self.services.toolbox(self.task, self.brief, self._submit)
            if self.recorder is not None:
                self._reopen_log()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ what the server offers
    def tools(self) -> list[ToolSpec]:
        """The ToolBox's tools, with their schemas from the pydantic argument models; ``submit`` says
        what it costs."""
        out = []
        for d in self.toolbox.anthropic_tools():
            desc = d["description"]
            if d["name"] == "submit":
                desc += (f" Each submit is one iteration of this campaign's budget of {self.budget}; after the "
                         "last one every tool call is refused. Read the resource " + STATUS_URI + " for what is left.")
            out.append(ToolSpec(name=d["name"], description=desc, input_schema=d["input_schema"]))
        return out

    def tool_names(self) -> list[str]:
        return [d["name"] for d in self.toolbox.anthropic_tools()]

    def status(self) -> dict[str, Any]:
        done = len(self.recorder.recorded()) if self.recorder is not None else 0
        return {"campaign_id": self.campaign_id, "task": self.task.id, "tuner": self.tuner_spec,
                "budget": self.budget, "iterations_recorded": done, "submissions_left": self.budget - done,
                "finished": self._finished(), "call_log": str(self.log.path) if self.log else None}

    @property
    def campaign_id(self) -> str | None:
        return self.recorder.campaign_id if self.recorder is not None else None

    @property
    def tuner_spec(self) -> str | None:
        return self.recorder.info.tuner_spec if self.recorder is not None else None

    # ------------------------------------------------------------------ calls
    def call(self, client: ClientIdentity | None, name: str, arguments: Any) -> CallResult:
        """Run one tool call for ``client``. Never raises: every failure is an error result (and logged
        once the campaign is claimed). A failure of the store or the log itself is answered as an error
        naming it; the campaign stays as it was stored (resumable)."""
        try:
            return self._call(client, name, arguments)
        except Exception as exc:  # noqa: BLE001 - the boundary: the server must answer, never die
            return CallResult(is_error=True, content=[
                f"error: the server could not run {name}: {type(exc).__name__}: {' '.join(str(exc).split())}"])

    def _call(self, client: ClientIdentity | None, name: str, arguments: Any) -> CallResult:
        started, t0 = utc_now(), time.perf_counter()
        refusal = self._claim(client)
        if refusal is not None:
            result = CallResult(content=[refusal], is_error=True)
            if client is not None and self.recorder is not None:     # another agent knocking: logged, not run
                nxt = self.recorder.next_index()
                self._log_call(client, self.budget if nxt is None else nxt, name, arguments, result, False, started,
                               time.perf_counter() - t0, None, None)
            return result
        assert client is not None and self.recorder is not None
        idx = self.recorder.next_index()
        submitted_files = verdict = None
        if name not in self.tool_names():
            result = CallResult(is_error=True, unknown_tool=True, content=[
                f"unknown tool {name!r}; the tools are: {', '.join(self.tool_names())}"])
            ran = False
        elif idx is None or self._finished():
            result = CallResult(is_error=True, content=[
                f"error: the budget of {self.budget} submissions is spent and campaign {self.campaign_id} is "
                f"finished; it takes no more tool calls. Its results: `atb report {self.campaign_id} --out DIR`."])
            ran = False
        else:
            self._iteration = idx
            self._verdict: dict[str, Any] | None = None
            try:
                out = self.toolbox.call(name, arguments if arguments is not None else {})
            except Exception as exc:  # noqa: BLE001 - the ToolBox promises not to raise; belt and braces
                out = _error_outcome(f"{name} failed: {type(exc).__name__}: {exc}")
            ran = True
            content = [out.content]
            if name == "submit" and not out.is_error:
                verdict = self._verdict
                try:
                    submitted_files = dict(json.loads(out.content).get("files", {}))
                except (ValueError, AttributeError):
                    submitted_files = None
                left = self.budget - len(self.recorder.recorded())
                content.append(f"iteration {idx + 1} of {self.budget} recorded; {left} submission(s) left"
                               + ("; the campaign is finished" if left == 0 else ""))
            result = CallResult(content=content, is_error=out.is_error,
                                structured={"verdict": verdict, "iteration": idx + 1, "budget": self.budget}
                                if verdict is not None else None)
        self._log_call(client, idx if idx is not None else self.budget, name, arguments, result, ran, started,
                       time.perf_counter() - t0, submitted_files, verdict)
        if ran and verdict is not None and self.recorder.next_index() is None:
            self._finish()
        return result

    def _submit(self, files: dict[str, bytes]) -> dict[str, Any]:
        """The ToolBox's ``submit``: measure with the harness, record the iteration once, answer the verdict."""
        from atb_agent.evaluation import IterationUsageCounts, StoreIterationSink, file_hashes

        idx = self._iteration
        verdict = self.evaluator.evaluate(idx, files)
        row = StoreIterationSink(self.recorder).record(
            idx, verdict, IterationUsageCounts(),
            {"client": self.tuner_spec, "call_index": self._calls, "files": file_hashes(files), "external_agent": True})
        summary = verdict.model_dump(mode="json", exclude={"shown_to_model"})
        summary.update(iteration=idx + 1, usable=row["usable"], unusable_reason=row["unusable_reason"])
        self._verdict = summary
        return summary

    # ------------------------------------------------------------------ claiming, logging, finishing
    def _claim(self, client: ClientIdentity | None) -> str | None:
        from harness.tuning.campaigns import CampaignRecorder

        if client is None:
            return ("error: the client did not identify itself (clientInfo name and version in initialize); an MCP "
                    "campaign records its tuner as mcp:<name>/<version>, so it needs them")
        if self.recorder is None:
            self.recorder = CampaignRecorder.open(
                self.store, self.protocol, task_id=self.task.id, kind=self.task.kind,
                tuner_spec=client.tuner_spec, seed=self.seed, budget=self.budget, session_id=self.session_id,
                config={"external_agent": True, "truncation_observable": False, "transport": self.transport,
                        "client": {"name": client.name, "version": client.version},
                        "sandbox_backend": self.sandbox_backend})
            self._open_log()
        elif client.tuner_spec != self.recorder.info.tuner_spec:
            return (f"error: campaign {self.campaign_id} belongs to {self.recorder.info.tuner_spec}, not "
                    f"{client.tuner_spec}; start another `atb mcp serve` for another agent")
        if client != self._last_client and self.log is not None:
            self.log.append("client", ClientRecord(name=client.name, version=client.version,
                                                   protocol_version=client.protocol_version,
                                                   transport=client.transport or self.transport, seen_at=utc_now()))
            self._last_client = client
        return None

    def _open_log(self) -> None:
        from atb_agent.tuners import tool_definitions_sha256

        assert self.recorder is not None
        path = default_log_path(self.store_path, self.recorder.campaign_id)
        self.log = CallLogWriter(path)
        if self.log.next_seq == 0:
            self.log.append("header", LogHeader(
                task=self.task.id, task_brief=self.brief, budget=self.budget, seed=self.seed,
                campaign_id=self.recorder.campaign_id, tuner_spec=self.recorder.info.tuner_spec,
                protocol_version=self.protocol.version, protocol_sha256=self.protocol.sha256,
                tool_definitions_sha256=tool_definitions_sha256(self.toolbox),
                sandbox_backend=self.sandbox_backend, measure_backend=self.backend, created_at=utc_now()))

    def _reopen_log(self) -> None:
        """A resumed campaign: continue its log (verifying the chain) and rebuild the workspace."""
        assert self.recorder is not None
        path = default_log_path(self.store_path, self.recorder.campaign_id)
        if not path.is_file():
            raise CampaignError(f"campaign {self.campaign_id} has no MCP call log at {path}; it cannot be resumed "
                                "(was it started by `atb mcp serve` with this --db?)")
        previous = read_call_log(path).tool_calls()
        self._calls = len(previous)
        self.log = CallLogWriter(path)
        restored, failed = restore_workspace(self.toolbox, previous)
        self.log.append("resume", ResumeRecord(resumed_at=utc_now(), iterations_recorded=len(self.recorder.recorded()),
                                               restored_calls=restored))
        self._resumed = {"restored_calls": restored, "failed": failed}

    def _log_call(self, client: ClientIdentity, idx: int, name: str, arguments: Any, result: CallResult, ran: bool,
                  started: str, duration: float, files: dict[str, str] | None, verdict: dict[str, Any] | None) -> None:
        if self.log is None:
            return
        self.log.append("tool_call", ToolCallRecord(
            call_index=self._calls, iteration=idx, client=client.tuner_spec, name=name,
            arguments=_jsonable(arguments), content=result.content, is_error=result.is_error, ran=ran,
            started_at=started, duration_s=round(duration, 6), submitted_files=files, verdict=verdict))
        self._calls += 1

    def _finished(self) -> bool:
        from harness.tuning.campaigns import get_outcome

        return self.recorder is not None and get_outcome(self.store, self.recorder.campaign_id) is not None

    def _finish(self) -> None:
        assert self.recorder is not None
        outcome = self.recorder.finish(detail={
            "call_log": str(self.log.path) if self.log else "", "external_agent": True,
            "truncation_observable": False, "tool_calls": self._calls,
            "note": "an external agent over MCP: its model calls (and their truncation) are not observable"})
        if self.log is not None:
            self.log.append("end", EndRecord(status=outcome.status, iterations=len(self.recorder.recorded()),
                                             tool_calls=self._calls, reason=outcome.reason))

    def close(self) -> None:
        """Close the sandbox, the session and the store. An unfinished campaign stays open for ``--resume``."""
        try:
            self.services.close()
        finally:
            self.store.close()


def _error_outcome(message: str) -> Any:
    from tools import ToolOutcome

    return ToolOutcome(content=f"error: {message}", is_error=True)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


__all__ = ["BRIEF_URI", "STATUS_URI", "WORKSPACE_WRITERS", "CallResult", "ClientIdentity", "McpCampaign", "ToolSpec",
           "default_log_path", "restore_workspace"]
