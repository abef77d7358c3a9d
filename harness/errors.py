"""Typed errors of the harness. Messages say what was wrong and what to do.

``user_fixable = True`` on a class is the marker the CLI reads (``atb_agent.cli._common.classify``):
such an error is printed as one line and exits 2, with no traceback. The sandbox, transcripts and
protocol packages cannot import this module, so the marker is an attribute, not a base class; each
package sets it on its own base error.
"""

from __future__ import annotations

from typing import ClassVar


class HarnessError(Exception):
    """Base class of harness errors that a user can act on (exit status 2 at the CLI)."""

    user_fixable: ClassVar[bool] = True


class TaskError(HarnessError):
    """A task file is missing, does not load, or lacks Model / get_inputs / get_init_inputs."""


class CandidateError(HarnessError):
    """A candidate file is missing, too large, or not readable text."""


class IncomparableError(HarnessError):
    """Two results measured on different devices, sessions, protocols or tasks were to be compared."""


class DeviceUnavailableError(HarnessError):
    """The requested backend (cuda, mlx) is not available on this machine."""
