"""vLLM / SGLang / llama-server adapters: command construction, flag-space constraints, and readiness
handling against a real loopback HTTP server process on 127.0.0.1 (no GPU, no engine needed)."""

from __future__ import annotations

import json
import random
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.engines import (
    EngineLaunchFailed, EngineNotBuilt, FlagSpaceError, LaunchSpec, LlamaServerAdapter, SglangAdapter, VllmAdapter,
    load_engine_task, parse_config_text, render_config,
)
from harness.measure.serving.process import EngineProcess, free_port
from harness.engines.adapters.base import options_in_help

# A stand-in engine: answers 503 on every readiness path until `ready_after` seconds have passed,
# then 200; /v1/models lists one model. `mode=exit` prints a log line and exits 3 at once.
LOOPBACK = textwrap.dedent('''
    import json, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    port, ready_after, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    print("loopback engine starting", flush=True)
    if mode == "exit":
        print("fatal: could not allocate KV cache", flush=True)
        sys.exit(3)
    t0 = time.monotonic()
    seen = []
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def do_GET(self):
            seen.append(self.path)
            ready = time.monotonic() - t0 >= ready_after and mode != "never"
            if self.path in ("/health", "/v1/models"):
                code = 200 if ready else 503
                body = json.dumps({"data": [{"id": "m"}]} if self.path == "/v1/models" else {"status": "ok"})
            else:
                code, body = 404, "{}"
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())
            print("GET", self.path, code, flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
''')


@pytest.fixture()
def loopback(tmp_path: Path) -> Path:
    script = tmp_path / "loopback.py"
    script.write_text(LOOPBACK)
    return script


def _spec_for(adapter_ready: tuple[str, ...], script: Path, ready_after: float, mode: str) -> LaunchSpec:
    port = free_port()
    return LaunchSpec(argv=[sys.executable, str(script), str(port), str(ready_after), mode], host="127.0.0.1",
                      port=port, ready_paths=list(adapter_ready))


# ------------------------------------------------------------------ command construction
def test_vllm_command_renders_flags_and_speculative_json() -> None:
    a = VllmAdapter()
    cfg = {"max_num_seqs": 64, "max_num_batched_tokens": 8192, "enable_prefix_caching": True,
           "enable_chunked_prefill": False, "speculative_method": "ngram", "num_speculative_tokens": 4,
           "prompt_lookup_max": 5, "prompt_lookup_min": 2}
    spec = a.launch(cfg, model="Qwen/Qwen2.5-0.5B-Instruct", host="127.0.0.1", port=8000,
                    fixed_args=["--max-model-len", "4096"])
    argv = spec.argv
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct"]
    assert argv[argv.index("--port") + 1] == "8000"
    assert argv[argv.index("--max-num-seqs") + 1] == "64"
    assert "--enable-prefix-caching" in argv and "--no-enable-chunked-prefill" in argv
    spec_json = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec_json == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5,
                         "prompt_lookup_min": 2}
    assert argv.index("--max-model-len") < argv.index("--max-num-seqs")  # fixed args before tuned flags
    assert spec.ready_paths == ["/health", "/v1/models"]


def test_default_config_renders_no_tuned_flags() -> None:
    for a in (VllmAdapter(), SglangAdapter(python="/usr/bin/python3")):
        base = a.base_argv("M", "127.0.0.1", 9)
        assert a.launch({}, model="M", host="127.0.0.1", port=9).argv == base


def test_sglang_command() -> None:
    a = SglangAdapter(python="/opt/py/bin/python")
    argv = a.launch({"max_running_requests": 128, "schedule_policy": "lpm", "speculative_algorithm": "NGRAM",
                     "speculative_num_draft_tokens": 8, "speculative_ngram_max_match_window_size": 10},
                    model="/models/qwen", host="0.0.0.0", port=30000).argv
    assert argv[:3] == ["/opt/py/bin/python", "-m", "sglang.launch_server"]
    assert argv[argv.index("--model-path") + 1] == "/models/qwen"
    assert argv[argv.index("--schedule-policy") + 1] == "lpm"
    assert argv[argv.index("--speculative-algorithm") + 1] == "NGRAM"
    assert argv[argv.index("--speculative-ngram-max-match-window-size") + 1] == "10"
    assert a.help_argv() == ["/opt/py/bin/python", "-m", "sglang.launch_server", "--help"]


def test_llama_server_command_bools_both_ways(tmp_path: Path) -> None:
    a = LlamaServerAdapter(binary=tmp_path / "llama-server")
    argv = a.launch({"parallel": 4, "cont_batching": False, "cache_prompt": True, "spec_type": "ngram-mod",
                     "spec_ngram_mod_n_min": 8, "spec_ngram_mod_n_max": 16},
                    model="/m.gguf", host="127.0.0.1", port=8080, fixed_args=["--ctx-size", "2048"]).argv
    assert argv[0] == str(tmp_path / "llama-server")
    assert "--no-cont-batching" in argv and "--cache-prompt" in argv
    assert argv[argv.index("--parallel") + 1] == "4"
    assert argv[argv.index("--spec-type") + 1] == "ngram-mod"


