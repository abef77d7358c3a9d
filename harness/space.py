"""The one search-space language: parameter values, constraints between parameters, and the kernel knob space.

Two kinds of space are written in it, with one knob vocabulary and one ``sample`` / ``validate_config``
(:class:`SearchSpaceBase`). A kernel task's :class:`KnobSpace` (block sizes, algorithm choices, layouts,
``torch.compile`` modes: grid knobs, every one always set) is searched by the seeded random-search
baseline and shown to the LLM tuner; a serving engine's flag space (:class:`harness.engines.flags.FlagSpace`)
is a *partial* space of :class:`RangeKnob` knobs (a flag left out takes the engine's default) and adds
only how a value becomes a command-line argument. Both keep their constraints in the same types below,
with one meaning and one method: ``violation(values, explicit) -> message | None``.

Constraints are data, not code: a stored space can be read back and checked without running anything
a task author wrote. Their serialized forms (``{"kind": "le", "left": ..., "right": ...}`` and the
others) are what stored spaces and task files hold.

Values a constraint reads may be ``None``: the parameter is left unset and takes a default nobody
here knows (an engine flag "left to the engine"). A constraint that would compare such a value is
skipped. ``explicit`` names the parameters a configuration sets itself (engine flags left out take
the engine's default); ``None`` means every parameter with a value, as in a kernel knob space, where
every knob is always set.
"""

from __future__ import annotations

from abc import abstractmethod

import math
import random
from collections.abc import Collection, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, TypeGuard, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.errors import HarnessError

KnobValue = Union[bool, int, float, str]
# What constraints read: a value per parameter name; None: unset, the default is not known here.
Values = Mapping[str, KnobValue | None]

#: the exception class a space refuses with (a field named ``type`` shadows the builtin inside RangeKnob)
ErrorType = type[Exception]

# Rejection-sampling bound per draw: an algorithmic limit of the sampler, not a measurement parameter
# (it cannot move a verdict; it only decides when a constraint set is declared unsatisfiable).
_MAX_DRAWS = 10_000


