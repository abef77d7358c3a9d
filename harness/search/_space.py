"""The knob space a tuner searches: categorical choices, integer ranges, booleans, and constraints.

One model serves kernel tasks (block sizes, algorithm choices, layouts, ``torch.compile`` modes) and
serving engines (launch flags), so the random-search baseline and the LLM tuner search the same kind of
space. Constraints are data, not code: a stored space can be read back and checked without running
anything a task author wrote.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.errors import HarnessError

KnobValue = Union[bool, int, float, str]

# Rejection-sampling bound per draw: an algorithmic limit of the sampler, not a measurement parameter
# (it cannot move a verdict; it only decides when a constraint set is declared unsatisfiable).
_MAX_DRAWS = 10_000


class KnobSpaceError(HarnessError):
    """A knob space is malformed, or a configuration does not belong to it (the message says which knob)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CategoricalKnob(_Frozen):
    """One of a fixed list of values (an algorithm, a layout, a compile mode, a flag's enum)."""

    kind: Literal["categorical"] = "categorical"
    name: str = Field(min_length=1)
    choices: list[KnobValue] = Field(min_length=1)
    default: KnobValue | None = None

    def contains(self, value: Any) -> bool:
        return any(type(value) is type(c) and value == c for c in self.choices)

    def values(self) -> list[KnobValue]:
        return list(self.choices)


class IntKnob(_Frozen):
    """An integer in ``[low, high]`` on a grid of ``step``; ``log2`` draws powers of two in range."""

    kind: Literal["int"] = "int"
    name: str = Field(min_length=1)
    low: int
    high: int
    step: int = Field(default=1, ge=1)
    log2: bool = False
    default: int | None = None

    @model_validator(mode="after")
    def _range(self) -> "IntKnob":
        if self.high < self.low:
            raise ValueError(f"knob {self.name!r}: high {self.high} is below low {self.low}")
        if self.log2 and self.low < 1:
            raise ValueError(f"knob {self.name!r}: a log2 knob needs low >= 1")
        if not self.values():
            raise ValueError(f"knob {self.name!r}: the range holds no value")
        return self

    def values(self) -> list[KnobValue]:
        if self.log2:
            out: list[KnobValue] = []
            v = 1
            while v <= self.high:
                if v >= self.low:
                    out.append(v)
                v *= 2
            return out
        return list(range(self.low, self.high + 1, self.step))

    def contains(self, value: Any) -> bool:
        return type(value) is int and value in self.values()


class BoolKnob(_Frozen):
    """On or off (a feature flag, ``--enable-prefix-caching``)."""

    kind: Literal["bool"] = "bool"
    name: str = Field(min_length=1)
    default: bool | None = None

    def values(self) -> list[KnobValue]:
        return [False, True]

    def contains(self, value: Any) -> bool:
        return type(value) is bool


Knob = Annotated[Union[CategoricalKnob, IntKnob, BoolKnob], Field(discriminator="kind")]


class LessEqual(_Frozen):
    """``config[left] <= config[right]`` (e.g. a micro-batch no larger than the batch)."""

    kind: Literal["le"] = "le"
    left: str
    right: str

    def holds(self, config: Mapping[str, Any]) -> bool:
        return bool(config[self.left] <= config[self.right])

    def describe(self) -> str:
        return f"{self.left} <= {self.right}"


class Implies(_Frozen):
    """When every knob in ``when`` takes one of its listed values, every knob in ``then`` must too."""

    kind: Literal["implies"] = "implies"
    when: dict[str, list[KnobValue]] = Field(min_length=1)
    then: dict[str, list[KnobValue]] = Field(min_length=1)

    def holds(self, config: Mapping[str, Any]) -> bool:
        if all(_member(config[k], vs) for k, vs in self.when.items()):
            return all(_member(config[k], vs) for k, vs in self.then.items())
        return True

    def describe(self) -> str:
        return f"if {self.when} then {self.then}"


class Forbidden(_Frozen):
    """No configuration may take all of these values at once."""

    kind: Literal["forbidden"] = "forbidden"
    combination: dict[str, list[KnobValue]] = Field(min_length=1)

    def holds(self, config: Mapping[str, Any]) -> bool:
        return not all(_member(config[k], vs) for k, vs in self.combination.items())

    def describe(self) -> str:
        return f"not {self.combination}"


