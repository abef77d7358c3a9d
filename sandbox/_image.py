"""Where the sandbox's root filesystem and image live, and how ``atb sandbox build`` makes them.

The build itself is ``sandbox/build_image.sh`` (debootstrap from the mirror apt uses, then ``docker
import``); this module runs it, and tells whether its products are present.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from sandbox._errors import SandboxError
from sandbox._identity import RELEASE_FILE

BUILD_SCRIPT = Path(__file__).with_name("build_image.sh")


def cache_dir() -> Path:
    return Path(os.environ.get("ATB_SANDBOX_CACHE", "/var/cache/atb-sandbox"))


def rootfs_path(tag: str) -> Path:
    """The root filesystem ``build_image.sh`` makes for ``tag`` (shared by both backends)."""
    return cache_dir() / ("rootfs-" + re.sub(r"[^A-Za-z0-9._-]", "_", tag))


class ImageStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tag: str
    rootfs: str
    rootfs_present: bool
    rootfs_release: dict[str, object] | None
    docker_image_present: bool | None  # None: no daemon to ask
    docker_image_id: str | None
    docker_image_bytes: int | None


def image_status(tag: str, client: object | None = None) -> ImageStatus:
    """What exists of the sandbox for ``tag``; ``client`` is a Docker SDK client or None (no daemon)."""
    root = rootfs_path(tag)
    release_file = root / RELEASE_FILE
    release = json.loads(release_file.read_text()) if release_file.is_file() else None
    present: bool | None = None
    image_id: str | None = None
    size: int | None = None
    if client is not None:
        import docker

        try:
            img = client.images.get(tag)  # type: ignore[attr-defined]
            present, image_id, size = True, img.id, int(img.attrs.get("Size", 0))
        except docker.errors.ImageNotFound:
            present = False
    return ImageStatus(tag=tag, rootfs=str(root), rootfs_present=release is not None, rootfs_release=release,
                       docker_image_present=present, docker_image_id=image_id, docker_image_bytes=size)


def build_image(tag: str, *, force: bool = False, docker: bool = True, reimport: bool = False) -> Path:
    """Run ``build_image.sh`` (progress on stderr); returns the root filesystem's path.

    Raises ``SandboxError`` with the script's last lines when a step fails.
    """
    argv = ["bash", str(BUILD_SCRIPT), "--tag", tag, "--cache-dir", str(cache_dir())]
    if force:
        argv.append("--force")
    if reimport:
        argv.append("--reimport")
    if not docker:
        argv.append("--no-docker")
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if done.returncode != 0:
        raise SandboxError(f"the sandbox build failed (exit {done.returncode}); see the messages above")
    return Path(done.stdout.strip().splitlines()[-1])
