"""Errors of campaign recording."""

from __future__ import annotations

from harness.errors import HarnessError


class CampaignError(HarnessError):
    """A campaign cannot be opened, resumed or recorded as asked (the message says what differs)."""


class IterationConflict(CampaignError):
    """Iteration ``idx`` is already stored with a different candidate or verdict: a resumed run diverged."""
