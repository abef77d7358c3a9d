"""``small-model/2``: the small-model prompt with a short observation after a rejection (issue 28).

Under ``small-model/1`` SmolLM2-135M, shown a whole traceback after a rejected candidate, looped until its
output cap, and the A/B example's treatment runs were excluded as truncated. ``small-model/2`` shows the
verdict's last line and the instruction to reply with one Python block; everything else is
``small-model/1``'s, which stays byte-identical so recorded transcripts still replay. An A/B arm picks the
variant with ``config: {prompt: small-model/2}``, which is part of the registered digest.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from loopback import LoopbackServer, ScriptedTurn
from loopback.services import ScriptedServices
from loopback.served import register_served

from atb_agent.campaign import CampaignSpec, run_campaign
from atb_agent.evaluation import VerdictSummary
from atb_agent.graph import (
    PROMPT_SMALL_MODEL, PROMPT_SMALL_MODEL_SHORT_REJECTION, PROMPT_VARIANTS, observation, system_prompt,
)
from atb_agent.graph._prompts import SHORT_REASON_MAX_CHARS, short_verdict
from atb_agent.graph._text_protocol import TEXT_PROTOCOL_FENCED_PYTHON_STOP
from atb_agent.replay import replay_transcript
from transcripts import read_transcript

V1, V2 = PROMPT_SMALL_MODEL, PROMPT_SMALL_MODEL_SHORT_REJECTION
EXAMPLE = Path(__file__).resolve().parents[1] / "protocol" / "preregistrations" / "example-smollm2-ab.yaml"
TRACEBACK = ('candidate exception: load:   File "/tmp/x/inbox/2-atb_candidate_0f4d.py", line 9, in forward\n'
             '    return self.relu(x)\n           ^^^^^^^^^\nAttributeError: \'ModelNew\' object has no attribute \'relu\'\n')
REJECTED = VerdictSummary(status="rejected", correct=False, reason=TRACEBACK)
ACCEPTED = VerdictSummary(status="accepted", correct=True, speedup=0.544, speedup_ci=(0.505, 0.649),
                          reason="all 11 gates passed; speedup 0.544x")
INSTRUCTION = ("Write the complete candidate.py again in one ```python block: import torch, import torch.nn as nn, "
               "then class ModelNew(nn.Module) with the same __init__ and forward arguments as Model.")


def _obs(variant: str, verdict: VerdictSummary | None, iteration: int = 1) -> str:
    return observation(iteration, 3, "BRIEF", verdict.model_dump(mode="json") if verdict else None,
                       verdict.for_model() if verdict else None, variant)


def test_small_model_1_is_unchanged_byte_for_byte() -> None:
    """The text recorded transcripts were made with (the A/B run example-smollm2-ab-2's observation)."""
    assert _obs(V1, REJECTED) == (
        "Iteration 2 of 3. The harness's verdict on your last submission: status: rejected; correct: False; reason: "
        + TRACEBACK + ".\n\nAnswer with the complete candidate.py (class ModelNew, same arguments as Model) in one "
        "```python block.")
    assert V1 == "small-model/1" and V2 == "small-model/2" and V2 in PROMPT_VARIANTS


def test_small_model_2_differs_from_1_only_after_a_verdict_other_than_accepted() -> None:
    assert system_prompt(V2) == system_prompt(V1)
    assert _obs(V2, None, 0) == _obs(V1, None, 0)
    assert _obs(V2, ACCEPTED) == _obs(V1, ACCEPTED)
    assert _obs(V2, REJECTED) == ("Iteration 2 of 3. Your last candidate.py was rejected: AttributeError: 'ModelNew' "
                                  "object has no attribute 'relu'.\n\n" + INSTRUCTION)
    nothing = VerdictSummary(status="no_submission", reason="the iteration ended without a submission")
    assert _obs(V2, nothing) == ("Iteration 2 of 3. Your last answer was not measured: the iteration ended without a "
                                 "submission.\n\n" + INSTRUCTION)
    quarantined = VerdictSummary(status="quarantined", reason="gate timing_sanity failed.")
    assert _obs(V2, quarantined).startswith("Iteration 2 of 3. Your last candidate.py was quarantined: gate "
                                            "timing_sanity failed.\n\n")


def test_the_short_line_is_cut_and_read_from_the_text_the_model_is_shown() -> None:
    status, line = short_verdict("status: rejected; correct: False; reason: " + "x" * 1000)
    assert status == "rejected" and len(line) == SHORT_REASON_MAX_CHARS and line.endswith("...")
    assert _obs(V2, VerdictSummary(status="rejected", reason="y" * 1000)).count("...\n\n") == 1
    # replay as a tuner: the fresh verdict differs, the model is shown the recorded text, and so is the line
    fresh = REJECTED.model_copy(update={"reason": "a different fresh reason",
                                        "shown_to_model": ACCEPTED.for_model()})
    assert _obs(V2, fresh) == _obs(V1, ACCEPTED)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("ATB_CACHE_DIR", str(root))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ATB_PROMPT", raising=False)
    return root


def test_the_arm_config_picks_a_known_variant_for_the_built_in_tuner_only(cache: Path) -> None:
    from atb_agent.errors import TunerSpecError
    from atb_agent.tuners import ARM_CONFIG_KEYS, GraphTuner, RunCounts, TunerIdentity, apply_arm_config

    assert "prompt" in ARM_CONFIG_KEYS
    ident = register_served(cache, "http://127.0.0.1:9/v1")
    served = GraphTuner("openai:smollm2", "openai", "smollm2", lambda *a: None,  # type: ignore[arg-type,return-value]
                        served=ident, text_protocol=ident.text_protocol, prompt=V1)
    with pytest.raises(TunerSpecError, match="not a prompt variant"):
        apply_arm_config(served, {"prompt": "small-model/9"})
    apply_arm_config(served, {"prompt": V2})
    assert served.identity().prompt == V2

    class Other:
        spec = "mine"

        def identity(self) -> TunerIdentity:
            return TunerIdentity(provider="mine")

        def run(self, env: object) -> RunCounts:
            return RunCounts(iterations=0)

    with pytest.raises(TunerSpecError, match="no prompt the harness builds"):
        apply_arm_config(Other(), {"prompt": V2})


def test_the_variant_is_part_of_the_registered_digest() -> None:
    from harness.science.prereg import load_spec

    spec = load_spec(EXAMPLE)
    other = {**spec.control.config, "prompt": V1}
    changed = spec.model_copy(update={"control": spec.control.model_copy(update={"config": other})})
    assert changed.digest != spec.digest


def test_a_rejection_is_followed_by_the_short_observation_and_the_run_replays_byte_for_byte(cache: Path,
                                                                                           tmp_path: Path) -> None:
    bad = "```python\nimport torch\n\nclass Model(torch.nn.Module):\n    pass"                 # no ModelNew: rejected
    good = "```python\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x"
    with LoopbackServer([ScriptedTurn(text=bad), ScriptedTurn(text=good)]) as srv:
        register_served(cache, srv.openai_base_url)
        summary = run_campaign(CampaignSpec(task="relu", tuner="openai:smollm2", budget=2, seed=3,
                                            store=tmp_path / "atb.sqlite", base_url=srv.openai_base_url,
                                            config={"text_protocol": TEXT_PROTOCOL_FENCED_PYTHON_STOP, "prompt": V2},
                                            scripted=True),
                               services=ScriptedServices())
        bodies = [body for _, body in srv.requests]
    assert len(bodies) == 2
    assert bodies[1]["messages"][-1] == {"role": "user", "content": (
        "Iteration 2 of 2. Your last candidate.py was rejected: no ModelNew defined.\n\n" + INSTRUCTION)}
    path = Path(summary.outcome.detail["transcript"])
    t = read_transcript(path)
    assert t.header.prompt == V2 and t.header.text_protocol == TEXT_PROTOCOL_FENCED_PYTHON_STOP
    assert [v.verdict["status"] for v in t.verdicts()] == ["rejected", "accepted"]

    from loopback.workspace import MemoryToolBox

    report = replay_transcript(path, toolbox_factory=lambda inbox, brief: MemoryToolBox(brief, inbox))
    assert report.requests_identical == report.model_calls == 2 and report.verdicts_reproduced
