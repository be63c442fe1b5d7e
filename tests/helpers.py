"""Small helpers for driving the server through a real MCP client."""

from __future__ import annotations

import subprocess
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


async def build_tree_of(cache: Path, repo: Path, commit: str, timeout: float = 120.0) -> Path:
    """The build worktree of `commit` in the cache, once the executor has made it: the one place a confined
    run reads a file a test writes while it runs."""
    tree = subprocess.run(["git", "rev-parse", f"{commit}^{{tree}}"], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()
    with anyio.fail_after(timeout):
        while True:
            found = list((cache / "worktrees").glob(f"*/tree-{tree[:16]}"))
            if found:
                return found[0]
            await anyio.sleep(0.05)
