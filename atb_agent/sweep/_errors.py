"""Typed errors of ``atb sweep``: each says what is wrong and what to do (exit 2 at the CLI)."""

from __future__ import annotations

from atb_agent.errors import AgentError


class SweepSpecError(AgentError):
    """The sweep spec does not load: bad YAML, a field out of range, a task or tuner that does not exist."""


class SweepError(AgentError):
    """A sweep cannot run: Ray cannot be reached, or the store and the tuners do not fit together."""


class CampaignFailed(AgentError):
    """A campaign's attempt raised: the message names the original error's type and text.

    Why a wrapper: a worker's exception crosses a process (and maybe a machine) boundary by pickling,
    and error types whose constructors take several arguments (``IngestRejected(rule, message)``) do not
    survive that; one string does.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)


__all__ = ["CampaignFailed", "SweepError", "SweepSpecError"]
