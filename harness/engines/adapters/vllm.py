"""vLLM's OpenAI-compatible server (``vllm serve MODEL``), pinned to one release.

vLLM needs a CUDA GPU and is not installable on a CPU machine: this adapter's command construction,
flag space and readiness handling are tested here against a loopback server; a live run needs a GPU
machine with ``pip install vllm==0.11.0``. Readiness: ``GET /health`` answers 200 once the engine
serves, then ``GET /v1/models`` lists the served model.
"""

from __future__ import annotations

import json

from harness.engines.adapters.base import ENGINES, EngineAdapter
from harness.engines.flags import FlagSpace, FlagSpec, FlagValue, LessEqual, Requires

_SPEC = "speculative_config"

_SPACE = FlagSpace(
    engine="vllm",
    flags=[
        FlagSpec(name="max_num_seqs", type="int", cli="--max-num-seqs", low=1, high=1024, log=True,
                 default=256, help="maximum sequences scheduled per iteration"),
        FlagSpec(name="max_num_batched_tokens", type="int", cli="--max-num-batched-tokens", low=16,
                 high=65536, log=True, help="token budget per scheduler iteration (engine picks by default)"),
        FlagSpec(name="gpu_memory_utilization", type="float", cli="--gpu-memory-utilization", low=0.3,
                 high=0.98, default=0.9, help="fraction of GPU memory for weights and KV cache"),
        FlagSpec(name="enable_chunked_prefill", type="bool", cli="--enable-chunked-prefill",
                 cli_false="--no-enable-chunked-prefill", help="split long prefills into chunks"),
        FlagSpec(name="enable_prefix_caching", type="bool", cli="--enable-prefix-caching",
                 cli_false="--no-enable-prefix-caching", help="reuse KV cache of shared prefixes"),
        FlagSpec(name="speculative_method", type="choice", composite=_SPEC, choices=["ngram"],
                 help="speculative decoding by prompt lookup (ngram); unset: no speculation"),
        FlagSpec(name="num_speculative_tokens", type="int", composite=_SPEC, low=1, high=16,
                 help="draft tokens proposed per step"),
        FlagSpec(name="prompt_lookup_min", type="int", composite=_SPEC, low=1, high=8,
                 help="shortest n-gram matched in the prompt"),
        FlagSpec(name="prompt_lookup_max", type="int", composite=_SPEC, low=1, high=16,
                 help="longest n-gram matched in the prompt"),
    ],
    constraints=[
        LessEqual(left="max_num_seqs", right="max_num_batched_tokens"),
        LessEqual(left="prompt_lookup_min", right="prompt_lookup_max"),
        *Requires.each(["num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"],
                       needs="speculative_method", needs_value="ngram"),
        Requires(flag="speculative_method", value="ngram", needs="num_speculative_tokens"),
        Requires(flag="speculative_method", value="ngram", needs="prompt_lookup_max"),
    ],
)


@ENGINES.register("vllm")
class VllmAdapter(EngineAdapter):
    """``vllm serve``; ngram speculation is one ``--speculative-config`` JSON argument."""

    name = "vllm"
    pinned_version = "0.11.0"
    ready_paths = ("/health", "/v1/models")

    def flag_space(self) -> FlagSpace:
        return _SPACE

    def base_argv(self, model: str, host: str, port: int) -> list[str]:
        return ["vllm", "serve", model, "--host", host, "--port", str(port), "--seed", "0"]

    def version_argv(self) -> list[str]:
        return ["vllm", "--version"]

    def help_argv(self) -> list[str]:
        return ["vllm", "serve", "--help=all"]

    def render_composites(self, config: dict[str, FlagValue]) -> list[str]:
        if config.get("speculative_method") != "ngram":
            return []
        spec: dict[str, FlagValue] = {"method": "ngram"}
        for key in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"):
            if key in config:
                spec[key] = config[key]
        return ["--speculative-config", json.dumps(spec, sort_keys=True, separators=(",", ":"))]

    def install_hint(self) -> str:
        return f"on a CUDA GPU machine run `pip install vllm=={self.pinned_version}`"
