"""Typed errors of the sandbox. Each message says what went wrong and what to do about it.

The sandbox must not import the harness, so these do not subclass ``harness.errors.HarnessError``;
callers that surface them to a user (the CLI, the tools) map them themselves. Each is something a user
can act on (start Docker, build the image, fix a path, raise a limit), so the base class carries the
CLI's ``user_fixable`` marker: one line, exit 2, no traceback.
"""

from __future__ import annotations

from typing import ClassVar


class SandboxError(Exception):
    """Base class of every error the sandbox raises."""

    user_fixable: ClassVar[bool] = True


class SandboxUnavailableError(SandboxError):
    """The requested backend cannot run here: no Docker daemon answers, bwrap is missing, no image."""


class ImageMissingError(SandboxUnavailableError):
    """The sandbox image (or the bubblewrap root filesystem) has not been built yet."""


class PathOutsideWorkspaceError(SandboxError):
    """A path is absolute, climbs out with '..', or passes through a symbolic link."""


class WorkspaceFileError(SandboxError):
    """A workspace file is missing, not a regular file, or too large to read or write."""


class SandboxClosedError(SandboxError):
    """The sandbox was closed, or its container stopped (wall-clock limit reached or removed)."""


class CopyOutError(SandboxError):
    """Copying the candidate out of the workspace was refused (a cap was exceeded)."""
