"""An engine's flag space: names, types, ranges, defaults and the constraints between flags.

A *configuration* is a mapping from flag name to value for the flags set explicitly; a flag left out
takes the engine's own default (``FlagSpec.default`` documents it; ``None`` means "the engine decides").
The empty configuration is therefore the engine's default launch, the honest baseline of every engine
trial. :meth:`FlagSpace.validate_config` is the one place a configuration is checked: a tuner's proposal,
a task file's defaults and a search sample all pass through it.

Constraints are the one search-space language's (:mod:`harness.space`: ``LessEqual``, ``Requires``,
``Implies``, ``Forbidden``), read on *effective* values (a flag left out has its default; ``None``
when the engine decides, and a constraint comparing it is skipped) with the configuration's own
flags as the explicitly set ones. What is engine-only lives here: a flag's command-line spelling.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.engines._errors import FlagSpaceError
from harness.space import (
    Constraint, Forbidden, Implies, KnobValue, LessEqual, Requires, check_constraint_names, constraint_violations,
)

FlagValue = KnobValue

__all__ = ["Constraint", "FlagSpace", "FlagSpec", "FlagValue", "Forbidden", "Implies", "LessEqual", "Requires",
           "parse_config_text", "render_config"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FlagSpec(_Model):
    """One launch flag.

    ``cli`` is the option as the engine spells it. Booleans render as ``cli`` when true and
    ``cli_false`` when false (``None``: nothing is passed for false). ``composite`` names a group the
    adapter renders as one argument (vLLM's ``--speculative-config`` JSON); such flags have no ``cli``.
    ``low``/``high`` bound numbers (inclusive); ``log`` asks samplers to draw on a log scale.
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    type: Literal["int", "float", "bool", "choice"]
    cli: str | None = None
    cli_false: str | None = None
    composite: str | None = None
    default: FlagValue | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[str] | None = None
    help: str = ""

    @model_validator(mode="after")
    def _shape(self) -> "FlagSpec":
        if (self.cli is None) == (self.composite is None):
            raise ValueError(f"flag {self.name}: exactly one of cli and composite must be given")
        if self.type in ("int", "float") and (self.low is None or self.high is None or self.low > self.high):
            raise ValueError(f"flag {self.name}: numeric flags need low <= high")
        if self.type == "choice" and not self.choices:
            raise ValueError(f"flag {self.name}: a choice flag needs choices")
        if self.log and (self.low is None or self.low <= 0):
            raise ValueError(f"flag {self.name}: a log-scale flag needs low > 0")
        return self

    def check(self, value: Any) -> FlagValue:
        """Return ``value`` coerced to this flag's type; raises FlagSpaceError when it does not fit."""
        where = f"flag '{self.name}'"
        if self.type == "bool":
            if not isinstance(value, bool):
                raise FlagSpaceError(f"{where} takes true or false, got {value!r}")
            return value
        if self.type == "choice":
            if not isinstance(value, str) or value not in (self.choices or []):
                raise FlagSpaceError(f"{where} takes one of {self.choices}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FlagSpaceError(f"{where} takes a number, got {value!r}")
        number: int | float
        if self.type == "int":
            if isinstance(value, float) and not value.is_integer():
                raise FlagSpaceError(f"{where} takes an integer, got {value!r}")
            number = int(value)
        else:
            number = float(value)
        assert self.low is not None and self.high is not None
        if not self.low <= number <= self.high:
            raise FlagSpaceError(f"{where} must lie in [{self.low:g}, {self.high:g}], got {value!r}")
        return number

    @property
    def numeric(self) -> bool:
        return self.type in ("int", "float")

    def sample(self, rng: random.Random) -> FlagValue:
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


class FlagSpace(_Model):
    """The flags an engine task lets a tuner set, with the constraints between them."""

    engine: str
    flags: list[FlagSpec]
    constraints: list[Constraint] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names(self) -> "FlagSpace":
        names = [f.name for f in self.flags]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate flag names in the {self.engine} flag space")
        check_constraint_names(self.constraints, names, [f.name for f in self.flags if f.numeric], what="flags")
        return self

    def spec(self, name: str) -> FlagSpec:
        for f in self.flags:
            if f.name == name:
                return f
        raise FlagSpaceError(
            f"unknown {self.engine} flag '{name}'; known flags: {', '.join(f.name for f in self.flags)}")

    def restrict(self, names: list[str]) -> "FlagSpace":
        """The sub-space of ``names`` (a task's tunable flags), keeping constraints among them only."""
        keep = [self.spec(n) for n in names]
        kept = set(names)
        cons = [c for c in self.constraints if c.names() <= kept]
        return FlagSpace(engine=self.engine, flags=keep, constraints=cons)

    def effective(self, config: dict[str, FlagValue]) -> dict[str, FlagValue | None]:
        return {f.name: config.get(f.name, f.default) for f in self.flags}

    def validate_config(self, config: Any) -> dict[str, FlagValue]:
        """Check a configuration and return it normalised (types coerced, keys sorted).

        Raises:
            FlagSpaceError: not a mapping, an unknown flag, a bad value, or a broken constraint;
                the message names the flag and the legal values.
        """
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise FlagSpaceError(f"a {self.engine} configuration is a mapping of flag -> value, got "
                                 f"{type(config).__name__}")
        out: dict[str, FlagValue] = {}
        for name in sorted(config):
            if not isinstance(name, str):
                raise FlagSpaceError(f"flag names are strings, got {name!r}")
            out[name] = self.spec(name).check(config[name])
        problems = [message for _, message in constraint_violations(self.constraints, self.effective(out), out)]
        if problems:
            raise FlagSpaceError(f"{self.engine} configuration breaks constraints: " + "; ".join(problems))
        return out

    def sample(self, rng: random.Random, max_tries: int = 200) -> dict[str, FlagValue]:
        """A random legal configuration: each flag is left at its default or drawn, constraints held.

        Raises:
            FlagSpaceError: no legal configuration was found in ``max_tries`` draws (the constraints
                are unsatisfiable within the ranges).
        """
        for _ in range(max_tries):
            cfg = {f.name: f.sample(rng) for f in self.flags if rng.random() < 0.5}
            try:
                return self.validate_config(cfg)
            except FlagSpaceError:
                continue
        raise FlagSpaceError(f"no legal {self.engine} configuration found in {max_tries} draws")

    def describe(self) -> list[dict[str, Any]]:
        """A plain listing for prompts and `atb tasks`: name, type, range or choices, default, help."""
        return [f.model_dump(exclude_none=True, exclude={"composite", "cli_false"}) for f in self.flags]


def render_config(config: dict[str, FlagValue]) -> str:
    """The canonical text of a configuration (sorted JSON): what is hashed and stored as the candidate."""
    return json.dumps(dict(sorted(config.items())), indent=2, sort_keys=True) + "\n"


def parse_config_text(text: str) -> dict[str, Any]:
    """Read a configuration from JSON or YAML text (a mapping of flag -> value).

    Raises:
        FlagSpaceError: the text is not a mapping, or does not parse.
    """
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise FlagSpaceError(f"the configuration is neither JSON nor YAML: {exc}") from exc
    if data is None:
        data = {}
    if isinstance(data, dict) and set(data) == {"flags"}:
        data = data["flags"] or {}
    if not isinstance(data, dict):
        raise FlagSpaceError("a configuration is a mapping of flag -> value, e.g. {\"parallel\": 4}")
    return data
