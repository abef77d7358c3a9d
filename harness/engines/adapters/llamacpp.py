"""llama.cpp's C++ ``llama-server``, built here from the ``llama-cpp-python`` sdist (see llamacpp_build).

This is the engine that runs on a CPU machine: the Python ``llama_cpp.server`` serialises requests
behind a lock and is no throughput target, the C++ server batches slots. Readiness: ``GET /health``
answers 503 while the model loads and 200 once slots serve. Flags and defaults below are those of the
llama.cpp tree vendored by llama-cpp-python 0.3.36; ``probe()`` records the installed ``--help`` so a
run shows which flags really existed.
"""

from __future__ import annotations

from pathlib import Path

from harness.engines.adapters.base import ENGINES, EngineAdapter
from harness.engines.flags import FlagSpace, FlagSpec, LessEqual, Requires
from harness.engines.llamacpp_build import LLAMA_CPP_PYTHON_VERSION, cached_binary, runtime_env

_SPEC_TYPES = ["ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache"]

_SPACE = FlagSpace(
    engine="llama-server",
    flags=[
        FlagSpec(name="threads", type="int", cli="--threads", low=1, high=256,
                 help="CPU threads for generation (engine default: all cores)"),
        FlagSpec(name="threads_batch", type="int", cli="--threads-batch", low=1, high=256,
                 help="CPU threads for prompt processing (default: same as threads)"),
        FlagSpec(name="batch_size", type="int", cli="--batch-size", low=32, high=4096, log=True, default=2048,
                 help="logical maximum batch size"),
        FlagSpec(name="ubatch_size", type="int", cli="--ubatch-size", low=32, high=2048, log=True, default=512,
                 help="physical maximum batch size"),
        FlagSpec(name="parallel", type="int", cli="--parallel", low=1, high=64,
                 help="server slots decoded together (engine default: auto)"),
        FlagSpec(name="cont_batching", type="bool", cli="--cont-batching", cli_false="--no-cont-batching",
                 default=True, help="continuous (dynamic) batching"),
        FlagSpec(name="cache_prompt", type="bool", cli="--cache-prompt", cli_false="--no-cache-prompt",
                 default=True, help="reuse the KV cache of a slot's previous prompt"),
        FlagSpec(name="cache_reuse", type="int", cli="--cache-reuse", low=0, high=256, default=0,
                 help="min chunk size reused from the cache via KV shifting"),
        FlagSpec(name="kv_unified", type="bool", cli="--kv-unified", cli_false="--no-kv-unified",
                 help="one KV buffer shared by all slots (engine default: on when slots are auto)"),
        FlagSpec(name="poll", type="int", cli="--poll", low=0, high=100, default=50,
                 help="busy-wait polling level of the thread pool"),
        FlagSpec(name="flash_attn", type="choice", cli="--flash-attn", choices=["on", "off", "auto"],
                 default="auto", help="flash attention"),
        FlagSpec(name="spec_type", type="choice", cli="--spec-type", choices=_SPEC_TYPES,
                 help="model-free n-gram speculative decoding; unset: none"),
        FlagSpec(name="spec_ngram_simple_size_n", type="int", cli="--spec-ngram-simple-size-n", low=1, high=32,
                 default=12, help="ngram-simple: lookup n-gram length"),
        FlagSpec(name="spec_ngram_simple_size_m", type="int", cli="--spec-ngram-simple-size-m", low=1, high=64,
                 default=48, help="ngram-simple: drafted m-gram length"),
        FlagSpec(name="spec_ngram_mod_n_min", type="int", cli="--spec-ngram-mod-n-min", low=1, high=128,
                 default=48, help="ngram-mod: minimum drafted tokens"),
        FlagSpec(name="spec_ngram_mod_n_max", type="int", cli="--spec-ngram-mod-n-max", low=1, high=128,
                 default=64, help="ngram-mod: maximum drafted tokens"),
    ],
    constraints=[
        LessEqual(left="ubatch_size", right="batch_size"),
        LessEqual(left="spec_ngram_mod_n_min", right="spec_ngram_mod_n_max"),
        Requires(flag="cache_reuse", needs="cache_prompt", needs_value=True),
        *Requires.each(["spec_ngram_simple_size_n", "spec_ngram_simple_size_m"], needs="spec_type",
                       needs_value="ngram-simple"),
        *Requires.each(["spec_ngram_mod_n_min", "spec_ngram_mod_n_max"], needs="spec_type", needs_value="ngram-mod"),
    ],
)


@ENGINES.register("llama-server")
class LlamaServerAdapter(EngineAdapter):
    """``llama-server -m MODEL``; the binary is the cached build unless ``binary`` is given."""

    name = "llama-server"
    pinned_version = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
    ready_paths = ("/health",)
    greedy_check = True

    def __init__(self, binary: str | Path | None = None) -> None:
        found = Path(binary) if binary else cached_binary()
        self.binary = found

    def flag_space(self) -> FlagSpace:
        return _SPACE

    def base_argv(self, model: str, host: str, port: int) -> list[str]:
        exe = str(self.binary) if self.binary else "llama-server"
        return [exe, "--model", model, "--host", host, "--port", str(port), "--no-webui"]

    def env(self) -> dict[str, str]:
        return runtime_env(self.binary) if self.binary else {}

    def missing_reason(self) -> str | None:
        if self.binary is None or not self.binary.is_file():
            return "llama-server is not built on this machine"
        return None

    def install_hint(self) -> str:
        return "run `atb engine build llama-cpp` (about 7 minutes on 2 cores; cached afterwards)"
