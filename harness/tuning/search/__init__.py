"""The seeded random-search baseline: a tuner like any other, over a declared knob space."""

from harness.space import (
    BoolKnob, CategoricalKnob, Forbidden, Implies, IntKnob, KnobSpace, KnobSpaceError, KnobValue, LessEqual, Requires,
)
from harness.tuning.search._random import RandomSearch, SearchSpace
from harness.tuning.search._run import TUNER_SPEC, run_random_search
from harness.tuning.search._task import random_search_task

__all__ = [
    "TUNER_SPEC", "BoolKnob", "CategoricalKnob", "Forbidden", "Implies", "IntKnob", "KnobSpace",
    "KnobSpaceError", "KnobValue", "LessEqual", "RandomSearch", "Requires", "SearchSpace", "random_search_task",
    "run_random_search",
]