# ------------------------------------------------------------------ flag-space constraints
@pytest.mark.parametrize("cfg, message", [
    ({"max_num_seqs": 512, "max_num_batched_tokens": 256}, "must not exceed"),
    ({"num_speculative_tokens": 4}, "needs speculative_method='ngram'"),
    ({"speculative_method": "ngram", "prompt_lookup_max": 4}, "needs num_speculative_tokens"),
    ({"speculative_method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2,
      "prompt_lookup_min": 4}, r"prompt_lookup_min \(4\) must not exceed prompt_lookup_max \(2\)"),
    ({"gpu_memory_utilization": 1.5}, "must lie in"),
    ({"max_num_seqs": 2.5}, "takes an integer"),
    ({"enable_prefix_caching": "yes"}, "takes true or false"),
    ({"max_num_seq": 4}, "unknown vllm flag 'max_num_seq'"),
])
def test_vllm_constraints_refuse(cfg: dict, message: str) -> None:
    with pytest.raises(FlagSpaceError, match=message):
        VllmAdapter().flag_space().validate_config(cfg)


def test_sglang_and_llama_constraints() -> None:
    with pytest.raises(FlagSpaceError, match="cuda_graph_max_bs"):
        SglangAdapter().flag_space().validate_config({"cuda_graph_max_bs": 256, "max_running_requests": 64})
    with pytest.raises(FlagSpaceError, match="needs speculative_algorithm='NGRAM'"):
        SglangAdapter().flag_space().validate_config({"speculative_num_draft_tokens": 4})
    with pytest.raises(FlagSpaceError, match="ubatch_size"):  # default batch 2048 < ubatch 4096 is out of range
        LlamaServerAdapter().flag_space().validate_config({"ubatch_size": 1024, "batch_size": 512})
    with pytest.raises(FlagSpaceError, match="one of"):
        SglangAdapter().flag_space().validate_config({"schedule_policy": "shortest"})
    assert SglangAdapter().flag_space().validate_config({"speculative_algorithm": "NGRAM",
                                                         "speculative_num_draft_tokens": 4})


def test_task_bounds_narrow_the_space_and_samples_are_legal() -> None:
    task = load_engine_task("llamacpp-tiny")
    space = task.flag_space()
    assert space.spec("threads").high == 2
    with pytest.raises(FlagSpaceError, match="must lie in"):
        space.validate_config({"threads": 8})
    rng = random.Random(7)
    samples = [space.sample(rng) for _ in range(40)]
    assert len({render_config(s) for s in samples}) > 20
    for s in samples:
        assert space.validate_config(s) == s


def test_config_text_round_trip_and_bad_text() -> None:
    cfg = {"parallel": 4, "cont_batching": True}
    assert parse_config_text(render_config(cfg)) == cfg
    assert parse_config_text("parallel: 4\ncont_batching: true\n") == cfg
    assert parse_config_text('{"flags": {"parallel": 4}}') == {"parallel": 4}
    with pytest.raises(FlagSpaceError):
        parse_config_text("[1, 2]")


def test_options_in_help_and_probe_of_missing_engine() -> None:
    assert options_in_help("  -np, --parallel N   slots\n  --cont-batching, -nocb") == \
        ["--cont-batching", "--parallel", "-nocb", "-np"]
    import shutil

    if shutil.which("vllm") is None:
        with pytest.raises(EngineNotBuilt, match="CUDA GPU machine"):
            VllmAdapter().probe()
    with pytest.raises(EngineNotBuilt, match="atb engine build llama-cpp"):
        LlamaServerAdapter(binary="/nonexistent/llama-server").probe()


# ------------------------------------------------------------------ readiness against a loopback server
@pytest.mark.parametrize("adapter", [VllmAdapter(), SglangAdapter()], ids=["vllm", "sglang"])
def test_readiness_waits_through_503(adapter, loopback: Path) -> None:
    spec = _spec_for(adapter.ready_paths, loopback, ready_after=0.8, mode="ok")
    with EngineProcess(spec) as proc:
        took = proc.wait_ready(timeout_s=20)
        assert took >= 0.7
        log = proc.log_excerpt()
    assert "GET /health 503" in log and "GET /health 200" in log and "GET /v1/models 200" in log
    assert not proc.alive()


def test_launch_that_exits_is_a_typed_failure_with_the_engine_log(loopback: Path) -> None:
    spec = _spec_for(VllmAdapter.ready_paths, loopback, ready_after=0, mode="exit")
    t0 = time.monotonic()
    with EngineProcess(spec) as proc, pytest.raises(EngineLaunchFailed) as err:
        proc.wait_ready(timeout_s=30)
    assert time.monotonic() - t0 < 15
    assert "exited with status 3" in str(err.value)
    assert "could not allocate KV cache" in err.value.log_excerpt


def test_launch_that_never_becomes_ready_times_out_and_is_stopped(loopback: Path) -> None:
    spec = _spec_for(SglangAdapter.ready_paths, loopback, ready_after=0, mode="never")
    proc = EngineProcess(spec).start()
    with pytest.raises(EngineLaunchFailed, match=r"not ready within 1\.5 s \(last readiness answer: GET /health -> 503\)"):
        proc.wait_ready(timeout_s=1.5)
    assert not proc.alive()


def test_missing_executable_is_a_launch_failure() -> None:
    spec = LaunchSpec(argv=["/nonexistent/vllm", "serve"], host="127.0.0.1", port=free_port(), ready_paths=["/health"])
    with pytest.raises(EngineLaunchFailed, match="could not start"):
        EngineProcess(spec).start()
