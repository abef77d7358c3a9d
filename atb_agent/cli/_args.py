"""Validated argument types for every ``atb`` command: a bad number is bad input (exit 2, one line).

argparse calls a ``type=`` callable on the raw string; raising ``argparse.ArgumentTypeError`` there
makes the parser report ``argument --budget: ...``, which the CLI's parser turns into a one-line
``BadInput`` (exit 2). Without these, ``--budget 10**21`` or ``--seed 2**70`` parse as Python ints and
fail deep inside (SQLite's signed 64-bit integers, ``torch.manual_seed``) as an internal error.

Each bound says why it is where it is:

* seeds: ``0 .. 2**62 - 1``. Stored as SQLite INTEGER (signed 64-bit) and handed to
  ``random.Random``, ``numpy.random.default_rng`` and ``torch.manual_seed`` (which takes up to
  2**64 - 1); derived seeds are computed from them, so headroom below 2**63 is kept.
* budgets: ``1 .. 10000`` iterations. Each iteration is one harness verdict (seconds to minutes);
  ten thousand is already weeks of measurement, and the bound keeps ``range(budget)`` and the
  graph's recursion limit finite.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

SEED_MAX = 2**62 - 1
BUDGET_MAX = 10_000


def _parse_int(text: str, what: str) -> int:
    raw = text.strip().replace("_", "")
    try:
        return int(raw, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be a whole number, not {text!r}") from None


def bounded_int(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: a base-10 integer in ``[low, high]`` (the message names the range)."""

    def parse(text: str) -> int:
        value = _parse_int(text, what)
        if not low <= value <= high:
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise argparse.ArgumentTypeError(f"{what} must be between {low} and {high}, not {shown}")
        return value

    parse.__name__ = what.replace(" ", "_")   # argparse names the type in some messages
    return parse


def positive_float(what: str, high: float = 1e9) -> Callable[[str], float]:
    """An argparse type: a finite float in ``(0, high]`` (no nan, no inf, no negative)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, not {text!r}") from None
        if not math.isfinite(value) or not 0 < value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be a finite number in (0, {high:g}], not {text}")
        return value

    parse.__name__ = what.replace(" ", "_")
    return parse


seed = bounded_int(0, SEED_MAX, "a seed")
"""``--seed``: any seed of a tuner, workload or model file."""

budget = bounded_int(1, BUDGET_MAX, "a budget (iterations)")
"""``--budget``: iterations of a campaign, each ending with one harness verdict."""

jobs = bounded_int(1, 1024, "a number of parallel jobs")
"""``--jobs``: parallel compile jobs."""

embedding_length = bounded_int(16, 8192, "an embedding length")
"""``atb engine make-model --embedding-length``: a *tiny* model's width (16 is the model's own floor)."""

block_count = bounded_int(1, 64, "a block count")
"""``atb engine make-model --block-count``: a *tiny* model's depth."""

port = bounded_int(0, 65535, "a TCP port")
"""``--port``: a TCP port number (0: let the system pick a free one)."""

threads = bounded_int(1, 1024, "a thread count")
"""``--threads``: worker or generation threads."""

output_tokens = bounded_int(1, 1_000_000, "a number of output tokens")
"""``--max-output-tokens``: a cap on one model reply (no served model here replies with more)."""



def tuner_spec(text: str) -> str:
    """An argparse type for ``--tuner``: the spec must name a tuner this installation can build.

    Checked before anything is opened (store, session, sandbox): the spec parses; ``replay:PATH``
    names a readable transcript of a provider that can be replayed as a tuner; an entry-point name is
    installed. API keys are not checked here (a missing key is its own error, with its own fix).
    Returns the spec unchanged.
    """
    from atb_agent.errors import TunerSpecError
    from atb_agent.tuners import TUNERS, parse_spec

    try:
        parsed = parse_spec(text)
    except TunerSpecError as exc:
        raise argparse.ArgumentTypeError(" ".join(str(exc).split())) from None
    if parsed.kind == "replay":
        from transcripts import TranscriptError, read_transcript

        try:
            header = read_transcript(parsed.arg).header
        except TranscriptError as exc:
            raise argparse.ArgumentTypeError(
                f"replay:{parsed.arg}: not a readable transcript ({' '.join(str(exc).split())})") from None
        if header.provider not in ("openai", "anthropic"):
            raise argparse.ArgumentTypeError(f"replay:{parsed.arg} records provider {header.provider!r}; only "
                                             "openai and anthropic transcripts can be replayed as a tuner")
    elif parsed.kind == "entry_point":
        try:
            TUNERS.require(parsed.name)         # installed entry points are listed, not loaded
        except TunerSpecError as exc:
            raise argparse.ArgumentTypeError(" ".join(str(exc).split())) from None
    return text


__all__ = ["BUDGET_MAX", "SEED_MAX", "block_count", "bounded_int", "budget", "embedding_length", "jobs",
           "output_tokens", "port", "positive_float", "seed", "threads", "tuner_spec"]
