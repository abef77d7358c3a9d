"""The text the model reads: the system prompt and each iteration's observation.

Two variants, chosen per run and recorded in the transcript header (``prompt``):

* ``standard`` — the original prompt, for models that use tools natively;
* ``small-model/1`` — for a small local model under the declared text protocol: the observation
  gives the task, the tools (and the text-protocol alternative), and one worked example of a complete
  submission for another operator, and later observations repeat what to send. Written after
  SmolLM2-135M answered the standard prompt with paragraphs and fragments (see
  ``benchmarks/results/live_prompt.md`` for the before/after submit-reach fractions on the same seeds).
"""

from __future__ import annotations

from typing import Any

PROMPT_STANDARD = "standard"
PROMPT_SMALL_MODEL = "small-model/1"
PROMPT_VARIANTS = (PROMPT_STANDARD, PROMPT_SMALL_MODEL)

SYSTEM_PROMPT = (
    "You are tuning a GPU kernel inside a sandboxed workspace. Use the tools to read the task, write and "
    "test your candidate, and call `submit` when it is ready: the harness then measures it against the "
    "honest baseline and its verdict opens your next turn. You cannot see or change how it is measured. "
    "Each iteration ends with exactly one measured submission; if you end your turn without submitting, "
    "the workspace is submitted as it stands."
)

SMALL_MODEL_SYSTEM_PROMPT = (
    "You are a PyTorch programmer. You answer with one complete Python file in a ```python code block. "
    "The file defines `class ModelNew(nn.Module)`, which computes the same result as the given `Model`, "
    "faster. Your code block is saved as candidate.py and submitted when your answer ends."
)

_WORKED_EXAMPLE = '''Example. If the reference were

```python
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.maximum(x, torch.zeros_like(x))
```

a good answer would be:

```python
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
```'''

_TOOLS_NOTE = (
    "How to submit: answer with one ```python block holding the whole candidate.py (it is written and "
    "submitted for you when your answer ends). Tools also exist: write_file(path, content), read_file(path), "
    "run_in_sandbox(command), submit(); a tool call takes precedence over the code block."
)


def system_prompt(variant: str) -> str:
    return SMALL_MODEL_SYSTEM_PROMPT if variant == PROMPT_SMALL_MODEL else SYSTEM_PROMPT


def observation(iteration: int, budget: int, task_brief: str, last_verdict: dict[str, Any] | None,
                verdict_text: str | None, variant: str = PROMPT_STANDARD) -> str:
    """Iteration 0 states the task; later iterations report the harness's last verdict."""
    head = f"Iteration {iteration + 1} of {budget}."
    if variant == PROMPT_SMALL_MODEL:
        if iteration == 0 or last_verdict is None:
            return (f"{head}\n\n{task_brief}\n\n{_TOOLS_NOTE}\n\n{_WORKED_EXAMPLE}\n\nNow write the complete "
                    "candidate.py for this task in one ```python block.")
        return (f"{head} The harness's verdict on your last submission: {verdict_text}.\n\nAnswer with the complete "
                "candidate.py (class ModelNew, same arguments as Model) in one ```python block.")
    if iteration == 0 or last_verdict is None:
        return f"{head}\n\n{task_brief}"
    return f"{head} The harness's verdict on your last submission: {verdict_text}. Improve on it and submit again."
