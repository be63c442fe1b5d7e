"""Session refs by their full names, and every autoresearch/* ref held to the ledger (issue 32, items 1-2).

A hostile or careless program names a ref so that git takes a session branch's short name for it (a tag
`autoresearch/<tag>`, a top-level `autoresearch/<tag>` file), or makes a session branch a symbolic ref,
which git's reference-transaction hook never sees. Each test plays it against a real server through a real
MCP client, with real git, and holds a control beside it (the session goes on once the ref is gone)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.git import gitops
from conftest import git, script_repo
from helpers import call, error, wait_final

pytestmark = pytest.mark.anyio

BENCH = "echo METRIC score=$(cat value.txt)"


def value_patch(new: str) -> str:
    return f"--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+{new}\n"


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


async def start(c: Client, repo: Path, tag: str = "t") -> dict[str, Any]:
    return await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag=tag)


def bench_changed(repo: Path, head: str) -> str:
    """A commit on `head` whose benchmark prints a better score whatever the code does (no ref moves)."""
    tree = git(repo, "rev-parse", f"{head}^{{tree}}")
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, capture_output=True, text=True,
                          check=True, input="#!/usr/bin/env bash\necho METRIC score=1000\n").stdout.strip()
    listing = subprocess.run(["git", "ls-tree", tree], cwd=repo, capture_output=True, text=True, check=True).stdout
    listing = re.sub(r"^100755 blob \w+\tautoresearch\.sh$", f"100755 blob {blob}\tautoresearch.sh", listing,
                     flags=re.M)
    new_tree = subprocess.run(["git", "mktree"], cwd=repo, input=listing, capture_output=True, text=True,
                              check=True).stdout.strip()
    return git(repo, "commit-tree", new_tree, "-p", head, "-m", "a better benchmark")


def fixes(message: str) -> list[str]:
    """The commands an error gives a person to put the refs right."""
    return re.findall(r"`((?:git|rm) [^`]+)`", message)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return script_repo(tmp_path, BENCH)


def test_a_branch_is_resolved_by_its_full_name_whatever_shadows_it(repo: Path) -> None:
    git(repo, "branch", "autoresearch/t")
    branch_head = git(repo, "rev-parse", "refs/heads/autoresearch/t")
    other = bench_changed(repo, branch_head)
    git(repo, "tag", "autoresearch/t", other)
    assert git(repo, "rev-parse", "autoresearch/t") == other  # git prefers the tag for the short name
    handle = gitops.open_repo(repo)
    assert gitops.branch_commit(handle, "autoresearch/t") == branch_head
    assert list(gitops.shadowing_refs(handle)) == ["refs/tags/autoresearch/t"]
    git(repo, "update-ref", "autoresearch/t", other)  # a ref file at the top of the git directory
    assert gitops.branch_commit(handle, "autoresearch/t") == branch_head
    assert list(gitops.shadowing_refs(handle)) == ["autoresearch/t", "refs/tags/autoresearch/t"]
    git(repo, "update-ref", "refs/autoresearch/exp/0001", other)  # the server's own refs shadow nothing
    git(repo, "update-ref", "refs/remotes/origin/autoresearch/t", other)  # origin/autoresearch/t
    assert list(gitops.shadowing_refs(handle)) == ["autoresearch/t", "refs/tags/autoresearch/t"]


async def test_a_tag_named_like_the_session_branch_stops_the_session_until_it_is_deleted(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        head = git(repo, "rev-parse", "refs/heads/autoresearch/t")
        faked = bench_changed(repo, head)
        refused = run(repo, "tag", "autoresearch/t", faked)  # the hook start_session installed
        assert refused.returncode != 0 and "refused to write refs/tags/autoresearch/t" in refused.stderr
        assert run(repo, "tag", "autoresearch-t", faked).returncode == 0  # control: another name is fine
        git(repo, "-c", "core.hooksPath=/dev/null", "tag", "autoresearch/t", faked)  # around the hook
        launch = await error(c, "launch_experiment", title="x", source="patch", patch=value_patch("110"))
        assert "refs/tags/autoresearch/t shadows a session branch" in launch
        assert fixes(launch) == ["git update-ref -d refs/tags/autoresearch/t"]
        for command in fixes(launch):  # deleting the shadow goes through the hook
            subprocess.run(command, shell=True, cwd=repo, check=True, capture_output=True)
        launched = await call(c, "launch_experiment", title="x", source="patch", repeats=30, patch=value_patch("110"))
        assert launched["base_commit"] == head
        await wait_final(c, launched["experiment_id"])


async def test_a_top_level_ref_named_like_the_session_branch_is_refused_and_drift(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        head = git(repo, "rev-parse", "refs/heads/autoresearch/t")
        faked = bench_changed(repo, head)
        refused = run(repo, "update-ref", "autoresearch/t", faked)
        assert refused.returncode != 0 and "refused to write autoresearch/t" in refused.stderr
        git(repo, "-c", "core.hooksPath=/dev/null", "update-ref", "autoresearch/t", faked)
        listing = await error(c, "launch_experiment", title="x", source="patch", patch=value_patch("110"))
        assert "autoresearch/t shadows a session branch" in listing
        assert fixes(listing) == [f"rm -- {repo / '.git' / 'autoresearch' / 't'}"]
        for command in fixes(listing):
            subprocess.run(command, shell=True, cwd=repo, check=True, capture_output=True)
        assert not (repo / ".git" / "autoresearch" / "t").exists()
        await call(c, "list_experiments")


@pytest.mark.slow
async def test_an_earlier_sessions_branch_made_a_symbolic_ref_is_drift(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo, tag="old")
        await start(c, repo, tag="t")
        git(repo, "branch", "side", "main")
        made = run(repo, "symbolic-ref", "refs/heads/autoresearch/old", "refs/heads/side")
        assert made.returncode == 0  # git runs no reference-transaction hook for it (git 2.39)
        refused = await error(c, "launch_experiment", title="x", source="patch", patch=value_patch("110"))
        assert "refs/heads/autoresearch/old is a symbolic ref to refs/heads/side" in refused
        for command in fixes(refused):
            subprocess.run(command, shell=True, cwd=repo, check=True, capture_output=True)
        assert gitops.branch_ref(gitops.open_repo(repo), "autoresearch/old") is not None
        launched = await call(c, "launch_experiment", title="x", source="patch", repeats=30, patch=value_patch("110"))
        await wait_final(c, launched["experiment_id"])
