"""Tool definitions for both providers, generated from the pydantic argument models.

One schema per tool, made once from its model: OpenAI gets ``{"type": "function", "function": {...}}``,
Anthropic ``{"name", "description", "input_schema"}``, both with the same JSON schema (references
inlined, titles dropped), so the two providers are offered exactly the same tools.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            return _inline(copy.deepcopy(defs[name]), defs)
        return {k: _inline(v, defs) for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with ``$defs`` inlined and titles removed; always an object schema."""
    raw = model.model_json_schema()
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _inline(raw, defs)
    schema.setdefault("properties", {})
    schema["type"] = "object"
    schema["additionalProperties"] = False
    return schema


def openai_definition(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": json_schema(model)}}


def anthropic_definition(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    return {"name": name, "description": description, "input_schema": json_schema(model)}
