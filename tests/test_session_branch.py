"""Git stays the server's, the gate's settings are the ledger's, and a crash inside commit_winner is
reconciled (issue 23, points 5 to 7). Each test plays a hostile or careless program against a real
server through a real MCP client, with real git, and holds a control beside it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from conftest import balanced_noise, git, script_repo
from helpers import call, error, wait_final

pytestmark = pytest.mark.anyio

NOISY_VALUE = (balanced_noise() + "awk -v v=$(cat value.txt) -v n=$n "
               "'BEGIN{printf \"METRIC score=%.5f\\n\", v*n}'")
# A candidate that holds a file `gate` waits in its build until the test puts `go` beside it, so the
# test acts while the job runs, whatever the machine's load.
GATED_BUILD = "if [ -e gate ]; then while [ ! -e go ]; do sleep 0.05; done; fi"


def value_patch(new: str = "110", gate: bool = False) -> str:
    patch = f"--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+{new}\n"
    return patch + ("--- /dev/null\n+++ b/gate\n@@ -0,0 +1 @@\n+wait\n" if gate else "")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return script_repo(tmp_path, NOISY_VALUE, build=GATED_BUILD)


async def start(c: Client, repo: Path, **kw: Any) -> dict[str, Any]:
    return await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="t", **kw)


async def winner(c: Client, new: str = "110") -> str:
    launched = await call(c, "launch_experiment", title=f"value {new}", source="patch", repeats=30,
                          patch=value_patch(new))
    assert (await wait_final(c, launched["experiment_id"]))["verdict"] == "improved"
    return str(launched["experiment_id"])


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def forged_commit(repo: Path, parent: str, message: str = "forged") -> str:
    """A commit of `parent`'s files plus one, made with git's plumbing (no ref moves)."""
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input="forged\n", capture_output=True,
                          text=True, check=True).stdout.strip()
    index = repo / ".git" / "forged-index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "read-tree", parent], cwd=repo, env=env, check=True)
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},forged.txt"], cwd=repo, env=env,
                   check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
    index.unlink()
    return git(repo, "commit-tree", tree, "-p", parent, "-m", message)


def worktree_of(tmp_path: Path, repo: Path, commit: str) -> Path:
    """The build worktree of `commit` in the cache, once the executor has made it."""
    tree = git(repo, "rev-parse", f"{commit}^{{tree}}")
    found = list((tmp_path / "cache" / "worktrees").glob(f"*/tree-{tree[:16]}"))
    assert len(found) == 1, found
    return found[0]


async def wait_for_worktree(tmp_path: Path, repo: Path, commit: str) -> Path:
    tree = git(repo, "rev-parse", f"{commit}^{{tree}}")
    with anyio.fail_after(120):
        while not list((tmp_path / "cache" / "worktrees").glob(f"*/tree-{tree[:16]}/gate")):
            await anyio.sleep(0.05)
    return worktree_of(tmp_path, repo, commit)


def fix_command(message: str) -> str:
    """The command an error gives a person to put the session branch back."""
    found = re.search(r"`(git -c core\.hooksPath=/dev/null [^`]+)`", message)
    assert found, message
    return found.group(1)


@contextlib.contextmanager
def ledger_appends_fail(repo: Path) -> Iterator[None]:
    """Stop the server between moving the branch and recording it: the ledger becomes a link, which the
    server reads through but never writes through, so the first record it appends fails."""
    ledger = repo / ".autoresearch" / "ledger.jsonl"
    real = ledger.with_name("ledger.real")
    ledger.rename(real)
    ledger.symlink_to(real.name)
    try:
        yield
    finally:
        ledger.unlink()
        real.rename(ledger)


# --- 5. the reference-transaction hook: every program, every spelling -----------------------------------------


async def test_a_candidate_like_process_cannot_move_the_session_branch(repo: Path, tmp_path: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
    head = git(repo, "rev-parse", "autoresearch/t")
    other = forged_commit(repo, head)
    baseline = worktree_of(tmp_path, repo, head)  # a linked worktree, as a candidate's build runs in
    git(repo, "checkout", "-q", "main")  # so that git itself does not refuse to move a checked-out branch
    for cwd, args in [(baseline, ("update-ref", "refs/heads/autoresearch/t", other)),
                      (baseline, ("push", ".", f"{other}:refs/heads/autoresearch/t")),
                      (repo, ("branch", "-f", "autoresearch/t", other)),
                      (repo, ("update-ref", "-d", "refs/heads/autoresearch/t")),
                      (repo, ("branch", "autoresearch/new", other)),
                      (repo, ("fetch", ".", f"{other}:refs/heads/autoresearch/t"))]:
        refused = run(cwd, *args)
        assert refused.returncode != 0 and "commit_winner" in refused.stderr, args
        assert git(repo, "rev-parse", "autoresearch/t") == head
    git(repo, "checkout", "-q", "autoresearch/t")
    refused = run(repo, "commit", "--allow-empty", "-m", "by hand")
    assert refused.returncode != 0 and "commit_winner" in refused.stderr
    assert git(repo, "rev-parse", "autoresearch/t") == head
    # control: other branches move as ever, and git's housekeeping rewrites refs without changing them
    assert run(baseline, "update-ref", "refs/heads/feature", other).returncode == 0
    assert git(repo, "rev-parse", "feature") == other
    for housekeeping in (("pack-refs", "--all"), ("gc", "-q")):
        assert run(repo, *housekeeping).returncode == 0
    assert git(repo, "rev-parse", "autoresearch/t") == head


@pytest.mark.parametrize("where", ["git-dir", "hooks-path"])
async def test_the_users_own_reference_transaction_hook_keeps_running_and_finalize_gives_it_back(
        repo: Path, tmp_path: Path, where: str) -> None:
    hooks = repo / ".git" / "hooks" if where == "git-dir" else tmp_path / "my-hooks"
    if where == "hooks-path":
        git(repo, "config", "core.hooksPath", str(hooks))
    hooks.mkdir(exist_ok=True)
    log = tmp_path / "user-hook.log"
    mine = f'#!/bin/sh\necho "$1 $(cat | tr "\\n" " ")" >> {log}\n'
    (hooks / "reference-transaction").write_text(mine)
    (hooks / "reference-transaction").chmod(0o755)
    async with Client(build_server()) as c:
        await start(c, repo)
        git(repo, "branch", "feature")  # the user's unrelated work
        assert "prepared" in log.read_text() and "refs/heads/feature" in log.read_text()
        other = forged_commit(repo, git(repo, "rev-parse", "HEAD"))
        refused = run(repo, "update-ref", "refs/heads/autoresearch/t", other)
        assert refused.returncode != 0 and "commit_winner" in refused.stderr
        assert "aborted" in log.read_text()  # theirs saw the refused update too
        assert git(repo, "status", "--porcelain") == ""  # nothing of the guard shows in the work tree
        final = await call(c, "finalize_session", repo=str(repo))
    assert "reference-transaction hook" in final["message"]
    assert (hooks / "reference-transaction").read_text() == mine
    assert [p.name for p in hooks.iterdir() if p.name.startswith("reference-transaction")] == ["reference-transaction"]
    moved = run(repo, "update-ref", "refs/heads/autoresearch/t", other)  # the guard is gone with the session
    assert moved.returncode == 0, moved.stderr


async def test_a_repository_without_hooks_gets_the_guard_and_loses_it_at_finalize(repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "reference-transaction"
    async with Client(build_server()) as c:
        await start(c, repo)
        assert hook.is_file() and "commit_winner" in hook.read_text()
        await call(c, "finalize_session", repo=str(repo))
    assert not hook.exists()


@pytest.mark.slow
async def test_the_servers_own_git_never_runs_a_planted_hook(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "planted-hook-ran"
    for name in ("post-checkout", "pre-commit", "post-commit", "reference-transaction"):
        hook = repo / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        hook.chmod(0o755)
    async with Client(build_server()) as c:
        await start(c, repo)  # checks out the branch, adds the baseline worktree
        exp_id = await winner(c)
        await call(c, "commit_winner", experiment_id=exp_id)  # moves the branch and the work tree
    assert not marker.exists()
    # control: the same hooks run for anyone else's git
    assert run(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "mine"), "HEAD").returncode == 0
    assert "post-checkout" in marker.read_text()


# --- 5. the server's own check: the branch against the ledger, the baseline against its commit ---------------


@pytest.mark.slow
async def test_a_branch_moved_around_the_hook_stops_the_next_commit_until_it_is_put_back(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        exp_id = await winner(c)
        head = git(repo, "rev-parse", "autoresearch/t")
        forged = forged_commit(repo, head)
        git(repo, "-c", "core.hooksPath=/dev/null", "update-ref", "refs/heads/autoresearch/t", forged)
        refused = await error(c, "commit_winner", experiment_id=exp_id)
        assert "autoresearch/t" in refused and head[:12] in refused and forged[:12] in refused
        assert "has no Autoresearch-Experiment trailer" in refused
        assert "start a new session" in refused
        launch = await error(c, "launch_experiment", title="x", source="patch", patch=value_patch("120"))
        assert forged[:12] in launch
        subprocess.run(fix_command(refused), shell=True, cwd=repo, check=True, capture_output=True)
        committed = await call(c, "commit_winner", experiment_id=exp_id)
    assert git(repo, "rev-parse", "autoresearch/t") == committed["commit"]
    assert git(repo, "rev-parse", "autoresearch/t~1") == head


@pytest.mark.slow
async def test_a_ref_written_by_hand_while_a_job_runs_fails_that_job(repo: Path, tmp_path: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        head = git(repo, "rev-parse", "autoresearch/t")
        launched = await call(c, "launch_experiment", title="gated", source="patch", repeats="auto",
                              patch=value_patch("110", gate=True))
        tree = await wait_for_worktree(tmp_path, repo, launched["candidate_commit"])
        (repo / ".git" / "refs" / "heads" / "autoresearch" / "t").write_text(forged_commit(repo, head) + "\n")
        (tree / "go").write_text("")
        res = await wait_final(c, launched["experiment_id"])
        assert res["status"] == "failed" and res["verdict"] is None
        assert "autoresearch/t" in res["error"] and "moved" in res["error"]
        listing = await call(c, "list_experiments")
        subprocess.run(fix_command(res["error"]), shell=True, cwd=repo, check=True, capture_output=True)
        # control: with the branch back, the same change is measured and kept
        again = await call(c, "launch_experiment", title="again", source="patch", repeats=30,
                           patch=value_patch("110"))
        assert (await wait_final(c, again["experiment_id"]))["verdict"] == "improved"
        await call(c, "commit_winner", experiment_id=again["experiment_id"])
    assert listing["kept"] == 0
    assert git(repo, "rev-parse", "autoresearch/t~1") == head


@pytest.mark.slow
async def test_a_baseline_changed_while_a_job_runs_fails_that_job_and_is_rebuilt(repo: Path, tmp_path: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        head = git(repo, "rev-parse", "autoresearch/t")
        baseline = worktree_of(tmp_path, repo, head)
        launched = await call(c, "launch_experiment", title="gated", source="patch", repeats="auto",
                              patch=value_patch("101", gate=True))
        tree = await wait_for_worktree(tmp_path, repo, launched["candidate_commit"])
        (baseline / "value.txt").write_text("50\n")  # a slower baseline: a no-op would now "win"
        (tree / "go").write_text("")
        res = await wait_final(c, launched["experiment_id"])
        # control: the next experiment measures against a baseline built afresh from its commit
        noop = await call(c, "launch_experiment", title="no-op", source="patch", repeats=30,
                          patch="--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+a note\n")
        control = await wait_final(c, noop["experiment_id"])
    assert res["status"] == "failed" and "baseline build" in res["error"] and "value.txt" in res["error"]
    assert control["status"] == "done" and control["verdict"] == "no_change"
    assert (baseline / "value.txt").read_text() == "100\n"


# --- 6. the gate's settings are the ledger's --------------------------------------------------------------------


async def test_a_config_changed_behind_the_server_is_refused_on_resume_and_a_deliberate_change_is_recorded(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
    config_path = repo / ".autoresearch" / "config.json"
    config = json.loads(config_path.read_text())
    config.update(alpha=0.5, min_effect=0)
    config_path.write_text(json.dumps(config))
    monkeypatch.chdir(repo)  # a new server binds the session it finds in its working directory
    async with Client(build_server()) as c:
        refused = await error(c, "list_experiments")
        launch = await error(c, "launch_experiment", title="x", source="patch", patch=value_patch())
        applied = await start(c, repo)  # the documented way to apply an edit
        listed = await call(c, "list_experiments")
    assert "alpha: 0.02 -> 0.5" in refused and "min_effect: 0.01 -> 0.0" in refused
    assert "start_session" in refused and "tag='t'" in refused and "alpha" in launch
    assert any("alpha: 0.02 -> 0.5" in w for w in applied["warnings"])
    assert listed["kept"] == 0
    sessions = [json.loads(line) for line in (repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()
                if json.loads(line)["type"] == "session"]
    assert [s["gate"]["alpha"] for s in sessions] == [0.02, 0.5]
    async with Client(build_server()) as c:  # control: the recorded settings resume without a word
        assert (await call(c, "list_experiments"))["kept"] == 0


# --- 7. a crash inside commit_winner ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_commit_the_crash_left_unrecorded_is_counted_after_a_restart(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        exp_id = await winner(c)
        head = git(repo, "rev-parse", "autoresearch/t")
        with ledger_appends_fail(repo):
            crashed = await error(c, "commit_winner", experiment_id=exp_id, title="faster value")
        moved = git(repo, "rev-parse", "autoresearch/t")
    assert "link" in crashed and moved != head  # the branch moved; the ledger does not know
    monkeypatch.chdir(repo)
    async with Client(build_server()) as c:
        listed = await call(c, "list_experiments")
        report = await call(c, "report", repo=str(repo))
        again = await error(c, "commit_winner", experiment_id=exp_id)
    assert listed["kept"] == 1 and listed["experiments"][0]["commit"] == moved
    assert report["kept"] == 1 and "already committed" in again
    records = [json.loads(line) for line in (repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()]
    commits = [r for r in records if r["type"] == "commit"]
    assert len(commits) == 1 and commits[0]["reconciled"] is True
    assert (commits[0]["experiment_id"], commits[0]["commit"], commits[0]["parent"], commits[0]["title"]) == (
        exp_id, moved, head, "faster value")


@pytest.mark.slow
@pytest.mark.parametrize("forgery", ["other files", "not a winner"])
async def test_a_forged_trailer_never_counts(repo: Path, monkeypatch: pytest.MonkeyPatch, forgery: str) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        exp_id = await winner(c)
        same = await call(c, "launch_experiment", title="no-op", source="patch", repeats=30,
                          patch="--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+a note\n")
        assert (await wait_final(c, same["experiment_id"]))["verdict"] == "no_change"
    head = git(repo, "rev-parse", "autoresearch/t")
    if forgery == "other files":  # names the winner, holds something else
        commit = forged_commit(repo, head, f"faster\n\nAutoresearch-Experiment: {exp_id}")
        why = "does not hold its measured candidate"
    else:  # holds the no-op candidate exactly, names it, but it never won
        tree = git(repo, "rev-parse", f"{same['candidate_commit']}^{{tree}}")
        commit = git(repo, "commit-tree", tree, "-p", head, "-m",
                     f"no-op\n\nAutoresearch-Experiment: {same['experiment_id']}")
        why = "verdict 'no_change'"
    git(repo, "-c", "core.hooksPath=/dev/null", "update-ref", "refs/heads/autoresearch/t", commit)
    monkeypatch.chdir(repo)
    async with Client(build_server()) as c:
        refused = await error(c, "list_experiments")
        final = await error(c, "finalize_session", repo=str(repo))
    assert commit[:12] in refused and why in refused and "not resumed" in refused
    assert commit[:12] in final
    records = [json.loads(line) for line in (repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()]
    assert not [r for r in records if r["type"] == "commit"]
