"""A session's benchmark can be fixed (issue 52): until the session launches its first experiment, a commit of its
scripts alone on its branch is its set-up, which start_session validates again and records as the session's
benchmark; after that the scripts stay as the experiments were measured with, and a new tag takes changed ones.
Each step runs as an agent would: real git (the reference-transaction hook start_session installs), the plugin's
PreToolUse guard on the same command, and a real MCP client."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.worker import sandbox
from conftest import git, script_repo
from helpers import call, error, wait_final
from test_hooks import bash_event, run_hook

pytestmark = pytest.mark.anyio

COMMIT = "git add autoresearch.sh && git commit -qm 'autoresearch: benchmark and checks'"


def bench_printing(repo: Path, lines: str) -> None:
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n  build) true ;;\n"
        f"  bench) {lines} ;;\nesac\n")


def agent_runs(repo: Path, tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    """`command` as the agent's Bash tool runs it: the PreToolUse guard first (stopping it there when it refuses),
    then the shell, with the repository's own git hooks."""
    guard = run_hook("guard", bash_event(repo, command), tmp_path)
    if guard.returncode != 0:
        return subprocess.CompletedProcess(command, guard.returncode, "", "guard: " + guard.stderr)
    return subprocess.run(command, shell=True, cwd=repo, capture_output=True, text=True)


async def start(c: Client, repo: Path, tag: str = "t", **kw: Any) -> dict[str, Any]:
    return await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag=tag, **kw)


