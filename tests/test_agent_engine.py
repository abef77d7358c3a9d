"""An engine (flag) task through the LLM tuner end to end: the loopback server's scripted OpenAI turns
call ``set_flags`` then ``submit`` on ``llamacpp-tiny-1t``, the tools run in the bubblewrap sandbox,
every submission is measured by real ``llama-server`` processes against the engine's default launch,
the transcript replays, and ``atb compare`` reads the run against a seeded random search of the same task and budget.

Skipped with the reason when llama-server is not built (`atb engine build llama-cpp`) or bubblewrap
cannot run here. About a minute on two shared cores (four engine trials of about ten seconds).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from loopback import LoopbackServer
from loopback.server import ScriptedCall, ScriptedTurn

from atb_agent.campaign import HarnessServices, CampaignSpec, run_campaign
from harness.engines import cached_binary
from harness.tuning.subjects._engine import ENGINE_CANDIDATE_FILE

TASK = "llamacpp-tiny-1t"
BUDGET = 2

pytestmark = [
    pytest.mark.engine, pytest.mark.bwrap, pytest.mark.slow,
    pytest.mark.skipif(cached_binary() is None,
                       reason="llama-server is not built here: run `atb engine build llama-cpp` (about 7 min)"),
]

FIRST = {"parallel": 4, "cache_prompt": True}
SECOND = {"parallel": 2, "spec_type": "ngram-mod", "spec_ngram_mod_n_min": 4, "spec_ngram_mod_n_max": 8}


def two_flag_iterations() -> list[ScriptedTurn]:
    """Iteration 0: set flags and submit in one turn. Iteration 1: read the task, then set other flags
    (ngram speculation) and submit."""
    return [
        ScriptedTurn(text="More slots first.", tool_calls=(
            ScriptedCall("set_flags", {"flags": FIRST}), ScriptedCall("submit", {}))),
        ScriptedTurn(tool_calls=(ScriptedCall("get_task", {}),)),
        ScriptedTurn(text="Trying n-gram speculation.", tool_calls=(
            ScriptedCall("set_flags", {"flags": SECOND}), ScriptedCall("submit", {}))),
    ]


@pytest.fixture(scope="module", autouse=True)
def _bwrap_ready() -> None:
    from protocol import load_protocol
    from sandbox import SandboxLimits, SandboxUnavailableError
    from sandbox._bwrap import BwrapSandbox

    try:
        BwrapSandbox(SandboxLimits.from_params(load_protocol().sandbox), mount_torch=False).close()
    except SandboxUnavailableError as exc:
        pytest.skip(f"bubblewrap sandbox unavailable here: {exc}")


def test_scripted_llm_run_on_llama_server_is_stored_and_compared_with_random(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli import main
    from harness.store import open_store
    from harness.tuning.compare import compare_runs
    from protocol import load_protocol

    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    db = tmp_path / "atb.sqlite"
    with LoopbackServer(two_flag_iterations()) as srv:
        llm = run_campaign(CampaignSpec(task=TASK, tuner="openai:scripted-model", budget=BUDGET, seed=0, store=db,
                                        base_url=srv.openai_base_url, scripted=True),
                                        services=HarnessServices("cpu", "bwrap"))
        tools_offered = {t["function"]["name"] for t in srv.requests[0][1]["tools"]}
        first_prompt = json.dumps(srv.requests[0][1]["messages"])
    assert "set_flags" in tools_offered and ENGINE_CANDIDATE_FILE in first_prompt
    assert llm.campaign.kind == "engine" and llm.iterations_recorded == BUDGET
    assert llm.outcome is not None and llm.outcome.status == "completed"

    with sqlite3.connect(db) as c:
        ids = [r[0] for r in c.execute("SELECT verdict_id FROM iterations WHERE campaign_id = ? ORDER BY idx",
                                       (llm.campaign.id,))]
    assert len(ids) == BUDGET and None not in ids     # every iteration has a harness verdict in the store
    with open_store(db) as store:
        verdicts = [store.verdict(i) for i in ids]
    for v in verdicts:
        assert (v.kind, v.baseline_label) == ("engine", "engine-default")
        assert v.status in ("accepted", "rejected", "quarantined")
        if v.ratio is not None:                       # a measured ratio always comes with its interval
            assert v.ci_low is not None and v.ci_high is not None and v.ci_low <= v.ratio <= v.ci_high
    assert [v.detail["config"] for v in verdicts] == [FIRST, SECOND]   # what set_flags wrote was launched
    assert any(v.ratio is not None for v in verdicts)  # real trials against the engine default happened

    from atb_agent.replay import replay_transcript
    from harness.tuning.subjects import load_subject

    services, task = HarnessServices("cpu", "bwrap"), load_subject(TASK)
    try:                                              # the engine transcript replays byte-for-byte
        report = replay_transcript(Path(llm.outcome.detail["transcript"]),
                                   toolbox_factory=lambda inbox, brief: services.toolbox(task, brief, inbox))
    finally:
        services.close()
    assert report.requests_identical == report.model_calls == 3
    assert report.submissions_checked == BUDGET and report.verdicts_reproduced

    import json as _json
    import subprocess
    import sys

    cli = subprocess.run([sys.executable, "-m", "atb_agent.cli", "replay", str(llm.outcome.detail["transcript"]),
                          "--json"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stdout + cli.stderr   # `atb replay` loads the engine task too
    replayed = _json.loads(cli.stdout)
    assert replayed["requests_identical"] == 3 and replayed["ok"] is True

    rnd = run_campaign(CampaignSpec(task=TASK, tuner="random", budget=BUDGET, seed=1, store=db))
    assert rnd.campaign.kind == "engine" and rnd.iterations_recorded == BUDGET
    proto = load_protocol()
    with open_store(db) as store:
        result = compare_runs(store, rnd.campaign.id, llm.campaign.id, proto)
    assert result.a.campaign_id == rnd.campaign.id and result.b.campaign_id == llm.campaign.id
    assert result.verdict in ("a_better", "b_better", "within_noise", "no_usable_result",
                              "uninformative_saturated")

    capsys.readouterr()
    assert main(["compare", rnd.campaign.id, llm.campaign.id, "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == result.verdict
