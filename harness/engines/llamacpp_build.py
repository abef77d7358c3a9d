"""Build llama.cpp's C++ ``llama-server`` from the ``llama-cpp-python`` source distribution, cached.

Why from that sdist: it is on PyPI (reachable here), pins one llama.cpp tree under
``vendor/llama.cpp`` including ``tools/server``, and builds with CMake on a CPU machine with no other
network. The build is idempotent: a cached binary that answers ``--version`` is reused; a partial
build directory is resumed (CMake is incremental). Layout under the cache root::

    <cache>/llama-server/<version>/work/   sdist, extracted tree, CMake build dir, build.log
    <cache>/llama-server/<version>/bin/    llama-server and the shared libraries it links

A CUDA build (``accelerator="cuda"``, issue 30) lives beside it under ``<version>-cuda-sm<arch>/``:
``-DGGML_CUDA=ON`` for one architecture only (``CUDA_ARCHITECTURES``, Hopper: 90), the fewest kernels
to compile on a GPU machine whose device calls last ten minutes; ``cmake --build`` resumes where a cut
call left it. Every build records its CMake flags and the binary's SHA-256 (:class:`BuildResult`).

``<cache>`` is ``$ATB_CACHE_DIR`` or ``~/.cache/autotunebench``. A file lock keeps two builds of one
version from sharing a build directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from harness.engines._errors import EngineBuildError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"

_CMAKE_FLAGS = [
    "-DGGML_NATIVE=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_CURL=OFF", "-DCMAKE_BUILD_TYPE=Release",
]
Accelerator = Literal["cpu", "cuda"]
CUDA_ARCHITECTURES = "90"   # Hopper (H100, H200): one architecture, so one set of kernels to compile
# per accelerator: GGML's CMake switch (None: the CPU build), the compiler it needs beyond cmake and c++
_GGML_SWITCH: dict[str, str | None] = {"cpu": None, "cuda": "-DGGML_CUDA=ON"}
_EXTRA_TOOL: dict[str, str | None] = {"cpu": None, "cuda": "nvcc"}


def cmake_flags(accelerator: Accelerator = "cpu", cuda_architectures: str = CUDA_ARCHITECTURES) -> list[str]:
    """The CMake configuration of a build (recorded with it)."""
    switch = _GGML_SWITCH[accelerator]
    if switch is None:
        return list(_CMAKE_FLAGS)
    return [*_CMAKE_FLAGS, switch, f"-DCMAKE_CUDA_ARCHITECTURES={cuda_architectures}"]


class BuildResult(BaseModel):
    """Where the binary is and how it got there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    binary: str
    lib_dir: str
    llama_cpp_python_version: str
    version_text: str
    reused: bool
    seconds: float
    log_path: str
    accelerator: Accelerator = "cpu"
    cmake_flags: list[str] = []
    binary_sha256: str = ""


def cache_root() -> Path:
    return Path(os.environ.get("ATB_CACHE_DIR") or Path.home() / ".cache" / "autotunebench")


def version_dir(version: str = LLAMA_CPP_PYTHON_VERSION, accelerator: Accelerator = "cpu",
                cuda_architectures: str = CUDA_ARCHITECTURES) -> Path:
    name = version if _GGML_SWITCH[accelerator] is None else f"{version}-{accelerator}-sm{cuda_architectures}"
    return cache_root() / "llama-server" / name


def cached_binary(version: str = LLAMA_CPP_PYTHON_VERSION, accelerator: Accelerator = "cpu",
                  cuda_architectures: str = CUDA_ARCHITECTURES) -> Path | None:
    """The cached ``llama-server`` of ``version`` if it exists and is executable, else None."""
    exe = version_dir(version, accelerator, cuda_architectures) / "bin" / "llama-server"
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


def runtime_env(binary: Path) -> dict[str, str]:
    """Environment that lets the binary find its shared libraries next to it."""
    prior = os.environ.get("LD_LIBRARY_PATH", "")
    return {"LD_LIBRARY_PATH": str(binary.parent) + (os.pathsep + prior if prior else "")}


