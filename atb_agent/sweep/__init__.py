"""``atb sweep``: a grid of (task, tuner, seed) campaigns fanned out over Ray into one shared store.

It lives on the agent side because it runs tuners (``atb_agent``); the harness stays unaware of it.
"""

from atb_agent.sweep._driver import CampaignResult, SweepResult, run_sweep
from atb_agent.sweep._errors import SweepError, SweepSpecError
from atb_agent.sweep._ledger import CampaignState, attempts, states
from atb_agent.sweep._node import NodeFingerprint, node_fingerprint
from atb_agent.sweep._progress import ProgressRow, ProgressTable
from atb_agent.sweep._spec import CampaignKey, DevicesSpec, ResolvedSweep, SweepSpec, load_spec, resolve

__all__ = ["CampaignKey", "CampaignResult", "CampaignState", "DevicesSpec", "NodeFingerprint", "ProgressRow",
           "ProgressTable", "ResolvedSweep", "SweepError", "SweepResult", "SweepSpec", "SweepSpecError", "attempts",
           "load_spec", "node_fingerprint", "resolve", "run_sweep", "states"]
