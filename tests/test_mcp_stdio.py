"""A whole campaign driven through the official ``mcp`` SDK's own client over stdio: the client starts
``atb mcp serve`` as its subprocess, lists the tools, reads the brief resource, writes and edits a
candidate in the Docker sandbox and submits until the budget is spent; the harness measures each
submission (CPU). Then the stored iterations, the call log's chain, ``atb compare`` against random search
and ``atb report`` are checked. About two minutes on two shared cores (four harness measurements)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from atb_agent.cli import main
from atb_agent.mcp import BRIEF_URI, STATUS_URI, read_call_log

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.usefixtures("docker_sandbox_ready")]

ROOT = Path(__file__).resolve().parents[1]
# swish (128 x 1024) rather than relu (128 x 8192): the same path through the server, fewer seconds per
# harness measurement; nothing here is about the task
TASK = "swish"

CANDIDATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x)
'''


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


async def _drive(db: Path, errlog: Path) -> dict[str, Any]:
    from mcp import Client, StdioServerParameters, stdio_client
    from mcp_types import Implementation

    params = StdioServerParameters(
        command=sys.executable, cwd=str(ROOT), env=dict(os.environ),
        args=["-m", "atb_agent.cli", "mcp", "serve", TASK, "--budget", "2", "--seed", "0", "--db", str(db),
              "--sandbox", "docker"])
    seen: dict[str, Any] = {}
    with errlog.open("w") as err:                  # the server's stderr (pytest's capture has no file descriptor)
        async with Client(stdio_client(params, errlog=err),
                          client_info=Implementation(name="stdio-test-agent", version="1.0")) as client:
            await _session(client, seen)
    return seen


async def _session(client: Any, seen: dict[str, Any]) -> None:
    """List the tools, read the brief, write a candidate, submit, edit, submit: the budget of 2 is spent."""
    tools = (await client.list_tools()).tools
    seen["tools"] = {t.name: t for t in tools}
    seen["resources"] = [str(r.uri) for r in (await client.list_resources()).resources]
    seen["brief"] = (await client.read_resource(BRIEF_URI)).contents[0].text
    wrote = await client.call_tool("write_file", {"path": "candidate.py", "content": CANDIDATE})
    assert not wrote.is_error, _text(wrote)
    first = await client.call_tool("submit", {"note": "F.silu"})
    assert not first.is_error, _text(first)
    edited = await client.call_tool("edit_file", {"path": "candidate.py", "replacements": [
        {"old": "torch.nn.functional.silu(x)", "new": "x * torch.sigmoid(x)"}]})
    assert not edited.is_error, _text(edited)
    second = await client.call_tool("submit", {})
    assert not second.is_error, _text(second)
    seen["submits"] = [first, second]
    seen["after"] = await client.call_tool("list_files", {})
    seen["status"] = json.loads((await client.read_resource(STATUS_URI)).contents[0].text)


def test_stdio_campaign_through_the_sdk_client(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tools import WriteFileArgs, json_schema

    db = tmp_path / "atb.sqlite"
    seen = asyncio.run(_drive(db, tmp_path / "serve.stderr"))

    # the ToolBox's tools, with the schemas generated from their pydantic argument models
    assert set(seen["tools"]) == {"list_files", "read_file", "write_file", "edit_file", "run_in_sandbox", "get_task",
                                  "submit"}
    schema = dict(seen["tools"]["write_file"].input_schema)      # plus the optional campaign id (test_mcp_per_call)
    assert schema["properties"].pop("campaign")["type"] == "string"
    assert schema == json_schema(WriteFileArgs)
    assert "budget of 2" in seen["tools"]["submit"].description
    assert BRIEF_URI in seen["resources"] and "class Model" in seen["brief"] and "candidate.py" in seen["brief"]

    # each submit was one iteration with one harness verdict; the budget was then enforced
    verdicts = [s.structured_content["verdict"] for s in seen["submits"]]
    assert [v["iteration"] for v in verdicts] == [1, 2]
    assert all(v["verdict_id"] and v["status"] in ("accepted", "rejected", "quarantined") for v in verdicts)
    assert "1 submission(s) left" in _text(seen["submits"][0]) and "finished" in _text(seen["submits"][1])
    assert seen["after"].is_error and "budget of 2 submissions is spent" in _text(seen["after"])
    run_id = seen["status"]["campaign_id"]
    assert seen["status"]["finished"] and seen["status"]["tuner"] == "mcp:stdio-test-agent/1.0"

    with sqlite3.connect(db) as c:
        camp = c.execute("SELECT tuner_spec, budget, seed FROM campaigns WHERE id = ?", (run_id,)).fetchone()
        rows = c.execute("SELECT i.idx, i.verdict_id, v.candidate_sha256 FROM iterations i JOIN verdicts v "
                         "ON v.id = i.verdict_id WHERE i.campaign_id = ? ORDER BY i.idx", (run_id,)).fetchall()
        outcome = c.execute("SELECT status FROM campaign_outcomes WHERE campaign_id = ?", (run_id,)).fetchone()
    assert camp == ("mcp:stdio-test-agent/1.0", 2, 0)
    assert [r[0] for r in rows] == [0, 1] and [r[1] for r in rows] == [v["verdict_id"] for v in verdicts]
    assert rows[0][2] != rows[1][2]                          # the edit made a different candidate
    assert outcome == ("completed",)

    # the call log: hash-chained, every call with its arguments, result, timing and the client
    log = read_call_log(seen["status"]["call_log"])
    calls = log.tool_calls()
    assert [c.name for c in calls] == ["write_file", "submit", "edit_file", "submit", "list_files"]
    assert calls[0].arguments == {"path": "candidate.py", "content": CANDIDATE}
    assert all(c.client == "mcp:stdio-test-agent/1.0" and c.duration_s >= 0 for c in calls)
    assert [c.verdict["verdict_id"] for c in calls if c.verdict] == [v["verdict_id"] for v in verdicts]
    assert calls[-1].ran is False and log.end is not None and log.end.status == "completed"
    assert log.clients()[0].name == "stdio-test-agent" and log.clients()[0].transport == "stdio"

    # beside random search, through the CLI contract: compare and report
    capsys.readouterr()
    assert main(["run", TASK, "--tuner", "random", "--budget", "2", "--seed", "0", "--db", str(db), "--json"]) == 0
    random_id = json.loads(capsys.readouterr().out)["run_id"]
    assert main(["compare", run_id, random_id, "--db", str(db), "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["a"]["tuner_spec"] == "mcp:stdio-test-agent/1.0" and cmp["b"]["tuner_spec"] == "random"
    assert cmp["a"]["iterations_recorded"] == cmp["b"]["iterations_recorded"] == 2
    assert cmp["verdict"] in ("a_better", "b_better", "within_noise", "uninformative_saturated", "no_usable_result")
    assert main(["report", run_id, random_id, "--db", str(db), "--out", str(tmp_path / "report"), "--json"]) == 0
    page = Path(json.loads(capsys.readouterr().out)["html"]).read_text(encoding="utf-8")
    assert "mcp:stdio-test-agent/1.0" in page and "external agent" in page
