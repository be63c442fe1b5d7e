"""Lighter tool input schemas: what the model reads of every tool on every turn.

pydantic writes an auto-generated `title` on every field ("Experiment Id") and wraps each optional
field in `anyOf: [X, {"type": "null"}]` with `default: null`. Neither tells the model anything that
the property name and its absence from `required` do not, and together they were about a fifth of
the schemas. Arguments are still validated by the full pydantic model, which accepts null as before.
"""

from __future__ import annotations

import json
from typing import Any

_NULL = {"type": "null"}
# keywords whose value maps names to schemas (the names themselves are data, e.g. a property "title")
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
# keywords whose value is data, copied as it is
_DATA = frozenset({"default", "const", "enum", "examples"})


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The same schema without generated titles, with `anyOf [X, null]` collapsed to X."""
    node = dict(schema)
    variants = node.get("anyOf")
    if isinstance(variants, list) and _NULL in variants:
        rest = [v for v in variants if v != _NULL]
        del node["anyOf"]
        if "default" in node and node["default"] is None:
            del node["default"]  # an omitted optional argument is null: saying so adds nothing
        node = {**rest[0], **node} if len(rest) == 1 else {**node, "anyOf": rest}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _DATA:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _compact_any(sub) for name, sub in value.items()}
        else:
            out[key] = _compact_any(value)
    return out


def _compact_any(value: Any) -> Any:
    if isinstance(value, dict):
        return compact_schema(value)
    if isinstance(value, list):
        return [_compact_any(v) for v in value]
    return value


def surface_chars(description: str | None, input_schema: dict[str, Any]) -> int:
    """What one tool costs the model's context: its description plus its input schema as JSON."""
    return len(description or "") + len(json.dumps(input_schema))