def ledger_heads(repo: Path) -> list[str]:
    lines = (repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()
    return [r["head"] for r in map(json.loads, lines) if r["type"] == "session"]


@pytest.mark.slow
async def test_a_bench_changed_before_the_first_launch_is_committed_validated_and_becomes_the_sessions(
        tmp_path: Path) -> None:
    repo = script_repo(tmp_path, "echo METRIC score=100")
    async with Client(build_server()) as c:
        first = await start(c, repo)
        assert any("commit them alone on autoresearch/t" in s for s in first["next_steps"]), first["next_steps"]
        bench_printing(repo, "echo METRIC score=100; echo METRIC ops=1000")
        (repo / "value.txt").write_text("120\n")  # a tweak by hand, beside the bench
        mixed = agent_runs(repo, tmp_path, "git commit -qam 'bench and a tweak'")
        git(repo, "checkout", "value.txt")
        committed = agent_runs(repo, tmp_path, COMMIT)
        fixed = git(repo, "rev-parse", "HEAD")
        # nothing runs on an unvalidated bench: the launch says what to do
        held = await error(c, "launch_experiment", title="x", source="patch",
                           patch="--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+110\n")
        again = await start(c, repo)
        launched = await call(c, "launch_experiment", title="value 110", source="patch", repeats=30,
                              patch="--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+110\n")
        bench_printing(repo, "echo METRIC score=100; echo METRIC ops=2000")
        later = agent_runs(repo, tmp_path, COMMIT)
        by_hand = subprocess.run(COMMIT, shell=True, cwd=repo, capture_output=True, text=True)  # past the guard
        git(repo, "checkout", "autoresearch.sh")
        await wait_final(c, launched["experiment_id"])
    assert mixed.returncode != 0 and "value.txt" in mixed.stderr and "-- autoresearch.sh" in mixed.stderr
    assert committed.returncode == 0, committed.stderr
    assert "start_session" in held and "tag='t'" in held and fixed[:12] in held, held
    assert again["resumed"] and again["head_commit"] == fixed and "ops" in again["baseline"]
    assert ledger_heads(repo) == [first["head_commit"], fixed]
    assert json.loads((repo / ".autoresearch" / "config.json").read_text())["start_commit"] == fixed
    assert launched["base_commit"] == fixed
    # once the session has launched, its bench stays: the guard and the hook both say how to change it
    assert later.returncode == 2 and "new tag" in later.stderr, later.stderr
    assert by_hand.returncode != 0 and "new tag" in by_hand.stderr, by_hand.stderr
    assert git(repo, "rev-parse", "autoresearch/t") == fixed


@pytest.mark.slow
async def test_after_the_first_launch_a_new_tag_takes_the_changed_bench_as_its_set_up(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, "echo METRIC score=100")
    async with Client(build_server()) as c:
        await start(c, repo)
        launched = await call(c, "launch_experiment", title="value 110", source="patch", repeats=30,
                              patch="--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+110\n")
        await wait_final(c, launched["experiment_id"])
        bench_printing(repo, "echo METRIC score=100; echo METRIC ops=1000")
        same_tag = await error(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="t")
        carried = await start(c, repo, tag="t2")
        step = next(s for s in carried["next_steps"] if "git commit" in s)
        committed = agent_runs(repo, tmp_path, step[step.index("git add"):].rstrip("."))
        validated = await start(c, repo, tag="t2")
    assert "new tag" in same_tag and "git checkout -- autoresearch.sh" in same_tag, same_tag
    assert carried["branch"] == "autoresearch/t2" and not carried["baseline"], carried
    assert committed.returncode == 0, committed.stderr
    assert validated["resumed"] and "ops" in validated["baseline"]
    assert git(repo, "show", "autoresearch/t2:autoresearch.sh").count("ops=1000") == 1


@pytest.mark.slow
async def test_a_new_tag_from_the_projects_branch_takes_the_commit_its_next_steps_ask_for(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, "echo METRIC score=100")
    git(repo, "checkout", "-qb", "project", "HEAD~0")
    git(repo, "rm", "-q", "autoresearch.sh", "autoresearch.checks.sh")
    git(repo, "commit", "-qm", "the project without scripts")
    git(repo, "checkout", "-q", "main")
    async with Client(build_server()) as c:
        await start(c, repo)  # installs the hook, which covers every autoresearch/* branch
        git(repo, "checkout", "-q", "project")
        fresh = await start(c, repo, tag="fresh")
        bench_printing(repo, "echo METRIC score=100")
        step = next(s for s in fresh["next_steps"] if "git commit" in s)
        committed = agent_runs(repo, tmp_path, step[step.index("git add"):].rstrip("."))
        validated = await start(c, repo, tag="fresh")
    assert fresh["templates_created"], fresh
    assert committed.returncode == 0, committed.stderr
    assert validated["resumed"] and validated["baseline"]["score"]["mean"] == 100


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
async def test_a_bench_warned_as_fixed_time_is_switched_to_fixed_work_before_the_first_launch(tmp_path: Path) -> None:
    # a rate over 0.3 s of wall time: as long whatever the code does; then the same loop over a fixed count
    timed = ("python3 -c 'import time\nt=time.time(); n=0\nwhile time.time()-t<0.3: n+=1\n"
             "print(\"METRIC score=%.1f\" % (n/(time.time()-t)))'")
    counted = ("python3 -c 'import time\nt=time.time()\nfor n in range(8000000): pass\n"
               "print(\"METRIC score=%.1f\" % (8000000/(time.time()-t)))'")
    repo = script_repo(tmp_path, timed)
    (repo / ".autoresearch").mkdir()
    (repo / ".autoresearch" / "config.json").write_text(json.dumps({"threads": 1}) + "\n")
    async with Client(build_server()) as c:
        warned = await start(c, repo)
        bench_printing(repo, counted)
        committed = agent_runs(repo, tmp_path, COMMIT)
        fixed = await start(c, repo)
    assert warned["settings"]["bench"].startswith("fixed time"), warned["settings"]
    assert any("fixed time" in w for w in warned["warnings"]), warned["warnings"]
    assert committed.returncode == 0, committed.stderr
    assert not fixed["settings"]["bench"].startswith("fixed time"), fixed["settings"]  # fixed work (unclear, loaded)
    assert not any("fixed time" in w for w in fixed["warnings"]), fixed["warnings"]
