"""Regenerate the scripted fixture transcripts under ``transcripts/recorded/``.

``python tests/loopback/make_fixtures.py`` (no network: the model is the loopback server). With
``--docker`` it also records through the real sandbox tools and the real harness (needs the Docker
daemon and the sandbox image). Regenerate after changing anything that enters a request: the system
prompt, the observation text, the tool definitions, the task brief, the providers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loopback import LoopbackServer  # noqa: E402
from loopback.scripts import three_iterations  # noqa: E402
from loopback.services import ScriptedServices  # noqa: E402

from atb_agent.campaign import HarnessServices, CampaignSpec, run_campaign  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "transcripts" / "recorded"
LABEL_MEMORY = ("SCRIPTED FIXTURE, not a real model: turns served by tests/loopback (a loopback server), tools on an "
                "in-memory test workspace, verdicts from the scripted test judge (tests/loopback/services.py)")
LABEL_DOCKER = ("SCRIPTED FIXTURE, not a real model: turns served by tests/loopback (a loopback server), tools in the "
                "Docker sandbox, verdicts measured by the harness on CPU")


def make(kind: str, docker: bool) -> Path:
    name = f"scripted-{kind}-{'docker' if docker else 'memory'}.jsonl"
    target = OUT / name
    target.unlink(missing_ok=True)
    os.environ.setdefault("OPENAI_API_KEY", "sk-scripted")
    os.environ.setdefault("ANTHROPIC_API_KEY", "sk-scripted")
    with tempfile.TemporaryDirectory() as tmp, LoopbackServer(three_iterations()) as srv:
        url = srv.openai_base_url if kind == "openai" else srv.anthropic_base_url
        services = HarnessServices("cpu", "docker") if docker else ScriptedServices()
        run_campaign(CampaignSpec(task="gelu", tuner=f"{kind}:scripted-model", budget=3, seed=0,
                                  store=Path(tmp) / "atb.sqlite", base_url=url, transcript_path=target,
                                  scripted=True, label=LABEL_DOCKER if docker else LABEL_MEMORY),
                                  services=services)
    return target


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--docker", action="store_true")
    a = ap.parse_args()
    for k in ("openai", "anthropic"):
        print(make(k, a.docker))
