"""The agent side of AutoTuneBench: the LangGraph tuner, its providers, tuner plug-ins, campaigns.

Public names are loaded on first use (``atb_agent.run_campaign``), so the CLI's light commands do not
import the model SDKs.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "run_campaign": "atb_agent.campaign",
    "CampaignServices": "atb_agent.services",
    "HarnessServices": "atb_agent.services",
    "Tuner": "atb_agent.tuners",
    "TunerIdentity": "atb_agent.tuners",
    "TuningEnvironment": "atb_agent.tuners",
    "RunCounts": "atb_agent.tuners",
    "parse_spec": "atb_agent.tuners",
    "resolve_tuner": "atb_agent.tuners",
    "replay_transcript": "atb_agent.replay",
    "ReplayReport": "atb_agent.replay",
    "VerdictSummary": "atb_agent.evaluation",
    "Evaluator": "atb_agent.evaluation",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'atb_agent' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
