"""Issue 28, item 4: MCP clients that open a session per tool call.

LangGraph's MCP adapter by default (``client.get_tools()``) opens a new session for every tool call, and
over stdio that starts a new ``atb mcp serve`` each time. Here the official ``mcp`` SDK's client does the
same: every call below is a connection (and a server process) of its own. What must hold:

* nothing is stored until the first call that can change something (listing the tools, reading the
  brief, ``get_task`` and ``list_files`` leave no campaign and no measurement session);
* that call answers the campaign's id (text and ``_meta``); passing it back as ``campaign`` continues the
  one campaign, in its one workspace (a ``sed -i`` run by ``run_in_sandbox`` in one process is what the
  next process submits), and another client identity cannot take it over;
* one campaign row, each iteration once, the call log's resume records say the workspace was kept, and
  ``atb replay`` re-executes the log with matching submissions;
* over HTTP the same id continues the campaign on a restarted server.

Before the campaign outlived its connection, ``get_task`` alone stored a campaign, and the submit in its
own process found no ``candidate.py``. The bubblewrap sandbox keeps this off the Docker daemon. About three
minutes on two shared cores (five harness measurements, two of them the replay's).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from atb_agent.cli import main
from atb_agent.mcp import BRIEF_URI, read_call_log

pytestmark = [pytest.mark.bwrap, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

ROOT = Path(__file__).resolve().parents[1]
# swish (128 x 1024) rather than relu (128 x 8192): the same MCP path, about half the seconds per harness
# measurement; nothing here is about the task
TASK = "swish"
AGENT = ("per-call-agent", "0.3")
CAMPAIGN_META = "autotunebench/campaign"        # the result _meta key carrying the campaign id (docs/mcp.md)

CANDIDATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x)
'''


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def _serve_args(db: Path, budget: int) -> list[str]:
    return ["-m", "atb_agent.cli", "mcp", "serve", TASK, "--budget", str(budget), "--seed", "0", "--db", str(db),
            "--sandbox", "bwrap"]


async def _once(db: Path, errlog: Path, what: str, arguments: dict[str, Any] | None = None,
                who: tuple[str, str] = AGENT) -> Any:
    """One connection, one request: the server is started for it and exits after it."""
    from mcp import Client, StdioServerParameters, stdio_client
    from mcp_types import Implementation

    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=dict(os.environ),
                                   args=_serve_args(db, 2))
    with errlog.open("a") as err:
        async with Client(stdio_client(params, errlog=err),
                          client_info=Implementation(name=who[0], version=who[1])) as client:
            if what == "tools/list":
                return (await client.list_tools()).tools
            if what == "resources/read":
                return (await client.read_resource(BRIEF_URI)).contents[0].text
            return await client.call_tool(what, arguments or {})


def _count(db: Path, table: str) -> int:
    with sqlite3.connect(db) as c:
        return int(c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def test_a_per_call_stdio_client_continues_one_campaign_by_its_id(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from tools import WriteFileArgs, json_schema

    db, err = tmp_path / "atb.sqlite", tmp_path / "serve.stderr"

    def once(what: str, arguments: dict[str, Any] | None = None, who: tuple[str, str] = AGENT) -> Any:
        return asyncio.run(_once(db, err, what, arguments, who))

    # reading changes nothing, so it stores nothing: no campaign, no measurement session
    tools = {t.name: t for t in once("tools/list")}
    assert "class Model" in once("resources/read")
    task = once("get_task")
    assert not task.is_error and "candidate.py" in _text(task)
    listed = once("list_files")
    assert not listed.is_error and "empty" in _text(listed)
    assert _count(db, "campaigns") == 0 and _count(db, "sessions") == 0, "a read-only call stored something"
    schema = dict(tools["write_file"].input_schema)
    assert "campaign" in schema["properties"] and "campaign" not in schema.get("required", [])
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k != "campaign"}
    assert schema == json_schema(WriteFileArgs)          # the ToolBox's own schema, plus the optional campaign

    # the first call that changes something opens the campaign and answers its id
    wrote = once("write_file", {"path": "candidate.py", "content": CANDIDATE})
    assert not wrote.is_error, _text(wrote)
    run_id = wrote.meta[CAMPAIGN_META]
    assert run_id.startswith("run-") and f'"campaign": "{run_id}"' in _text(wrote)
    assert _count(db, "campaigns") == 1

    # each later call, in a server of its own, names the campaign and finds its workspace
    first = once("submit", {"campaign": run_id})
    assert not first.is_error, _text(first)
    assert first.structured_content["iteration"] == 1 and first.structured_content["campaign"] == run_id
    intruder = once("read_file", {"path": "candidate.py", "campaign": run_id}, who=("intruder", "1"))
    assert intruder.is_error and f"belongs to mcp:{AGENT[0]}/{AGENT[1]}" in _text(intruder)
    edit = "sed -i 's/torch.nn.functional.silu(x)/x * torch.sigmoid(x)/' candidate.py"
    shell = once("run_in_sandbox", {"command": edit, "campaign": run_id})
    assert not shell.is_error, _text(shell)
    read = once("read_file", {"path": "candidate.py", "campaign": run_id})
    assert "x * torch.sigmoid(x)" in _text(read), "the workspace did not outlive the sandbox's process"
    second = once("submit", {"campaign": run_id})
    assert not second.is_error, _text(second)
    assert second.structured_content["iteration"] == 2 and "the campaign is finished" in _text(second)
    after = once("write_file", {"path": "candidate.py", "content": "x = 1\n", "campaign": run_id})
    assert after.is_error and "finished" in _text(after)
    bad = once("list_files", {"campaign": "run-nosuchcampaign"})
    assert bad.is_error and "cannot continue campaign run-nosuchcampaign" in _text(bad)

    # one campaign, each iteration once, two different candidates, completed
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT id, tuner_spec FROM campaigns").fetchall() == [(run_id, "mcp:per-call-agent/0.3")]
        rows = c.execute("SELECT i.idx, v.candidate_sha256 FROM iterations i JOIN verdicts v ON v.id = i.verdict_id "
                         "WHERE i.campaign_id = ? ORDER BY i.idx", (run_id,)).fetchall()
        outcome = c.execute("SELECT status FROM campaign_outcomes WHERE campaign_id = ?", (run_id,)).fetchone()
    assert [r[0] for r in rows] == [0, 1] and rows[0][1] != rows[1][1] and outcome == ("completed",)
    assert _count(db, "sessions") == 3              # the campaign's first, then one per measuring process
    assert not (tmp_path / "mcp_workspaces" / run_id).exists(), "a finished campaign's workspace folder was kept"

    # the call log: one server process per call, each taking the campaign up with its kept workspace
    log = read_call_log(tmp_path / "mcp_logs" / f"{run_id}.jsonl")
    resumes = [e.payload() for e in log.entries if e.kind == "resume"]
    assert len(resumes) == 5 and all(r.workspace == "kept" for r in resumes), resumes     # type: ignore[attr-defined]
    calls = log.tool_calls()
    assert [c.name for c in calls] == ["write_file", "submit", "read_file", "run_in_sandbox", "read_file", "submit",
                                       "write_file"]
    assert [c.ran for c in calls] == [True, True, False, True, True, True, False]
    assert calls[3].workspace_sha256 is not None and log.end is not None and log.end.status == "completed"

    # the tools' sandbox is recorded on the campaign (issue 26): the first process's in its config, then
    # each process that took the campaign up with a fresh sandbox, every one bubblewrap as asked
    from harness.store import open_store
    from harness.tuning.campaigns import campaign_sandboxes

    with open_store(db) as store:
        sandboxes = campaign_sandboxes(store, run_id)
    assert len(sandboxes) == 1 + len(resumes), sandboxes
    assert all(s["backend"] == "bwrap" and s["requested"] == "bwrap" and s["selection"] for s in sandboxes), sandboxes

    # replay: the logged calls again, a fresh sandbox per logged process, every submission measured afresh
    capsys.readouterr()
    assert main(["replay", str(log.path), "--db", str(tmp_path / "replay.sqlite"), "--sandbox", "bwrap",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["submissions_checked"] == 2 and rep["tool_output_differences"] == [], rep
    assert rep["same_statuses"], rep["verdicts"]


async def _http_once(url: str, token: str, name: str, arguments: dict[str, Any]) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import Implementation

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(30, read=300)) as http, \
            Client(streamable_http_client(url, http_client=http),
                   client_info=Implementation(name=AGENT[0], version=AGENT[1])) as client:
        return await client.call_tool(name, arguments)


class _HttpServer:
    def __init__(self, db: Path, errlog: Path, budget: int) -> None:
        self.err = errlog.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, *_serve_args(db, budget), "--transport", "http", "--port", "0", "--json"],
            cwd=ROOT, env={k: v for k, v in os.environ.items() if k != "ATB_MCP_TOKEN"}, stdout=subprocess.PIPE,
            stderr=self.err, text=True)
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.url, self.token = hello["url"], hello["token"]

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        return asyncio.run(_http_once(self.url, self.token, name, arguments))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.err.close()


def test_over_http_the_kept_id_continues_the_campaign_on_a_restarted_server(tmp_path: Path) -> None:
    db, err = tmp_path / "atb.sqlite", tmp_path / "serve.stderr"
    server = _HttpServer(db, err, budget=1)
    try:
        wrote = server.call("write_file", {"path": "candidate.py", "content": CANDIDATE})
        assert not wrote.is_error, _text(wrote)
        run_id = wrote.meta[CAMPAIGN_META]
        again = server.call("read_file", {"path": "candidate.py"})        # a new session, the server's campaign
        assert _text(again) == CANDIDATE and again.meta[CAMPAIGN_META] == run_id
    finally:
        assert server.stop() == 0, err.read_text()
    server = _HttpServer(db, err, budget=1)                               # a new process: no campaign held
    try:
        other = server.call("submit", {"campaign": "run-0000000000000000"})
        assert other.is_error and "cannot continue campaign run-0000000000000000" in _text(other)
        done = server.call("submit", {"campaign": run_id})
        assert not done.is_error, _text(done)
        assert done.structured_content["iteration"] == 1 and done.meta[CAMPAIGN_META] == run_id
    finally:
        assert server.stop() == 0, err.read_text()
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT id FROM campaigns").fetchall() == [(run_id,)]
        assert c.execute("SELECT status FROM campaign_outcomes").fetchall() == [("completed",)]
    log = read_call_log(tmp_path / "mcp_logs" / f"{run_id}.jsonl")
    assert [e.payload().workspace for e in log.entries if e.kind == "resume"] == ["kept"]   # type: ignore[attr-defined]
