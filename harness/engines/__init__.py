"""Serving-engine flag tuning: adapters (llama-server, vLLM, SGLang), the seeded workload and client,
and engine trials. A trial only measures; its verdict is formed and stored by
:mod:`harness.verdict.engine` (``evaluate_engine_candidate``), in a session from
:mod:`harness.measure.serving.session` (``open_engine_session``).

Public names are re-exported here; the modules behind them may move.
"""

from harness.engines._errors import (
    EngineBuildError, EngineError, EngineLaunchFailed, EngineNotBuilt, EngineTaskError, FlagSpaceError,
    ModelWriteError,
)
from harness.engines.adapter import ENGINES, EngineAdapter, EngineProbe, LaunchSpec
from harness.engines.client import RequestResult, WorkloadRun, run_workload
from harness.engines.flags import FlagSpace, FlagSpec, LessEqual, Requires, parse_config_text, render_config
from harness.engines.llamacpp import LlamaServerAdapter
from harness.engines.llamacpp_build import BuildResult, build_llama_server, cached_binary
from harness.engines.metrics import WorkloadMetrics, compute_metrics
from harness.engines.process import EngineProcess, free_port
from harness.engines.sglang import SglangAdapter
from harness.engines.task import EngineTask, engine_names, engine_task_names, get_adapter, is_engine_task, load_engine_task
from harness.engines.tiny_model import TinyModel, TinyModelSpec, write_tiny_model
from harness.engines.trial import EngineTrial, run_engine_trial
from harness.engines.vllm import VllmAdapter
from harness.engines.workload import Workload, WorkloadSpec, make_workload

__all__ = [
    "BuildResult", "ENGINES", "EngineAdapter", "EngineBuildError", "EngineError", "EngineLaunchFailed",
    "EngineNotBuilt", "EngineProbe", "EngineProcess", "EngineTask", "EngineTaskError", "EngineTrial", "FlagSpace",
    "FlagSpaceError", "FlagSpec", "LaunchSpec", "LessEqual", "LlamaServerAdapter", "ModelWriteError",
    "RequestResult", "Requires", "SglangAdapter", "TinyModel", "TinyModelSpec", "VllmAdapter", "Workload",
    "WorkloadMetrics", "WorkloadRun", "WorkloadSpec", "build_llama_server", "cached_binary", "compute_metrics",
    "engine_names", "engine_task_names", "free_port", "get_adapter", "is_engine_task", "load_engine_task",
    "make_workload", "parse_config_text", "render_config", "run_engine_trial", "run_workload", "write_tiny_model",
]
