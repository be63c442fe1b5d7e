"""Small helpers for driving the server through a real MCP client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client

FINAL = {"done", "failed", "checks_failed", "cancelled", "lost"}


class ToolFailed(Exception):
    pass


async def call(client: Client, name: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    if result.is_error:
        raise ToolFailed(" ".join(getattr(c, "text", "") for c in result.content))
    assert result.structured_content is not None
    return result.structured_content


async def error(client: Client, name: str, **args: Any) -> str:
    """The message of a call that must fail with a ToolError."""
    result = await client.call_tool(name, args)
    assert result.is_error, f"{name} should have failed but returned {result.structured_content}"
    return " ".join(getattr(c, "text", "") for c in result.content)


async def wait_final(client: Client, experiment_id: str, timeout: float = 120.0) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            res = await call(client, "fetch_sky_logs", experiment_id=experiment_id, tail_lines=20)
            if res["status"] in FINAL:
                return res
            await anyio.sleep(0.1)


async def measured_copies(cache: Path, experiment_id: str, timeout: float = 120.0) -> list[Path]:
    """The copies an experiment's pair is measured in (each side's own tree and its copy of the other's), once the
    runner has made all four: where a bench reads a file a test writes while the experiment measures."""
    with anyio.fail_after(timeout):
        while True:
            found = [p for p in (cache / "worktrees").glob(f"*/measure-{experiment_id}-*/*/*") if p.is_dir()]
            if len(found) == 4:
                return found
            await anyio.sleep(0.05)
