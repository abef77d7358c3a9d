"""Bad calls at the MCP boundary, a client that disconnects mid-run, and bad ``serve``/``replay`` input.

Through the SDK's own stdio client (the initialize handshake, ``mode="legacy"``, on the first connection):
an unknown tool is a JSON-RPC error naming the tools; malformed arguments, paths that leave the
workspace and calls after the budget is spent are tool results with ``isError``; none stops the server.
A client that disconnects after one of two submissions leaves an unfinished campaign; ``--resume`` refuses
another agent, rebuilds the workspace from the call log for the same one, and the campaign completes.
The bubblewrap sandbox keeps this off the Docker daemon. About a minute and a half (two measurements)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from atb_agent.cli import main
from atb_agent.mcp import read_call_log

HANDSHAKE_PROTOCOL_VERSIONS = pytest.importorskip("mcp_types.version").HANDSHAKE_PROTOCOL_VERSIONS

pytestmark = [pytest.mark.bwrap, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

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


async def _connect(db: Path, errlog: Path, who: tuple[str, str], session: Any, *extra: str, mode: str = "auto") -> Any:
    from mcp import Client, StdioServerParameters, stdio_client
    from mcp_types import Implementation

    params = StdioServerParameters(
        command=sys.executable, cwd=str(ROOT), env=dict(os.environ),
        args=["-m", "atb_agent.cli", "mcp", "serve", TASK, "--budget", "2", "--seed", "0", "--db", str(db),
              "--sandbox", "bwrap", *extra])
    with errlog.open("a") as err:
        async with Client(stdio_client(params, errlog=err), mode=mode,
                          client_info=Implementation(name=who[0], version=who[1])) as client:
            return await session(client)


async def _bad_calls_then_one_submit(client: Any) -> dict[str, Any]:
    from mcp.shared.exceptions import MCPError

    seen: dict[str, Any] = {}
    with pytest.raises(MCPError) as unknown:
        await client.call_tool("rm_rf", {"path": "/"})
    seen["unknown"] = unknown.value
    with pytest.raises(MCPError) as no_resource:
        await client.read_resource("atb://nothing/here")
    seen["no_resource"] = no_resource.value
    seen["bad"] = {
        "missing": await client.call_tool("write_file", {"path": "candidate.py"}),
        "wrong_type": await client.call_tool("read_file", {"path": 5}),
        "extra_field": await client.call_tool("list_files", {"recursive": True, "bogus": 1}),
        "both_modes": await client.call_tool("edit_file", {"path": "candidate.py", "patch": "x",
                                                           "replacements": [{"old": "a", "new": "b"}]}),
        "climbs_out": await client.call_tool("write_file", {"path": "../escape.py", "content": "x = 1\n"}),
        "absolute": await client.call_tool("read_file", {"path": "/etc/passwd"}),
        "nothing_to_submit": await client.call_tool("submit", {}),
    }
    wrote = await client.call_tool("write_file", {"path": "candidate.py", "content": CANDIDATE})
    assert not wrote.is_error, _text(wrote)
    seen["submit"] = await client.call_tool("submit", {})
    status = await client.read_resource("atb://campaign/status")
    seen["status"] = json.loads(status.contents[0].text)
    return seen


async def _intruder(client: Any) -> Any:
    return await client.call_tool("get_task", {})


async def _finish(client: Any) -> dict[str, Any]:
    seen = {"restored": await client.call_tool("read_file", {"path": "candidate.py"}),
            "submit": await client.call_tool("submit", {})}
    seen["after"] = await client.call_tool("write_file", {"path": "candidate.py", "content": "x = 1\n"})
    seen["status"] = json.loads((await client.read_resource("atb://campaign/status")).contents[0].text)
    return seen


def test_bad_calls_disconnect_and_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, err = tmp_path / "atb.sqlite", tmp_path / "serve.stderr"
    agent = ("errors-agent", "3.1")

    first = asyncio.run(_connect(db, err, agent, _bad_calls_then_one_submit, mode="legacy"))
    assert first["unknown"].code == -32602 and "the tools are: list_files" in first["unknown"].message
    assert first["no_resource"].code == -32002
    bad = {k: (r.is_error, _text(r)) for k, r in first["bad"].items()}
    assert all(is_error for is_error, _ in bad.values()), bad
    assert "content: Field required" in bad["missing"][1]
    assert "path: Input should be a valid string" in bad["wrong_type"][1]
    assert "bogus: Extra inputs are not permitted" in bad["extra_field"][1]
    assert "exactly one of 'replacements' or 'patch'" in bad["both_modes"][1]
    assert "'..'" in bad["climbs_out"][1] and "root:" not in bad["absolute"][1]     # nothing outside leaks
    assert "no regular file 'candidate.py'" in bad["nothing_to_submit"][1]
    assert not first["submit"].is_error, _text(first["submit"])
    run_id = first["status"]["campaign_id"]
    assert first["status"]["iterations_recorded"] == 1 and not first["status"]["finished"]

    # the client went away after one of two submissions: the campaign is open, one iteration stored
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM iterations WHERE campaign_id = ?", (run_id,)).fetchone() == (1,)
        assert c.execute("SELECT COUNT(*) FROM campaign_outcomes WHERE campaign_id = ?", (run_id,)).fetchone() == (0,)

    # resuming with other arguments is bad input (exit 2), before anything is started
    capsys.readouterr()
    assert main(["mcp", "serve", TASK, "--budget", "2", "--seed", "1", "--db", str(db), "--resume", run_id,
                 "--sandbox", "bwrap"]) == 2
    assert "resume an MCP campaign with its own" in capsys.readouterr().err

    # another agent cannot take the campaign over
    refused = asyncio.run(_connect(db, err, ("intruder", "9"), _intruder, "--resume", run_id))
    assert refused.is_error and "belongs to mcp:errors-agent/3.1" in _text(refused)

    # the same agent comes back: its workspace is rebuilt from the call log, and it finishes the budget
    second = asyncio.run(_connect(db, err, agent, _finish, "--resume", run_id))
    assert not second["restored"].is_error and _text(second["restored"]) == CANDIDATE
    assert not second["submit"].is_error and second["submit"].structured_content["iteration"] == 2
    assert second["after"].is_error and "budget of 2 submissions is spent" in _text(second["after"])
    assert second["status"]["finished"] and second["status"]["campaign_id"] == run_id
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT status FROM campaign_outcomes WHERE campaign_id = ?", (run_id,)).fetchone() == (
            "completed",)

    log = read_call_log(second["status"]["call_log"])
    kinds = [e.kind for e in log.entries]
    assert kinds.count("resume") == 2 and kinds.count("end") == 1
    calls = log.tool_calls()
    assert calls[-1].name == "write_file" and not calls[-1].ran and calls[-1].iteration == 2   # after the end
    assert calls[0].name == "rm_rf" and not calls[0].ran              # logged, never run
    assert [c.client for c in calls if c.client != "mcp:errors-agent/3.1"] == ["mcp:intruder/9"]
    # the first connection used the initialize handshake, the later ones the 2026 per-request envelope
    assert log.clients()[0].protocol_version in HANDSHAKE_PROTOCOL_VERSIONS

    # a tampered log is refused by replay (exit 2), before any sandbox is started
    tampered = tmp_path / "tampered.jsonl"
    text = Path(second["status"]["call_log"]).read_text(encoding="utf-8")
    tampered.write_text(text.replace("functional.silu", "functional.selu", 1), encoding="utf-8")
    capsys.readouterr()
    assert main(["replay", str(tampered), "--json"]) == 2
    assert "McpLogTampered" in json.loads(capsys.readouterr().out)["error"]


def test_serve_refuses_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
            (["mcp", "serve", "relu", "--budget", "0", "--seed", "0"],
             "argument --budget: a budget (iterations) must be between 1"),
            (["mcp", "serve", "relu", "--budget", "1", "--seed", "0", "--transport", "http", "--host", "example.com"],
             "--host must be an IP address"),
            (["mcp", "serve", "relu", "--budget", "1", "--seed", "0", "--port", "9000"], "apply to --transport http"),
    ):
        capsys.readouterr()
        assert main(argv) == 2
        assert message in capsys.readouterr().err