def file_sha256(path: Path) -> str:
    """SHA-256 of a built file (the binary an engine verdict ran)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _version_text(binary: Path) -> str | None:
    try:
        p = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30,
                           env={**os.environ, **runtime_env(binary)})
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (p.stdout + p.stderr).strip()
    return text if p.returncode == 0 and "version" in text else None


def _run_logged(argv: list[str], log: Path, cwd: Path) -> None:
    with open(log, "ab") as fh:
        fh.write(("\n$ " + " ".join(argv) + "\n").encode())
        fh.flush()
        p = subprocess.run(argv, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        tail = log.read_bytes()[-1500:].decode("utf-8", "replace")
        raise EngineBuildError(f"`{' '.join(argv[:3])} ...` failed with status {p.returncode} "
                               f"(full log: {log}); log ends with: {tail}")


def _fetch_sdist(version: str, work: Path, log: Path, sdist: Path | None) -> Path:
    name = f"llama_cpp_python-{version}.tar.gz"
    target = work / name
    if sdist is not None:
        if not sdist.is_file():
            raise EngineBuildError(f"no source distribution at {sdist}")
        if sdist.resolve() != target.resolve():
            shutil.copyfile(sdist, target)
    if not target.is_file():
        _run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                     f"llama-cpp-python=={version}", "-d", str(work)], log, work)
    if not target.is_file():
        raise EngineBuildError(f"pip download did not produce {name} in {work}")
    return target


def _extract(archive: Path, work: Path, version: str) -> Path:
    tree = work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (tree / "CMakeLists.txt").is_file():
        with tarfile.open(archive) as tf:
            tf.extractall(work, filter="data")
    if not (tree / "tools" / "server").is_dir():
        raise EngineBuildError(f"{archive.name} does not vendor llama.cpp's tools/server under {tree}")
    return tree


def build_llama_server(version: str = LLAMA_CPP_PYTHON_VERSION, *, jobs: int = 2, sdist: Path | None = None,
                       progress: Callable[[str], None] | None = None, accelerator: Accelerator = "cpu",
                       cuda_architectures: str = CUDA_ARCHITECTURES) -> BuildResult:
    """Return the cached ``llama-server`` of ``version`` for ``accelerator``, building it first when it
    is missing (a CUDA build needs ``nvcc``; it compiles kernels for ``cuda_architectures`` only).

    Raises:
        EngineBuildError: download, configure or compile failed (the message has the log's tail),
            or the built binary does not answer ``--version``.
    """
    say = progress or (lambda _m: None)
    t0 = time.monotonic()
    root = version_dir(version, accelerator, cuda_architectures)
    flags = cmake_flags(accelerator, cuda_architectures)
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        exe = cached_binary(version, accelerator, cuda_architectures)
        if exe is not None:
            text = _version_text(exe)
            if text is not None:
                return BuildResult(binary=str(exe), lib_dir=str(exe.parent), llama_cpp_python_version=version,
                                   version_text=text, reused=True, seconds=time.monotonic() - t0,
                                   log_path=str(log), accelerator=accelerator, cmake_flags=flags,
                                   binary_sha256=file_sha256(exe))
        for tool in ("cmake", "c++"):
            if shutil.which(tool) is None:
                raise EngineBuildError(f"'{tool}' is not installed; run `apt-get install -y cmake g++`")
        if _EXTRA_TOOL[accelerator] == "nvcc" and shutil.which("nvcc") is None:
            raise EngineBuildError("a CUDA build of llama-server needs 'nvcc' (the CUDA toolkit) on PATH; "
                                   "none was found here")
        tree = work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
        if sdist is not None or not ((tree / "CMakeLists.txt").is_file() and (tree / "tools" / "server").is_dir()):
            say(f"fetching llama-cpp-python=={version} source distribution into {work}")
            tree = _extract(_fetch_sdist(version, work, log, sdist), work, version)
        else:   # a tree already in place (extracted before, or a trimmed tree carried to a machine without network)
            say(f"using the llama.cpp tree already at {tree}")
        build = work / "build"
        if not (build / "CMakeCache.txt").is_file():
            say(f"configuring llama.cpp with CMake ({accelerator} build: {' '.join(flags)})")
            _run_logged(["cmake", "-S", str(tree), "-B", str(build), *flags], log, work)
        say(f"compiling llama-server with -j{jobs} (about 7 minutes on 2 cores); log: {log}")
        _run_logged(["cmake", "--build", str(build), "--target", "llama-server", f"-j{jobs}"], log, work)
        built = build / "bin" / "llama-server"
        if not built.is_file():
            raise EngineBuildError(f"the build finished but {built} is missing; see {log}")
        bin_dir = root / "bin"
        staging = root / "bin.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for src in [built, *sorted(build.glob("bin/*.so*")), *sorted(build.glob("**/lib*.so*"))]:
            if src.is_file() and not (staging / src.name).exists():
                shutil.copy2(src, staging / src.name, follow_symlinks=False)
        shutil.rmtree(bin_dir, ignore_errors=True)
        staging.rename(bin_dir)
        exe = bin_dir / "llama-server"
        text = _version_text(exe)
        if text is None:
            raise EngineBuildError(f"the built {exe} does not answer --version; see {log}")
        return BuildResult(binary=str(exe), lib_dir=str(bin_dir), llama_cpp_python_version=version,
                           version_text=text, reused=False, seconds=time.monotonic() - t0, log_path=str(log),
                           accelerator=accelerator, cmake_flags=flags, binary_sha256=file_sha256(exe))
