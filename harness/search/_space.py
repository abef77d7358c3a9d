"""The search package's view of the one search-space language, which lives in :mod:`harness.space`
(kernel knob spaces and engine flag spaces share its constraint types)."""

from harness.space import (
    BoolKnob, CategoricalKnob, Constraint, Forbidden, Implies, IntKnob, Knob, KnobSpace, KnobSpaceError, KnobValue,
    LessEqual, Requires,
)

__all__ = [
    "BoolKnob", "CategoricalKnob", "Constraint", "Forbidden", "Implies", "IntKnob", "Knob", "KnobSpace",
    "KnobSpaceError", "KnobValue", "LessEqual", "Requires",
]
