"""SGLang's server (``python -m sglang.launch_server``), pinned to one release.

SGLang needs a CUDA GPU: here its command construction, flag space and readiness are tested against a
loopback server; a live run needs a GPU machine with ``pip install "sglang[all]==0.5.5"``. Readiness:
``GET /health`` answers 200 once the scheduler serves, then ``GET /v1/models``.
"""

from __future__ import annotations

import sys

from harness.engines.adapters.base import ENGINES, EngineAdapter
from harness.engines.flags import FlagSpace, FlagSpec, LessEqual, Requires

_SPACE = FlagSpace(
    engine="sglang",
    flags=[
        FlagSpec(name="max_running_requests", type="int", cli="--max-running-requests", low=1, high=1024,
                 log=True, help="maximum requests decoded together (engine picks by default)"),
        FlagSpec(name="chunked_prefill_size", type="int", cli="--chunked-prefill-size", low=64, high=16384,
                 log=True, help="tokens per prefill chunk (engine picks by default)"),
        FlagSpec(name="schedule_policy", type="choice", cli="--schedule-policy", default="fcfs",
                 choices=["fcfs", "lpm", "random", "dfs-weight", "lof"], help="request scheduling order"),
        FlagSpec(name="mem_fraction_static", type="float", cli="--mem-fraction-static", low=0.3, high=0.95,
                 help="fraction of GPU memory for weights and KV pool (engine picks by default)"),
        FlagSpec(name="cuda_graph_max_bs", type="int", cli="--cuda-graph-max-bs", low=1, high=512, log=True,
                 help="largest batch captured in a CUDA graph"),
        FlagSpec(name="speculative_algorithm", type="choice", cli="--speculative-algorithm",
                 choices=["NGRAM"], help="ngram speculative decoding; unset: none"),
        FlagSpec(name="speculative_num_draft_tokens", type="int", cli="--speculative-num-draft-tokens",
                 low=1, high=32, help="draft tokens verified per step"),
        FlagSpec(name="speculative_ngram_min_match_window_size", type="int",
                 cli="--speculative-ngram-min-match-window-size", low=1, high=16, default=1,
                 help="shortest window matched in the n-gram cache"),
        FlagSpec(name="speculative_ngram_max_match_window_size", type="int",
                 cli="--speculative-ngram-max-match-window-size", low=1, high=32, default=12,
                 help="longest window matched in the n-gram cache"),
    ],
    constraints=[
        LessEqual(left="cuda_graph_max_bs", right="max_running_requests"),
        LessEqual(left="speculative_ngram_min_match_window_size", right="speculative_ngram_max_match_window_size"),
        *Requires.each(["speculative_num_draft_tokens", "speculative_ngram_min_match_window_size",
                        "speculative_ngram_max_match_window_size"], needs="speculative_algorithm", needs_value="NGRAM"),
    ],
)


@ENGINES.register("sglang")
class SglangAdapter(EngineAdapter):
    """``python -m sglang.launch_server``; speculation flags only with ``--speculative-algorithm NGRAM``."""

    name = "sglang"
    pinned_version = "0.5.5"
    ready_paths = ("/health", "/v1/models")

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def flag_space(self) -> FlagSpace:
        return _SPACE

    def base_argv(self, model: str, host: str, port: int) -> list[str]:
        return [self.python, "-m", "sglang.launch_server", "--model-path", model, "--host", host,
                "--port", str(port), "--random-seed", "0"]

    def executable(self) -> list[str]:
        return [self.python, "-m", "sglang.launch_server"]

    def version_argv(self) -> list[str]:
        return [self.python, "-c", "import sglang; print(sglang.__version__)"]

    def missing_reason(self) -> str | None:
        import importlib.util
        import subprocess

        if self.python == sys.executable:
            return None if importlib.util.find_spec("sglang") else "the sglang package is not installed"
        p = subprocess.run([self.python, "-c", "import sglang"], capture_output=True, timeout=60)
        return None if p.returncode == 0 else f"sglang is not importable by {self.python}"

    def install_hint(self) -> str:
        return f'on a CUDA GPU machine run `pip install "sglang[all]=={self.pinned_version}"`'
