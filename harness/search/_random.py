"""The seeded random-search proposer: a deterministic function of (space, seed) and nothing else.

It owns a private :class:`random.Random` so no other code (torch, numpy, the harness's input seeds) can
shift its sequence, and so the same seed gives the same candidates on any machine. Draws are without
replacement until the constrained space is exhausted, then repeats are allowed (the budget is a count
of iterations, and a small space must still spend it the way the LLM tuner would).
"""

from __future__ import annotations

import random

from harness.search._space import KnobSpace, KnobSpaceError, KnobValue
from harness.records import canonical_json

# Rejection-sampling bound per proposal: an algorithmic limit of this sampler, not a measurement
# parameter (it cannot move a verdict, only decide when a constraint set is declared unsatisfiable).
_MAX_DRAWS_PER_PROPOSAL = 10_000


class RandomSearch:
    """Propose configurations of ``space`` in an order fixed by ``seed``."""

    def __init__(self, space: KnobSpace, seed: int) -> None:
        self.space = space
        self.seed = seed
        self._rng = random.Random(seed)
        self._seen: set[str] = set()

    def _draw(self) -> dict[str, KnobValue]:
        return {k.name: self._rng.choice(k.values()) for k in self.space.knobs}

    def propose(self) -> dict[str, KnobValue]:
        """The next configuration: valid, and new unless every valid configuration was seen.

        Raises:
            KnobSpaceError: the constraints admit no configuration the sampler can find.
        """
        fallback: dict[str, KnobValue] | None = None
        for _ in range(_MAX_DRAWS_PER_PROPOSAL):
            config = self._draw()
            if self.space.violations(config):
                continue
            key = canonical_json(config)
            if key not in self._seen:
                self._seen.add(key)
                return config
            if fallback is None:
                fallback = config
            if len(self._seen) >= self.space.size():
                break
        if fallback is not None:
            return fallback
        raise KnobSpaceError(
            f"no configuration satisfying the constraints was found in {_MAX_DRAWS_PER_PROPOSAL} draws; "
            "check the knob space's constraints for a contradiction")

    def sequence(self, n: int) -> list[dict[str, KnobValue]]:
        """The first ``n`` proposals from a fresh sampler with this seed (does not advance ``self``)."""
        fresh = RandomSearch(self.space, self.seed)
        return [fresh.propose() for _ in range(n)]
