"""``atb model serve|stop|status``: the contract (one JSON object with --json, exit 2 for bad input) and,
where llama-server and the SmolLM2 GGUF are cached, a real serve -> ready -> stop cycle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from harness.engines.llamacpp_build import LLAMA_CPP_PYTHON_VERSION, cached_binary
from harness.engines.llamacpp_model import SMOLLM2_FILE, cached_smollm2

ROOT = Path(__file__).resolve().parents[1]


def atb(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ATB_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "atb_agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


def one_json(stdout: str) -> dict:
    text = stdout.strip()
    assert text.count("\n") == 0, f"--json must print one line, got: {text!r}"
    return json.loads(text)


@pytest.mark.parametrize("args, needle", [
    (("serve", "gpt-5"), "unknown model"),
    (("serve", "--port", "70000"), "--port"),
    (("serve", "--threads", "0"), "--threads"),
    (("serve", "--max-output-tokens", "0"), "--max-output-tokens"),
    (("stop", "nope"), "unknown model"),
])
def test_bad_input_exits_2_with_one_line(args: tuple[str, ...], needle: str, tmp_path: Path) -> None:
    out = atb("model", *args, "--json", cache=tmp_path)
    assert out.returncode == 2
    obj = one_json(out.stdout)
    assert obj["ok"] is False and needle in obj["error"]


def test_stop_and_status_with_nothing_running(tmp_path: Path) -> None:
    out = atb("model", "stop", "--json", cache=tmp_path)
    assert out.returncode == 0 and one_json(out.stdout) == {"model": "smollm2", "pid": None, "stopped": False}
    out = atb("model", "status", "--json", cache=tmp_path)
    assert out.returncode == 0 and one_json(out.stdout)["running"] is False


@pytest.mark.engine
@pytest.mark.slow
def test_serve_waits_for_readiness_and_stop_ends_the_server(tmp_path: Path) -> None:
    binary, model = cached_binary(), cached_smollm2()
    if binary is None or model is None:
        pytest.skip("llama-server or the SmolLM2 GGUF is not cached here: run `bash scripts/setup.sh`")
    cache = tmp_path / "cache"
    bin_dir = cache / "llama-server" / LLAMA_CPP_PYTHON_VERSION / "bin"
    bin_dir.parent.mkdir(parents=True)
    bin_dir.symlink_to(binary.parent, target_is_directory=True)
    (cache / "models").mkdir()
    (cache / "models" / SMOLLM2_FILE).symlink_to(model.path)
    out = atb("model", "serve", "--json", cache=cache)
    assert out.returncode == 0, out.stdout + out.stderr
    served = one_json(out.stdout)
    try:
        assert served["already_running"] is False and served["base_url"].startswith("http://127.0.0.1:")
        assert served["gguf_sha256"] == model.sha256 and "--jinja" in served["server_argv"]
        assert "version" in served["server_version"]
        root = served["base_url"].removesuffix("/v1")
        assert httpx.get(f"{root}/health", timeout=10).status_code == 200     # ready when serve returned
        again = one_json(atb("model", "serve", "--json", cache=cache).stdout)  # idempotent
        assert again["already_running"] is True and again["pid"] == served["pid"]
        assert one_json(atb("model", "status", "--json", cache=cache).stdout)["running"] is True
    finally:
        stopped = one_json(atb("model", "stop", "--json", cache=cache).stdout)
    assert stopped == {"model": "smollm2", "pid": served["pid"], "stopped": True}
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{served['base_url'].removesuffix('/v1')}/health", timeout=2)
