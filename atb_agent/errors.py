"""Typed errors of the agent side. Each message says what was wrong and what to do.

The CLI maps every :class:`AgentError` to exit status 2 (bad input a user can fix); anything else is
an internal failure (exit 1).
"""

from __future__ import annotations

from typing import ClassVar


class AgentError(Exception):
    """Base class of agent-side errors a user can act on."""

    user_fixable: ClassVar[bool] = True   # the CLI prints it in one line and exits 2


class MissingApiKeyError(AgentError):
    """A provider's API key environment variable is unset or empty."""

    def __init__(self, variable: str, provider: str) -> None:
        self.variable = variable
        super().__init__(
            f"the {provider} tuner needs an API key: set the environment variable {variable} "
            f"(or use a replay:PATH tuner, which needs no key)"
        )


class TunerSpecError(AgentError):
    """A ``--tuner`` spec names no known tuner, or is malformed."""


class ProviderError(AgentError):
    """A model call failed (HTTP error, connection error, malformed response)."""


class ReplayDivergence(AgentError):
    """A replayed run made a request (or produced a file) that differs from the recording.

    ``call_index`` is the 0-based index of the model call (or -1 when the divergence is not in a
    model call), ``field`` names what differed (``body``, ``url``, ``header:NAME``, ``workspace files``...).
    """

    def __init__(self, call_index: int, field: str, detail: str) -> None:
        self.call_index = call_index
        self.field = field
        self.detail = detail
        where = f"model call #{call_index}" if call_index >= 0 else "the replayed run"
        super().__init__(f"replay diverged at {where}, field {field}: {detail}")


class CampaignError(AgentError):
    """A campaign cannot start or resume (unknown campaign id, mismatched resume arguments...)."""


__all__ = ["AgentError", "CampaignError", "MissingApiKeyError", "ProviderError", "ReplayDivergence",
           "TunerSpecError"]
