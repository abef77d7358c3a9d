"""The tuner's sandbox: a confined place to edit and smoke-test candidates, out of the harness's reach.

``open_sandbox(SandboxLimits.from_params(load_protocol().sandbox))`` gives a ``Sandbox`` (Docker by
default, bubblewrap where no daemon answers). ``Sandbox.copy_out()`` is how the harness gets a candidate:
by content, regular files only, no link followed, capped and hashed. This package knows nothing of the
harness: its limits are passed in.
"""

from sandbox._base import Sandbox
from sandbox._cleanup import CleanupReport, cleanup_leftovers, containers_owned_by
from sandbox._errors import (
    CopyOutError,
    ImageMissingError,
    PathOutsideWorkspaceError,
    SandboxClosedError,
    SandboxError,
    SandboxUnavailableError,
    WorkspaceFileError,
)
from sandbox._image import ImageStatus, build_image, image_status, rootfs_path
from sandbox._models import CopiedFile, CopyOut, ExecResult, FileEntry, SandboxInfo, SandboxLimits, SkippedEntry
from sandbox._open import Backend, open_sandbox
from sandbox._safefs import copy_out, split_workspace_path

__all__ = [
    "Backend",
    "CleanupReport",
    "CopiedFile",
    "CopyOut",
    "CopyOutError",
    "ExecResult",
    "FileEntry",
    "ImageMissingError",
    "ImageStatus",
    "PathOutsideWorkspaceError",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "SandboxInfo",
    "SandboxLimits",
    "SandboxUnavailableError",
    "SkippedEntry",
    "WorkspaceFileError",
    "build_image",
    "cleanup_leftovers",
    "containers_owned_by",
    "copy_out",
    "image_status",
    "open_sandbox",
    "rootfs_path",
    "split_workspace_path",
]
