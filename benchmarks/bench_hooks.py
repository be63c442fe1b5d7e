"""How long the plugin's hooks take once the environment is installed (Claude Code waits for them).

Runs `hooks/run <hook>` with the JSON Claude Code sends, in a repository with a session (made
through the MCP server) and in one without, and prints the median and the slowest of 10 runs each.
The guard runs before every Bash call that mentions git and every Write or Edit, Stop at the end of
every turn. Last, what the session's reference-transaction hook adds to one ref update (a commit, a
branch) in the session's repository, against the same update where no hook is installed.
Run: python benchmarks/bench_hooks.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

from autoresearch_mcp.app import build_server

RUN = Path(__file__).resolve().parents[1] / "hooks" / "run"
REPEATS = 10


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args], cwd=repo,
                   check=True, capture_output=True)


def make_repo(path: Path, session: bool) -> Path:
    path.mkdir()
    (path / "autoresearch.sh").write_text('#!/usr/bin/env bash\ncase "$1" in bench) echo METRIC score=7 ;; esac\n')
    (path / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "bench")
    if session:
        async def start() -> None:
            async with Client(build_server()) as c:
                await c.call_tool("start_session", {"repo": str(path), "metric": "score", "direction": "higher"})
                await c.call_tool("add_note", {"text": "a finding, with its source"})

        anyio.run(start)
    return path


def timed(hook: str, event: dict[str, object], env: dict[str, str]) -> list[float]:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run(["bash", str(RUN), hook], input=json.dumps(event), capture_output=True, text=True, env=env,
                       check=False, timeout=120)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AUTORESEARCH_CACHE_DIR": str(Path(tmp) / "cache"), "XDG_DATA_HOME": str(Path(tmp)),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        os.environ.update(env)
        plain, with_session = make_repo(Path(tmp) / "plain", False), make_repo(Path(tmp) / "session", True)
        one_liner = "python3 -c \"import subprocess; subprocess.run(['git', 'log', '-1'])\""
        cases = [
            ("guard", "git commit -m x", plain), ("guard", "ls -la", plain),
            ("guard", "git commit -m x", with_session), ("guard", one_liner, with_session),
            ("guard", "Edit src/x.c", with_session), ("guard", "Edit .git/config", with_session),
            ("session-start", None, plain), ("session-start", None, with_session),
            ("stop", None, plain), ("stop", None, with_session),
        ]
        print(f"{'hook':<14} {'where':<10} {'command':<24} {'median':>8} {'max':>8}")
        for hook, command, repo in cases:
            event: dict[str, object] = {"cwd": str(repo), "hook_event_name": hook, "stop_hook_active": False}
            if command and command.startswith("Edit "):
                event.update(tool_name="Edit", tool_input={"file_path": str(repo / command[5:]), "old_string": "a",
                                                           "new_string": "b"})
            elif command:
                event.update(tool_name="Bash", tool_input={"command": command})
            times = timed(hook, event, env)
            print(f"{hook:<14} {repo.name:<10} {command[:24] if command else '':<24} {statistics.median(times):>7.2f}s "
                  f"{max(times):>7.2f}s")
        for repo in (plain, with_session):
            times = ref_updates(repo)
            print(f"{'ref update':<14} {repo.name:<10} {'git branch -f scratch':<24} "
                  f"{statistics.median(times) * 1000:>6.1f}ms {max(times) * 1000:>6.1f}ms")


def ref_updates(repo: Path) -> list[float]:
    """`git branch -f scratch HEAD` timed: one ref transaction (the reference-transaction hook runs twice)."""
    times = []
    for _ in range(REPEATS * 5):
        start = time.perf_counter()
        git(repo, "branch", "-f", "scratch", "HEAD")
        times.append(time.perf_counter() - start)
    return times


if __name__ == "__main__":
    main()
