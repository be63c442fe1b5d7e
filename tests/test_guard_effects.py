"""The PreToolUse guard against the spellings of issues 32 (items 1-3) and 33 (item 12): refs that shadow a
session branch, symbolic refs, git runs without the reference-transaction hook or with --update-refs, shell
aliases, the setup window's commit, and text that only mentions git. Run as Claude Code runs it: `hooks/run
guard` with the event's JSON on stdin, in a real repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch_mcp import guardshell
from conftest import git, init_repo
from test_hooks import ROOT, bash_event, run_hook


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


# --- 33.12: the setup window's commit holds the benchmark and checks alone --------------------------------------


@pytest.fixture
def setup_window(tmp_path: Path) -> Path:
    """A session branch that lacks its scripts (start_session created them from templates), on which the
    agent also changed a tracked file."""
    path = tmp_path / "s"
    path.mkdir()
    (path / "kernel.c").write_text("int f(void) { return 1; }\n")
    init_repo(path)
    git(path, "checkout", "-q", "-b", "autoresearch/s")
    for script in ("autoresearch.sh", "autoresearch.checks.sh"):
        (path / script).write_text("#!/usr/bin/env bash\n")
    (path / "kernel.c").write_text("int f(void) { return 2; }\n")  # tweaked by hand
    return path


@pytest.mark.parametrize(("command", "denied"), [
    ("git commit -am 'tweak the kernel by hand'", True),
    ("git add -A && git commit -m 'autoresearch: benchmark and checks'", True),
    ("git add . && git commit -m x", True),
    ("git add autoresearch.sh autoresearch.checks.sh kernel.c && git commit -m x", True),
    ("git add autoresearch.sh autoresearch.checks.sh && git commit -am x", True),
    ("git add autoresearch.sh autoresearch.checks.sh && git commit -m x kernel.c", True),
    ("git add autoresearch.sh autoresearch.checks.sh && git commit -m 'autoresearch: benchmark and checks'", False),
    ("git add autoresearch.sh && git add autoresearch.checks.sh && git commit -qm 'benchmark and checks'", False),
    ("git add autoresearch.sh autoresearch.checks.sh; git commit -m x -- autoresearch.sh autoresearch.checks.sh",
     False),
])
def test_the_setup_commit_holds_the_scripts_alone(
        setup_window: Path, tmp_path: Path, command: str, denied: bool) -> None:
    result = run_hook("guard", bash_event(setup_window, command), tmp_path)
    assert result.returncode == (2 if denied else 0), result.stderr
    if denied:
        assert "kernel.c" in result.stderr and "commit_winner" in result.stderr


def test_a_file_staged_before_the_setup_commit_is_refused_with_it(setup_window: Path, tmp_path: Path) -> None:
    git(setup_window, "add", "kernel.c")
    command = "git add autoresearch.sh autoresearch.checks.sh && git commit -m 'autoresearch: benchmark and checks'"
    result = run_hook("guard", bash_event(setup_window, command), tmp_path)
    assert result.returncode == 2 and "kernel.c" in result.stderr
    git(setup_window, "reset", "-q", "kernel.c")  # control: unstaged again, the same command may run
    assert run_hook("guard", bash_event(setup_window, command), tmp_path).returncode == 0


# --- 33.12: text is not a command; 31: shell aliases are followed -----------------------------------------------


@pytest.mark.parametrize(("command", "on_session_branch", "denied"), [
    ("python3 -c \"print('git commit')\"", True, False),
    ("python3 -c \"print(f'run git commit -m {x} by hand')\"", True, False),
    ("node -e \"console.log('git push --force')\"", True, False),
    ("ruby -e 'puts(\"git commit -m x\")'", True, False),
    ("python3 -c \"print('git commit')\" | sh", True, True),  # what it prints is run
    ("python3 -c \"import os; print(os.system('git commit -m x'))\"", True, True),
    ("python3 -c \"import os; os.system('git commit -m x'); print('done')\"", True, True),
    ("alias g=git\ng commit -m x", True, True),
    ("shopt -s expand_aliases; alias ci='git commit -m'\nci x", True, True),
    ("alias up='git update-ref refs/heads/autoresearch/x'\nup feature", False, True),
    ("alias g=git\nunalias g\ng commit -m x", True, False),
    ("alias ll='ls -la'\nll", True, False),
    ("alias g=git\ng status", True, False),
])
def test_text_is_not_a_command_and_shell_aliases_are_followed(
        moving: Path, tmp_path: Path, command: str, on_session_branch: bool, denied: bool) -> None:
    if on_session_branch:
        git(moving, "checkout", "-q", "autoresearch/x")
    result = run_hook("guard", bash_event(moving, command), tmp_path)
    assert result.returncode == (2 if denied else 0), result.stderr


# --- 31: the evaluator's effects, as the policy receives them ---------------------------------------------------


def effects(command: str, cwd: str = "/repo") -> list[tuple[str, object]]:
    """What guardshell.Shell hands its judge for `command`, none refused."""
    seen: list[tuple[str, object]] = []

    def judge(effect: guardshell.Effect) -> str | None:
        if isinstance(effect, guardshell.GitCall):
            seen.append(("git", (effect.args, effect.cwd, effect.joined)))
        elif isinstance(effect, guardshell.Write):
            seen.append(("write", (effect.path, effect.cwd)))
        else:
            seen.append(("blind", effect.scope))
        return None

    guardshell.Shell(judge, guardshell.Oracle()).command(command, cwd)
    return seen


def test_the_evaluator_emits_git_calls_and_writes_in_order() -> None:
    assert effects("cd sub && git -c core.hooksPath=/dev/null commit -m x > log.txt") == [
        ("write", ("log.txt", "/repo/sub")), ("git", (["-c", "core.hooksPath=/dev/null", "commit", "-m", "x"],
                                                      "/repo/sub", False))]
    assert effects("git checkout a && git commit -m x; git push") == [
        ("git", (["checkout", "a"], "/repo", False)), ("git", (["commit", "-m", "x"], "/repo", True)),
        ("git", (["push"], "/repo", False))]
    assert effects("alias g='git -C /else'\ng tag autoresearch/x") == [
        ("git", (["-C", "/else", "tag", "autoresearch/x"], "/repo", False))]
    assert effects("echo x | tee -a .git/packed-refs") == [("write", ("-a", "/repo")),
                                                           ("write", (".git/packed-refs", "/repo"))]
    assert [kind for kind, _ in effects("python3 -c \"print('git commit')\"")] == ["write", "write"]  # its words
    assert [e for e in effects("python3 -c \"import os; git = 'g' + 'it'; os.system(git)\"") if e[0] != "write"] \
        == [("blind", "repo")]
    assert effects("sh ./no-such-script.sh")[0] == ("blind", "branch")


# --- 33.12: the hook's cheap path ---------------------------------------------------------------------------------


def test_a_python_shim_is_resolved_once_and_its_interpreter_remembered(moving: Path, tmp_path: Path) -> None:
    shims = tmp_path / "pyenv" / "shims"
    shims.mkdir(parents=True)
    log = tmp_path / "shim.log"
    (shims / "python3").write_text(f"#!/bin/sh\necho ran >> {log}\nexec {sys.executable} \"$@\"\n")
    (shims / "python3").chmod(0o755)
    env = {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    git(moving, "checkout", "-q", "autoresearch/x")
    for _ in range(3):
        assert run_hook("guard", bash_event(moving, "git commit -m x"), tmp_path, **env).returncode == 2
        assert run_hook("guard", bash_event(moving, "git status"), tmp_path, **env).returncode == 0
    assert log.read_text() == "ran\n"  # asked once which interpreter it runs, then never again
    remembered = (tmp_path / "cache" / "autoresearch-mcp" / "guard-python3").read_text().strip()
    assert Path(remembered).resolve() == Path(sys.executable).resolve()


@pytest.mark.parametrize("event", [
    {"tool_name": "Bash", "tool_input": {"command": "echo \"\\u00e9 \\\\ \\t\" 'a'", "timeout": 12.5}, "cwd": "/tmp"},
    {"tool_name": "Edit", "tool_input": {"file_path": "/x", "edits": [{"old_string": "a"}, None, True]}, "cwd": "."},
])
def test_the_event_is_read_as_json_reads_it_without_importing_json(event: dict[str, object]) -> None:
    text = json.dumps(event) + "\n"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from autoresearch_mcp.guard import read_event\n"
            "seen = read_event(sys.stdin.read()); loaded = sorted(m for m in ('json', 're') if m in sys.modules)\n"
            "import json; print(json.dumps([seen, loaded]))")  # json only now, for the answer
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT / "server")], input=text,
                         capture_output=True, text=True, check=True).stdout
    seen, modules = json.loads(out)
    assert seen == json.loads(text) and modules == []
