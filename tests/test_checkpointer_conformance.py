"""One checkpointer suite, two checkpointers: the tuner graph's LangGraph checkpoints behave alike in a
SQLite file and on the PostgreSQL store's server (issue 28), and an LLM campaign on PostgreSQL that is
killed mid-run resumes from its server-side checkpoint with every iteration stored once.

Like ``test_store_conformance.py`` (the results store's rules over both stores), every test here takes
the ``checkpointer`` fixture, parametrised over ``sqlite`` and ``postgresql``; PostgreSQL tests need a
server (``pg_db`` in conftest.py: skipped locally without one, a failure under CI=true).
"""

from __future__ import annotations

import operator
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from atb_agent._checkpointer import PG_SCHEMA, CheckpointTarget, open_checkpointer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", "postgresql"])
def checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointTarget:
    if request.param == "sqlite":
        return tmp_path / "checkpoints.sqlite"
    return str(request.getfixturevalue("pg_db"))


class Count(TypedDict):
    n: int
    seen: Annotated[list[str], operator.add]


RAN: list[str] = []
FAIL_AT: dict[str, int] = {}


def _step(name: str) -> Any:
    def node(state: Count) -> dict[str, Any]:
        RAN.append(name)
        if FAIL_AT.get(name) == state["n"]:
            FAIL_AT.pop(name)
            raise RuntimeError(f"killed in {name}")
        return {"n": state["n"] + 1, "seen": [name]}
    return node


def _graph() -> StateGraph[Count, None, Count, Count]:
    g: StateGraph[Count, None, Count, Count] = StateGraph(Count)
    for name in ("a", "b", "c"):
        g.add_node(name, _step(name))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def test_a_finished_thread_is_read_back_through_a_new_connection(checkpointer: CheckpointTarget) -> None:
    with open_checkpointer(checkpointer) as saver:
        out = _graph().compile(checkpointer=saver).invoke({"n": 0, "seen": []}, _cfg("t1"), durability="sync")
    assert out == {"n": 3, "seen": ["a", "b", "c"]}
    with open_checkpointer(checkpointer) as saver:         # another process would see the same
        snap = _graph().compile(checkpointer=saver).get_state(_cfg("t1"))
    assert snap.values == out and snap.next == ()


def test_an_interrupted_thread_resumes_after_its_last_completed_node(checkpointer: CheckpointTarget) -> None:
    RAN.clear()
    FAIL_AT["b"] = 1
    with open_checkpointer(checkpointer) as saver:
        with pytest.raises(RuntimeError, match="killed in b"):
            _graph().compile(checkpointer=saver).invoke({"n": 0, "seen": []}, _cfg("t2"), durability="sync")
    with open_checkpointer(checkpointer) as saver:
        graph = _graph().compile(checkpointer=saver)
        assert graph.get_state(_cfg("t2")).next == ("b",)
        out = graph.invoke(None, _cfg("t2"), durability="sync")
    assert out == {"n": 3, "seen": ["a", "b", "c"]}
    assert RAN == ["a", "b", "b", "c"], "a completed node ran again, or a lost one was skipped"


def test_threads_are_isolated_and_an_unknown_thread_is_empty(checkpointer: CheckpointTarget) -> None:
    with open_checkpointer(checkpointer) as saver:
        graph = _graph().compile(checkpointer=saver)
        graph.invoke({"n": 10, "seen": []}, _cfg("x"), durability="sync")
        graph.invoke({"n": 20, "seen": []}, _cfg("y"), durability="sync")
        assert graph.get_state(_cfg("x")).values["n"] == 13
        assert graph.get_state(_cfg("y")).values["n"] == 23
        assert not graph.get_state(_cfg("never")).values
        assert len(list(saver.list(_cfg("x")))) >= 4          # a checkpoint per superstep, kept


def test_many_workers_opening_at_once_set_up_once(checkpointer: CheckpointTarget) -> None:
    errors: list[BaseException] = []

    def open_and_write(i: int) -> None:
        try:
            with open_checkpointer(checkpointer) as saver:
                _graph().compile(checkpointer=saver).invoke({"n": i, "seen": []}, _cfg(f"w{i}"), durability="sync")
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=open_and_write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors


def test_the_tuner_graph_state_round_trips(checkpointer: CheckpointTarget) -> None:
    """The real graph's state (messages, counters, the transcript position) through each saver: what
    ``checkpointed_transcript_seq`` reads on resume."""
    from atb_agent._runner import checkpointed_transcript_seq
    from atb_agent.graph import build_graph, initial_state

    state = dict(initial_state(3, 17))
    with open_checkpointer(checkpointer) as saver:
        graph = build_graph().compile(checkpointer=saver)
        graph.update_state(_cfg("run-x"), state, as_node="record")
    assert checkpointed_transcript_seq(checkpointer, "run-x") == 17
    assert checkpointed_transcript_seq(checkpointer, "run-none") is None


def test_postgres_checkpoints_stay_out_of_the_results_store(pg_db: str) -> None:
    """The checkpointer's tables live in their own schema: the hash-chained store verifies as before."""
    import psycopg

    from harness.store import open_store

    with open_store(pg_db) as store:
        assert store.verify().ok
    with open_checkpointer(pg_db) as saver:
        _graph().compile(checkpointer=saver).invoke({"n": 0, "seen": []}, _cfg("t"), durability="sync")
    with psycopg.connect(pg_db, autocommit=True) as conn:
        where = {r[0] for r in conn.execute("SELECT schemaname FROM pg_tables WHERE tablename = 'checkpoints'")}
    assert where == {PG_SCHEMA}
    with open_store(pg_db) as store:
        verified = store.verify()
    assert verified.ok, verified.first_problem


# ---------------------------------------------------------------------- an LLM campaign on PostgreSQL
def _pg_rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    from harness.store._postgres import PgExecutor

    with psycopg.connect(url, autocommit=True) as pg:
        try:
            return [tuple(r) for r in PgExecutor(pg).execute(sql, params).fetchall()]
        except psycopg.errors.UndefinedTable:
            return []


@pytest.mark.slow
def test_a_killed_llm_campaign_on_postgres_resumes_storing_each_iteration_once(pg_db: str, tmp_path: Path) -> None:
    """Through the official OpenAI SDK against the loopback model: the run is SIGKILLed after its first
    stored iteration, then resumed (in this process, as another node would) from the server's checkpoint."""
    sys.path.insert(0, str(ROOT / "tests"))
    from loopback import LoopbackServer
    from loopback.scripts import three_iterations
    from loopback.services import ScriptedServices
    from test_agent_campaign import _memory_tools

    from atb_agent.campaign import CampaignSpec, run_campaign
    from atb_agent.replay import replay_transcript

    child = ROOT / "tests" / "loopback" / "child_run.py"
    env = {**os.environ, "ATB_TRANSCRIPTS_DIR": str(tmp_path), "OPENAI_API_KEY": "sk-scripted"}
    with LoopbackServer(three_iterations()) as srv:
        proc = subprocess.Popen([sys.executable, str(child), "openai", srv.openai_base_url, pg_db], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        rows: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not rows:
            rows = _pg_rows(pg_db, "SELECT campaign_id, idx FROM iterations")
            time.sleep(0.05)
        assert proc.poll() is None, f"the child ended before the kill: {proc.stderr.read() if proc.stderr else ''}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        cid = rows[0][0]
        sql = "SELECT idx, id, verdict_id, created_at FROM iterations WHERE campaign_id = ? ORDER BY idx"
        before = _pg_rows(pg_db, sql, (cid,))
        assert 1 <= len(before) < 3 and not _pg_rows(pg_db, "SELECT 1 FROM campaign_outcomes")
        assert _pg_rows(pg_db, f"SELECT count(*) FROM {PG_SCHEMA}.checkpoints WHERE thread_id = ?", (cid,))[0][0] > 0
        os.environ["OPENAI_API_KEY"] = env["OPENAI_API_KEY"]
        try:
            summary = run_campaign(CampaignSpec(task="gelu", tuner="openai:scripted-model", budget=3, seed=7,
                                                store=pg_db, base_url=srv.openai_base_url,
                                                scripted=True, resume=cid,
                                                transcripts_dir=tmp_path),
                                                services=ScriptedServices())
        finally:
            os.environ.pop("OPENAI_API_KEY", None)
    after = _pg_rows(pg_db, sql, (cid,))
    assert [r[0] for r in after] == [0, 1, 2]
    assert after[:len(before)] == before                  # stored iterations were kept, not redone
    assert summary.outcome.status == "completed"
    transcript = Path(summary.outcome.detail["transcript"])
    assert transcript.parent == tmp_path / "transcripts"
    report = replay_transcript(transcript, toolbox_factory=_memory_tools, evidence_db=pg_db)
    assert report.verdicts_reproduced and report.requests_identical == 5 and report.submissions_checked == 3
