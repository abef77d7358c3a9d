"""The tuner as a LangGraph state machine: observe -> call_model -> run_tools -> submit -> record -> route.

The graph itself (``NODES``, ``build_graph``, ``make_graph``, from ``_build``) is imported on first use: it
pulls in LangGraph (~0.6 s), which a random-search run, a sweep driver or a refused command never needs, while
the prompts and the context types below are needed by every tuner."""

from typing import TYPE_CHECKING, Any

from atb_agent.graph._context import AgentContext, ExchangeRecorder, SubmissionInbox, ToolBoxLike, ToolOutcomeLike
from atb_agent.graph._prompts import (
    PROMPT_SMALL_MODEL, PROMPT_SMALL_MODEL_SHORT_REJECTION, PROMPT_STANDARD, PROMPT_VARIANTS, SYSTEM_PROMPT, observation,
    system_prompt,
)
from atb_agent.graph._state import TunerState, initial_state

if TYPE_CHECKING:
    from atb_agent.graph._build import NODES, build_graph, make_graph

_LAZY = ("NODES", "build_graph", "make_graph")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from atb_agent.graph import _build

        return getattr(_build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["NODES", "PROMPT_SMALL_MODEL", "PROMPT_SMALL_MODEL_SHORT_REJECTION", "PROMPT_STANDARD", "PROMPT_VARIANTS", "SYSTEM_PROMPT", "system_prompt", "AgentContext", "ExchangeRecorder", "SubmissionInbox", "ToolBoxLike",
           "ToolOutcomeLike", "TunerState", "build_graph", "initial_state", "make_graph", "observation"]
