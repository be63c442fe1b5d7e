"""What the model reads of the tools: compact input schemas within the 12,000-character budget."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.toolschema import compact_schema, surface_chars

pytestmark = pytest.mark.anyio
BUDGET = 12_000  # descriptions plus input schemas of all tools together (benchmarks/bench_tool_surface.py)


def _nodes(schema: Any) -> list[dict[str, Any]]:
    """Every schema object inside `schema` (property names are not schemas)."""
    if isinstance(schema, list):
        return [n for item in schema for n in _nodes(item)]
    if not isinstance(schema, dict):
        return []
    found = [schema]
    for key, value in schema.items():
        if key == "properties":
            found += [n for sub in value.values() for n in _nodes(sub)]
        elif key not in ("default", "enum", "const"):
            found += _nodes(value)
    return found


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_all_tools_fit_the_context_budget_without_generated_titles_or_null_unions(mode: str) -> None:
    async with Client(build_server(), mode=mode) as c:  # type: ignore[arg-type]
        tools = (await c.list_tools()).tools
    total = sum(surface_chars(t.description, t.input_schema) for t in tools)
    assert total <= BUDGET, f"tools cost {total} characters of context, over the {BUDGET} budget"
    for tool in tools:
        assert not {"anyOf", "oneOf", "allOf"} & set(tool.input_schema), tool.name  # Claude Code skips those
        for node in _nodes(tool.input_schema):
            assert "title" not in node, (tool.name, node)
            assert {"type": "null"} not in node.get("anyOf", []), (tool.name, node)


async def test_limits_are_schema_constraints_and_the_server_still_enforces_them() -> None:
    async with Client(build_server()) as c:
        tools = {t.name: t.input_schema for t in (await c.list_tools()).tools}
        tail = tools["fetch_sky_logs"]["properties"]["tail_lines"]
        assert (tail["minimum"], tail["maximum"]) == (0, 400)
        assert tools["fetch_sky_logs"]["properties"]["wait_s"]["maximum"] == 600
        assert tools["search_arxiv"]["properties"]["max_results"]["maximum"] == 50
        assert tools["survey_forks"]["properties"]["limit"]["maximum"] == 20
        res = await c.call_tool("search_arxiv", {"query": "fusion", "max_results": 500})
    assert res.is_error and "max_results" in res.content[0].text  # type: ignore[union-attr]


def test_compaction_keeps_a_property_named_title_and_every_constraint() -> None:
    schema = {
        "title": "launch_experimentArguments", "type": "object", "required": ["title"],
        "properties": {
            "title": {"title": "Title", "type": "string", "description": "short name"},
            "commit": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Commit"},
            "repeats": {"anyOf": [{"type": "integer", "minimum": 3}, {"const": "auto", "type": "string"},
                                  {"type": "null"}], "default": None, "title": "Repeats"},
            "paths": {"anyOf": [{"type": "array", "items": {"type": "string", "title": "Path"}},
                                {"type": "null"}], "default": None},
            "mode": {"default": {"title": "kept: a default is data"}, "type": "object"},
        },
    }
    assert compact_schema(schema) == {
        "type": "object", "required": ["title"],
        "properties": {
            "title": {"type": "string", "description": "short name"},
            "commit": {"type": "string"},
            "repeats": {"anyOf": [{"type": "integer", "minimum": 3}, {"const": "auto", "type": "string"}]},
            "paths": {"type": "array", "items": {"type": "string"}},
            "mode": {"default": {"title": "kept: a default is data"}, "type": "object"},
        },
    }
    assert schema["properties"]["commit"]["title"] == "Commit"  # the input is left as it was
