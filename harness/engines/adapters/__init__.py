"""Engine adapters: how each serving engine is launched, probed and told its flags.

``base.py`` holds :class:`EngineAdapter`, :class:`LaunchSpec`, :class:`EngineProbe` and the ``ENGINES``
registry; each built-in adapter module registers its class when imported
(:func:`harness.engines.task.engine_registry` imports them).
"""

from harness.engines.adapters.base import ENGINES, EngineAdapter, EngineProbe, LaunchSpec
from harness.engines.adapters.llamacpp import LlamaServerAdapter
from harness.engines.adapters.sglang import SglangAdapter
from harness.engines.adapters.vllm import VllmAdapter

__all__ = ["ENGINES", "EngineAdapter", "EngineProbe", "LaunchSpec", "LlamaServerAdapter", "SglangAdapter", "VllmAdapter"]
