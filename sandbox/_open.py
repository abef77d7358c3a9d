"""``open_sandbox``: the one way to get a sandbox. Docker whenever a daemon answers; bwrap otherwise,
over the image's root filesystem when built, else over the host's own files (read-only)."""

from __future__ import annotations

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

    bubblewrap (``auto`` without a daemon, or ``bwrap``) runs over the image's root filesystem when
    ``atb sandbox build --no-docker`` made one, else over the host's own files, read-only (a GPU host
    without Docker, issue 26); that choice is said on stderr (unless ``quiet``), and every reason in
    the chain is recorded in ``info().enforcement['selection']`` (Docker's too). ``info().choice()`` is
    that choice as a run records it: backend, root (``image`` or ``host``), image, root identity, reasons.

    Raises ``SandboxUnavailableError`` (neither backend can run; the message names both reasons),
    ``ImageMissingError`` (run ``atb sandbox build``), ``HostRootError`` (no image root, and no Python
    the tuner can reach on the host; the message names the fix), ``SandboxError`` (a container failed
    to start).
    """
    from sandbox._bwrap import BwrapSandbox, bwrap_available
    from sandbox._docker import DockerSandbox, docker_client

    if backend not in ("auto", "docker", "bwrap"):
        raise ValueError(f"unknown sandbox backend {backend!r}; use auto, docker or bwrap")
    if limits is None:
        from protocol import load_protocol

        limits = SandboxLimits.from_params(load_protocol().sandbox)
    selection: list[str] = []
    if backend in ("auto", "docker"):
        try:
            client = docker_client()
        except SandboxUnavailableError as exc:
            if backend == "docker":
                raise
            docker_reason = str(exc)
        else:
            why = "auto: a Docker daemon answers" if backend == "auto" else "docker asked for"
            return DockerSandbox(limits, mount_torch=mount_torch, workspace_base=workspace_base, client=client,
                                 selection=[why])
        missing = bwrap_available()
        if missing is not None:
            raise SandboxUnavailableError(f"{docker_reason}; and bubblewrap, the fallback, cannot run: {missing}")
        selection.append(f"auto: {docker_reason}")
        if not quiet:
            print(f"atb: {docker_reason}. Using the bubblewrap backend instead.", file=sys.stderr)
    else:
        selection.append("bwrap asked for")
    root, why = bwrap_root(limits.image)
    if root == "image":
        return BwrapSandbox(limits, mount_torch=mount_torch, workspace_base=workspace_base, root="image",
                            selection=selection)
    selection.append(why)
    if not quiet:
        print(f"atb: {why} (only the system folders, a few /etc files and one Python interpreter, bound "
              "read-only; see `info().enforcement['root_filesystem']`).", file=sys.stderr)
    return BwrapSandbox(limits, mount_torch=mount_torch, workspace_base=workspace_base, root="host",
                        selection=selection)


def bwrap_root(tag: str) -> tuple[Literal["image", "host"], str]:
    """Which root the bubblewrap backend uses for image ``tag`` and why: the image's root filesystem
    when ``atb sandbox build`` made it, else the host's own files (read-only). The one place that
    decides it (``open_sandbox``; ``atb sandbox status`` may ask it too)."""
    from sandbox._identity import RELEASE_FILE
    from sandbox._image import rootfs_path

    rootfs = rootfs_path(tag)
    if (rootfs / RELEASE_FILE).is_file():
        return "image", f"the image's root filesystem {rootfs}"
    return "host", (f"no image root filesystem at {rootfs} (`atb sandbox build --no-docker` makes one), "
                    "so bubblewrap runs over the host's own files, read-only")
