"""The LangGraph example of docs/mcp.md, run for real: ``langchain-mcp-adapters`` 0.3.2 on its own ``mcp``
1.30 client drives ``atb mcp serve`` in both patterns the page shows, one explicit session and a session
per tool call (``client.get_tools()``) with the interceptor that keeps the campaign id.

The code block is read from the page and executed as it stands; only the chat model is scripted (it asks
for ``write_file`` then ``submit``, then answers) and the server entry points at this checkout with the
bubblewrap sandbox. The adapter needs ``mcp<2`` and the server runs on ``mcp`` 2.3, so, as for a real agent
whose environment is its own, the client runs in a child interpreter whose path starts with a folder holding
the adapter and ``mcp`` 1.30 (``ATB_LANGCHAIN_MCP_SITE``, else ``~/.cache/autotunebench/langchain-mcp-client``,
installed there from PyPI with ``pip install --target`` the first time; the test is skipped when that cannot
be done). About a minute and a half on two shared cores (two harness measurements).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from atb_agent.mcp import read_call_log

pytestmark = [pytest.mark.bwrap, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

ROOT = Path(__file__).resolve().parents[1]
# swish (128 x 1024) rather than relu (128 x 8192): the same path through the server, fewer seconds per
# harness measurement; nothing here is about the task
TASK = "swish"
DOC = ROOT / "docs" / "mcp.md"
MARKER = "<!-- tested: tests/test_mcp_langgraph.py"
SITE_ENV = "ATB_LANGCHAIN_MCP_SITE"
# The client side, pinned: the adapter, its mcp 1.x, and what mcp 1.x needs that mcp 2.3's environment lacks.
CLIENT_PACKAGES = ["langchain-mcp-adapters==0.3.2", "mcp==1.30.0", "httpx-sse==0.4.3", "pydantic-settings==2.16.3",
                   "python-dotenv==1.2.4"]

CANDIDATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x)
'''

DRIVER = r'''
import asyncio, json, os, sys
sys.path.insert(0, sys.argv[1])                       # the folder holding the page's example as example.py
import example                                         # the code block of docs/mcp.md, unchanged
import mcp
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

config = json.loads(sys.argv[2])


class Scripted(BaseChatModel):
    """write_file, then submit, then a final answer: what a tool-calling model would ask for."""

    def bind_tools(self, tools, **kwargs):
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        done = sum(isinstance(m, ToolMessage) for m in messages)
        turns = [AIMessage(content="", tool_calls=[{"name": "write_file", "id": "call-1", "type": "tool_call",
                                                    "args": {"path": "candidate.py", "content": config["candidate"]}}]),
                 AIMessage(content="", tool_calls=[{"name": "submit", "id": "call-2", "type": "tool_call",
                                                    "args": {"note": "F.silu"}}]),
                 AIMessage(content="done")]
        return ChatResult(generations=[ChatGeneration(message=turns[min(done, 2)])])


def server(name):
    return {**example.ATB_SERVER, "command": sys.executable, "args": config["args"], "cwd": config["cwd"],
            "env": config["env"],
            "session_kwargs": {"client_info": example.Implementation(name=name, version="1.0")}}


def tools_said(state):
    return [(m.name, str(m.content)) for m in state["messages"] if isinstance(m, ToolMessage)]


async def main():
    one = await example.tune_in_one_session(Scripted(), server("langgraph-session"))
    per_call, campaign = await example.tune_per_call(Scripted(), server("langgraph-per-call"))
    print(json.dumps({"mcp": mcp.__file__, "session": tools_said(one), "per_call": tools_said(per_call),
                      "campaign": campaign}))


asyncio.run(main())
'''


def _client_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get(SITE_ENV)
    site = Path(given) if given else Path.home() / ".cache" / "autotunebench" / "langchain-mcp-client"
    if (site / "langchain_mcp_adapters").is_dir() and (site / "mcp").is_dir():
        return site
    if given:
        pytest.skip(f"{SITE_ENV}={given} holds no langchain_mcp_adapters and mcp")
    staging = tmp_path_factory.mktemp("client-site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging),
                           *CLIENT_PACKAGES], capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        pytest.skip(f"could not install the LangGraph MCP client ({', '.join(CLIENT_PACKAGES)}): "
                    f"{done.stderr.strip()[-400:]}")
    site.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, site)
    except OSError:                  # another worker put it there first
        shutil.rmtree(staging, ignore_errors=True)
    return site


def _example() -> str:
    text = DOC.read_text(encoding="utf-8")
    at = text.index(MARKER)
    block = re.search(r"```python\n(.*?)\n```", text[at:], re.DOTALL)
    assert block is not None, "no python block after the marker in docs/mcp.md"
    return block.group(1)


def test_the_langgraph_example_of_the_docs_runs_in_both_patterns(tmp_path: Path,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    site = _client_site(tmp_path_factory)
    (tmp_path / "example.py").write_text(_example(), encoding="utf-8")
    db = tmp_path / "atb.sqlite"
    server_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}     # the server keeps its own mcp 2.3
    config = {"candidate": CANDIDATE, "cwd": str(ROOT), "env": server_env,
              "args": ["-m", "atb_agent.cli", "mcp", "serve", TASK, "--budget", "1", "--seed", "0", "--db", str(db),
                       "--sandbox", "bwrap"]}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path), json.dumps(config)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=500,
                          check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["mcp"].startswith(str(site)), "the client did not run on the adapter's own mcp 1.x"

    for pattern in ("session", "per_call"):
        said = dict(out[pattern])
        assert set(said) == {"write_file", "submit"}, out[pattern]
        assert "wrote" in said["write_file"] and "iteration 1 of 1 recorded" in said["submit"], said

    # two campaigns, one per pattern, each with its one iteration, completed; nothing else was opened
    with sqlite3.connect(db) as c:
        rows = dict(c.execute("SELECT tuner_spec, id FROM campaigns").fetchall())
        outcomes = dict(c.execute("SELECT campaign_id, status FROM campaign_outcomes").fetchall())
        counts = dict(c.execute("SELECT campaign_id, COUNT(*) FROM iterations GROUP BY campaign_id").fetchall())
    assert set(rows) == {"mcp:langgraph-session/1.0", "mcp:langgraph-per-call/1.0"}, rows
    assert all(outcomes.get(cid) == "completed" and counts.get(cid) == 1 for cid in rows.values())
    assert out["campaign"] == rows["mcp:langgraph-per-call/1.0"], "the interceptor did not keep the campaign id"

    # per call: the submit ran in a server of its own, which took the campaign up with its kept workspace
    per_call = read_call_log(tmp_path / "mcp_logs" / f"{out['campaign']}.jsonl")
    assert [e.payload().workspace for e in per_call.entries if e.kind == "resume"] == ["kept"]  # type: ignore[attr-defined]
    one = read_call_log(tmp_path / "mcp_logs" / f"{rows['mcp:langgraph-session/1.0']}.jsonl")
    assert not [e for e in one.entries if e.kind == "resume"]
