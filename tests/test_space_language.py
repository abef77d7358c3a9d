"""One search-space language (issue 18): kernel knob spaces and engine flag spaces share one set of
constraint types, with one meaning and one method, and their stored forms still load."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import harness.engines.flags as flags
import harness.tuning.search as search
import harness.space as space
from harness.engines import FlagSpaceError
from harness.engines.flags import FlagSpace, FlagSpec
from harness.space import BoolKnob, Forbidden, Implies, IntKnob, KnobSpace, KnobSpaceError, LessEqual, Requires


def _flags(constraints: list[dict]) -> FlagSpace:
    return FlagSpace.model_validate({"engine": "e", "flags": [
        {"name": "batch", "type": "int", "cli": "-b", "low": 1, "high": 64, "default": 16},
        {"name": "ubatch", "type": "int", "cli": "-ub", "low": 1, "high": 64},          # default: the engine's
        {"name": "spec", "type": "choice", "cli": "--spec", "choices": ["ngram", "cache"]},
        {"name": "cache", "type": "bool", "cli": "--cache", "cli_false": "--no-cache", "default": True}],
        "constraints": constraints})


def test_there_is_one_constraint_family() -> None:
    for name in ("LessEqual", "Requires", "Implies", "Forbidden"):
        assert getattr(flags, name) is getattr(space, name)
    assert search.LessEqual is space.LessEqual and search.Requires is space.Requires


def test_a_stored_le_means_the_same_in_a_knob_space_and_a_flag_space() -> None:
    le = {"kind": "le", "left": "ubatch", "right": "batch"}
    knobs = KnobSpace.model_validate({"knobs": [{"kind": "int", "name": "batch", "low": 1, "high": 64},
                                                {"kind": "int", "name": "ubatch", "low": 1, "high": 64}],
                                      "constraints": [le]})
    engine = _flags([le])
    assert type(knobs.constraints[0]) is type(engine.constraints[0]) is LessEqual
    assert knobs.constraints[0].model_dump() == engine.constraints[0].model_dump() == le
    with pytest.raises(KnobSpaceError, match=r"ubatch <= batch \(ubatch \(32\) must not exceed batch \(8\)\)"):
        knobs.validate_config({"batch": 8, "ubatch": 32})
    with pytest.raises(FlagSpaceError, match=r"ubatch \(32\) must not exceed batch \(8\)"):
        engine.validate_config({"batch": 8, "ubatch": 32})
    assert knobs.validate_config({"batch": 32, "ubatch": 8}) == {"batch": 32, "ubatch": 8}
    assert engine.validate_config({"batch": 32, "ubatch": 8}) == {"batch": 32, "ubatch": 8}


def test_a_value_left_to_the_engine_skips_the_comparison() -> None:
    le = LessEqual(left="ubatch", right="batch")
    assert le.violation({"ubatch": 4, "batch": None}) is None
    assert le.violation({"ubatch": 4, "batch": 2}) == "ubatch (4) must not exceed batch (2)"
    engine = _flags([le.model_dump()])
    assert engine.validate_config({"batch": 2}) == {"batch": 2}                 # ubatch is the engine's: skipped
    with pytest.raises(FlagSpaceError, match="must not exceed"):
        engine.validate_config({"ubatch": 32})                                  # batch's default 16 is known


def test_le_compares_numbers_only_and_names_known_parameters() -> None:
    with pytest.raises(ValidationError, match="not numbers"):
        _flags([{"kind": "le", "left": "spec", "right": "batch"}])
    with pytest.raises(ValidationError, match="not numbers"):
        KnobSpace(knobs=[BoolKnob(name="a"), IntKnob(name="b", low=0, high=1)],
                  constraints=[LessEqual(left="a", right="b")])
    with pytest.raises(ValidationError, match="unknown flags"):
        _flags([{"kind": "le", "left": "nope", "right": "batch"}])


def test_requires_reads_explicit_flags_and_every_knob_is_explicit() -> None:
    assert Requires.each(["a", "b"], needs="c", needs_value=1) == [Requires(flag="a", needs="c", needs_value=1),
                                                                   Requires(flag="b", needs="c", needs_value=1)]
    engine = _flags([{"kind": "requires", "flag": "ubatch", "needs": "spec", "needs_value": "ngram"},
                     {"kind": "requires", "flag": "batch", "needs": "cache", "needs_value": True}])
    assert engine.validate_config({"cache": False}) == {"cache": False}        # batch only has its default
    with pytest.raises(FlagSpaceError, match="batch needs cache=True"):
        engine.validate_config({"batch": 8, "cache": False})
    with pytest.raises(FlagSpaceError, match="ubatch needs spec='ngram'"):
        engine.validate_config({"ubatch": 8})
    knobs = KnobSpace(knobs=[BoolKnob(name="spec"), IntKnob(name="n", low=1, high=4)],
                      constraints=[Requires(flag="n", value=4, needs="spec", needs_value=True)])
    with pytest.raises(KnobSpaceError, match="n=4 needs spec=True"):
        knobs.validate_config({"spec": False, "n": 4})
    assert knobs.validate_config({"spec": False, "n": 3}) == {"spec": False, "n": 3}


def test_implies_and_forbidden_serve_flag_spaces_too() -> None:
    engine = _flags([Implies(when={"spec": ["cache"]}, then={"cache": [True]}).model_dump(),
                     Forbidden(combination={"spec": ["ngram"], "cache": [False]}).model_dump()])
    with pytest.raises(FlagSpaceError, match="then"):
        engine.validate_config({"spec": "cache", "cache": False})
    with pytest.raises(FlagSpaceError, match="not "):
        engine.validate_config({"spec": "ngram", "cache": False})
    assert engine.validate_config({"spec": "ngram"}) == {"spec": "ngram"}      # cache's default True


def test_an_engine_flag_spec_is_numeric_by_type() -> None:
    assert FlagSpec(name="x", type="float", cli="-x", low=0, high=1).numeric
    assert not FlagSpec(name="y", type="bool", cli="-y").numeric