class KnobSpaceError(HarnessError):
    """A knob space is malformed, or a configuration does not belong to it (the message says which knob)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------------- knobs: grid (kernel) and range (engine flag)

class CategoricalKnob(_Frozen):
    """One of a fixed list of values (an algorithm, a layout, a compile mode, a flag's enum)."""

    kind: Literal["categorical"] = "categorical"
    name: str = Field(min_length=1)
    choices: list[KnobValue] = Field(min_length=1)
    default: KnobValue | None = None

    def contains(self, value: Any) -> bool:
        return _member(value, self.choices)

    def draw(self, rng: random.Random) -> KnobValue:
        return rng.choice(self.values())

    def values(self) -> list[KnobValue]:
        return list(self.choices)

    @property
    def numeric(self) -> bool:
        return all(_is_number(c) for c in self.choices)


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

    def draw(self, rng: random.Random) -> KnobValue:
        return rng.choice(self.values())

    @property
    def numeric(self) -> bool:
        return True


class BoolKnob(_Frozen):
    """On or off (a feature flag, ``--enable-prefix-caching``)."""

    kind: Literal["bool"] = "bool"
    name: str = Field(min_length=1)
    default: bool | None = None

    def values(self) -> list[KnobValue]:
        return [False, True]

    def contains(self, value: Any) -> bool:
        return type(value) is bool

    def draw(self, rng: random.Random) -> KnobValue:
        return rng.choice(self.values())

    @property
    def numeric(self) -> bool:
        return False


class RangeKnob(_Frozen):
    """A knob of a partial space (a serving engine's flag): a number in ``[low, high]`` (drawn uniformly,
    or log-uniformly with ``log``), a choice, or on/off. A configuration may leave it unset: ``default``
    documents the value it then has (``None``: the engine decides).
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    type: Literal["int", "float", "bool", "choice"]
    default: KnobValue | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[str] | None = None
    help: str = ""

    @model_validator(mode="after")
    def _value_shape(self) -> "RangeKnob":
        if self.type in ("int", "float") and (self.low is None or self.high is None or self.low > self.high):
            raise ValueError(f"flag {self.name}: numeric flags need low <= high")
        if self.type == "choice" and not self.choices:
            raise ValueError(f"flag {self.name}: a choice flag needs choices")
        if self.log and (self.low is None or self.low <= 0):
            raise ValueError(f"flag {self.name}: a log-scale flag needs low > 0")
        return self

    @property
    def numeric(self) -> bool:
        return self.type in ("int", "float")

    def contains(self, value: Any) -> bool:
        try:
            self.check(value, ValueError)
        except ValueError:
            return False
        return True

    def check(self, value: Any, error: ErrorType) -> KnobValue:
        """Return ``value`` coerced to this knob's type; raises ``error`` when it does not fit."""
        where = f"flag '{self.name}'"
        if self.type == "bool":
            if not isinstance(value, bool):
                raise error(f"{where} takes true or false, got {value!r}")
            return value
        if self.type == "choice":
            if not isinstance(value, str) or value not in (self.choices or []):
                raise error(f"{where} takes one of {self.choices}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise error(f"{where} takes a number, got {value!r}")
        number: int | float
        if self.type == "int":
            if isinstance(value, float) and not value.is_integer():
                raise error(f"{where} takes an integer, got {value!r}")
            number = int(value)
        else:
            number = float(value)
        assert self.low is not None and self.high is not None
        if not self.low <= number <= self.high:
            raise error(f"{where} must lie in [{self.low:g}, {self.high:g}], got {value!r}")
        return number

    def draw(self, rng: random.Random) -> KnobValue:
        """A uniformly (or log-uniformly) drawn legal value."""
        if self.type == "bool":
            return rng.random() < 0.5
        if self.type == "choice":
            return str(rng.choice(list(self.choices or [])))
        assert self.low is not None and self.high is not None
        if self.log:
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = rng.uniform(self.low, self.high)
        if self.type == "int":
            return int(min(max(round(x), self.low), self.high))
        return round(x, 4)


Knob = Annotated[Union[CategoricalKnob, IntKnob, BoolKnob], Field(discriminator="kind")]
#: what any space holds: the grid knobs of a kernel space, or the range knobs of a partial (engine) space
AnyKnob = Union[CategoricalKnob, IntKnob, BoolKnob, RangeKnob]


# ---------------------------------------------------------------------- constraints (shared)

def _member(value: Any, allowed: list[KnobValue]) -> bool:
    return any(type(value) is type(a) and value == a for a in allowed)


def _explicit(values: Values, explicit: Collection[str] | None) -> Collection[str]:
    return explicit if explicit is not None else {k for k, v in values.items() if v is not None}


class LessEqual(_Frozen):
    """``values[left] <= values[right]`` on numbers (a micro-batch no larger than the batch); skipped
    when either is unset (``None``, left to the engine)."""

    kind: Literal["le"] = "le"
    left: str
    right: str

    def names(self) -> set[str]:
        return {self.left, self.right}

    def violation(self, values: Values, explicit: Collection[str] | None = None) -> str | None:
        a, b = values.get(self.left), values.get(self.right)
        if a is None or b is None:
            return None
        if not (_is_number(a) and _is_number(b)):
            return f"{self.left} ({a!r}) and {self.right} ({b!r}) are not both numbers"
        return None if a <= b else f"{self.left} ({a}) must not exceed {self.right} ({b})"

    def describe(self) -> str:
        return f"{self.left} <= {self.right}"


class Implies(_Frozen):
    """When every parameter in ``when`` takes one of its listed values, every one in ``then`` must too."""

    kind: Literal["implies"] = "implies"
    when: dict[str, list[KnobValue]] = Field(min_length=1)
    then: dict[str, list[KnobValue]] = Field(min_length=1)

    def names(self) -> set[str]:
        return set(self.when) | set(self.then)

    def violation(self, values: Values, explicit: Collection[str] | None = None) -> str | None:
        if not all(_member(values.get(k), vs) for k, vs in self.when.items()):
            return None
        off = {k: values.get(k) for k, vs in self.then.items() if not _member(values.get(k), vs)}
        return f"{self.describe()}, but got {off}" if off else None

    def describe(self) -> str:
        return f"if {self.when} then {self.then}"


class Forbidden(_Frozen):
    """No configuration may take all of these values at once."""

    kind: Literal["forbidden"] = "forbidden"
    combination: dict[str, list[KnobValue]] = Field(min_length=1)

    def names(self) -> set[str]:
        return set(self.combination)

    def violation(self, values: Values, explicit: Collection[str] | None = None) -> str | None:
        if all(_member(values.get(k), vs) for k, vs in self.combination.items()):
            return f"{self.describe()}: got {{{', '.join(f'{k!r}: {values.get(k)!r}' for k in self.combination)}}}"
        return None

    def describe(self) -> str:
        return f"not {self.combination}"


class Requires(_Frozen):
    """When ``flag`` is set explicitly (and equals ``value`` if given), ``needs`` must equal
    ``needs_value``, or be set explicitly when ``needs_value`` is None.

    "Set explicitly" is what ``explicit`` names: an engine flag a configuration gives (not one left to
    its default); in a knob space every knob is set, so this reads "if flag (= value) then needs =
    needs_value".
    """

    kind: Literal["requires"] = "requires"
    flag: str
    value: KnobValue | None = None
    needs: str
    needs_value: KnobValue | None = None

    @classmethod
    def each(cls, flags: list[str], *, needs: str, needs_value: KnobValue | None = None) -> list["Requires"]:
        """One constraint per name in ``flags``: each of them needs ``needs`` (= ``needs_value``)."""
        return [cls(flag=f, needs=needs, needs_value=needs_value) for f in flags]

    def names(self) -> set[str]:
        return {self.flag, self.needs}

    def violation(self, values: Values, explicit: Collection[str] | None = None) -> str | None:
        given = _explicit(values, explicit)
        if self.flag not in given or (self.value is not None and values.get(self.flag) != self.value):
            return None
        cond = self.flag if self.value is None else f"{self.flag}={self.value!r}"
        if self.needs_value is None:
            return None if self.needs in given else f"{cond} needs {self.needs} to be set"
        if values.get(self.needs) != self.needs_value:
            return f"{cond} needs {self.needs}={self.needs_value!r}"
        return None

    def describe(self) -> str:
        cond = self.flag if self.value is None else f"{self.flag}={self.value!r}"
        need = f"{self.needs} set" if self.needs_value is None else f"{self.needs}={self.needs_value!r}"
        return f"{cond} requires {need}"


Constraint = Annotated[Union[LessEqual, Implies, Forbidden, Requires], Field(discriminator="kind")]


def check_constraint_names(constraints: list[Constraint], known: Collection[str], numeric: Collection[str],
                           what: str = "parameters") -> None:
    """Refuse constraints that name unknown parameters, or compare (``le``) a parameter that is no number.

    Raises:
        ValueError: naming the constraint and the offending names (pydantic turns it into a
            ValidationError when raised from a model validator).
    """
    for c in constraints:
        missing = sorted(c.names() - set(known))
        if missing:
            raise ValueError(f"constraint {c.describe()} names unknown {what} {missing}")
        if isinstance(c, LessEqual):
            not_numbers = sorted(c.names() - set(numeric))
            if not_numbers:
                raise ValueError(f"constraint {c.describe()} compares {what} that are not numbers: {not_numbers}")


def constraint_violations(constraints: list[Constraint], values: Values,
                          explicit: Collection[str] | None = None) -> list[tuple[Constraint, str]]:
    """Each constraint ``values`` breaks, with its message (empty when every one holds)."""
    out: list[tuple[Constraint, str]] = []
    for c in constraints:
        message = c.violation(values, explicit)
        if message is not None:
            out.append((c, message))
    return out


# ---------------------------------------------------------------------- spaces: one sample, one validate_config

class SearchSpaceBase(_Frozen):
    """What every space does with its knobs: check a configuration and draw one, the same way for all.

    A *total* space (a kernel's :class:`KnobSpace`) sets every knob in every configuration and reports every
    problem at once; a *partial* space (an engine's flag space, ``partial = True``) lets a configuration set
    only some knobs (the rest keep their defaults, which constraints read as the effective values), coerces
    the values it sets, and stops at the first problem. Knob order is part of the space: it fixes the order
    of random draws, and a partial space first tosses a fair coin per knob (set it or leave it).
    """

    #: a configuration may leave knobs unset (an engine flag left out takes the engine's default)
    partial: ClassVar[bool] = False
    #: draws tried before the constraints are declared unsatisfiable (a sampler limit, not a measurement one)
    max_draws: ClassVar[int] = _MAX_DRAWS
    #: the error every refusal raises (a kernel space's KnobSpaceError, an engine space's FlagSpaceError)
    error: ClassVar[type[Exception]] = KnobSpaceError

    @abstractmethod
    def knob_list(self) -> Sequence[AnyKnob]:
        """The space's knobs, in draw order."""

    @abstractmethod
    def constraint_list(self) -> list[Constraint]:
        """The constraints every configuration must satisfy."""

    def label(self) -> str:
        """How messages name the space's owner (an engine's name; a kernel space says "knob space")."""
        return "knob space"

    def lookup(self, name: str) -> AnyKnob:
        """The knob called ``name``. Raises: the space's error, listing the known names."""
        for k in self.knob_list():
            if k.name == name:
                return k
        known = [k.name for k in self.knob_list()]
        if self.partial:
            raise self.error(f"unknown {self.label()} flag '{name}'; known flags: {', '.join(known)}")
        raise self.error(f"no knob named {name!r}; knobs are {known}")

    def effective(self, config: Mapping[str, KnobValue]) -> dict[str, KnobValue | None]:
        """Every knob's value under ``config``: its own, or its default where it leaves the knob unset."""
        return {k.name: config.get(k.name, k.default) for k in self.knob_list()}

    def violations(self, config: Mapping[str, Any]) -> list[str]:
        """Why ``config`` is not a point of this total space (empty when it is)."""
        knobs = self.knob_list()
        problems: list[str] = []
        names = {k.name for k in knobs}
        for extra in sorted(set(config) - names):
            problems.append(f"unknown knob {extra!r}")
        for k in knobs:
            if k.name not in config:
                problems.append(f"knob {k.name!r} has no value")
            elif not k.contains(config[k.name]):
                problems.append(f"knob {k.name!r}: {config[k.name]!r} is not one of its values")
        if problems:
            return problems
        problems.extend(f"constraint violated: {c.describe()} ({message})"
                        for c, message in constraint_violations(self.constraint_list(), config))
        return problems

    def validate_config(self, config: Any) -> dict[str, KnobValue]:
        """Check a configuration and return it normalised: a total space's in knob order, a partial
        space's with its values coerced and its keys sorted.

        Raises:
            the space's error: naming the knob (flag) or constraint the configuration breaks and the
                legal values.
        """
        if not self.partial:
            problems = self.violations(config)
            if problems:
                raise self.error("configuration is outside the knob space: " + "; ".join(problems))
            return {k.name: config[k.name] for k in self.knob_list()}
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise self.error(f"a {self.label()} configuration is a mapping of flag -> value, got "
                             f"{type(config).__name__}")
        out: dict[str, KnobValue] = {}
        for name in sorted(config):
            if not isinstance(name, str):
                raise self.error(f"flag names are strings, got {name!r}")
            knob = self.lookup(name)
            assert isinstance(knob, RangeKnob), "a partial space holds range knobs"
            out[name] = knob.check(config[name], self.error)
        problems = [message for _, message in constraint_violations(self.constraint_list(), self.effective(out), out)]
        if problems:
            raise self.error(f"{self.label()} configuration breaks constraints: " + "; ".join(problems))
        return out

    def sample(self, rng: random.Random) -> dict[str, KnobValue]:
        """One legal configuration drawn from ``rng``: each knob in order (in a partial space, each only
        after a fair coin says to set it), redrawn until the constraints hold.

        Raises:
            the space's error: no legal configuration was found in ``max_draws`` draws (the constraints
                are unsatisfiable within the ranges).
        """
        for _ in range(self.max_draws):
            config = {k.name: k.draw(rng) for k in self.knob_list() if not self.partial or rng.random() < 0.5}
            try:
                return self.validate_config(config)
            except self.error:
                continue
        if self.partial:
            raise self.error(f"no legal {self.label()} configuration found in {self.max_draws} draws")
        raise self.error(f"no configuration satisfying the constraints was found in {self.max_draws} draws; "
                         "check the knob space's constraints for a contradiction")


# ---------------------------------------------------------------------- the kernel knob space

class KnobSpace(SearchSpaceBase):
    """A declared kernel search space: grid knobs, every one set in every configuration."""

    knobs: list[Knob] = Field(min_length=1)
    constraints: list[Constraint] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names(self) -> "KnobSpace":
        names = [k.name for k in self.knobs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"knob names must be unique; repeated: {dupes}")
        check_constraint_names(self.constraints, names, [k.name for k in self.knobs if k.numeric], what="knobs")
        return self

    def knob_list(self) -> Sequence[AnyKnob]:
        return self.knobs

    def constraint_list(self) -> list[Constraint]:
        return self.constraints

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
        """Raises: KnobSpaceError: no knob has that name (the message lists them)."""
        k = self.lookup(name)
        assert not isinstance(k, RangeKnob)
        return k

    def size(self) -> int:
        """Number of grid points before constraints (an upper bound on distinct configurations)."""
        n = 1
        for k in self.knobs:
            n *= len(k.values())
        return n
