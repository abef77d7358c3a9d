"""``fenced-python-stop/1``: the text protocol the local-model A/B example runs under (issue 28).

SmolLM2-135M wrote its code block and then the same block again until the output cap, so 3 of the 4
runs of the A/B example were excluded as truncated. Under this protocol every request asks the server
to stop where the first Python block closes; the server leaves the stop sequence out of the reply, and
a trailing block the server ended itself (``finish_reason: stop``, not flagged as truncated) is taken.
A reply cut off at the cap is still counted as truncated and its block is never taken.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer, ScriptedTurn
from loopback.services import ScriptedServices
from loopback.served import register_served
from loopback.workspace import MemoryToolBox

from atb_agent.campaign import CampaignSpec, run_campaign
from atb_agent.graph._text_protocol import (
    STOP_SEQUENCES, SUBMIT_CALL_ID, TEXT_PROTOCOL_FENCED_PYTHON_STOP, WRITE_CALL_ID, candidate_from_text,
)
from atb_agent.replay import replay_transcript
from transcripts import TEXT_PROTOCOL_FENCED_PYTHON, ModelTurnData, read_transcript

GOOD = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
STOPPED_REPLY = "Here is the complete candidate.py:\n\n```python\n" + GOOD.rstrip("\n")   # the server cut the fence
STOP = TEXT_PROTOCOL_FENCED_PYTHON_STOP
EXAMPLE = Path(__file__).resolve().parents[1] / "protocol" / "preregistrations" / "example-smollm2-ab.yaml"


def test_a_block_the_server_stopped_is_taken_only_under_the_stop_protocol() -> None:
    assert candidate_from_text(STOPPED_REPLY, protocol=STOP, stopped=True) == GOOD
    assert candidate_from_text(STOPPED_REPLY) is None                                  # fenced-python/1: unclosed
    assert candidate_from_text(STOPPED_REPLY, protocol=TEXT_PROTOCOL_FENCED_PYTHON, stopped=True) is None
    # cut at the cap (the caller passes stopped=False for finish_reason length or a counted cap hit)
    assert candidate_from_text(STOPPED_REPLY, protocol=STOP, stopped=False) is None


def test_a_closed_block_still_wins_and_an_empty_or_non_python_tail_is_not_a_block() -> None:
    closed = f"```python\n{GOOD}```\nthen a helper:\n```python\ndef helper():\n    return 1"
    assert candidate_from_text(closed, protocol=STOP, stopped=True) == GOOD           # the one defining ModelNew
    assert candidate_from_text("Sure:\n```python\n", protocol=STOP, stopped=True) is None
    assert candidate_from_text("```bash\npython candidate.py", protocol=STOP, stopped=True) is None
    assert "```python" not in "".join(STOP_SEQUENCES)     # an opening fence never matches the stop sequence


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("ATB_CACHE_DIR", str(root))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)      # a served model needs no key
    monkeypatch.delenv("ATB_PROMPT", raising=False)
    return root


def test_stop_protocol_end_to_end_truncation_still_counts_and_replay_is_byte_for_byte(cache: Path,
                                                                                     tmp_path: Path) -> None:
    turns = [ScriptedTurn(text=STOPPED_REPLY),                     # ended by the server's stop: taken
             ScriptedTurn(text=STOPPED_REPLY, truncate=True)]      # cut at the cap: truncated, not taken
    with LoopbackServer(turns) as srv:
        register_served(cache, srv.openai_base_url)
        summary = run_campaign(CampaignSpec(task="relu", tuner="openai:smollm2", budget=2, seed=3,
                                            store=tmp_path / "atb.sqlite", base_url=srv.openai_base_url,
                                            config={"text_protocol": STOP}, scripted=True),
                               services=ScriptedServices())
        bodies = [body for _, body in srv.requests]
    assert all(b["stop"] == list(STOP_SEQUENCES) and b["seed"] == 3 for b in bodies) and len(bodies) == 2
    path = Path(summary.outcome.detail["transcript"])
    t = read_transcript(path)
    assert t.header.text_protocol == STOP
    calls: dict[int, list[Any]] = {}
    for c in t.tool_calls():
        calls.setdefault(c.iteration, []).append(c)
    assert [c.call_id for c in calls[0]] == [WRITE_CALL_ID, SUBMIT_CALL_ID]
    assert json.loads(calls[0][0].arguments)["content"] == GOOD
    assert [c.call_id for c in calls[1]] == ["forced-submit"]
    assert [s.forced for s in t.submissions()] == [False, True]
    assert [turn.truncation.truncated for turn in t.of_kind("model_turn", ModelTurnData)] == [False, True]
    assert summary.outcome.truncated_fraction == 0.5                # the cap hit is counted, as before
    report = replay_transcript(path, toolbox_factory=lambda inbox, brief: MemoryToolBox(brief, inbox))
    assert report.requests_identical == report.model_calls == 2 and report.verdicts_reproduced


def test_the_arm_config_names_a_known_protocol_for_a_served_model_only(cache: Path) -> None:
    from atb_agent.errors import TunerSpecError
    from atb_agent.tuners import GraphTuner, apply_arm_config

    plain = GraphTuner("openai:m", "openai", "m", lambda *a: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(TunerSpecError, match="served here"):
        apply_arm_config(plain, {"text_protocol": STOP})
    ident = register_served(cache, "http://127.0.0.1:9/v1")
    served = GraphTuner("openai:smollm2", "openai", "smollm2", lambda *a: None,  # type: ignore[arg-type,return-value]
                        served=ident, text_protocol=ident.text_protocol)
    with pytest.raises(TunerSpecError, match="not known"):
        apply_arm_config(served, {"text_protocol": "fenced-python/9"})
    apply_arm_config(served, {"text_protocol": STOP})
    assert served.identity().text_protocol == STOP


def test_the_shipped_example_runs_both_arms_under_the_stop_protocol_and_differs_only_in_the_suffix() -> None:
    from harness.science.prereg import load_spec

    spec = load_spec(EXAMPLE)
    both = {"text_protocol": STOP, "prompt": "small-model/2"}     # the short observation after a rejection
    assert spec.id == "example-smollm2-ab-3"                       # ids -1 and -2 are spent (registered, run)
    assert spec.control.config == both
    assert {k: v for k, v in spec.treatment.config.items() if k != "system_prompt_suffix"} == both
    assert spec.treatment_marker in spec.treatment.config["system_prompt_suffix"]
    assert (spec.budget, spec.seeds) == (3, [1, 2])
