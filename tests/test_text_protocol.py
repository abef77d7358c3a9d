"""The declared text protocol (``fenced-python/1``) for models without native tool calls.

The parser is checked on its own; the protocol end to end runs the real graph, store, transcript and
replay against the loopback OpenAI server, with the endpoint registered as a model served by
``atb model serve`` (a state file naming the loopback URL, under a private cache root)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer, ScriptedCall, ScriptedTurn
from loopback.services import ScriptedServices
from loopback.served import register_served
from loopback.workspace import MemoryToolBox

from atb_agent.campaign import CampaignSpec, run_campaign
from atb_agent.graph._text_protocol import SUBMIT_CALL_ID, WRITE_CALL_ID, candidate_from_text, fenced_python_blocks
from atb_agent.replay import replay_transcript
from transcripts import TEXT_PROTOCOL_FENCED_PYTHON, read_transcript

GOOD = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 0.5 * (1.0 + torch.erf(x / 1.41421356))\n"
HELPER = "def helper():\n    return 1\n"


def test_a_closed_python_block_is_taken_byte_for_byte() -> None:
    text = f"Here is my answer.\n\n```python\n{GOOD}```\nThat should be faster."
    assert candidate_from_text(text) == GOOD


def test_the_last_block_defining_modelnew_wins_over_a_later_helper() -> None:
    text = f"```py\n{GOOD}```\nand a helper:\n```python\n{HELPER}```"
    assert fenced_python_blocks(text) == [GOOD.rstrip("\n"), HELPER.rstrip("\n")]
    assert candidate_from_text(text) == GOOD


def test_an_unclosed_block_cut_off_at_the_cap_is_not_taken() -> None:
    assert candidate_from_text("```python\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return") is None


def test_plain_text_and_other_languages_are_not_candidates() -> None:
    assert candidate_from_text("GELU is a smooth activation. I would use erf.") is None
    assert candidate_from_text("```bash\npython candidate.py\n```") is None


def _turns() -> list[ScriptedTurn]:
    return [
        # 0: code in plain text, no tool call -> written and submitted by the protocol
        ScriptedTurn(text=f"Sure! Here is a faster version:\n```python\n{GOOD}```\n"),
        # 1: a native tool call takes precedence over the code block in the same turn
        ScriptedTurn(text=f"```python\n{HELPER}```", tool_calls=(
            ScriptedCall("write_file", {"path": "candidate.py", "content": GOOD + "# native\n"}),
            ScriptedCall("submit", {}))),
        # 2: a paragraph with no code: the workspace is submitted as it stands (forced)
        ScriptedTurn(text="I think the erf form is already optimal."),
    ]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("ATB_CACHE_DIR", str(root))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)      # a served model needs no key
    monkeypatch.delenv("ATB_PROMPT", raising=False)
    return root


def test_text_protocol_end_to_end_is_recorded_and_replays(cache: Path, tmp_path: Path) -> None:
    services = ScriptedServices()
    with LoopbackServer(_turns()) as srv:
        ident = register_served(cache, srv.openai_base_url)
        summary = run_campaign(CampaignSpec(task="gelu", tuner="openai:smollm2", budget=3, seed=5,
                                            store=tmp_path / "atb.sqlite",
                                            base_url=srv.openai_base_url, scripted=True),
                                            services=services)
        bodies = [body for _, body in srv.requests]
    assert summary.outcome.status == "completed" and summary.iterations_recorded == 3
    assert summary.campaign.config["model_server"]["gguf_sha256"] == ident.gguf_sha256
    path = Path(summary.outcome.detail["transcript"])
    t = read_transcript(path)
    assert t.header.text_protocol == TEXT_PROTOCOL_FENCED_PYTHON and t.header.prompt == "small-model/1"
    assert t.header.model_server == ident
    # every request carries the run's seed, the served temperature and the served output cap
    assert all(b["seed"] == 5 and b["temperature"] == 0.2 and b["max_completion_tokens"] == 256 for b in bodies)
    calls = t.tool_calls()
    by_iter: dict[int, list[Any]] = {}
    for c in calls:
        by_iter.setdefault(c.iteration, []).append(c)
    assert [c.call_id for c in by_iter[0]] == [WRITE_CALL_ID, SUBMIT_CALL_ID]
    assert json.loads(by_iter[0][0].arguments) == {"path": "candidate.py", "content": GOOD}
    assert all(c.call_id not in (WRITE_CALL_ID, SUBMIT_CALL_ID) for c in by_iter[1])    # native calls won
    assert [c.call_id for c in by_iter[2]] == ["forced-submit"]
    assert [s.forced for s in t.submissions()] == [False, False, True]
    assert services.judge is not None and services.judge.evaluated == [0, 1, 2]
    # replay rebuilds the same tuner from the header and makes byte-identical requests
    report = replay_transcript(path, toolbox_factory=lambda inbox, brief: MemoryToolBox(brief, inbox))
    assert report.requests_identical == report.model_calls == 3 and report.verdicts_reproduced
    assert report.tool_calls == len(calls)


def test_without_a_served_model_the_protocol_is_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATB_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with LoopbackServer([ScriptedTurn(text=f"```python\n{GOOD}```")]) as srv:
        summary = run_campaign(CampaignSpec(task="gelu", tuner="openai:scripted-model", budget=1, seed=5,
                                            store=tmp_path / "atb.sqlite",
                                            base_url=srv.openai_base_url, scripted=True),
                                            services=ScriptedServices())
        body = srv.requests[0][1]
    t = read_transcript(Path(summary.outcome.detail["transcript"]))
    assert t.header.text_protocol == "" and t.header.model_server is None and "seed" not in body
    assert [c.call_id for c in t.tool_calls()] == ["forced-submit"]


LIVE = Path(__file__).resolve().parents[1] / "transcripts" / "recorded" / "live-smollm2-relu.jsonl"


@pytest.mark.bwrap
def test_the_committed_live_transcript_replays_byte_for_byte_and_a_flipped_byte_is_refused(tmp_path: Path) -> None:
    """A transcript of the real model (SmolLM2-135M served by llama-server, recorded by scripts/demo.sh):
    replay rebuilds its tuner from the header (seed, temperature, cap, text protocol, prompt) and every
    request is byte-identical, its tool calls re-run in a real (bwrap) sandbox with the real tools; one
    flipped byte anywhere breaks the hash chain and is refused."""
    import shutil

    from atb_agent.campaign import HarnessServices
    from harness.tuning.subjects import load_subject
    from transcripts import TranscriptError

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (scripts/setup.sh installs it)")
    t = read_transcript(LIVE)
    assert not t.header.scripted and t.header.model_server is not None
    assert t.header.model_server.gguf_sha256 and t.header.text_protocol == TEXT_PROTOCOL_FENCED_PYTHON
    task = load_subject(t.header.task)
    services = HarnessServices("cpu", sandbox_backend="bwrap")
    try:
        report = replay_transcript(LIVE, toolbox_factory=lambda inbox, brief: services.toolbox(task, brief, inbox))
    finally:
        services.close()
    assert report.requests_identical == report.model_calls == len(t.model_calls()) >= 1
    # the committed transcript ships without its store: nothing signed to check its verdicts against,
    # so replay must not claim them reproduced (issue 27: a transcript's own records are not evidence)
    assert not report.verdicts_reproduced and report.verdict_evidence == "none"
    assert report.submissions_checked == t.header.budget
    raw = bytearray(LIVE.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    bad = tmp_path / "flipped.jsonl"
    bad.write_bytes(bytes(raw))
    with pytest.raises(TranscriptError):
        replay_transcript(bad, toolbox_factory=lambda inbox, brief: MemoryToolBox(brief, inbox))


def test_a_replay_run_at_another_seed_writes_a_transcript_that_replays(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the sweep-restart benchmark (issue 28): ``atb run relu --tuner replay:LIVE --seed 0`` (LIVE
    was recorded at seed 1) sends the recorded requests, which carry seed 1; its transcript's header said
    seed 0, and replaying it rebuilt requests with seed 0: ``body.seed: recorded 1, replayed 0``. The
    header now records the request seed when it is not the campaign's."""
    from atb_agent.cli import main

    recorded = read_transcript(LIVE)
    assert recorded.header.seed == 1
    monkeypatch.chdir(tmp_path)
    db = str(tmp_path / "a.sqlite")
    assert main(["run", "relu", "--tuner", f"replay:{LIVE}", "--seed", "0", "--budget", str(recorded.header.budget),
                 "--db", db, "--json"]) == 0
    written = sorted((tmp_path / "transcripts").glob("*.jsonl"))   # beside the working directory
    assert len(written) == 1
    header = read_transcript(written[0]).header
    assert (header.seed, header.request_seed, header.model_request_seed()) == (0, 1, 1)
    assert main(["replay", str(written[0]), "--db", db, "--json"]) == 0
