"""llama.cpp's C++ ``llama-server``, built here from the ``llama-cpp-python`` sdist (see llamacpp_build).

This is the engine that runs on a CPU machine: the Python ``llama_cpp.server`` serialises requests
behind a lock and is no throughput target, the C++ server batches slots. Readiness: ``GET /health``
answers 503 while the model loads and 200 once slots serve. Flags and defaults below are those of the
llama.cpp tree vendored by llama-cpp-python 0.3.36; ``probe()`` records the installed ``--help`` so a
run shows which flags really existed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from harness.engines._errors import FlagSpaceError
from harness.engines.adapters.base import ENGINES, EngineAdapter, LaunchSpec
from harness.engines.flags import FlagSpace, FlagSpec, FlagValue, Forbidden, LessEqual, Requires
from harness.engines.llamacpp_build import LLAMA_CPP_PYTHON_VERSION, Accelerator, cached_binary, runtime_env

#: a llama-server to launch instead of the cached build of the adapter's accelerator (a binary carried to a
#: machine, or the CPU build standing in for the CUDA one in a CPU rehearsal); the probe records its SHA-256
BINARY_ENV = "ATB_LLAMA_SERVER_BINARY"
#: llama.cpp's CUDA backend reads this variable: set (to anything), CUDA graphs are off
#: (ggml/src/ggml-cuda/common.cuh of the vendored tree); there is no command-line flag for it
CUDA_GRAPHS_ENV = "GGML_CUDA_DISABLE_GRAPHS"

_SPEC_TYPES = ["ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache"]
#: the model-free n-gram speculative-decoding family, the same on the CPU and the GPU build (one list, so the
#: two spaces cannot drift apart)
_NGRAM_SPEC_FLAGS = [
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
]
_NGRAM_SPEC_CONSTRAINTS = [   # the family's "needs spec_type" rules (its size order stays beside the batch sizes')
    *Requires.each(["spec_ngram_simple_size_n", "spec_ngram_simple_size_m"], needs="spec_type",
                   needs_value="ngram-simple"),
    *Requires.each(["spec_ngram_mod_n_min", "spec_ngram_mod_n_max"], needs="spec_type", needs_value="ngram-mod"),
]

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
        *_NGRAM_SPEC_FLAGS,
    ],
    constraints=[
        LessEqual(left="ubatch_size", right="batch_size"),
        LessEqual(left="spec_ngram_mod_n_min", right="spec_ngram_mod_n_max"),
        Requires(flag="cache_reuse", needs="cache_prompt", needs_value=True),
        *_NGRAM_SPEC_CONSTRAINTS,
    ],
)


# KV-cache types offered on the GPU. The CUDA build compiles flash-attention kernels for K-V pairs of one
# type only (GGML_CUDA_FA_QUANTS defaults to q4_0-q4_0, q8_0-q8_0, f16-f16, bf16-bf16 in the vendored
# ggml/CMakeLists.txt), so the space keeps K and V alike; a quantized V cache needs flash attention
# (llama_init_from_model refuses it with flash attention off, src/llama-context.cpp). One knob sets both (a
# composite flag rendered as --cache-type-k T --cache-type-v T): four constraints tying K to V made a random
# draw of the whole space legal too rarely for the sampler's 200 tries. A lossy type changes
# the completions: the engine gates' output_match is what must catch it, not this space.
_KV_TYPES = ["f16", "bf16", "q8_0", "q4_0"]
_QUANTIZED_KV = ["q8_0", "q4_0"]

#: llama-server built for CUDA (issue 30, step 2): what decides GPU serving throughput. Threads and polling
#: are CPU-side and left out (a task fixes them); CUDA graphs are an environment variable, rendered by the
#: adapter (composite "env"). The n-gram speculation family is the CPU space's.
_GPU_SPACE = FlagSpace(
    engine="llama-server-cuda",
    flags=[
        FlagSpec(name="n_gpu_layers", type="int", cli="--n-gpu-layers", low=0, high=99,
                 help="layers whose weights and KV cache live on the GPU (engine default: auto, which fits "
                      "every layer of a small model); 99 offloads every layer of any model up to 99 layers"),
        FlagSpec(name="batch_size", type="int", cli="--batch-size", low=64, high=8192, log=True, default=2048,
                 help="logical maximum batch size"),
        FlagSpec(name="ubatch_size", type="int", cli="--ubatch-size", low=32, high=4096, log=True, default=512,
                 help="physical maximum batch size"),
        FlagSpec(name="parallel", type="int", cli="--parallel", low=1, high=64,
                 help="server slots decoded together (engine default: auto)"),
        FlagSpec(name="cont_batching", type="bool", cli="--cont-batching", cli_false="--no-cont-batching",
                 default=True, help="continuous (dynamic) batching"),
        FlagSpec(name="cache_prompt", type="bool", cli="--cache-prompt", cli_false="--no-cache-prompt",
                 default=True, help="reuse the KV cache of a slot's previous prompt"),
        FlagSpec(name="kv_unified", type="bool", cli="--kv-unified", cli_false="--no-kv-unified",
                 help="one KV buffer shared by all slots (engine default: on when slots are auto)"),
        FlagSpec(name="flash_attn", type="choice", cli="--flash-attn", choices=["on", "off", "auto"],
                 default="auto", help="flash attention"),
        FlagSpec(name="cache_type", type="choice", composite="kv", choices=_KV_TYPES, default="f16",
                 help="KV cache data type, K and V alike (--cache-type-k and --cache-type-v; quantized types are "
                      "lossy, and a quantized V cache needs flash attention)"),
        FlagSpec(name="cuda_graphs", type="bool", composite="env", default=True,
                 help=f"CUDA graphs (false sets {CUDA_GRAPHS_ENV}=1)"),
        *_NGRAM_SPEC_FLAGS,
    ],
    constraints=[
        LessEqual(left="ubatch_size", right="batch_size"),
        LessEqual(left="spec_ngram_mod_n_min", right="spec_ngram_mod_n_max"),
        Forbidden(combination={"cache_type": list(_QUANTIZED_KV), "flash_attn": ["off"]}),
        *_NGRAM_SPEC_CONSTRAINTS,
    ],
)


@ENGINES.register("llama-server")
class LlamaServerAdapter(EngineAdapter):
    """``llama-server -m MODEL``; the binary is ``binary``, else ``$ATB_LLAMA_SERVER_BINARY``, else the cached
    build of the adapter's accelerator. The flag space follows the accelerator: the CPU space, or on
    ``cuda`` the GPU space (offload, KV types, flash attention, CUDA graphs)."""

    name = "llama-server"
    accelerator: Accelerator = "cpu"
    pinned_version = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
    ready_paths = ("/health",)
    greedy_check = True

    def __init__(self, binary: str | Path | None = None) -> None:
        given = binary or os.environ.get(BINARY_ENV)
        self.binary = Path(given) if given else cached_binary(accelerator=self.accelerator)

    def flag_space(self) -> FlagSpace:
        return _GPU_SPACE if self.accelerator == "cuda" else _SPACE

    def render_composites(self, config: dict[str, FlagValue]) -> list[str]:
        """``cache_type`` (composite ``kv``) as both ``--cache-type-k`` and ``--cache-type-v``; ``cuda_graphs``
        (composite ``env``) is an environment variable, set by :meth:`launch`."""
        args: list[str] = []
        for name, value in config.items():
            spec = self.flag_space().spec(name)
            if spec.composite == "kv":
                args += ["--cache-type-k", str(value), "--cache-type-v", str(value)]
            elif spec.composite is not None and spec.composite != "env":
                raise FlagSpaceError(f"{self.name}: flag '{name}' has an unknown composite '{spec.composite}'")
        return args

    def launch(self, config: dict[str, FlagValue], *, model: str, host: str, port: int,
               fixed_args: Sequence[str] = (), env: dict[str, str] | None = None) -> LaunchSpec:
        """The base launch, with ``GGML_CUDA_DISABLE_GRAPHS=1`` when the configuration turns CUDA graphs off."""
        spec = super().launch(config, model=model, host=host, port=port, fixed_args=fixed_args, env=env)
        if config.get("cuda_graphs") is False:
            return spec.model_copy(update={"env": {**spec.env, CUDA_GRAPHS_ENV: "1"}})
        return spec

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


@ENGINES.register("llama-server-cuda")
class LlamaServerCudaAdapter(LlamaServerAdapter):
    """llama-server built for CUDA (``build_llama_server(accelerator="cuda")``, Hopper), over the GPU space."""

    name = "llama-server-cuda"
    accelerator: Accelerator = "cuda"

    def install_hint(self) -> str:
        return ("build it on the GPU machine: `python benchmarks/llamacpp_gpu.py --only build` "
                "(harness.engines.llamacpp_build.build_llama_server(accelerator='cuda'); needs nvcc and CMake)")
