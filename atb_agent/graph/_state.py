"""The tuner graph's state: plain JSON values only, so every checkpoint serialises exactly."""

from __future__ import annotations

from typing import Any, TypedDict


class TunerState(TypedDict):
    """What the graph carries between nodes (and what a checkpoint holds).

    ``iteration`` is the index of the iteration in progress; it advances only in ``record``, after the
    iteration is stored, so a resumed run never skips or repeats one. ``transcript_seq`` is the next
    transcript sequence number as of this state: records beyond it were written by a node whose
    checkpoint was lost, and a resume voids them.
    """

    iteration: int
    budget: int
    messages: list[dict[str, Any]]
    pending_tool_calls: list[dict[str, Any]]
    tool_calls_this_iteration: int
    model_calls: int
    truncated_calls: int
    iteration_usage: dict[str, int]
    submission: dict[str, Any] | None
    verdict: dict[str, Any] | None
    last_verdict: dict[str, Any] | None
    history: list[dict[str, Any]]
    transcript_seq: int


def initial_state(budget: int, transcript_seq: int) -> TunerState:
    return TunerState(
        iteration=0, budget=budget, messages=[], pending_tool_calls=[], tool_calls_this_iteration=0,
        model_calls=0, truncated_calls=0, iteration_usage=zero_usage(), submission=None, verdict=None,
        last_verdict=None, history=[], transcript_seq=transcript_seq)


def zero_usage() -> dict[str, int]:
    return {"tokens_in": 0, "tokens_out": 0, "model_calls": 0, "truncated_calls": 0}
