"""The seeded serving workload: which prompts, how long the outputs, and when each request is sent.

A workload is a pure function of (spec, seed): the same pair always gives the same requests at the same
offsets, so default and candidate configurations see identical traffic at each paired seed. Prompts are
sequences of words from :data:`harness.engines.workload.WORDS` (each one token in the tiny model's
vocabulary, and ordinary English for a real model); ``shared_prefix_words`` puts one seeded prefix in front of every prompt of a
workload so prefix caching and n-gram speculation have something to find, and ``prompt_style: repeated``
makes each prompt one seeded unit said over and over (a real model continues it by copying: where n-gram
speculation can win). Specs without the repeated style draw exactly the requests they always drew.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

from harness.engines.workload import WORDS, WorkloadSpec


class RequestSpec(BaseModel):
    """One request of a workload: what to send and when (seconds after the workload starts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    prompt: str
    max_tokens: int
    send_at_s: float = Field(ge=0)


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    spec: WorkloadSpec
    requests: list[RequestSpec] = Field(min_length=1)


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _repeated(rng: random.Random, unit_words: int, n: int) -> str:
    """``n`` words: one seeded unit of ``unit_words`` words, said again and again (the last time cut short)."""
    unit = [rng.choice(WORDS) for _ in range(unit_words)]
    return " ".join(unit[i % unit_words] for i in range(n))


def make_workload(spec: WorkloadSpec, seed: int, n_requests: int) -> Workload:
    """The ``n_requests`` requests of ``spec`` at ``seed``: deterministic in (spec, seed, n_requests)."""
    rng = random.Random(f"atb-workload:{seed}")
    prefix = _words(rng, spec.shared_prefix_words) + " " if spec.shared_prefix_words else ""
    t = 0.0
    out: list[RequestSpec] = []
    for i in range(n_requests):
        if spec.arrival == "poisson" and i > 0:
            assert spec.rate_per_s is not None
            t += rng.expovariate(spec.rate_per_s)
        n_words = rng.randint(spec.prompt_words_min, spec.prompt_words_max)
        body = _repeated(rng, spec.repeat_unit_words, n_words) if spec.repeat_unit_words else _words(rng, n_words)
        out.append(RequestSpec(index=i, prompt=prefix + body,
                               max_tokens=rng.randint(spec.output_tokens_min, spec.output_tokens_max),
                               send_at_s=round(t, 6)))
    return Workload(seed=seed, spec=spec, requests=out)


__all__ = ["RequestSpec", "Workload", "WorkloadSpec", "make_workload"]
