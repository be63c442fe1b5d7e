"""How long the plugin's hooks take once the environment is installed (Claude Code waits for them).

Runs `hooks/run <hook>` with the JSON Claude Code sends, in a repository with a session (made
through the MCP server) and in one without, and prints the median and the slowest of 10 runs each.
The guard runs before every Bash call that mentions git and every Write or Edit, Stop at the end of
every turn. Last, what the session's reference-transaction hook adds to one ref update (a commit, a
branch) in the session's repository, against the same update where no hook is installed.

`--spellings` times only the guard, once per Bash command of a set an agent sends (reading, building,
git that reads, git that moves a session branch, text that mentions git, one-line programs), on and off the
session branch, and prints the median, p95 and slowest call (issue 33, item 12). `--root DIR` runs the hooks
of another checkout (`--root /work/main` gives the figures before a change).
Run: python benchmarks/bench_hooks.py [--spellings] [--root DIR]
"""

from __future__ import annotations

import argparse
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
# What an agent sends the Bash tool in a session, allowed and refused alike.
SPELLINGS = [
    "ls -la", "cat src/x.c", "make -j2", "cmake --build build -j 2", "./autoresearch.sh bench",
    'grep -rn "ggml_vec_dot" src/', "rg 'fused' -n src", "sed -n '1,80p' src/x.c", "wc -l src/*.c",
    'echo "done: $(date)"', "python3 -c \"print('hello')\"", "python3 -c \"print('git commit')\"",
    "python3 benchmarks/run.py --repeat 3", "head -n 40 README.md && tail -n 5 README.md",
    "git status", "git log --oneline -5", "git diff", "git diff --stat HEAD~1", "git show --stat HEAD",
    "git branch -a", "git stash list", 'git log --grep "fuse" --oneline', "git -C src status",
    "git commit -m x", "git commit -am 'tweak the kernel by hand'", "git reset --hard HEAD~1",
    "git checkout -b trial && git commit -am x", "git rebase -i HEAD~2", "git push --force origin HEAD",
    "git tag autoresearch/s HEAD", "git symbolic-ref refs/heads/autoresearch/s refs/heads/main",
    "git -c core.hooksPath=/dev/null rebase --update-refs main", "G=git; $G commit -m x",
    "bash -c 'git commit -m x'", "echo 'git commit -m x' | sh", "alias g=git\ng commit -m x",
    "python3 -c \"import subprocess; subprocess.run(['git', 'log', '-1'])\"",
    "echo abc > .git/refs/heads/autoresearch/s", "cat .git/HEAD", 'cd "$(git rev-parse --show-toplevel)" && ls',
]


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spellings", action="store_true", help="time the guard on SPELLINGS only")
    parser.add_argument("--root", type=Path, help="the checkout whose hooks/run is timed (default: this one)")
    given = parser.parse_args()
    global RUN
    if given.root:
        RUN = given.root.resolve() / "hooks" / "run"
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AUTORESEARCH_CACHE_DIR": str(Path(tmp) / "cache"), "XDG_DATA_HOME": str(Path(tmp)),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        os.environ.update(env)
        plain, with_session = make_repo(Path(tmp) / "plain", False), make_repo(Path(tmp) / "session", True)
        if given.spellings:
            spellings(with_session, env)
            return
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


def spellings(repo: Path, env: dict[str, str]) -> None:
    """Each of SPELLINGS through the guard, on the session branch and off it (main), three times each."""
    times, refused = [], 0
    for branch in ("autoresearch/" + current_tag(repo), "main"):
        git(repo, "checkout", "-q", branch)
        for command in SPELLINGS:
            event = {"cwd": str(repo), "hook_event_name": "PreToolUse", "tool_name": "Bash",
                     "tool_input": {"command": command}}
            for _ in range(3):
                start = time.perf_counter()
                done = subprocess.run(["bash", str(RUN), "guard"], input=json.dumps(event), capture_output=True,
                                      text=True, env=env, check=False, timeout=120)
                times.append(time.perf_counter() - start)
                refused += done.returncode == 2
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    print(f"guard on {len(SPELLINGS)} spellings x 2 branches x 3 ({len(times)} calls, {refused} refused) with "
          f"{RUN}: median {statistics.median(times) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
          f"max {times[-1] * 1000:.0f} ms; load {os.getloadavg()[0]:.1f}")


def current_tag(repo: Path) -> str:
    config = json.loads((repo / ".autoresearch" / "config.json").read_text())
    return str(config["tag"])


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
