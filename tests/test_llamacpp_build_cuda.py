"""Issue 30: a CUDA build of llama-server is configured for one architecture, cached apart from the CPU
build, refused with a clear error where there is no ``nvcc``, and every build and engine probe records
the binary's digest (a CPU and a CUDA build of one version answer ``--version`` alike)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.engines._errors import EngineBuildError
from harness.engines.llamacpp_build import (CUDA_ARCHITECTURES, build_llama_server, cached_binary, cmake_flags,
                                            file_sha256, version_dir)


def test_cuda_flags_add_cuda_for_one_architecture_only() -> None:
    cpu, cuda = cmake_flags("cpu"), cmake_flags("cuda")
    assert "-DGGML_CUDA=ON" not in cpu and not any("CUDA_ARCHITECTURES" in f for f in cpu)
    assert cuda[:len(cpu)] == cpu
    assert "-DGGML_CUDA=ON" in cuda and f"-DCMAKE_CUDA_ARCHITECTURES={CUDA_ARCHITECTURES}" in cuda
    assert CUDA_ARCHITECTURES == "90"


def test_the_cuda_build_is_cached_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATB_CACHE_DIR", str(tmp_path))
    assert version_dir(accelerator="cuda") != version_dir()
    assert version_dir(accelerator="cuda").name.endswith("-cuda-sm90")
    assert cached_binary(accelerator="cuda") is None


def test_a_cuda_build_without_nvcc_says_so_before_fetching(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATB_CACHE_DIR", str(tmp_path))
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "nvcc" else real(name, *a, **k))
    if real("cmake") is None or real("c++") is None:
        pytest.skip("cmake and a C++ compiler are installed by scripts/setup.sh")
    with pytest.raises(EngineBuildError, match="nvcc"):
        build_llama_server(accelerator="cuda")
    assert not any((version_dir(accelerator="cuda") / "work").glob("*.tar.gz"))   # nothing fetched


def test_the_cached_cpu_build_reports_its_digest_and_flags() -> None:
    if cached_binary() is None:
        pytest.skip("no cached llama-server (scripts/setup.sh builds it)")
    res = build_llama_server()
    assert res.reused and res.accelerator == "cpu" and res.cmake_flags == cmake_flags("cpu")
    assert res.binary_sha256 == file_sha256(Path(res.binary)) and len(res.binary_sha256) == 64


def test_the_engine_probe_records_the_binary_digest() -> None:
    from harness.engines.adapters.llamacpp import LlamaServerAdapter

    binary = cached_binary()
    if binary is None:
        pytest.skip("no cached llama-server (scripts/setup.sh builds it)")
    probe = LlamaServerAdapter(binary=str(binary)).probe()
    assert probe.binary_sha256 == file_sha256(binary)