Constraint = Annotated[Union[LessEqual, Implies, Forbidden], Field(discriminator="kind")]


def _member(value: Any, allowed: list[KnobValue]) -> bool:
    return any(type(value) is type(a) and value == a for a in allowed)


class KnobSpace(_Frozen):
    """A declared search space. Knob order is part of the space: it fixes the order of random draws."""

    knobs: list[Knob] = Field(min_length=1)
    constraints: list[Constraint] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names(self) -> "KnobSpace":
        names = [k.name for k in self.knobs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"knob names must be unique; repeated: {dupes}")
        known = set(names)
        for c in self.constraints:
            refs = ({c.left, c.right} if isinstance(c, LessEqual)
                    else set(c.when) | set(c.then) if isinstance(c, Implies) else set(c.combination))
            missing = sorted(refs - known)
            if missing:
                raise ValueError(f"constraint {c.describe()} names unknown knobs {missing}")
        return self

    @classmethod
    def coerce(cls, obj: Any) -> "KnobSpace":
        """Accept a KnobSpace, its JSON-like dict, or a plain ``{name: [choices]}`` mapping.

        Raises:
            KnobSpaceError: the object describes no valid space.
        """
        if isinstance(obj, KnobSpace):
            return obj
        if isinstance(obj, BaseModel):
            obj = obj.model_dump(mode="json")
        try:
            if isinstance(obj, Mapping) and "knobs" in obj:
                return cls.model_validate(dict(obj))
            if isinstance(obj, Mapping):
                knobs = [{"kind": "categorical", "name": str(k), "choices": list(v)} for k, v in obj.items()]
                return cls.model_validate({"knobs": knobs})
        except (ValidationError, TypeError) as exc:
            raise KnobSpaceError(f"not a valid knob space: {exc}") from exc
        raise KnobSpaceError(f"a knob space must be a KnobSpace or a mapping, not {type(obj).__name__}")

    def knob(self, name: str) -> CategoricalKnob | IntKnob | BoolKnob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KnobSpaceError(f"no knob named {name!r}; knobs are {[k.name for k in self.knobs]}")

    def violations(self, config: Mapping[str, Any]) -> list[str]:
        """Why ``config`` is not a point of this space (empty when it is)."""
        problems: list[str] = []
        names = {k.name for k in self.knobs}
        for extra in sorted(set(config) - names):
            problems.append(f"unknown knob {extra!r}")
        for k in self.knobs:
            if k.name not in config:
                problems.append(f"knob {k.name!r} has no value")
            elif not k.contains(config[k.name]):
                problems.append(f"knob {k.name!r}: {config[k.name]!r} is not one of its values")
        if problems:
            return problems
        problems.extend(f"constraint violated: {c.describe()}" for c in self.constraints if not c.holds(config))
        return problems

    def validate_config(self, config: Mapping[str, Any]) -> dict[str, KnobValue]:
        """Return ``config`` as a plain dict in knob order.

        Raises:
            KnobSpaceError: naming every knob or constraint the configuration breaks.
        """
        problems = self.violations(config)
        if problems:
            raise KnobSpaceError("configuration is outside the knob space: " + "; ".join(problems))
        return {k.name: config[k.name] for k in self.knobs}

    def sample(self, rng: random.Random) -> dict[str, KnobValue]:
        """One configuration drawn uniformly per knob (in knob order) from ``rng``, constraints held.

        Raises:
            KnobSpaceError: the constraints admit no configuration the sampler can find.
        """
        for _ in range(_MAX_DRAWS):
            config = {k.name: rng.choice(k.values()) for k in self.knobs}
            if not self.violations(config):
                return config
        raise KnobSpaceError(f"no configuration satisfying the constraints was found in {_MAX_DRAWS} draws; "
                             "check the knob space's constraints for a contradiction")

    def size(self) -> int:
        """Number of grid points before constraints (an upper bound on distinct configurations)."""
        n = 1
        for k in self.knobs:
            n *= len(k.values())
        return n
