"""The same campaign over Streamable HTTP on loopback: ``atb mcp serve --transport http --port 0 --json``
prints its URL and bearer token; requests without the token are refused (401); the SDK's own client,
carrying the token, lists the tools, reads the brief, writes a candidate and submits until the budget is
spent. Then the stored iterations, ``atb compare`` against random search, and ``atb replay`` of the
call log (every tool call again in a fresh sandbox, every submission measured afresh) are checked.
About three minutes on two shared cores (six harness measurements)."""

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
from atb_agent.mcp import BRIEF_URI, STATUS_URI

# The bubblewrap sandbox (real confinement, no container to create) keeps this test off the Docker daemon;
# tests/test_mcp_stdio.py drives the Docker sandbox.
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


async def _unauthorised(url: str, token: str) -> list[int]:
    import httpx2

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with httpx2.AsyncClient(timeout=30) as http:
        none = await http.post(url, json=body, headers=headers)
        wrong = await http.post(url, json=body, headers={**headers, "authorization": f"Bearer {token[:-2]}xx"})
    return [none.status_code, wrong.status_code]


async def _drive(url: str, token: str) -> dict[str, Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import Implementation

    seen: dict[str, Any] = {}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(30, read=300)) as http:
        async with Client(streamable_http_client(url, http_client=http),
                          client_info=Implementation(name="http-test-agent", version="2.0")) as client:
            seen["tools"] = [t.name for t in (await client.list_tools()).tools]
            seen["brief"] = (await client.read_resource(BRIEF_URI)).contents[0].text
            wrote = await client.call_tool("write_file", {"path": "candidate.py", "content": CANDIDATE})
            assert not wrote.is_error, _text(wrote)
            first = await client.call_tool("submit", {})
            assert not first.is_error, _text(first)
            edited = await client.call_tool("edit_file", {"path": "candidate.py", "replacements": [
                {"old": "torch.nn.functional.silu(x)", "new": "x * torch.sigmoid(x)"}]})
            assert not edited.is_error, _text(edited)
            second = await client.call_tool("submit", {})
            assert not second.is_error, _text(second)
            seen["submits"] = [first, second]
            seen["after"] = await client.call_tool("submit", {})
            seen["status"] = json.loads((await client.read_resource(STATUS_URI)).contents[0].text)
    return seen


def test_http_campaign_on_loopback_with_bearer_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "atb.sqlite"
    err = (tmp_path / "serve.stderr").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "atb_agent.cli", "mcp", "serve", TASK, "--budget", "2", "--seed", "0", "--db", str(db),
         "--sandbox", "bwrap", "--transport", "http", "--port", "0", "--json"],
        cwd=ROOT, env={k: v for k, v in os.environ.items() if k != "ATB_MCP_TOKEN"}, stdout=subprocess.PIPE,
        stderr=err, text=True)
    try:
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline())
        url, token = hello["url"], hello["token"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp") and len(token) >= 32
        assert asyncio.run(_unauthorised(url, token)) == [401, 401]
        seen = asyncio.run(_drive(url, token))
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
        err.close()
    assert rc == 0, (tmp_path / "serve.stderr").read_text()

    assert "submit" in seen["tools"] and "class Model" in seen["brief"]
    verdicts = [s.structured_content["verdict"] for s in seen["submits"]]
    assert [v["iteration"] for v in verdicts] == [1, 2] and all(v["verdict_id"] for v in verdicts)
    assert seen["after"].is_error and "spent" in _text(seen["after"])
    run_id = seen["status"]["campaign_id"]
    assert seen["status"]["tuner"] == "mcp:http-test-agent/2.0" and seen["status"]["finished"]
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT idx, verdict_id FROM iterations WHERE campaign_id = ? ORDER BY idx",
                         (run_id,)).fetchall()
        config = json.loads(c.execute("SELECT config_json FROM campaigns WHERE id = ?", (run_id,)).fetchone()[0])
    assert rows == [(0, verdicts[0]["verdict_id"]), (1, verdicts[1]["verdict_id"])]
    assert config["external_agent"] is True and config["transport"] == "http"

    capsys.readouterr()
    assert main(["run", TASK, "--tuner", "random", "--budget", "2", "--seed", "0", "--db", str(db), "--json"]) == 0
    random_id = json.loads(capsys.readouterr().out)["run_id"]
    assert main(["compare", random_id, run_id, "--db", str(db), "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["a"]["tuner_spec"] == "random" and cmp["b"]["tuner_spec"] == "mcp:http-test-agent/2.0"

    # replay: the logged calls again in a fresh sandbox, each submission measured afresh by the harness
    assert main(["replay", seen["status"]["call_log"], "--db", str(tmp_path / "replay.sqlite"),
                 "--sandbox", "bwrap", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["kind"] == "mcp" and rep["tuner"] == "mcp:http-test-agent/2.0" and rep["finished"]
    assert rep["tool_calls_logged"] == 5 and rep["tool_calls_replayed"] == 4 and rep["tool_calls_skipped"] == 1
    assert rep["submissions_checked"] == 2 and rep["tool_output_differences"] == []
    assert rep["recorded_statuses"] == [v["status"] for v in verdicts]
    assert rep["same_statuses"], rep["verdicts"]      # speedups may move on a loaded machine; statuses may not
    print("replayed verdicts:", json.dumps(rep["verdicts"]))     # shown with -rP: how far the speedups moved
