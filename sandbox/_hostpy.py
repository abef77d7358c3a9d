"""Finding the host's torch so that it can be mounted read-only into the sandbox.

Torch is not copied into the image (vfs copies the whole root filesystem for each container, and torch
is about 750 MB); the site-packages directory that holds it is bound read-only instead. That works only
when the image's Python has the same minor version (compiled extensions are built per ABI), so callers
compare ``host_python_minor()`` with the image's recorded version before mounting.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def host_python_minor() -> str:
    return "%d.%d" % sys.version_info[:2]


def torch_site_packages() -> Path | None:
    """The site-packages directory holding this interpreter's torch, without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    site = Path(spec.origin).resolve().parent.parent
    return site if site.is_dir() else None
