"""The LangGraph tuner end to end through the real SDKs and the loopback server, with the real store,
campaign recorder, transcripts and checkpointer; the sandbox is an in-memory ToolBox and the harness a
scripted judge (the Docker/harness versions are in test_agent_e2e_docker.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer
from loopback.scripts import three_iterations, truncated_run
from loopback.services import ScriptedServices
from loopback.workspace import MemoryToolBox

from atb_agent.campaign import CampaignSpec, run_campaign
from atb_agent.errors import ReplayDivergence
from atb_agent.replay import replay_transcript
from transcripts import TranscriptTampered, read_transcript


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-anthropic")


def _url(srv: LoopbackServer, kind: str) -> str:
    return srv.openai_base_url if kind == "openai" else srv.anthropic_base_url


def _memory_tools(inbox: Any, brief: str) -> MemoryToolBox:
    return MemoryToolBox(brief, inbox)


def _iteration_rows(db: Path, campaign_id: str) -> list[tuple[int, str | None]]:
    with sqlite3.connect(db) as c:
        return list(c.execute("SELECT idx, verdict_id FROM iterations WHERE campaign_id = ? ORDER BY idx", (campaign_id,)))


def _run(kind: str, tmp_path: Path, turns: Any, budget: int = 3, services: Any = None) -> Any:
    with LoopbackServer(turns) as srv:
        return run_campaign(CampaignSpec(task="gelu", tuner=f"{kind}:scripted-model", budget=budget, seed=7,
                                         store=tmp_path / "atb.sqlite", base_url=_url(srv, kind),
                                         scripted=True), services=services or ScriptedServices())


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_scripted_run_completes_and_replays_byte_for_byte(kind: str, tmp_path: Path) -> None:
    services = ScriptedServices()
    summary = _run(kind, tmp_path, three_iterations(), services=services)
    assert summary.iterations_recorded == 3 and summary.outcome.status == "completed"
    rows = _iteration_rows(tmp_path / "atb.sqlite", summary.campaign.id)
    assert [r[0] for r in rows] == [0, 1, 2] and all(r[1] for r in rows)
    assert services.judge is not None and services.judge.evaluated == [0, 1, 2]
    # the tools really ran: the workspace holds the second version
    assert b"torch.erf" in services.toolboxes[0].files["candidate.py"]

    path = Path(summary.outcome.detail["transcript"])
    t = read_transcript(path)
    assert t.header.scripted and t.header.provider == kind
    assert len(t.model_calls()) == 5 and [s.forced for s in t.submissions()] == [False, False, True]
    report = replay_transcript(path, toolbox_factory=_memory_tools)
    assert report.requests_identical == 5 and report.tool_calls == 7
    assert report.submissions_checked == 3 and report.verdicts_reproduced and not report.tool_output_differences


def test_an_edited_transcript_is_rejected(tmp_path: Path) -> None:
    summary = _run("openai", tmp_path, three_iterations())
    path = Path(summary.outcome.detail["transcript"])
    lines = path.read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if '"kind":"verdict"' in line)
    lines[i] = lines[i].replace('"status":"accepted"', '"status":"rejected"', 1)
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(TranscriptTampered) as exc:
        replay_transcript(edited, toolbox_factory=_memory_tools)
    assert exc.value.line == i + 1

    from atb_agent.cli import main

    assert main(["replay", str(edited), "--json"]) == 2


def test_a_request_that_differs_names_the_call_and_field(tmp_path: Path) -> None:
    summary = _run("anthropic", tmp_path, three_iterations())
    path = Path(summary.outcome.detail["transcript"])

    class OtherTools(MemoryToolBox):
        def anthropic_tools(self) -> list[dict[str, Any]]:
            tools = super().anthropic_tools()
            tools[0] = {**tools[0], "description": "a different description"}
            return tools

    with pytest.raises(ReplayDivergence) as exc:
        replay_transcript(path, toolbox_factory=lambda inbox, brief: OtherTools(brief, inbox))
    assert exc.value.call_index == 0 and exc.value.field == "body"
    assert "body.tools[0].description" in exc.value.detail


def test_a_run_whose_replies_hit_the_cap_is_an_infrastructure_defect(tmp_path: Path) -> None:
    summary = _run("openai", tmp_path, truncated_run(3))
    assert summary.outcome.status == "infrastructure_defect"
    assert summary.truncated_fraction == 1.0
    assert "truncated" in summary.outcome.reason
    t = read_transcript(Path(summary.outcome.detail["transcript"]))
    turns = [e.data for e in t.live if e.kind == "model_turn"]
    assert len(turns) == 3 and all(d["truncation"]["truncated"] for d in turns)
    assert t.end is not None and t.end.status == "infrastructure_defect"


class _CrashOnce(ScriptedServices):
    """Measurement fails the first time iteration 1 is submitted (a crash inside the submit node)."""

    crashed = False

    def evaluator(self, task: Any, store: Any, protocol: Any) -> Any:
        judge = super().evaluator(task, store, protocol)
        inner = judge.evaluate

        def evaluate(iteration: int, files: dict[str, bytes]) -> Any:
            if iteration == 1 and not _CrashOnce.crashed:
                _CrashOnce.crashed = True
                raise RuntimeError("simulated crash while measuring")
            return inner(iteration, files)

        judge.evaluate = evaluate  # type: ignore[method-assign]
        return judge


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_crashed_run_resumes_with_every_iteration_stored_once(kind: str, tmp_path: Path) -> None:
    _CrashOnce.crashed = False
    db = tmp_path / "atb.sqlite"
    with LoopbackServer(three_iterations()) as srv:
        with pytest.raises(RuntimeError, match="simulated crash"):
            run_campaign(CampaignSpec(task="gelu", tuner=f"{kind}:scripted-model", budget=3, seed=7, store=db,
                                      base_url=_url(srv, kind), scripted=True), services=_CrashOnce())
        with sqlite3.connect(db) as c:
            (campaign_id,), = c.execute("SELECT id FROM campaigns")
        assert [r[0] for r in _iteration_rows(db, campaign_id)] == [0]
        from atb_agent.campaign import default_paths

        with pytest.raises(ReplayDivergence, match="did not finish"):
            replay_transcript(default_paths(db, campaign_id).transcript, toolbox_factory=_memory_tools)
        services = ScriptedServices()
        summary = run_campaign(CampaignSpec(task="gelu", tuner=f"{kind}:scripted-model", budget=3, seed=7, store=db,
                                            base_url=_url(srv, kind), scripted=True,
                                            resume=campaign_id), services=services)
    assert summary.iterations_recorded == 3
    assert [r[0] for r in _iteration_rows(db, campaign_id)] == [0, 1, 2]
    assert services.judge is not None and services.judge.evaluated == [1, 2]   # nothing measured twice
    path = Path(summary.outcome.detail["transcript"])
    t = read_transcript(path)
    assert any(e.kind == "resume" for e in t.records) and t.voided
    report = replay_transcript(path, toolbox_factory=_memory_tools)
    assert report.verdicts_reproduced and report.requests_identical == 5


def test_resume_with_other_arguments_is_refused(tmp_path: Path) -> None:
    from atb_agent.errors import CampaignError

    summary = _run("openai", tmp_path, three_iterations(), budget=1)
    with pytest.raises(CampaignError, match="same arguments"):
        run_campaign(CampaignSpec(task="gelu", tuner="openai:scripted-model", budget=2, seed=7,
                                  store=tmp_path / "atb.sqlite", resume=summary.campaign.id),
                                  services=ScriptedServices())


def test_a_loaded_subject_runs_like_its_name(tmp_path: Path) -> None:
    """``run_campaign`` takes a :class:`harness.tuning.subjects.Subject` as well as a task name; the services see
    the subject (its id, kind and source), and the campaign stores the kind and config it always has."""
    from harness.tuning.subjects import load_subject

    subject = load_subject("gelu")
    services = ScriptedServices()
    with LoopbackServer(three_iterations()) as srv:
        summary = run_campaign(CampaignSpec(task=subject, tuner="openai:scripted-model", budget=3, seed=7,
                                            store=tmp_path / "atb.sqlite",
                                            base_url=srv.openai_base_url, scripted=True),
                                            services=services)
    assert summary.iterations_recorded == 3 and summary.campaign.kind == "kernel"
    assert services.judge is not None and services.judge.task is subject
    assert {"base_url", "scripted"} <= set(summary.campaign.config) and "engine" not in summary.campaign.config
    header = read_transcript(Path(summary.outcome.detail["transcript"])).header
    assert header.task == "gelu" and header.task_brief == subject.model_brief()


def test_replay_tuner_reruns_a_transcript_and_is_measured_afresh(tmp_path: Path) -> None:
    first = _run("openai", tmp_path / "a", three_iterations())
    path = first.outcome.detail["transcript"]
    services = ScriptedServices()
    again = run_campaign(CampaignSpec(task="gelu", tuner=f"replay:{path}", budget=3, seed=7,
                                      store=tmp_path / "b" / "atb.sqlite"), services=services)
    assert again.iterations_recorded == 3 and services.judge is not None and services.judge.evaluated == [0, 1, 2]
    assert again.candidate_sequence == first.candidate_sequence


def test_langgraph_json_points_at_the_graph_factory() -> None:
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = json.loads((root / "langgraph.json").read_text())
    file, _, name = spec["graphs"]["tuner"].partition(":")
    module_spec = importlib.util.spec_from_file_location("graph_build", root / file)
    assert module_spec is not None and module_spec.loader is not None
    from atb_agent.graph import make_graph

    graph = make_graph()
    nodes = set(graph.get_graph().nodes)
    assert {"observe", "call_model", "run_tools", "submit", "record"} <= nodes
    assert name == "make_graph"


def test_a_killed_run_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """SIGKILL a campaign in a child process once its first iteration is stored, then resume it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    db = tmp_path / "atb.sqlite"
    child = Path(__file__).resolve().parent / "loopback" / "child_run.py"
    with LoopbackServer(three_iterations()) as srv:
        proc = subprocess.Popen([sys.executable, str(child), "openai", srv.openai_base_url, str(db)],
                                env={**os.environ}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        rows: list[Any] = []
        while time.monotonic() < deadline and proc.poll() is None:
            if db.exists():
                try:
                    with sqlite3.connect(db, timeout=1) as c:
                        rows = list(c.execute("SELECT campaign_id, idx FROM iterations"))
                except sqlite3.OperationalError:
                    rows = []
                if rows:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, f"the child ended before it could be killed: {proc.stderr.read() if proc.stderr else ''}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        campaign_id = rows[0][0]
        before = _iteration_rows(db, campaign_id)
        assert 1 <= len(before) < 3
        with sqlite3.connect(db) as c:
            assert not list(c.execute("SELECT 1 FROM campaign_outcomes"))
        summary = run_campaign(CampaignSpec(task="gelu", tuner="openai:scripted-model", budget=3, seed=7, store=db,
                                            base_url=srv.openai_base_url, scripted=True,
                                            resume=campaign_id), services=ScriptedServices())
    after = _iteration_rows(db, campaign_id)
    assert [r[0] for r in after] == [0, 1, 2]
    assert after[:len(before)] == before                  # stored iterations were kept, not redone
    assert summary.outcome.status == "completed"
    report = replay_transcript(Path(summary.outcome.detail["transcript"]), toolbox_factory=_memory_tools)
    assert report.verdicts_reproduced and report.requests_identical == 5 and report.submissions_checked == 3


def test_a_crashed_replay_tuner_run_resumes_with_every_iteration_stored_once(tmp_path: Path) -> None:
    """Issue 14: resuming works for every tuner. ``replay:PATH`` used to refuse ``resume`` outright; now
    its recorded-call cursor is put where the checkpoint stands, so the resumed requests still match
    the recording byte for byte and nothing is measured twice."""
    first = _run("openai", tmp_path / "a", three_iterations())
    path = first.outcome.detail["transcript"]
    db = tmp_path / "b" / "atb.sqlite"
    _CrashOnce.crashed = False
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_campaign(CampaignSpec(task="gelu", tuner=f"replay:{path}", budget=3, seed=7, store=db),
                                  services=_CrashOnce())
    with sqlite3.connect(db) as c:
        (campaign_id,), = c.execute("SELECT id FROM campaigns")
    assert [r[0] for r in _iteration_rows(db, campaign_id)] == [0]
    services = ScriptedServices()
    again = run_campaign(CampaignSpec(task="gelu", tuner=f"replay:{path}", budget=3, seed=7, store=db,
                                      resume=campaign_id), services=services)
    assert again.iterations_recorded == 3 and again.outcome.status == "completed"
    assert [r[0] for r in _iteration_rows(db, campaign_id)] == [0, 1, 2]
    assert services.judge is not None and services.judge.evaluated == [1, 2]
    assert again.candidate_sequence == first.candidate_sequence
    report = replay_transcript(Path(again.outcome.detail["transcript"]), toolbox_factory=_memory_tools)
    assert report.verdicts_reproduced and report.requests_identical == 5
