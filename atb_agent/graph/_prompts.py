"""The text the model reads: the system prompt and each iteration's observation.

Three variants, chosen per run and recorded in the transcript header (``prompt``):

* ``standard`` — the original prompt, for models that use tools natively;
* ``small-model/1`` — for a small local model under the declared text protocol: the observation
  gives the task, the tools (and the text-protocol alternative), and one worked example of a complete
  submission for another operator, and later observations repeat what to send. Written after
  SmolLM2-135M answered the standard prompt with paragraphs and fragments (see
  ``benchmarks/results/live_prompt.md`` for the before/after submit-reach fractions on the same seeds);
* ``small-model/2`` — ``small-model/1`` with a short observation after a verdict other than accepted:
  the verdict's last line (for a traceback, the exception) and the instruction to reply with one
  ```` ```python ```` block, instead of the whole verdict text. Under ``small-model/1`` SmolLM2-135M,
  shown a full traceback after a rejected candidate, looped until its output cap on most such calls
  (``benchmarks/results/ab_smollm2/README.md``). Everything else (system prompt, first observation,
  the observation after an accepted verdict) is ``small-model/1``'s, byte for byte. The short line is
  taken from the verdict *text* the model is shown (:meth:`VerdictSummary.for_model`), so a replay that
  shows the recorded text rebuilds the same observation.

A variant is never edited once runs are recorded under it: a change is a new variant.
"""

from __future__ import annotations

import re
from typing import Any

PROMPT_STANDARD = "standard"
PROMPT_SMALL_MODEL = "small-model/1"
PROMPT_SMALL_MODEL_SHORT_REJECTION = "small-model/2"
PROMPT_VARIANTS = (PROMPT_STANDARD, PROMPT_SMALL_MODEL, PROMPT_SMALL_MODEL_SHORT_REJECTION)
_SMALL_MODEL_VARIANTS = (PROMPT_SMALL_MODEL, PROMPT_SMALL_MODEL_SHORT_REJECTION)
_NOT_MEASURED = "no candidate was measured: "     # how VerdictSummary.for_model opens a no_submission verdict
SHORT_REASON_MAX_CHARS = 240
"""``small-model/2``: the longest verdict line shown after a rejection (longer ones are cut, marked ``...``)."""

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
    return SMALL_MODEL_SYSTEM_PROMPT if variant in _SMALL_MODEL_VARIANTS else SYSTEM_PROMPT


def short_verdict(verdict_text: str) -> tuple[str, str]:
    """``small-model/2``'s reading of a verdict text (:meth:`VerdictSummary.for_model`): its status word
    (``""`` when the text names none: "no candidate was measured: ...") and its last non-empty line
    after ``reason:`` (else after "no candidate was measured: ", else of the whole text), at most :data:`SHORT_REASON_MAX_CHARS`
    characters, without a trailing full stop."""
    m = re.match(r"status: (\w+);", verdict_text)
    status = m.group(1) if m else ""
    _, found, reason = verdict_text.partition("reason: ")
    if not found:
        reason = verdict_text.removeprefix(_NOT_MEASURED)
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    last = lines[-1].rstrip(".") if lines else ""
    if len(last) > SHORT_REASON_MAX_CHARS:
        last = last[:SHORT_REASON_MAX_CHARS - 3].rstrip() + "..."
    return status, last


def _short_rejection(head: str, verdict_text: str) -> str:
    status, last = short_verdict(verdict_text)
    said = f"Your last candidate.py was {status}" if status else "Your last answer was not measured"
    stop = "" if last.endswith("...") else "."
    return (f"{head} {said}: {last}{stop}\n\nWrite the complete candidate.py again in one ```python block: import torch, "
            "import torch.nn as nn, then class ModelNew(nn.Module) with the same __init__ and forward arguments "
            "as Model.")


def observation(iteration: int, budget: int, task_brief: str, last_verdict: dict[str, Any] | None,
                verdict_text: str | None, variant: str = PROMPT_STANDARD) -> str:
    """Iteration 0 states the task; later iterations report the harness's last verdict."""
    head = f"Iteration {iteration + 1} of {budget}."
    if variant in _SMALL_MODEL_VARIANTS:
        if iteration == 0 or last_verdict is None:
            return (f"{head}\n\n{task_brief}\n\n{_TOOLS_NOTE}\n\n{_WORKED_EXAMPLE}\n\nNow write the complete "
                    "candidate.py for this task in one ```python block.")
        if variant == PROMPT_SMALL_MODEL_SHORT_REJECTION and not (verdict_text or "").startswith("status: accepted;"):
            return _short_rejection(head, verdict_text or "")
        return (f"{head} The harness's verdict on your last submission: {verdict_text}.\n\nAnswer with the complete "
                "candidate.py (class ModelNew, same arguments as Model) in one ```python block.")
    if iteration == 0 or last_verdict is None:
        return f"{head}\n\n{task_brief}"
    return f"{head} The harness's verdict on your last submission: {verdict_text}. Improve on it and submit again."
