"""Serving engines as the harness knows them: the adapters (llama-server, vLLM, SGLang, under
``adapters/``), engine tasks with their flag spaces and declared workloads, the llama.cpp build and the
models a trial serves.

Measuring a configuration (the trial, its client, workload, processes, metrics and output checks) lives
in :mod:`harness.measure.serving`; judging it and storing the verdict in :mod:`harness.verdict.engine`.
Nothing here imports either.
"""

from harness.engines._errors import (
    EngineBuildError, EngineError, EngineLaunchFailed, EngineNotBuilt, EngineTaskError, FlagSpaceError,
    ModelWriteError,
)
from harness.engines.adapters import (
    ENGINES, EngineAdapter, EngineProbe, LaunchSpec, LlamaServerAdapter, SglangAdapter, VllmAdapter,
)
from harness.engines.flags import FlagSpace, FlagSpec, LessEqual, Requires, parse_config_text, render_config
from harness.engines.llamacpp_build import BuildResult, build_llama_server, cached_binary
from harness.engines.task import EngineTask, engine_names, engine_task_names, get_adapter, is_engine_task, load_engine_task
from harness.engines.tiny_model import TinyModel, TinyModelSpec, write_tiny_model
from harness.engines.workload import WorkloadSpec

__all__ = [
    "BuildResult", "ENGINES", "EngineAdapter", "EngineBuildError", "EngineError", "EngineLaunchFailed",
    "EngineNotBuilt", "EngineProbe", "EngineTask", "EngineTaskError", "FlagSpace", "FlagSpaceError", "FlagSpec",
    "LaunchSpec", "LessEqual", "LlamaServerAdapter", "ModelWriteError", "Requires", "SglangAdapter", "TinyModel",
    "TinyModelSpec", "VllmAdapter", "WorkloadSpec", "build_llama_server", "cached_binary", "engine_names",
    "engine_task_names", "get_adapter", "is_engine_task", "load_engine_task", "parse_config_text", "render_config",
    "write_tiny_model",
]
