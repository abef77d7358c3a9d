"""The text the model reads: the system prompt and each iteration's observation."""

from __future__ import annotations

from typing import Any

SYSTEM_PROMPT = (
    "You are tuning a GPU kernel inside a sandboxed workspace. Use the tools to read the task, write and "
    "test your candidate, and call `submit` when it is ready: the harness then measures it against the "
    "honest baseline and its verdict opens your next turn. You cannot see or change how it is measured. "
    "Each iteration ends with exactly one measured submission; if you end your turn without submitting, "
    "the workspace is submitted as it stands."
)


def observation(iteration: int, budget: int, task_brief: str, last_verdict: dict[str, Any] | None,
                verdict_text: str | None) -> str:
    """Iteration 0 states the task; later iterations report the harness's last verdict."""
    head = f"Iteration {iteration + 1} of {budget}."
    if iteration == 0 or last_verdict is None:
        return f"{head}\n\n{task_brief}"
    return f"{head} The harness's verdict on your last submission: {verdict_text}. Improve on it and submit again."
