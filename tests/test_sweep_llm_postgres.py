"""Issue 28: an LLM campaign in an `atb sweep` on PostgreSQL, its Ray worker SIGKILLed mid-iteration,
resumes (Ray re-runs the task; the campaign continues from its graph checkpoint on the server) with
every iteration stored exactly once, and its transcript replays byte-for-byte.

Everything is real but the model: the official OpenAI SDK talks to the loopback server's scripted
turns; tools run in the sandbox; the harness measures on this CPU; the store and the LangGraph
checkpoints are on the test PostgreSQL server. The Ray cluster is this module's own (``sweep_cli.ray_cluster``) so its workers carry the scripted key; the sweep runs as the real CLI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sweep_cli import ray_cluster

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("docker_sandbox_ready")]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {**os.environ, "OPENAI_API_KEY": "sk-scripted"}       # the workers' environment is the cluster's
    with ray_cluster(env=env, cwd=tmp_path_factory.mktemp("ray")) as address:
        yield address


def _rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    from harness.store._postgres import PgExecutor

    with psycopg.connect(url, autocommit=True) as pg:
        try:
            return [tuple(r) for r in PgExecutor(pg).execute(sql, params).fetchall()]
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return []


def test_a_killed_ray_worker_llm_campaign_on_postgres_resumes_storing_each_iteration_once(
        ray_address: str, pg_db: str, tmp_path: Path) -> None:
    from loopback import LoopbackServer
    from loopback.scripts import three_iterations

    from atb_agent.replay import replay_transcript

    budget = 3
    with LoopbackServer(three_iterations()) as srv:
        spec = tmp_path / "sweep.yaml"
        spec.write_text(f"tasks: [gelu]\ntuners: ['openai:scripted-model']\nseeds: [7]\nbudget: {budget}\n"
                        f"base_url: {srv.openai_base_url}\nmax_retries: 2\n")
        env = {**os.environ, "ATB_TRANSCRIPTS_DIR": str(tmp_path), "OPENAI_API_KEY": "sk-scripted"}
        proc = subprocess.Popen([sys.executable, "-m", "atb_agent.cli", "sweep", str(spec), "--ray", ray_address,
                                 "--db", pg_db, "--json", "--no-live"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        deadline = time.monotonic() + 400
        first: list[tuple[Any, ...]] = []
        while time.monotonic() < deadline and proc.poll() is None and not first:
            first = _rows(pg_db, "SELECT campaign_id, idx, id, verdict_id, created_at FROM iterations")
            time.sleep(0.1)
        assert first, f"no iteration stored (rc {proc.poll()}): {proc.stderr.read()[-3000:] if proc.poll() is not None and proc.stderr else ''}"
        (cid, idx0, rid0, vid0, at0), = first
        attempt = json.loads(_rows(pg_db, "SELECT body_json FROM reports WHERE kind = 'sweep_attempt'")[0][0])
        assert not _rows(pg_db, "SELECT 1 FROM campaign_outcomes WHERE campaign_id = ?", (cid,))
        os.kill(attempt["pid"], signal.SIGKILL)            # the Ray worker running the LLM campaign
        killed_at = len(_rows(pg_db, "SELECT 1 FROM iterations WHERE campaign_id = ?", (cid,)))
        assert killed_at < budget, "the campaign finished before the kill landed; the test proves nothing"
        checkpoints = _rows(pg_db, "SELECT count(*) FROM atb_graph_checkpoints.checkpoints WHERE thread_id = ?", (cid,))
        assert checkpoints and checkpoints[0][0] > 0, "the graph checkpointed nowhere on the server"
        out, err = proc.communicate(timeout=500)
    lines = [x for x in out.splitlines() if x.strip()]
    assert proc.returncode == 0 and len(lines) == 1, err[-3000:]
    (c,) = json.loads(lines[0])["campaigns"]
    assert c["campaign_id"] == cid and c["outcome"] == "completed" and c["attempts"] == 2, c
    rows = _rows(pg_db, "SELECT idx, id, verdict_id, created_at FROM iterations WHERE campaign_id = ? ORDER BY idx",
                 (cid,))
    assert [r[0] for r in rows] == list(range(budget)), rows
    assert rows[0][1:] == (rid0, vid0, at0), "iteration 0 was stored again after the resume"
    assert len(_rows(pg_db, "SELECT id FROM campaigns")) == 1, "the campaign was started twice"
    pids = [json.loads(b)["pid"] for (b,) in _rows(pg_db, "SELECT body_json FROM reports WHERE kind = 'sweep_attempt'")]
    assert len(pids) == 2 and pids[0] == attempt["pid"] and pids[1] != pids[0]
    transcript = tmp_path / "transcripts" / f"{cid}.jsonl"
    assert transcript.is_file()
    from atb_agent.campaign import HarnessServices
    from harness.tuning.subjects import load_subject

    services, task = HarnessServices("cpu"), load_subject("gelu")     # the toolbox the campaign used
    try:
        report = replay_transcript(transcript, evidence_db=pg_db,
                                   toolbox_factory=lambda inbox, brief: services.toolbox(task, brief, inbox))
    finally:
        services.close()
    assert report.requests_identical == report.model_calls == 5, report
    assert report.submissions_checked == budget
