"""Typed errors of the serving-engine side of the harness.

Each is a :class:`harness.errors.HarnessError`, so the CLI maps it to exit status 2 with its message;
messages say what was wrong and what to run or change.
"""

from __future__ import annotations

from harness.errors import HarnessError


class EngineError(HarnessError):
    """Base class of serving-engine errors."""


class FlagSpaceError(EngineError):
    """A configuration names an unknown flag, has a value of the wrong type or out of range, or breaks
    a constraint between flags."""


class EngineTaskError(EngineError):
    """An engine task file is missing, malformed, or names an unknown engine."""


class EngineNotBuilt(EngineError):
    """The engine's binary is not present on this machine (build it, or install the engine)."""


class EngineBuildError(EngineError):
    """Building the engine from source failed; the message carries the tail of the build log."""


class EngineLaunchFailed(EngineError):
    """The engine process exited or did not become ready within the start-up timeout.

    ``log_excerpt`` holds the end of the engine's own log, so a rejected trial can show why.
    """

    def __init__(self, message: str, log_excerpt: str = "") -> None:
        self.log_excerpt = log_excerpt
        super().__init__(message + (f"; engine log ends with: {log_excerpt[-600:]}" if log_excerpt else ""))


class ModelWriteError(EngineError):
    """The tiny GGUF model could not be written (bad hyperparameters or an unwritable path)."""
