"""The tuner as a LangGraph state machine: observe -> call_model -> run_tools -> submit -> record -> route."""

from atb_agent.graph._build import NODES, build_graph, make_graph
from atb_agent.graph._context import AgentContext, ExchangeRecorder, SubmissionInbox, ToolBoxLike, ToolOutcomeLike
from atb_agent.graph._prompts import (
    PROMPT_SMALL_MODEL, PROMPT_SMALL_MODEL_SHORT_REJECTION, PROMPT_STANDARD, PROMPT_VARIANTS, SYSTEM_PROMPT, observation,
    system_prompt,
)
from atb_agent.graph._state import TunerState, initial_state

__all__ = ["NODES", "PROMPT_SMALL_MODEL", "PROMPT_SMALL_MODEL_SHORT_REJECTION", "PROMPT_STANDARD", "PROMPT_VARIANTS", "SYSTEM_PROMPT", "system_prompt", "AgentContext", "ExchangeRecorder", "SubmissionInbox", "ToolBoxLike",
           "ToolOutcomeLike", "TunerState", "build_graph", "initial_state", "make_graph", "observation"]
