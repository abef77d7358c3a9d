"""The tuner graph's shape: named nodes and explicit edges."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from atb_agent.graph._context import AgentContext
from atb_agent.graph._nodes import (
    after_model, after_tools, call_model, observe, record, route, run_tools, submit, text_protocol,
)
from atb_agent.graph._state import TunerState

NODES = ("observe", "call_model", "run_tools", "text_protocol", "submit", "record")


def build_graph() -> StateGraph[TunerState, AgentContext, TunerState, TunerState]:
    """The uncompiled graph. Compile it with a checkpointer (``SqliteSaver``) to run it."""
    g: StateGraph[TunerState, AgentContext, TunerState, TunerState] = StateGraph(TunerState, context_schema=AgentContext)
    g.add_node("observe", observe)
    g.add_node("call_model", call_model)
    g.add_node("run_tools", run_tools)
    g.add_node("text_protocol", text_protocol)
    g.add_node("submit", submit)
    g.add_node("record", record)
    g.add_edge(START, "observe")
    g.add_edge("observe", "call_model")
    g.add_conditional_edges("call_model", after_model, ["run_tools", "text_protocol", "submit"])
    g.add_edge("text_protocol", "submit")
    g.add_conditional_edges("run_tools", after_tools, ["call_model", "submit"])
    g.add_edge("submit", "record")
    g.add_conditional_edges("record", route, {"observe": "observe", "__end__": END})
    return g


def make_graph(config: Any = None) -> Any:
    """The compiled graph without a checkpointer, for LangGraph's tools (``langgraph.json``).

    Running it needs an :class:`AgentContext`; campaigns compile with a SQLite checkpointer instead.
    """
    return build_graph().compile()
