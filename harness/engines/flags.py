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
from collections.abc import Sequence
from typing import Any, ClassVar

import yaml
from pydantic import Field, model_validator

from harness.engines._errors import FlagSpaceError
from harness.space import (
    AnyKnob, Constraint, Forbidden, Implies, KnobValue, LessEqual, RangeKnob, Requires, SearchSpaceBase,
    check_constraint_names,
)

FlagValue = KnobValue

__all__ = ["Constraint", "FlagSpace", "FlagSpec", "FlagValue", "Forbidden", "Implies", "LessEqual", "Requires",
           "parse_config_text", "render_config"]


class FlagSpec(RangeKnob):
    """One launch flag: a :class:`harness.space.RangeKnob` (its type, range or choices, default, and how it
    is checked and drawn) plus how the engine spells it.

    ``cli`` is the option as the engine spells it. Booleans render as ``cli`` when true and
    ``cli_false`` when false (``None``: nothing is passed for false). ``composite`` names a group the
    adapter renders as one argument (vLLM's ``--speculative-config`` JSON); such flags have no ``cli``.
    """

    cli: str | None = None
    cli_false: str | None = None
    composite: str | None = None

    @model_validator(mode="after")
    def _spelling(self) -> "FlagSpec":
        if (self.cli is None) == (self.composite is None):
            raise ValueError(f"flag {self.name}: exactly one of cli and composite must be given")
        return self

    def check_value(self, value: Any) -> KnobValue:
        """Return ``value`` coerced to this flag's type; raises FlagSpaceError when it does not fit."""
        return self.check(value, FlagSpaceError)


class FlagSpace(SearchSpaceBase):
    """The flags an engine task lets a tuner set, with the constraints between them: a partial space
    (``sample`` and ``validate_config`` are the one space language's), refusing with FlagSpaceError."""

    partial: ClassVar[bool] = True
    max_draws: ClassVar[int] = 200
    error: ClassVar[type[Exception]] = FlagSpaceError

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

    def knob_list(self) -> Sequence[AnyKnob]:
        return self.flags

    def constraint_list(self) -> list[Constraint]:
        return self.constraints

    def label(self) -> str:
        return self.engine

    def spec(self, name: str) -> FlagSpec:
        """Raises: FlagSpaceError: no such flag (the message lists the known ones)."""
        f = self.lookup(name)
        assert isinstance(f, FlagSpec)
        return f

    def restrict(self, names: list[str]) -> "FlagSpace":
        """The sub-space of ``names`` (a task's tunable flags), keeping constraints among them only."""
        keep = [self.spec(n) for n in names]
        kept = set(names)
        cons = [c for c in self.constraints if c.names() <= kept]
        return FlagSpace(engine=self.engine, flags=keep, constraints=cons)

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
