"""Tool definitions generated from the argument models, and the strict edit logic. No sandbox needed."""

from __future__ import annotations

import json

import pytest

from tools import (
    EditError,
    EditFileArgs,
    ReadFileArgs,
    Replacement,
    SetFlagsArgs,
    apply_replacements,
    apply_unified_diff,
    json_schema,
)
from tools._schema import anthropic_definition, openai_definition


def test_schemas_are_self_contained_objects() -> None:
    schema = json_schema(EditFileArgs)
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text and '"title"' not in text
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["required"] == ["path"]
    item = schema["properties"]["replacements"]["anyOf"][0]["items"]
    assert set(item["properties"]) == {"old", "new", "replace_all"} and item["required"] == ["old", "new"]
    assert json_schema(ReadFileArgs)["properties"]["start_line"]["minimum"] == 1
    assert "additionalProperties" in json.dumps(json_schema(SetFlagsArgs)["properties"]["flags"])


def test_both_providers_get_the_same_schema() -> None:
    o = openai_definition("read_file", "Read.", ReadFileArgs)
    a = anthropic_definition("read_file", "Read.", ReadFileArgs)
    assert o["type"] == "function" and o["function"]["name"] == a["name"] == "read_file"
    assert o["function"]["parameters"] == a["input_schema"] == json_schema(ReadFileArgs)


def test_replacements_are_exact() -> None:
    text = "x = 1\ny = 1\n"
    assert apply_replacements(text, [Replacement(old="x", new="z")]) == ("z = 1\ny = 1\n", 1)
    assert apply_replacements(text, [Replacement(old="= 1", new="= 2", replace_all=True)]) == ("x = 2\ny = 2\n", 2)
    with pytest.raises(EditError, match="occurs 2 times"):
        apply_replacements(text, [Replacement(old="= 1", new="= 2")])
    with pytest.raises(EditError, match="not found"):
        apply_replacements(text, [Replacement(old="w", new="v")])


def test_unified_diff_applies_only_where_it_matches() -> None:
    text = "a\nb\nc\nd\n"
    patch = "--- a/f\n+++ b/f\n@@ -2,2 +2,3 @@\n b\n-c\n+C\n+C2\n@@ -4 +5 @@\n-d\n+D\n"
    assert apply_unified_diff(text, patch) == ("a\nb\nC\nC2\nD\n", 2)
    # a hunk whose line numbers are off but whose lines are unique still applies at its one match
    assert apply_unified_diff(text, "@@ -9,1 +9,1 @@\n-c\n+X\n") == ("a\nb\nX\nd\n", 1)
    with pytest.raises(EditError, match="not in the file"):
        apply_unified_diff(text, "@@ -1 +1 @@\n-zz\n+y\n")
    with pytest.raises(EditError, match="match 2 places"):
        apply_unified_diff("q\nq\n", "@@ -5 +5 @@\n-q\n+r\n")
    with pytest.raises(EditError, match="no '@@"):
        apply_unified_diff(text, "--- a/f\n+++ b/f\n")
    with pytest.raises(EditError, match="before the first"):
        apply_unified_diff(text, "just words")


def test_edit_args_need_exactly_one_mode() -> None:
    with pytest.raises(ValueError):
        EditFileArgs(path="a.py")
    with pytest.raises(ValueError):
        EditFileArgs(path="a.py", patch="@@ -1 +1 @@\n", replacements=[Replacement(old="a", new="b")])
