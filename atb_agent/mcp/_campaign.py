"""One campaign driven by an external agent over MCP: the synchronous core behind ``atb mcp serve``.

The MCP server (``_server``) only translates protocol messages; everything that touches the sandbox,
the harness or the store happens here, on one worker thread, one call at a time. The campaign is an
ordinary one (``CampaignRecorder``, its measurement sessions, every ``submit`` one iteration with one
harness verdict), so ``atb compare`` and ``atb report`` read it beside built-in tuners and random search.

A campaign outlives the connection, and the server process, that started it. Nothing is stored until
the first call that can change something (``write_file``, ``edit_file``, ``set_flags``,
``run_in_sandbox``, ``submit``): reading the brief, listing the tools, ``get_task``, ``list_files`` and
``read_file`` on a fresh workspace leave no row. That call opens the campaign (its tuner is the client's
``clientInfo``: ``mcp:<name>/<version>``) and answers its id. A client that opens one session per tool
call, or comes back after a restart, passes that id back as the optional ``campaign`` argument of any
tool call (or starts ``serve`` with ``--resume RUN``): the server takes the campaign up, loads its
workspace from the folder the server keeps (:mod:`atb_agent.mcp._workspace`), and carries on. Another
client identity cannot take over a claimed campaign.

Measurement sessions are opened only to measure: at the first ``submit`` of each server process (and
for the campaign row, whose device it names, when the campaign is opened), so a per-call client's
``write_file`` costs a sandbox, not a measuring worker.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from atb_agent.errors import CampaignError
from atb_agent.mcp._log import (
    CallLog, CallLogWriter, ClientRecord, EndRecord, LogHeader, McpLogError, ResumeRecord, ToolCallRecord,
    read_call_log,
)
from atb_agent.mcp._workspace import (
    WORKSPACE_CHANGERS, WORKSPACE_WRITERS, CampaignLock, WorkspaceFolder, load_into, manifest_sha256, snapshot,
    workspace_home,
)
from harness.errors import HarnessError
from harness.records import utc_now

# Calls that can change nothing: answered without opening a campaign (on a fresh workspace) until one is open.
READ_ONLY_TOOLS = ("list_files", "read_file", "get_task")

BRIEF_URI = "atb://task/brief"
STATUS_URI = "atb://campaign/status"
CAMPAIGN_STATUS_URI = "atb://campaign/{campaign}/status"
_CAMPAIGN_STATUS_RE = re.compile(r"^atb://campaign/(run-[A-Za-z0-9._-]{1,120})/status$")

CAMPAIGN_ARG = "campaign"
CAMPAIGN_META = "autotunebench/campaign"
LOCK_WAIT_ENV = "ATB_MCP_LOCK_WAIT_S"
LOCK_WAIT_S = 300.0

CAMPAIGN_ARG_SCHEMA: dict[str, Any] = {
    "type": "string",
    "description": "The id of the campaign this call belongs to (run-...), as answered by the call that opened it. "
                   "Omit it within one connection; pass it on every call from a client that opens a new connection "
                   "per call, or after the server was restarted, so the call continues that campaign and its "
                   "workspace instead of starting another.",
}


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
    campaign: str | None = Field(default=None, description="the campaign the call belongs to (answered in _meta)")


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    input_schema: dict[str, Any] = Field(description="JSON schema generated from the tool's pydantic argument model, "
                                                     "plus the optional campaign argument")


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


def _lock_wait_s() -> float:
    try:
        return float(os.environ.get(LOCK_WAIT_ENV, LOCK_WAIT_S))
    except ValueError:
        return LOCK_WAIT_S


class _Pending(BaseModel):
    """A call answered before the campaign was opened, logged once it is (in the same process)."""

    client: ClientIdentity
    name: str
    arguments: Any
    result: CallResult
    ran: bool
    started: str
    duration: float


class McpCampaign:
    """The campaign behind one ``atb mcp serve`` process. Not thread-safe: call it from one thread.

    Raises (from the constructor): TaskError/EngineTaskError (unknown task), CampaignError (a bad
    budget, or ``resume`` names a campaign of another task, budget or seed, or one already finished, or
    one another server holds), NotFound (no such campaign), SandboxUnavailableError/ImageMissingError
    (no sandbox can start: at once for ``resume`` and over HTTP, else at the first call that needs one).
    """

    def __init__(self, task: str | Path, budget: int, seed: int, store_path: str | Path, *,
                 backend: str = "cpu", sandbox_backend: str = "auto", resume: str | None = None,
                 transport: str = "stdio", services: Any = None) -> None:
        from atb_agent.services import HarnessServices, task_brief
        from harness.store import open_store
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
        self.store = open_store(self.store_path)
        self.services = services or HarnessServices(backend, sandbox_backend)
        self.recorder: Any = None
        self.log: CallLogWriter | None = None
        self.session_id: str | None = None
        self.evaluator: Any = None
        self._toolbox: Any = None
        self._lock: CampaignLock | None = None
        self._folder: WorkspaceFolder | None = None
        self._calls = 0
        self._last_client: ClientIdentity | None = None
        self._resumed: dict[str, Any] | None = None
        self._pending: list[_Pending] = []
        self._announce = False
        self._iteration = 0
        self._verdict: dict[str, Any] | None = None
        try:
            if hasattr(self.services, "bind_task"):
                self.services.bind_task(self.task)
            self._spec = self._spec_toolbox()
            if resume is not None:
                rec = self._check_campaign(resume, "resume an MCP campaign with its own task, --budget and --seed")
                if rec.finished():
                    raise CampaignError(f"campaign {resume} has finished; start a new one without --resume")
                self._take_up(rec)
            elif transport == "http":
                self._workspace()          # a long-lived server: no sandbox is bad input at start, not at a call
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ what the server offers
    def _spec_toolbox(self) -> Any:
        """The ToolBox's tool definitions (and ``get_task``), without a sandbox: listing the tools or
        reading the task must not start one (a per-call client lists the tools in a process of its own)."""
        from sandbox import SandboxLimits
        from tools import TaskBrief, ToolBox

        b = self.task.tool_brief(self.brief)
        brief = TaskBrief(text=b.text, task_id=b.task_id, kind=b.kind, candidate_file=b.candidate_file,
                          flag_space=b.flag_space)
        return ToolBox(SimpleNamespace(limits=SandboxLimits.from_params(self.protocol.sandbox)),  # type: ignore[arg-type]
                       brief, self._submit)

    def tools(self) -> list[ToolSpec]:
        """The ToolBox's tools, with their schemas from the pydantic argument models plus the optional
        ``campaign`` argument; ``submit`` says what it costs."""
        out = []
        for d in self._spec.anthropic_tools():
            desc = d["description"]
            if d["name"] == "submit":
                desc += (f" Each submit is one iteration of this campaign's budget of {self.budget}; after the "
                         "last one every tool call is refused. Read the resource " + STATUS_URI + " for what is left.")
            schema = json.loads(json.dumps(d["input_schema"]))
            schema.setdefault("properties", {})[CAMPAIGN_ARG] = dict(CAMPAIGN_ARG_SCHEMA)
            out.append(ToolSpec(name=d["name"], description=desc, input_schema=schema))
        return out

    def tool_names(self) -> list[str]:
        return list(self._spec.names)

    def status(self) -> dict[str, Any]:
        done = len(self.recorder.recorded()) if self.recorder is not None else 0
        return {"campaign_id": self.campaign_id, "task": self.task.id, "tuner": self.tuner_spec,
                "budget": self.budget, "iterations_recorded": done, "submissions_left": self.budget - done,
                "finished": self._finished(), "call_log": str(self.log.path) if self.log else None,
                "workspace": str(self._folder.path) if self._folder is not None else None}

    def status_of(self, uri: str) -> dict[str, Any] | None:
        """``atb://campaign/RUN/status``: a stored MCP campaign's status, read from the store without taking
        it up (any client may read it; None when ``uri`` is not of that form)."""
        from harness.store import NotFound
        from harness.tuning.campaigns import get_campaign, get_iterations, get_outcome

        m = _CAMPAIGN_STATUS_RE.match(uri)
        if m is None:
            return None
        cid = m.group(1)
        if self.recorder is not None and cid == self.campaign_id:
            return self.status()
        try:
            info = get_campaign(self.store, cid)
        except NotFound:
            return {"campaign_id": cid, "found": False}
        if not info.tuner_spec.startswith("mcp:"):
            return {"campaign_id": cid, "found": False}
        done = len(get_iterations(self.store, cid))
        log = default_log_path(self.store_path, cid)
        return {"campaign_id": cid, "found": True, "task": info.task_id, "tuner": info.tuner_spec,
                "budget": info.budget, "iterations_recorded": done, "submissions_left": info.budget - done,
                "finished": get_outcome(self.store, cid) is not None, "call_log": str(log) if log.is_file() else None}

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
            return CallResult(is_error=True, campaign=self.campaign_id, content=[
                f"error: the server could not run {name}: {type(exc).__name__}: {' '.join(str(exc).split())}"])

    def _call(self, client: ClientIdentity | None, name: str, arguments: Any) -> CallResult:
        started, t0 = utc_now(), time.perf_counter()
        arguments, wanted = _split_campaign(arguments)
        if isinstance(wanted, CallResult):
            return wanted
        refusal = self._claim(client, name, wanted)
        if refusal is not None:
            result = CallResult(content=[refusal], is_error=True, campaign=self.campaign_id)
            if client is not None and self.recorder is not None:     # another agent knocking: logged, not run
                nxt = self.recorder.next_index()
                self._log_call(client, self.budget if nxt is None else nxt, name, arguments, result, False, started,
                               time.perf_counter() - t0, None, None)
            return result
        assert client is not None
        if self.recorder is None:            # nothing opened yet: a read-only call on a fresh workspace
            return self._unclaimed(client, name, arguments, started, t0)
        idx = self.recorder.next_index()
        submitted_files = verdict = workspace = None
        if name not in self.tool_names():
            result = CallResult(is_error=True, unknown_tool=True, content=[
                f"unknown tool {name!r}; the tools are: {', '.join(self.tool_names())}"])
            ran = False
        elif idx is None or self._finished():
            result = CallResult(is_error=True, content=[(
                f"error: the budget of {self.budget} submissions is spent and campaign {self.campaign_id} is "
                f"finished; it takes no more tool calls. Its results: `atb report {self.campaign_id} --out DIR`.")])
            ran = False
        else:
            self._iteration = idx
            self._verdict = None
            out = self._run_tool(name, arguments)
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
            if name in WORKSPACE_CHANGERS:
                workspace = self._keep_workspace()
            result = CallResult(content=content, is_error=out.is_error,
                                structured={"verdict": verdict, "iteration": idx + 1, "budget": self.budget,
                                            "campaign": self.campaign_id}
                                if verdict is not None else None)
        if self._announce:
            self._announce = False
            result = result.model_copy(update={"content": [*result.content, self._announcement()]})
        result = result.model_copy(update={"campaign": self.campaign_id})
        self._log_call(client, idx if idx is not None else self.budget, name, arguments, result, ran, started,
                       time.perf_counter() - t0, submitted_files, verdict, workspace)
        if ran and verdict is not None and self.recorder.next_index() is None:
            self._finish()
        return result

    def _unclaimed(self, client: ClientIdentity, name: str, arguments: Any, started: str, t0: float) -> CallResult:
        """A call before any campaign is open: it can change nothing (unknown tools included), so nothing is
        stored; it is logged, in order, if this process opens a campaign later."""
        if name not in self.tool_names():
            result = CallResult(is_error=True, unknown_tool=True, content=[
                f"unknown tool {name!r}; the tools are: {', '.join(self.tool_names())}"])
            ran = False
        else:
            out = self._run_tool(name, arguments)
            result, ran = CallResult(content=[out.content], is_error=out.is_error), True
        self._pending.append(_Pending(client=client, name=name, arguments=_jsonable(arguments), result=result, ran=ran,
                                      started=started, duration=time.perf_counter() - t0))
        return result

    def _run_tool(self, name: str, arguments: Any) -> Any:
        box = self._spec if name == "get_task" and self._toolbox is None else self._workspace()
        try:
            return box.call(name, arguments if arguments is not None else {})
        except Exception as exc:  # noqa: BLE001 - the ToolBox promises not to raise; belt and braces
            return _error_outcome(f"{name} failed: {type(exc).__name__}: {exc}")

    def _announcement(self) -> str:
        return (f"campaign {self.campaign_id} opened (task {self.task.id}, budget {self.budget}, seed {self.seed}). "
                f"A client that opens a new connection per tool call, or reconnects after a restart, continues it by "
                f"passing \"{CAMPAIGN_ARG}\": \"{self.campaign_id}\" in the arguments of every tool call; its "
                f"workspace is kept between connections.")

    def _submit(self, files: dict[str, bytes]) -> dict[str, Any]:
        """The ToolBox's ``submit``: measure with the harness, record the iteration once, answer the verdict."""
        from atb_agent.evaluation import IterationUsageCounts, StoreIterationSink, file_hashes

        idx = self._iteration
        self._measuring()
        verdict = self.evaluator.evaluate(idx, files)
        row = StoreIterationSink(self.recorder).record(
            idx, verdict, IterationUsageCounts(),
            {"client": self.tuner_spec, "call_index": self._calls, "files": file_hashes(files), "external_agent": True})
        summary = verdict.model_dump(mode="json", exclude={"shown_to_model"})
        summary.update(iteration=idx + 1, usable=row["usable"], unusable_reason=row["unusable_reason"])
        self._verdict = summary
        return summary

    # ------------------------------------------------------------------ sandbox, sessions
    def _workspace(self) -> Any:
        """The toolbox on this process's sandbox, started at the first call that needs a workspace.

        Raises:
            SandboxUnavailableError, ImageMissingError, SandboxError: no sandbox could start.
        """
        if self._toolbox is None:
            self._toolbox = self.services.toolbox(self.task, self.brief, self._submit)
        return self._toolbox

    def _measuring(self) -> None:
        """Open this process's measurement session (once), attached to the campaign; a campaign taken up
        from another process measures in a session of its own, on the campaign's device."""
        if self.evaluator is not None:
            return
        assert self.recorder is not None
        if self.session_id is None:
            self.session_id = self.services.open_session(self.store, self.protocol, self.recorder.info.session_id)
            if hasattr(self.recorder, "attach_session"):
                self.recorder.attach_session(self.session_id)
        self.evaluator = self.services.evaluator(self.task, self.store, self.protocol)

    def _keep_workspace(self) -> str | None:
        """Copy the workspace to the campaign's folder; its digest, or None when it cannot be kept whole."""
        if self._folder is None or self._toolbox is None:
            return None
        files = snapshot(self._toolbox.sandbox)
        if files is None:
            return None
        self._folder.save(files)
        return manifest_sha256(files)

    # ------------------------------------------------------------------ claiming, taking up, logging, finishing
    def _claim(self, client: ClientIdentity | None, name: str, wanted: str | None) -> str | None:
        """Refusal text, or None when the call may go on (with the campaign open, or none needed yet)."""
        if client is None:
            return ("error: the client did not identify itself (clientInfo name and version in initialize); an MCP "
                    "campaign records its tuner as mcp:<name>/<version>, so it needs them")
        if wanted is not None:
            if self.recorder is None:
                try:
                    self._take_up(self._check_campaign(
                        wanted, "start `atb mcp serve` with that campaign's task, --budget and --seed to continue it, "
                                "or leave out the campaign argument to start a new one"))
                except (CampaignError, McpLogError, HarnessError) as exc:   # unknown, other task, busy...
                    return f"error: cannot continue campaign {wanted}: {' '.join(str(exc).split())}"
            elif wanted != self.campaign_id:
                return (f"error: this server is working on campaign {self.campaign_id}, not {wanted}; start another "
                        f"`atb mcp serve` for {wanted}")
        elif self.recorder is None:
            if name in READ_ONLY_TOOLS or name not in self.tool_names():
                return None
            self._open_new(client)
        if client.tuner_spec != self.recorder.info.tuner_spec:
            return (f"error: campaign {self.campaign_id} belongs to {self.recorder.info.tuner_spec}, not "
                    f"{client.tuner_spec}; start another `atb mcp serve` for another agent")
        self._note_client(client)
        return None

    def _note_client(self, client: ClientIdentity) -> None:
        if client != self._last_client and self.log is not None:
            self.log.append("client", ClientRecord(name=client.name, version=client.version,
                                                   protocol_version=client.protocol_version,
                                                   transport=client.transport or self.transport, seen_at=utc_now()))
            self._last_client = client

    def _check_campaign(self, campaign_id: str, hint: str) -> Any:
        """The stored MCP campaign ``campaign_id``, checked to be this server's task, budget and seed.

        Raises:
            NotFound: no such campaign. CampaignError: another protocol digest, task, budget, seed, or not
            an MCP campaign (``hint`` says what to do).
        """
        from harness.tuning.campaigns import CampaignRecorder

        rec = CampaignRecorder.resume(self.store, self.protocol, campaign_id)
        info = rec.info
        if (info.task_id, info.budget, info.seed) != (self.task.id, self.budget, self.seed) or \
                not info.tuner_spec.startswith("mcp:"):
            raise CampaignError(f"campaign {campaign_id} is task {info.task_id!r}, tuner {info.tuner_spec!r}, "
                                f"budget {info.budget}, seed {info.seed}; {hint}")
        return rec

    def _open_new(self, client: ClientIdentity) -> None:
        """The first call that can change something: open the measurement session (the campaign row names
        its device), start the sandbox, then store the campaign, its lock, folder and log; log the calls
        answered before it.

        The sandbox starts before the campaign is stored, as in ``run_campaign``: the campaign's config
        records which backend and root the agent's tools ran over and why (issue 26), and a sandbox that
        cannot start stores no campaign."""
        from atb_agent.services import sandbox_choice_of
        from harness.tuning.campaigns import CampaignRecorder

        self.session_id = self.services.open_session(self.store, self.protocol, None)
        self.evaluator = self.services.evaluator(self.task, self.store, self.protocol)
        self._workspace()
        choice = sandbox_choice_of(self.services)
        self.recorder = CampaignRecorder.open(
            self.store, self.protocol, task_id=self.task.id, kind=self.task.kind,
            tuner_spec=client.tuner_spec, seed=self.seed, budget=self.budget, session_id=self.session_id,
            config={"external_agent": True, "truncation_observable": False, "transport": self.transport,
                    "client": {"name": client.name, "version": client.version},
                    "sandbox_backend": self.sandbox_backend,
                    **({"sandbox": choice} if choice is not None else {})})
        self._hold(self.recorder.campaign_id)
        self._open_log()
        self._announce = True
        for p in self._pending:
            self._note_client(p.client)
            self._log_call(p.client, 0, p.name, p.arguments, p.result, p.ran, p.started, p.duration, None, None)
        self._pending = []

    def _hold(self, campaign_id: str) -> None:
        home = workspace_home(self.store_path)
        self._lock = CampaignLock(home, campaign_id)
        self._lock.acquire(_lock_wait_s())
        self._folder = WorkspaceFolder(home, campaign_id)

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
                tool_definitions_sha256=tool_definitions_sha256(self._spec),
                sandbox_backend=self.sandbox_backend, measure_backend=self.backend, created_at=utc_now()))

    def _take_up(self, rec: Any) -> None:
        """Continue a stored campaign in this process: hold it (waiting for another server to let go),
        continue its log, and give this process's fresh sandbox the campaign's workspace: loaded from its
        folder when that is the workspace last logged, else rebuilt from the logged file writes.

        Raises:
            CampaignError: the campaign has no call log here, or another server holds it (CampaignBusy).
            McpLogError: its call log fails verification.
        """
        path = default_log_path(self.store_path, rec.campaign_id)
        if not path.is_file():
            raise CampaignError(f"campaign {rec.campaign_id} has no MCP call log at {path}; it cannot be resumed "
                                "(was it started by `atb mcp serve` with this --db?)")
        self._hold(rec.campaign_id)
        try:
            log = read_call_log(path)                        # after the lock: the log is final until we let go
            self.recorder = rec
            self._pending = []                               # they ran in this process's own fresh workspace
            self._calls = len(log.tool_calls())
            self.log = CallLogWriter(path)
            if not rec.finished():
                self._restore(log)
        except BaseException:
            self.recorder, self.log = None, None
            self._let_go()
            raise

    def _restore(self, log: CallLog) -> None:
        from atb_agent.services import sandbox_choice_of

        assert self.recorder is not None and self.log is not None and self._folder is not None
        # a fresh sandbox (services.toolbox closes this process's earlier one): nothing else carries over
        toolbox: Any = self.services.toolbox(self.task, self.brief, self._submit)
        self._toolbox = toolbox
        choice = sandbox_choice_of(self.services)
        if choice is not None:          # this process's fresh sandbox, beside the first run's in the config
            self.recorder.note_sandbox(choice, self.session_id)
        expected = log.last_workspace_sha256(manifest_sha256({}))
        files = self._folder.load() if expected is not None else None
        why = ""
        if expected is None:
            why = "the last logged call did not record the workspace's digest"
        elif files is None and expected != manifest_sha256({}):
            why = f"no workspace folder at {self._folder.path}"
        elif files is not None and manifest_sha256(files) != expected:
            why = "the workspace folder is not the workspace last logged"
        failed: list[str] = []
        if why:
            restored, failed = restore_workspace(toolbox, log.tool_calls())
            files_loaded = 0
        else:
            load_into(toolbox.sandbox, files or {})
            restored, files_loaded = 0, len(files or {})
        digest = self._keep_workspace()
        self.log.append("resume", ResumeRecord(
            resumed_at=utc_now(), iterations_recorded=len(self.recorder.recorded()), restored_calls=restored,
            workspace="rebuilt" if why else "kept", workspace_sha256=digest, why_rebuilt=why))
        self._resumed = {"restored_calls": restored, "restored_files": files_loaded, "failed": failed,
                         "workspace": "rebuilt" if why else "kept", "why_rebuilt": why}

    def _log_call(self, client: ClientIdentity, idx: int, name: str, arguments: Any, result: CallResult, ran: bool,
                  started: str, duration: float, files: dict[str, str] | None, verdict: dict[str, Any] | None,
                  workspace: str | None = None) -> None:
        if self.log is None:
            return
        self.log.append("tool_call", ToolCallRecord(
            call_index=self._calls, iteration=idx, client=client.tuner_spec, name=name,
            arguments=_jsonable(arguments), content=result.content, is_error=result.is_error, ran=ran,
            started_at=started, duration_s=round(duration, 6), submitted_files=files, verdict=verdict,
            workspace_sha256=workspace))
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
        if self._folder is not None:               # a finished campaign takes no more calls: its workspace goes
            self._folder.remove()

    def _let_go(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def close(self) -> None:
        """Close the sandbox, the session and the store, and let go of the campaign. An unfinished campaign
        stays open: a later call naming it, or ``--resume``, continues it with its workspace."""
        try:
            self._let_go()
            self.services.close()
        finally:
            self.store.close()


def _split_campaign(arguments: Any) -> tuple[Any, str | None | CallResult]:
    """(the tool's own arguments, the ``campaign`` argument or None, or an error result for a bad one)."""
    if not isinstance(arguments, dict) or CAMPAIGN_ARG not in arguments:
        return arguments, None
    rest = {k: v for k, v in arguments.items() if k != CAMPAIGN_ARG}
    wanted = arguments[CAMPAIGN_ARG]
    if wanted is None or wanted == "":
        return rest, None
    if not isinstance(wanted, str) or not re.fullmatch(r"run-[A-Za-z0-9._-]{1,120}", wanted):
        return rest, CallResult(is_error=True, content=[(
            f"bad arguments: {CAMPAIGN_ARG}: a campaign id like run-..., as answered by the call that opened the "
            f"campaign, not {wanted!r}")])
    return rest, wanted


def _error_outcome(message: str) -> Any:
    from tools import ToolOutcome

    return ToolOutcome(content=f"error: {message}", is_error=True)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


__all__ = ["BRIEF_URI", "CAMPAIGN_ARG", "CAMPAIGN_META", "CAMPAIGN_STATUS_URI", "LOCK_WAIT_ENV", "READ_ONLY_TOOLS",
           "STATUS_URI", "WORKSPACE_CHANGERS", "WORKSPACE_WRITERS", "CallResult", "ClientIdentity", "McpCampaign",
           "ToolSpec", "default_log_path", "restore_workspace"]
