"""The MCP server as clients see it: both protocol modes in-process, and stdio as Claude Code runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters

from autoresearch_mcp.app import build_server
from conftest import script_repo
from helpers import call

pytestmark = pytest.mark.anyio
CONTRACT = json.loads((Path(__file__).parents[1] / "tests" / "contract.json").read_text())


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_every_tool_has_an_output_schema_annotations_and_a_description(mode: str) -> None:
    async with Client(build_server(), mode=mode) as c:  # type: ignore[arg-type]
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert {"start_session", "list_experiments", "launch_experiment", "fetch_sky_logs", "commit_winner",
            "cancel_experiment", "stop_workers"} <= set(tools)
    for name, tool in tools.items():
        assert tool.output_schema and tool.output_schema.get("properties"), name
        assert tool.annotations is not None and tool.annotations.read_only_hint is not None, name
        assert tool.description and len(tool.description) <= 2048, name
        assert not {"anyOf", "oneOf", "allOf"} & set(tool.input_schema), name
        want = CONTRACT["tools"].get(name)
        if want:
            assert set(want["inputs"]) <= set(tool.input_schema["properties"]), name
            assert set(want["outputs"]) <= set(tool.output_schema["properties"]), name
    assert tools["list_experiments"].annotations.read_only_hint is True
    assert tools["cancel_experiment"].annotations.destructive_hint is True


def stdio(cwd: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "autoresearch_mcp", "serve"],
                                 cwd=str(cwd), env=dict(os.environ))


@pytest.mark.slow
async def test_stdio_server_answers_and_reports_errors_as_tool_errors(tmp_path: Path) -> None:
    async with Client(stdio(tmp_path)) as c:
        tools = (await c.list_tools()).tools
        assert len(tools) >= 7
        res = await c.call_tool("list_experiments", {})
    assert res.is_error and "call start_session" in res.content[0].text  # type: ignore[union-attr]


async def test_version_flag() -> None:
    out = subprocess.run([sys.executable, "-m", "autoresearch_mcp", "--version"], capture_output=True, text=True)
    assert out.stdout.startswith("autoresearch-mcp ")


@pytest.mark.slow
async def test_after_kill_9_the_ledger_survives_and_interrupted_experiments_are_lost(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, 'if [ -e slow ]; then sleep 60; fi; echo METRIC score=$((100 + RANDOM % 3))')
    params = stdio(repo)
    runner: psutil.Process | None = None
    with pytest.raises(BaseException):  # noqa: B017 - the client loses its server mid-session, as intended
        async with Client(params) as c:
            await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="k")
            launched = await call(c, "launch_experiment", title="slow", source="patch", repeats="auto",
                                  patch="--- /dev/null\n+++ b/slow\n@@ -0,0 +1 @@\n+x\n")
            with anyio.fail_after(60):
                while (await call(c, "fetch_sky_logs", experiment_id=launched["experiment_id"]))["status"] != "running":
                    await anyio.sleep(0.1)
            ledger = (repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()
            runner = psutil.Process(next(json.loads(line)["runtime"]["pid"] for line in ledger if '"pid"' in line))
            server = next(p for p in psutil.Process().children() if "autoresearch_mcp" in " ".join(p.cmdline()))
            server.send_signal(signal.SIGKILL)  # kill -9 the server, and only the server
            server.wait(10)
            await call(c, "list_experiments")
    assert runner is not None and runner.is_running() and runner.status() != psutil.STATUS_ZOMBIE
    # a torn last line, as a crash mid-write would leave
    with open(repo / ".autoresearch" / "ledger.jsonl", "a") as fh:
        fh.write('{"type": "status", "experiment_id": "')
    async with Client(stdio(repo)) as c:  # the new server binds the session left in its cwd
        listing = await call(c, "list_experiments")
    assert [e["status"] for e in listing["experiments"]] == ["lost"]
    assert any("torn" in w for w in listing["warnings"])
    gone, _ = psutil.wait_procs([runner], timeout=15)
    assert runner in gone or runner.status() == psutil.STATUS_ZOMBIE  # killed (nobody reaps orphans here)
    worktrees = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True,
                               text=True).stdout
    assert "prunable" not in worktrees
