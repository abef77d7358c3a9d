"""End to end with everything real but the model: the loopback server's scripted turns through the
official SDKs, the tools in the Docker sandbox, verdicts measured by the harness (CPU), iterations in
the store; then the transcript replays byte-for-byte through a fresh sandbox. About a minute per
provider on two cores (the harness measures every submission)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from loopback import LoopbackServer
from loopback.scripts import three_iterations

from atb_agent.campaign import HarnessServices, CampaignSpec, run_campaign
from atb_agent.replay import replay_transcript

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.usefixtures("docker_sandbox_ready")]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_scripted_run_in_the_sandbox_with_harness_verdicts_replays(kind: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-scripted")
    db = tmp_path / "atb.sqlite"
    with LoopbackServer(three_iterations()) as srv:
        url = srv.openai_base_url if kind == "openai" else srv.anthropic_base_url
        summary = run_campaign(CampaignSpec(task="gelu", tuner=f"{kind}:scripted-model", budget=3, seed=0, store=db,
                                            base_url=url, scripted=True),
                                            services=HarnessServices("cpu", "docker"))
    assert summary.iterations_recorded == 3
    with sqlite3.connect(db) as c:
        rows = list(c.execute("SELECT i.idx, v.id, v.baseline_label FROM iterations i JOIN verdicts v "
                              "ON v.id = i.verdict_id WHERE i.campaign_id = ? ORDER BY i.idx", (summary.campaign.id,)))
    assert [r[0] for r in rows] == [0, 1, 2]          # every iteration has a harness verdict in the store
    assert len({r[1] for r in rows}) == 3

    path = Path(summary.outcome.detail["transcript"])
    if kind == "openai":
        services = HarnessServices("cpu", "docker")
        from harness.tuning.subjects import load_subject

        task = load_subject("gelu")        # the toolbox takes the Subject (its sandbox mounts torch)
        try:
            report = replay_transcript(path, toolbox_factory=lambda inbox, brief: services.toolbox(task, brief, inbox))
        finally:
            services.close()
        assert report.requests_identical == report.model_calls == 5
        assert report.tool_calls == 7 and report.submissions_checked == 3 and report.verdicts_reproduced
    else:                                   # the same check through the CLI contract: one JSON object, exit 0
        from atb_agent.cli import main

        capsys.readouterr()
        assert main(["replay", str(path), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["ok"] and out["requests_identical"] == out["model_calls"] == 5
        assert out["submissions_checked"] == 3 and out["verdicts_reproduced"]
