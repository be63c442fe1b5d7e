"""What the tools cost the model's context: descriptions plus input schemas, as `tools/list` gives them.

Claude Code sends every tool's description and input schema to the model on every turn; the budget
for all of them together is 12,000 characters. Prints one line per tool, largest first, then the
total, through a real MCP client (legacy JSON-RPC mode, as Claude Code speaks).
Run: python benchmarks/bench_tool_surface.py
"""

from __future__ import annotations

import json

import anyio
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.toolschema import surface_chars

BUDGET = 12_000


async def main() -> None:
    async with Client(build_server(), mode="legacy") as client:
        tools = (await client.list_tools()).tools
    rows = sorted(((t.name, len(t.description or ""), len(json.dumps(t.input_schema)),
                    surface_chars(t.description, t.input_schema)) for t in tools), key=lambda r: -r[3])
    print(f"{'tool':<20} {'description':>11} {'schema':>7} {'total':>6}")
    for name, desc, schema, total in rows:
        print(f"{name:<20} {desc:>11} {schema:>7} {total:>6}")
    total = sum(r[3] for r in rows)
    print(f"{len(rows)} tools: {total} characters of {BUDGET} ({total / BUDGET:.0%}); "
          f"descriptions {sum(r[1] for r in rows)}, input schemas {sum(r[2] for r in rows)}")


if __name__ == "__main__":
    anyio.run(main)
