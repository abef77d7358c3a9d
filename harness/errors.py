"""Typed errors of the harness. Messages say what was wrong and what to do."""

from __future__ import annotations


class HarnessError(Exception):
    """Base class of harness errors that a user can act on (exit status 2 at the CLI)."""


class TaskError(HarnessError):
    """A task file is missing, does not load, or lacks Model / get_inputs / get_init_inputs."""


class CandidateError(HarnessError):
    """A candidate file is missing, too large, or not readable text."""


class IncomparableError(HarnessError):
    """Two results measured on different devices, sessions, protocols or tasks were to be compared."""


class DeviceUnavailableError(HarnessError):
    """The requested backend (cuda, mlx) is not available on this machine."""
