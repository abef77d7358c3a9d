"""The real model, live: SmolLM2-135M-Instruct served by the real llama-server, called through the
official OpenAI SDK. Runs where setup cached both (``scripts/setup.sh`` does, so CI runs it); kept few
and short (budget 1, small output caps).

Each test serves the model from a private cache root that links the cached binary and GGUF, so its
output cap cannot disturb a server someone else started, and stops exactly the server it started."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback.services import ScriptedServices

from atb_agent.campaign import CampaignSpec, run_campaign
from atb_agent.cli import main
from harness.engines.llamacpp_build import LLAMA_CPP_PYTHON_VERSION, cached_binary
from harness.engines.llamacpp_model import SMOLLM2_FILE, cached_smollm2
from transcripts import TEXT_PROTOCOL_FENCED_PYTHON, ModelTurnData, read_transcript

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _private_cache(root: Path) -> None:
    binary, model = cached_binary(), cached_smollm2()
    if binary is None or model is None:
        pytest.skip("llama-server or the SmolLM2 GGUF is not cached here: run `bash scripts/setup.sh`")
    bin_dir = root / "llama-server" / LLAMA_CPP_PYTHON_VERSION / "bin"
    bin_dir.parent.mkdir(parents=True)
    bin_dir.symlink_to(binary.parent, target_is_directory=True)
    (root / "models").mkdir()
    (root / "models" / SMOLLM2_FILE).symlink_to(model.path)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[str]:
    """Serve the real model from a private cache root, with the output cap the test function names in
    its ``cap`` attribute (default 64 tokens)."""
    from atb_agent import model_server

    root = tmp_path / "cache"
    _private_cache(root)
    monkeypatch.setenv("ATB_CACHE_DIR", str(root))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ATB_PROMPT", raising=False)
    cap = getattr(request.function, "cap", 64)
    state, was_running = model_server.serve("smollm2", max_output_tokens=cap)
    assert not was_running
    try:
        yield state.identity.base_url
    finally:
        stopped = model_server.stop("smollm2")
        assert stopped is not None and stopped.pid == state.pid


def test_truncation_is_caught_for_real_and_makes_the_run_an_infrastructure_defect(served: str, tmp_path: Path) -> None:
    summary = run_campaign(CampaignSpec(task="gelu", tuner="openai:smollm2", budget=1, seed=3,
                                        store=tmp_path / "atb.sqlite", base_url=served),
                                        services=ScriptedServices())
    t = read_transcript(Path(summary.outcome.detail["transcript"]))
    turns = t.of_kind("model_turn", ModelTurnData)
    assert turns, "the real model was called"
    first = turns[0]
    # the real server said so itself, and the protocol's counter agrees
    assert first.stop_reason == "length" and first.truncation.truncated
    assert first.truncation.api_signal == "finish_reason=length" and first.truncation.requested_cap == 8
    assert summary.outcome.status == "infrastructure_defect" and summary.truncated_fraction == 1.0
    assert summary.iterations_recorded == 1           # counted, never crashed


test_truncation_is_caught_for_real_and_makes_the_run_an_infrastructure_defect.cap = 8  # type: ignore[attr-defined]


def test_live_run_records_identity_and_replays_byte_for_byte(served: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    summary = run_campaign(CampaignSpec(task="gelu", tuner="openai:smollm2", budget=1, seed=3,
                                        store=tmp_path / "atb.sqlite", base_url=served),
                                        services=ScriptedServices())
    assert summary.iterations_recorded == 1 and summary.outcome is not None
    path = Path(summary.outcome.detail["transcript"])
    t = read_transcript(path)
    ms = t.header.model_server
    assert ms is not None and not t.header.scripted and t.header.text_protocol == TEXT_PROTOCOL_FENCED_PYTHON
    assert ms.gguf_sha256 == cached_smollm2().sha256 and "version" in ms.server_version  # type: ignore[union-attr]
    assert "--jinja" in ms.server_argv and ms.base_url == served
    # the library replay with an in-memory workspace (the demo runs `atb replay`, which opens a sandbox)
    from atb_agent.replay import replay_transcript
    from loopback.workspace import MemoryToolBox

    report = replay_transcript(path, toolbox_factory=lambda inbox, brief: MemoryToolBox(brief, inbox))
    assert report.requests_identical == report.model_calls >= 1 and report.verdicts_reproduced
    # one flipped byte in the recorded model turn is refused, before anything is replayed
    raw = bytearray(path.read_bytes())
    i = raw.index(b'"stop_reason":"') + len(b'"stop_reason":"')
    raw[i] ^= 0x01
    bad = tmp_path / "flipped.jsonl"
    bad.write_bytes(bytes(raw))
    capsys.readouterr()
    assert main(["replay", str(bad), "--json"]) == 2
    assert "TranscriptTampered" in json.loads(capsys.readouterr().out)["error"]


def test_the_real_model_engine_task_serves_the_cached_gguf() -> None:
    """llamacpp-smollm2 names the cached real model through ``{cache}``: both arms get that file, and
    the trial records its real SHA-256 (the random-weight llamacpp-tiny task stays for fast tests)."""
    from harness.engines import load_engine_task
    from harness.measure.serving.trial import prepare_model

    model = cached_smollm2()
    if model is None:
        pytest.skip("the SmolLM2 GGUF is not cached here: run `bash scripts/setup.sh`")
    task = load_engine_task("llamacpp-smollm2")
    prepared = prepare_model(task)
    assert Path(prepared.arg).resolve() == Path(model.path).resolve() and prepared.sha256 == model.sha256
    assert "--threads" in task.fixed_args and task.workload.shared_prefix_words > 0
    assert load_engine_task("llamacpp-tiny").model.kind == "tiny-gguf"
