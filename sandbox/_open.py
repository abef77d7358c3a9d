"""``open_sandbox``: the one way to get a sandbox. Docker whenever a daemon answers; bwrap otherwise."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Literal

from sandbox._base import Sandbox
from sandbox._errors import SandboxUnavailableError
from sandbox._models import SandboxLimits

Backend = Literal["auto", "docker", "bwrap"]


def open_sandbox(limits: SandboxLimits | None = None, backend: Backend = "auto", *, mount_torch: bool = True,
                 workspace_base: Path | None = None, quiet: bool = False) -> Sandbox:
    """Start a sandbox for one tuning run.

    ``limits`` default to ``protocol.sandbox`` of the digest-checked protocol (the sandbox reads nothing
    else of it). ``auto`` uses Docker when a daemon answers; when none does it says so on stderr (unless ``quiet``)
    and falls back to bubblewrap. A missing image with a live daemon is an error, not a fallback: the
    default backend must not change silently because a build step was skipped.

    Raises ``SandboxUnavailableError`` (neither backend can run; the message names both reasons),
    ``ImageMissingError`` (run ``atb sandbox build``), ``SandboxError`` (a container failed to start).
    """
    from sandbox._docker import DockerSandbox, docker_client

    if backend not in ("auto", "docker", "bwrap"):
        raise ValueError(f"unknown sandbox backend {backend!r}; use auto, docker or bwrap")
    if limits is None:
        from protocol import load_protocol

        limits = SandboxLimits.from_params(load_protocol().sandbox)
    if backend in ("auto", "docker"):
        try:
            client = docker_client()
        except SandboxUnavailableError as exc:
            if backend == "docker":
                raise
            docker_reason = str(exc)
        else:
            return DockerSandbox(limits, mount_torch=mount_torch, workspace_base=workspace_base, client=client)
        if shutil.which("bwrap") is None:
            raise SandboxUnavailableError(
                f"{docker_reason}; and bubblewrap, the fallback, is not installed (apt-get install bubblewrap)"
            )
        if not quiet:
            print(f"atb: {docker_reason}. Using the bubblewrap backend instead.", file=sys.stderr)
    from sandbox._bwrap import BwrapSandbox

    return BwrapSandbox(limits, mount_torch=mount_torch, workspace_base=workspace_base)
