"""Tuner specs, the entry-point plug-in path, and replay with fresh measurement."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer
from loopback.scripts import three_iterations
from loopback.services import ScriptedJudge, ScriptedServices
from loopback.workspace import MemoryToolBox

from atb_agent.campaign import CampaignSpec, run_campaign
from atb_agent.errors import TunerSpecError
from atb_agent.tuners import GraphTuner, parse_spec, resolve_tuner


@pytest.mark.parametrize("spec,kind,arg", [
    ("openai:gpt-4o", "openai", "gpt-4o"), ("anthropic:claude-x", "anthropic", "claude-x"),
    ("replay:/tmp/t.jsonl", "replay", "/tmp/t.jsonl"), ("random", "random", ""), ("mytuner:v2", "entry_point", "v2"),
    ("openai:org/model:tag", "openai", "org/model:tag"),
])
def test_specs_parse(spec: str, kind: str, arg: str) -> None:
    p = parse_spec(spec)
    assert p.kind == kind and p.arg == arg


@pytest.mark.parametrize("spec", ["openai:", "anthropic:", "replay:", "", ":x"])
def test_incomplete_specs_are_refused(spec: str) -> None:
    with pytest.raises(TunerSpecError):
        parse_spec(spec)


def test_an_unknown_tuner_names_the_choices() -> None:
    with pytest.raises(TunerSpecError, match="autotunebench.tuners"):
        resolve_tuner("no-such-tuner")


def test_builtin_specs_resolve_to_the_graph_tuner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    t = resolve_tuner("openai:m", base_url="http://127.0.0.1:1/v1")
    assert isinstance(t, GraphTuner) and t.identity().base_url == "http://127.0.0.1:1/v1"


PLUGIN = '''
from atb_agent.tuners import RunCounts, TunerIdentity

class WriteAndSubmit:
    """A whole different agent: writes a fixed candidate and ends each iteration itself."""
    spec = "plugtuner"
    def __init__(self, arg):
        self.arg = arg
    def identity(self):
        return TunerIdentity(provider="plugtuner", model=self.arg)
    def run(self, env):
        for idx in env.iterations_left():
            env.toolbox.call("write_file", {"path": "candidate.py", "content": "class ModelNew: pass  # " + str(idx)})
            env.toolbox.call("submit", {})
            env.conclude_iteration(idx)
        return RunCounts(iterations=env.budget)

def make(arg):
    return WriteAndSubmit(arg)
'''


def test_a_third_party_tuner_runs_through_its_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "plug_pkg").mkdir(parents=True)
    (site / "plug_pkg" / "__init__.py").write_text(PLUGIN)
    info = site / "plug_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plug-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[autotunebench.tuners]\nplugtuner = plug_pkg:make\n")
    monkeypatch.syspath_prepend(str(site))
    services = ScriptedServices()
    summary = run_campaign(CampaignSpec(task="gelu", tuner="plugtuner:v1", budget=2, seed=3,
                                        store=tmp_path / "atb.sqlite"), services=services)
    assert summary.iterations_recorded == 2 and summary.usable_iterations == 2
    assert summary.outcome.status == "completed"
    assert services.judge is not None and services.judge.evaluated == [0, 1]
    with sqlite3.connect(tmp_path / "atb.sqlite") as c:
        assert [r[0] for r in c.execute("SELECT tuner_spec FROM campaigns")] == ["plugtuner:v1"]
    sys.modules.pop("plug_pkg", None)


class _SlowerJudge(ScriptedJudge):
    """A fresh measurement that reads every accepted candidate 10% slower than recorded."""

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> Any:
        v = super().evaluate(iteration, files)
        if v.speedup is None:
            return v
        return v.model_copy(update={"speedup": v.speedup * 0.9, "speedup_ci": None})


def test_fresh_measurement_reports_how_verdicts_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from atb_agent.replay import replay_transcript
    from harness.store import open_store
    from harness.tasks import load_task
    from protocol import load_protocol

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with LoopbackServer(three_iterations()) as srv:
        summary = run_campaign(CampaignSpec(task="gelu", tuner="openai:scripted-model", budget=3, seed=7,
                                            store=tmp_path / "atb.sqlite",
                                            base_url=srv.openai_base_url, scripted=True),
                                            services=ScriptedServices())
    store = open_store(tmp_path / "fresh.sqlite")
    proto = load_protocol()
    services = ScriptedServices()
    sid = services.open_session(store, proto, None)
    judge = _SlowerJudge(store, proto, sid, load_task("gelu"))
    report = replay_transcript(Path(summary.outcome.detail["transcript"]),
                               toolbox_factory=lambda inbox, brief: MemoryToolBox(brief, inbox), fresh_evaluator=judge)
    assert report.measurement == "fresh" and report.requests_identical == 5
    assert judge.evaluated == [0, 1, 2]
    assert all(m.moved for m in report.verdicts) and not report.verdicts_reproduced
    assert report.verdicts[0].replayed_speedup == pytest.approx(report.verdicts[0].recorded_speedup * 0.9)


def test_a_missing_key_fails_before_a_campaign_is_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from atb_agent.errors import MissingApiKeyError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingApiKeyError, match="ANTHROPIC_API_KEY"):
        run_campaign(CampaignSpec(task="gelu", tuner="anthropic:claude-x", budget=2, seed=0,
                                  store=tmp_path / "atb.sqlite"), services=ScriptedServices())
    assert not (tmp_path / "atb.sqlite").exists()

    from atb_agent.cli import main

    assert main(["replay", str(tmp_path / "missing.jsonl"), "--json"]) == 2


def test_a_loopback_url_that_atb_does_not_serve_still_needs_a_key(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a model `atb model serve` started (its state file names the URL, its pid is alive) is keyless."""
    from atb_agent.errors import MissingApiKeyError

    monkeypatch.setenv("ATB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingApiKeyError, match="OPENAI_API_KEY"):
        resolve_tuner("openai:smollm2", base_url="http://127.0.0.1:9/v1")


def test_a_stale_model_server_state_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state file whose process has gone (a crashed server) is removed, not used."""
    import subprocess

    from atb_agent.model_server import ServerState, served_identity, state_path
    from transcripts import ModelServerData

    monkeypatch.setenv("ATB_CACHE_DIR", str(tmp_path / "cache"))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    ident = ModelServerData(name="smollm2", about="x", gguf_sha256="0" * 64, gguf_bytes=1, server="llama-server",
                            server_version="v", server_argv=[], base_url="http://127.0.0.1:9/v1",
                            max_output_tokens=8, temperature=0.0, text_protocol="fenced-python/1")
    path = state_path("smollm2")
    path.parent.mkdir(parents=True)
    path.write_text(ServerState(pid=gone.pid, log_path="", started_at=0.0, identity=ident).model_dump_json())
    assert served_identity("http://localhost:9/v1") is None and not path.exists()


def test_an_unknown_prompt_variant_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from atb_agent.tuners import prompt_variant_from_env

    monkeypatch.setenv("ATB_PROMPT", "chatty")
    with pytest.raises(TunerSpecError, match="ATB_PROMPT"):
        prompt_variant_from_env("small-model/1")
    monkeypatch.setenv("ATB_PROMPT", "standard")
    assert prompt_variant_from_env("small-model/1") == "standard"
