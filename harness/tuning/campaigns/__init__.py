"""Campaigns: tuning runs, their iterations (usable or not, and why) and their outcomes, in the store.

Every tuner records through :class:`CampaignRecorder`; readers use :func:`summarize`,
:func:`get_iterations`, :func:`best_so_far`.
"""

from harness.tuning.campaigns._errors import CampaignError, IterationConflict
from harness.tuning.campaigns._models import (
    CampaignOutcome, CampaignSummary, IterationRecord, IterationUsage, OutcomeStatus,
)
from harness.tuning.campaigns._recorder import SANDBOX_REPORT_KIND, CampaignRecorder, campaign_sandboxes
from harness.tuning.campaigns._store import get_campaign, get_iterations, get_outcome, list_campaigns
from harness.tuning.campaigns._summary import best_so_far, best_usable, summarize, truncated_fraction
from harness.tuning.campaigns._usability import REASON_CATEGORIES, assess_usability, reason_category

__all__ = [
    "REASON_CATEGORIES", "SANDBOX_REPORT_KIND", "CampaignError", "CampaignOutcome", "CampaignRecorder",
    "CampaignSummary", "IterationConflict", "IterationRecord", "IterationUsage", "OutcomeStatus",
    "assess_usability", "best_so_far", "best_usable", "campaign_sandboxes",
    "get_campaign", "get_iterations", "get_outcome",
    "list_campaigns", "reason_category", "summarize", "truncated_fraction",
]
