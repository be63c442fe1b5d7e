"""The PreToolUse guard against the spellings of issues 32 (items 1-3) and 33 (item 12): refs that shadow a
session branch, symbolic refs, git runs without the reference-transaction hook or with --update-refs, shell
aliases, the setup window's commit, and text that only mentions git. Run as Claude Code runs it: `hooks/run
guard` with the event's JSON on stdin, in a real repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import git, init_repo
from test_hooks import bash_event, run_hook


@pytest.fixture
def moving(tmp_path: Path) -> Path:
    """A session past its setup: autoresearch/x and feature, one commit ahead of main; HEAD on main."""
    path = tmp_path / "r"
    path.mkdir()
    (path / "a.txt").write_text("a\n")
    for script in ("autoresearch.sh", "autoresearch.checks.sh"):
        (path / script).write_text("#!/usr/bin/env bash\n")
    init_repo(path)
    git(path, "branch", "autoresearch/x")
    git(path, "checkout", "-q", "-b", "feature")
    (path / "b.txt").write_text("b\n")
    git(path, "add", "b.txt")
    git(path, "commit", "-q", "-m", "b")
    git(path, "checkout", "-q", "main")
    return path


# Each would move a session branch, shadow it, or let a later git move it unseen; the second field: run on it.
REFUSED = [
    # 32.1: a ref git prefers for the short name autoresearch/<tag>
    ("git tag autoresearch/x feature", False),
    ("git tag -f autoresearch/x", False),
    ("git tag -a -m 'faster' autoresearch/x feature", False),
    ("git tag -s autoresearch/x", False),
    ("git update-ref refs/tags/autoresearch/x feature", False),
    ("git update-ref autoresearch/x feature", False),
    ("git fetch . +feature:refs/tags/autoresearch/x", False),
    ("git fetch . feature:refs/remotes/autoresearch/x", False),
    ("git tag $TAG_NAME_UNSET feature", False),
    # 32.2: symbolic refs, which git's reference-transaction hook never sees
    ("git symbolic-ref refs/heads/autoresearch/x refs/heads/feature", False),
    ("git symbolic-ref refs/heads/autoresearch/old refs/heads/feature", False),
    ("git symbolic-ref refs/heads/other refs/heads/autoresearch/x", False),
    ("git symbolic-ref -d refs/heads/autoresearch/x", False),
    # 32.3: git without the hook, or moving branches besides the one checked out
    ("git -c core.hooksPath=/dev/null rebase --update-refs main", False),
    ("git -c core.hooksPath=/dev/null rebase main", False),
    ("git -c core.hookspath=/tmp/none merge feature", False),
    ("git --config-env=core.hooksPath=HOME cherry-pick feature", False),
    ("git rebase --update-refs main", False),
    ("git -c rebase.updateRefs=true rebase main", False),
    ("git config rebase.updateRefs true", False),
    ("git pull --rebase --update-refs . main", False),
    ("GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/dev/null git branch -f autoresearch/y",
     False),
    ("env GIT_CONFIG_PARAMETERS=\"'core.hooksPath'='/dev/null'\" git rebase main", False),
]

ALLOWED = [
    ("git tag v1.0", False),
    ("git tag -l 'autoresearch/*'", False),
    ("git tag", False),
    ("git tag -d autoresearch/x", False),  # how a shadowing tag is put right
    ("git tag -n autoresearch/x", False),
    ("git symbolic-ref HEAD", False),
    ("git symbolic-ref refs/heads/alias refs/heads/feature", False),
    ("git rebase --no-update-refs main", False),
    ("git rebase main", False),  # on main: nothing to move
    ("git -c core.hooksPath=/dev/null status", True),  # reads only
    ("git -c core.hooksPath=/dev/null log -1", False),
    ("git fetch . feature:refs/remotes/origin/autoresearch/x", False),
    ("git config rebase.autoStash true", False),
]


@pytest.mark.parametrize(("command", "on_session_branch"), REFUSED)
def test_the_guard_refuses_refs_that_shadow_a_session_branch_and_git_without_its_hook(
        moving: Path, tmp_path: Path, command: str, on_session_branch: bool) -> None:
    if on_session_branch:
        git(moving, "checkout", "-q", "autoresearch/x")
    result = run_hook("guard", bash_event(moving, command), tmp_path)
    assert result.returncode == 2, f"{command!r} got through"
    assert "commit_winner" in result.stderr


@pytest.mark.parametrize(("command", "on_session_branch"), ALLOWED)
def test_the_guard_lets_tags_listing_and_reading_run(
        moving: Path, tmp_path: Path, command: str, on_session_branch: bool) -> None:
    if on_session_branch:
        git(moving, "checkout", "-q", "autoresearch/x")
    result = run_hook("guard", bash_event(moving, command), tmp_path)
    assert result.returncode == 0, result.stderr


def test_rebase_update_refs_set_in_the_repository_is_refused(moving: Path, tmp_path: Path) -> None:
    git(moving, "checkout", "-q", "feature")
    assert run_hook("guard", bash_event(moving, "git rebase main"), tmp_path).returncode == 0
    git(moving, "config", "rebase.updateRefs", "true")
    assert run_hook("guard", bash_event(moving, "git rebase main"), tmp_path).returncode == 2
    assert run_hook("guard", bash_event(moving, "git rebase --no-update-refs main"), tmp_path).returncode == 0
