"""The plugin's first start on a fresh machine: how soon Claude Code sees the server, and how soon a tool answers.

1. `claude --plugin-dir . mcp list` with a fresh HOME (so a fresh plugin data folder, nothing installed):
   its wall time and whether it says Connected (Claude Code gives up on a server after 30 s).
2. An MCP client (JSON-RPC, as Claude Code speaks) on bin/autoresearch-mcp-launch with a fresh data folder:
   the time until `tools/list` answers, and until the first tool call (`diff_backends` on the bundled
   example) answers, calling again while the bootstrap says the install is still running.
3. The same once installed (the next start), and `claude mcp list` then.
The install uses pip as this machine is set up (its index), or the wheels in --wheelhouse with no index.
No autoresearch-mcp on PATH is used. Claude Code comes from scripts/check_plugin.sh's cache (run it once).
Run: python benchmarks/bench_first_start.py [--wheelhouse DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = Path(os.environ.get("AUTORESEARCH_NPM_TOOLS", Path.home() / ".cache" / "autoresearch-mcp-ci" / "npm")) \
    / "node_modules" / ".bin" / "claude"
EXAMPLE = ROOT / "examples" / "normsoft"


def user_env(home: Path, wheelhouse: str | None) -> dict[str, str]:
    """A user's environment: a fresh HOME, no autoresearch-mcp on PATH, the plugin data folder left to Claude Code
    (or the launcher's default under HOME)."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "autoresearch-mcp").exists())
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_DATA_HOME", "AUTORESEARCH_PLUGIN_DATA", "CLAUDE_PLUGIN_DATA", "VIRTUAL_ENV")}
    env.update(HOME=str(home), PATH=path)
    if wheelhouse:
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=wheelhouse, UV_NO_INDEX="1", UV_FIND_LINKS=wheelhouse)
    return env


def mcp_list(env: dict[str, str], cwd: Path) -> str:
    started = time.monotonic()
    out = subprocess.run([str(CLAUDE), "--plugin-dir", str(ROOT), "mcp", "list"], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=300)
    line = next((x for x in out.stdout.splitlines() if "plugin:autoresearch" in x), out.stdout.strip()[-200:])
    state = "Connected" if "Connected" in line else "Failed to connect" if "Failed" in line else line
    return f"{time.monotonic() - started:.1f} s, {state}"


async def first_call(env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """Seconds until tools/list answers, until the first tool call answers, and the calls it took."""
    params = StdioServerParameters(command="bash", args=[str(ROOT / "bin" / "autoresearch-mcp-launch"), "serve"],
                                   env=env, cwd=str(cwd))
    started = time.monotonic()
    async with Client(params, mode="legacy") as c:
        await c.list_tools()
        listed = time.monotonic() - started
        calls = 0
        while True:
            calls += 1
            result = await c.call_tool("diff_backends", {"repo": str(EXAMPLE)})
            text = " ".join(getattr(x, "text", "") for x in result.content)
            if "still installing" not in text:
                break
        if result.is_error:
            raise SystemExit(f"the first call failed: {text}")
        return listed, time.monotonic() - started, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", help="install from these wheels only (no index)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        env = user_env(home, args.wheelhouse)
        if CLAUDE.exists():
            print(f"claude mcp list, fresh HOME and plugin data: {mcp_list(env, work)}")
            # the install it started goes on after it: let it end (it would slow the runs below), then drop it
            deadline = time.monotonic() + 900
            while not (done := list(home.glob(".claude/plugins/data/*/.install-seconds"))) \
                    and time.monotonic() < deadline:
                time.sleep(1)
            print(f"  the install it started ended after {done[0].read_text().strip() if done else '?'} s")
            subprocess.run(["rm", "-rf", str(home / ".claude" / "plugins" / "data")], check=True)
        else:
            print(f"claude mcp list: skipped ({CLAUDE} missing; scripts/check_plugin.sh installs it)")
        env["AUTORESEARCH_PLUGIN_DATA"] = str(Path(tmp) / "data")  # one folder for the client runs below
        listed, answered, calls = anyio.run(first_call, env, work)
        print(f"fresh data folder: tools/list {listed:.2f} s; first tool call answered {answered:.1f} s "
              f"({calls} call(s)); install took {(Path(tmp) / 'data' / '.install-seconds').read_text().strip()} s")
        listed, answered, calls = anyio.run(first_call, env, work)
        print(f"installed: tools/list {listed:.2f} s; first tool call answered {answered:.1f} s")
        if CLAUDE.exists():
            print(f"claude mcp list, installed: {mcp_list(env, work)}")


if __name__ == "__main__":
    main()
