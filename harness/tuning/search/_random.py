"""The seeded random-search proposer: a deterministic function of (space, seed) and nothing else.

It owns a private :class:`random.Random` so no other code (torch, numpy, the harness's input seeds) can
shift its sequence, and the same seed gives the same candidates on any machine. Draws avoid repeating a
configuration (up to a bounded number of redraws), then allow repeats: the budget is a count of
iterations, and a small space must still spend it the way the LLM tuner would.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from harness.records import canonical_json

# Redraws tried to find an unseen configuration before a repeat is accepted: an algorithmic limit of
# the sampler (it cannot move a verdict; it only bounds the work on a nearly exhausted space).
_MAX_REDRAWS = 256


class SearchSpace(Protocol):
    """What random search needs of a space: :class:`KnobSpace` and the engines' ``FlagSpace`` both fit."""

    def sample(self, rng: random.Random) -> dict[str, Any]: ...

    def validate_config(self, config: Any) -> dict[str, Any]: ...


class RandomSearch:
    """Propose configurations of ``space`` in an order fixed by ``seed``."""

    def __init__(self, space: SearchSpace, seed: int) -> None:
        self.space = space
        self.seed = seed
        self._rng = random.Random(seed)
        self._seen: set[str] = set()

    def propose(self) -> dict[str, Any]:
        """The next configuration: valid, and unseen unless the space ran out of new ones.

        Raises:
            KnobSpaceError / FlagSpaceError: the space's constraints admit no configuration.
        """
        first: dict[str, Any] | None = None
        for _ in range(_MAX_REDRAWS):
            config = self.space.validate_config(self.space.sample(self._rng))
            key = canonical_json(config)
            if key not in self._seen:
                self._seen.add(key)
                return config
            if first is None:
                first = config
        assert first is not None
        return first

    def sequence(self, n: int) -> list[dict[str, Any]]:
        """The first ``n`` proposals of a fresh sampler with this seed (does not advance ``self``)."""
        fresh = RandomSearch(self.space, self.seed)
        return [fresh.propose() for _ in range(n)]
