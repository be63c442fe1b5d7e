"""The plugin's hooks, run as Claude Code runs them: `hooks/run <hook>` with the event's JSON on stdin."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.hooks import cloud_workers
from calls import problems, tool_calls
from conftest import git, init_repo, script_repo
from helpers import call, measured_copies, wait_final

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "hooks" / "run"


def run_hook(hook: str, event: dict[str, Any], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"),  # no plugin venv: the installed package
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **env}
    environ.pop("AUTORESEARCH_PLUGIN_DATA", None)
    environ.pop("CLAUDE_PLUGIN_DATA", None)
    return subprocess.run(["bash", str(RUN), hook], input=json.dumps(event), capture_output=True, text=True,
                          env=environ, cwd=event["cwd"], timeout=120)


def bash_event(cwd: Path, command: str) -> dict[str, Any]:
    """A PreToolUse event as Claude Code sends it for the Bash tool."""
    return {"session_id": "5e1f4c2a", "transcript_path": str(cwd / "t.jsonl"), "cwd": str(cwd),
            "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": command, "description": "run a command"}, "tool_use_id": "toolu_01"}


def stop_event(cwd: Path, active: bool = False) -> dict[str, Any]:
    return {"session_id": "5e1f4c2a", "transcript_path": str(cwd / "t.jsonl"), "cwd": str(cwd),
            "permission_mode": "default", "hook_event_name": "Stop", "stop_hook_active": active,
            "last_assistant_message": "Done for now."}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "r"
    path.mkdir()
    (path / "a.txt").write_text("a\n")
    for script in ("autoresearch.sh", "autoresearch.checks.sh"):  # a session past its setup
        (path / script).write_text("#!/usr/bin/env bash\n")
    init_repo(path)
    git(path, "branch", "autoresearch/x")
    git(path, "branch", "feature")
    return path


def test_a_commit_on_a_session_branch_is_denied_and_on_main_allowed(repo: Path, tmp_path: Path) -> None:
    allowed = run_hook("guard", bash_event(repo, "git commit -am 'tweak'"), tmp_path)
    assert allowed.returncode == 0 and allowed.stderr == ""
    git(repo, "checkout", "-q", "autoresearch/x")
    denied = run_hook("guard", bash_event(repo, "git commit -am 'tweak'"), tmp_path)
    assert denied.returncode == 2  # exit 2 blocks the call; stderr is the reason Claude reads
    assert "autoresearch/x" in denied.stderr and "commit_winner" in denied.stderr


@pytest.mark.parametrize(("command", "on_session_branch", "denied"), [
    ("git reset --hard HEAD~1", True, True),
    ("git reset --hard HEAD~1", False, False),
    ("git status && git log --oneline -3", True, False),
    ("cd sub; git -c core.pager=cat commit -m x", True, True),
    ("bash -c 'git commit -m \"from a script\"'", True, True),
    ("git checkout autoresearch/x && git commit -m x", False, True),
    ("git checkout feature && git commit -m x", True, False),
    ("git push --force origin autoresearch/x", False, True),
    ("git push -f", True, True),
    ("git push --force-with-lease origin feature", True, False),
    ("git push origin +autoresearch/x", False, True),
    ("git push origin --delete autoresearch/x", False, True),
    ("git push origin :autoresearch/x", False, True),
    ("git push origin autoresearch/x", True, False),
    ("git branch -D autoresearch/x-review/01-fuse", False, True),
    ("git branch --delete --force autoresearch/x", False, True),
    ("git branch -d feature", True, False),
    ("git branch autoresearch/y", False, False),
    ("echo 'no git here' | wc -l", True, False),
])
def test_the_guard_protects_only_autoresearch_branches(
        repo: Path, tmp_path: Path, command: str, on_session_branch: bool, denied: bool) -> None:
    (repo / "sub").mkdir()
    if on_session_branch:
        git(repo, "checkout", "-q", "autoresearch/x")
    result = run_hook("guard", bash_event(repo, command), tmp_path)
    assert result.returncode == (2 if denied else 0), result.stderr
    assert ("commit_winner" in result.stderr) == denied


@pytest.mark.parametrize(("command", "on_session_branch", "denied"), [
    ("git commit --amend --no-edit", True, True),
    ("git merge feature", True, True),
    ("git merge --abort", True, False),
    ("git merge autoresearch/x", False, False),  # into main: the session branch does not move
    ("git rebase -i HEAD~1", True, True),
    ("git rebase main autoresearch/x", False, True),  # checks out autoresearch/x, then rebases it
    ("git rebase autoresearch/x", False, False),
    ("git cherry-pick feature", True, True),
    ("git revert --no-edit HEAD", True, True),
    ("git am fix.patch", True, True),
    ("git pull --rebase origin main", True, True),
    ("git reset --soft HEAD~1", True, True),
    ("git reset feature", True, True),  # feature is a commit ahead: the branch would move there
    ("git reset HEAD -- a.txt", True, False),
    ("git reset a.txt", True, False),
    ("git stash -m 'before git rebase' && git stash pop", True, False),
    ("git checkout -B autoresearch/x", False, True),
    ("git checkout -Bautoresearch/x feature", False, True),
    ("git checkout -B feature autoresearch/x", False, False),
    ("git switch -C autoresearch/x main", False, True),
    ("git switch --force-create=autoresearch/x", False, True),
    ("git worktree add -B autoresearch/x ../w", False, True),
    ("git branch -f autoresearch/x feature", False, True),
    ("git branch -f feature autoresearch/x", False, False),
    ("git branch -M feature autoresearch/x", False, True),
    ("git branch -m autoresearch/x renamed", False, True),
    ("git branch -m renamed", True, True),  # renames the branch checked out
    ("git update-ref refs/heads/autoresearch/x HEAD~1", False, True),
    ("git update-ref -m moved refs/heads/autoresearch/x feature", False, True),
    ("git update-ref -d refs/autoresearch/exp/0001", False, True),
    ("git update-ref HEAD feature", True, True),
    ("git update-ref refs/heads/feature HEAD", False, False),
    ("git update-ref --stdin < moves.txt", False, True),  # refs it cannot see, beside session branches
    ("git fetch . feature:autoresearch/x", False, True),
    ("git fetch origin +main:refs/heads/autoresearch/x", False, True),
    ("git fetch origin autoresearch/x:refs/remotes/origin/autoresearch/x", False, False),
    ("git push origin +HEAD", True, True),
    ("git push --mirror origin", False, True),
    ("git checkout main -- a.txt && git commit -m x", True, True),  # restores a file, stays on the branch
    ("git checkout feature; git commit -m x", True, True),  # if the checkout fails, the commit lands here
    ("git checkout autoresearch/x; git commit -m x", False, True),
    ("git checkout - && git commit -m x", False, False),  # back on main after the fixture's checkout -
    ("g''it commit -m x", True, True),
    ("git -C sub commit -m x", True, True),
    ("cd \"$NOWHERE_SET\" && git commit -m x", False, True),  # a directory it cannot resolve
    ("git -c alias.save='commit -m' save x", True, True),
    ("git frobnicate", True, False),  # git answers that it is no command
    ("git log --oneline autoresearch/x && git diff main autoresearch/x", False, False),
    ("git worktree add ../w autoresearch/x && git -C ../w commit -m x", False, True),  # a directory made first
])
def test_the_guard_refuses_whatever_moves_a_session_branch(
        repo: Path, tmp_path: Path, command: str, on_session_branch: bool, denied: bool) -> None:
    (repo / "sub").mkdir()
    git(repo, "checkout", "-q", "feature")
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "b.txt")
    git(repo, "commit", "-q", "-m", "b")
    git(repo, "checkout", "-q", "autoresearch/x" if on_session_branch else "main")
    result = run_hook("guard", bash_event(repo, command), tmp_path)
    assert result.returncode == (2 if denied else 0), result.stderr
    assert ("commit_winner" in result.stderr) == denied


def test_the_guard_follows_aliases_and_cd_into_another_repository(repo: Path, tmp_path: Path) -> None:
    git(repo, "config", "alias.ci", "commit -v")
    git(repo, "config", "alias.fixup", "!git commit --amend --no-edit")
    git(repo, "checkout", "-q", "autoresearch/x")
    for command in ("git ci -m x", "git fixup", "git -C . ci"):
        assert run_hook("guard", bash_event(repo, command), tmp_path).returncode == 2, command
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("a\n")
    init_repo(plain)
    assert run_hook("guard", bash_event(plain, f"cd {repo} && git commit -m x"), tmp_path).returncode == 2
    assert run_hook("guard", bash_event(plain, f"(cd {repo}; git status); git commit -m x"), tmp_path).returncode == 0
    assert run_hook("guard", bash_event(repo, f"cd {plain} && git commit -m x"), tmp_path).returncode == 0


def test_the_setup_commit_start_session_asks_for_is_allowed_and_later_commits_are_not(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    init_repo(repo)

    async def start() -> dict[str, Any]:
        async with Client(build_server()) as c:
            return await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="s")

    started = anyio.run(start)
    assert started["templates_created"] and git(repo, "branch", "--show-current") == "autoresearch/s"
    step = next(s for s in started["next_steps"] if "git commit" in s)
    command = step[step.index("git add"):].rstrip(".")
    assert run_hook("guard", bash_event(repo, command), tmp_path).returncode == 0, command
    assert run_hook("guard", bash_event(repo, "git commit --amend -m x"), tmp_path).returncode == 2
    subprocess.run(command, shell=True, cwd=repo, check=True, capture_output=True)
    denied = run_hook("guard", bash_event(repo, "git commit -am 'tweak'"), tmp_path)
    assert denied.returncode == 2 and "commit_winner" in denied.stderr


def test_a_failing_guard_denies_instead_of_failing_open(repo: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken-bin"
    broken.mkdir()
    (broken / "python3").write_text("#!/bin/sh\nexit 1\n")
    (broken / "python3").chmod(0o755)
    result = run_hook("guard", bash_event(repo, "git commit -m x"), tmp_path,
                      PATH=f"{broken}{os.pathsep}{os.environ['PATH']}")
    assert result.returncode == 2 and "refused to be safe" in result.stderr
    other = run_hook("guard", bash_event(repo, "ls -la"), tmp_path, PATH=f"{broken}{os.pathsep}{os.environ['PATH']}")
    assert other.returncode == 0  # commands without git never reach python


def test_a_guard_that_cannot_run_git_refuses(repo: Path, tmp_path: Path) -> None:
    tools = tmp_path / "no-git-bin"
    tools.mkdir()
    for tool in ("bash", "cat", "dirname", "python3"):
        found = shutil.which(tool)
        assert found is not None
        (tools / tool).symlink_to(found)
    git(repo, "checkout", "-q", "autoresearch/x")
    result = run_hook("guard", bash_event(repo, "git commit -m x"), tmp_path, PATH=str(tools))
    assert result.returncode == 2 and "refused to be safe" in result.stderr


@pytest.mark.slow
def test_session_start_prints_the_sessions_state_and_nothing_elsewhere(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("a\n")
    init_repo(plain)
    event = {"session_id": "5e1f4c2a", "transcript_path": "t.jsonl", "hook_event_name": "SessionStart",
             "source": "startup"}
    quiet = run_hook("session-start", {**event, "cwd": str(plain)}, tmp_path)
    assert quiet.returncode == 0 and quiet.stdout == ""

    repo = script_repo(tmp_path, "echo METRIC score=$((100 + RANDOM % 3))")

    async def prepare() -> None:
        async with Client(build_server()) as c:
            await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="s")
            await call(c, "add_note", text="diff_backends: RMS_NORM+MUL fused in CUDA, not on CPU")

    anyio.run(prepare)
    shown = run_hook("session-start", {**event, "source": "compact", "cwd": str(repo)}, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "Session s (autoresearch/s)" in shown.stdout and "score, higher is better" in shown.stdout
    assert "RMS_NORM+MUL fused in CUDA" in shown.stdout and "list_experiments" in shown.stdout


@pytest.mark.slow
def test_after_compaction_session_start_shows_the_agreement_and_running_experiments_as_running(
        tmp_path: Path) -> None:
    repo = script_repo(tmp_path, 'while [ -e slow ] && [ ! -e go ]; do sleep 0.1; done; echo METRIC score=100')
    event = {"session_id": "5e1f4c2a", "transcript_path": "t.jsonl", "hook_event_name": "SessionStart",
             "cwd": str(repo)}
    seen: dict[str, str] = {}

    async def scenario() -> str:
        async with Client(build_server()) as c:
            await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="s")
            await call(c, "add_note", text="Agreed: goal tg_tps up 5%; constraints: no accuracy loss; budget 2 h")
            for i in range(12):  # enough findings to push the agreement out of the latest notes
                await call(c, "add_note", text=f"finding {i}: " + "x" * 200)
            launched = await call(c, "launch_experiment", title="slow", source="patch", repeats="auto",
                                  patch="--- /dev/null\n+++ b/slow\n@@ -0,0 +1 @@\n+x\n")
            for source in ("compact", "clear", "startup"):
                shown = run_hook("session-start", {**event, "source": source}, tmp_path)
                assert shown.returncode == 0, shown.stderr
                seen[source] = shown.stdout
            for tree in await measured_copies(tmp_path / "cache", launched["experiment_id"]):
                (tree / "go").touch()
            await wait_final(c, launched["experiment_id"])
            return str(launched["experiment_id"])

    experiment_id = anyio.run(scenario)
    tools = anyio.run(tool_schemas)
    for source in ("compact", "clear"):
        text = seen[source]
        assert "Agreed: goal tg_tps up 5%; constraints: no accuracy loss; budget 2 h" in text
        assert "Still running" in text and experiment_id in text and "'slow'" in text
        assert f'fetch_sky_logs(experiment_id="{experiment_id}", wait_s=600)' in text
        # it is running, and the server still bound (the baseline's label may name start_session's runs)
        assert "lost" not in text and "start_session with the same tag" not in text
        assert not [p for c in tool_calls(text) for p in problems(c, tools)]  # each call it shows runs as written
    assert "marks them lost" in seen["startup"] and 'launch_experiment(source="experiment"' in seen["startup"]


def test_before_the_environment_is_installed_session_start_says_so_at_once(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, "echo METRIC score=1")

    async def prepare() -> None:
        async with Client(build_server()) as c:
            await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="s")

    anyio.run(prepare)
    bare_path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                if not (Path(p) / "autoresearch-mcp").exists())
    event = {"session_id": "5e1f4c2a", "transcript_path": "t.jsonl", "hook_event_name": "SessionStart",
             "source": "startup", "cwd": str(repo)}
    shown = run_hook("session-start", event, tmp_path, PATH=bare_path)
    assert shown.returncode == 0 and "installing its environment" in shown.stdout and "list_experiments" in shown.stdout
    assert not (tmp_path / "data" / "autoresearch-mcp").exists()  # the MCP server's first start installs it


async def tool_schemas() -> dict[str, dict[str, Any]]:
    async with Client(build_server(), mode="legacy") as c:
        return {t.name: t.input_schema for t in (await c.list_tools()).tools}


@pytest.mark.slow
def test_stop_reminds_once_while_an_experiment_runs(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, 'if [ -e slow ]; then sleep 2; fi; echo METRIC score=$((100 + RANDOM % 3))')
    seen: dict[str, subprocess.CompletedProcess[str]] = {}

    async def scenario() -> str:
        async with Client(build_server()) as c:
            await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="s")
            seen["idle"] = run_hook("stop", stop_event(repo), tmp_path)
            launched = await call(c, "launch_experiment", title="slow", source="patch", repeats="auto",
                                  patch="--- /dev/null\n+++ b/slow\n@@ -0,0 +1 @@\n+x\n")
            seen["busy"] = run_hook("stop", stop_event(repo), tmp_path)
            seen["again"] = run_hook("stop", stop_event(repo, active=True), tmp_path)
            await wait_final(c, launched["experiment_id"])
            seen["done"] = run_hook("stop", stop_event(repo), tmp_path)
            return str(launched["experiment_id"])

    experiment_id = anyio.run(scenario)
    assert seen["idle"].returncode == 0 and seen["idle"].stdout == ""
    decision = json.loads(seen["busy"].stdout)
    assert decision["decision"] == "block" and experiment_id in decision["reason"]
    assert "fetch_sky_logs" in decision["reason"]
    assert seen["again"].stdout == ""  # never twice in a row: Claude may end its turn
    assert seen["done"].stdout == ""  # quiet once everything finished


def test_without_the_environment_the_stop_hook_installs_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("a\n")
    init_repo(plain)
    bare_path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                if not (Path(p) / "autoresearch-mcp").exists())
    result = run_hook("stop", stop_event(plain), tmp_path, PATH=bare_path)
    assert result.returncode == 0 and result.stdout == ""
    assert not (tmp_path / "data" / "autoresearch-mcp").exists()


def test_cloud_workers_are_those_used_since_the_last_stop_workers() -> None:
    records = [
        {"type": "launch", "experiment_id": "a", "session_id": "s1"},
        {"type": "status", "experiment_id": "a", "status": "running", "runtime": {"cluster": "ar-s1-0"}},
        {"type": "launch", "experiment_id": "b", "session_id": "other"},
        {"type": "status", "experiment_id": "b", "status": "running", "runtime": {"cluster": "ar-other-0"}},
    ]
    assert cloud_workers(records, "s1") == ["ar-s1-0"]
    released = [*records, {"type": "workers", "session_id": "s1", "mode": "down", "released": ["ar-s1-0"]}]
    assert cloud_workers(released, "s1") == []
    again = [*released, {"type": "status", "experiment_id": "a", "status": "done", "runtime": {"cluster": "ar-s1-1"}}]
    assert cloud_workers(again, "s1") == ["ar-s1-1"]


# --- the guard against spellings that hide a branch move (issue 23), and commands that only look like them ----

# Each moves (or would let something move) autoresearch/x; the second field: run on the session branch.
# The first fifteen are the spellings that got through before: xargs, $(echo git), backticks, $G, push into the
# repository itself, symbolic-ref HEAD then commit, replace, a config alias, fast-import, a python3 -c program,
# writes into .git/refs and packed-refs.
BRANCH_MOVES = [
    ("echo 'branch -f autoresearch/x feature' | xargs git", False),
    ("printf 'autoresearch/x feature' | xargs git branch -f", False),
    ("$(echo git) commit -m x", True),
    ("`echo git` commit -m x", True),
    ("G=git; $G commit -m x", True),
    ("git push . feature:autoresearch/x", False),
    ("git symbolic-ref HEAD refs/heads/autoresearch/x && git commit -m x", False),
    ("git replace HEAD feature", False),
    ("git config alias.sv 'commit -m' && git sv x", True),
    ("git fast-import < stream.txt", False),
    ("python3 -c \"import subprocess; subprocess.run(['git', 'update-ref', 'refs/heads/autoresearch/x', 'feature'])\"",
     False),
    ("echo $(git rev-parse feature) > .git/refs/heads/autoresearch/x", False),
    ("printf '%s refs/heads/autoresearch/x\\n' abc >> .git/packed-refs", False),
    ("cp .git/refs/heads/feature .git/refs/heads/autoresearch/x", False),
    ("sed -i s/a/b/ .git/packed-refs", False),
    # and more of the same kinds
    ("echo autoresearch/x | xargs -I{} git branch -f {} feature", False),
    ("G=git && $G update-ref refs/heads/autoresearch/x feature", False),
    ("$UNSET_IN_THIS_TEST commit -m x", True),
    ("x=git; y=commit; $x $y -m x", True),
    ("$'\\x67it' commit -m x", True),
    ("git push . HEAD:refs/heads/autoresearch/x", False),
    ("git push \"$PWD\" +feature:autoresearch/x", False),
    ("git send-pack . feature:refs/heads/autoresearch/x", False),
    ("git config alias.mv2 '!git update-ref refs/heads/autoresearch/x feature' && git mv2", False),
    ("git config core.hooksPath /dev/null", False),
    ("git config --unset core.hooksPath", False),
    ("git -c core.hooksPath=/dev/null update-ref refs/heads/autoresearch/x feature", False),
    ("git update-ref --stdin <<< 'update refs/heads/autoresearch/x feature'", False),
    ("git receive-pack . < /dev/null", False),
    ("python3 -c 'import os; os.system(\"git commit -m x\")'", True),
    ("python3 -c \"import subprocess as s; r='refs/heads/autoresearch/x'; s.run(['git', 'update-ref', r, 'HEAD'])\"",
     False),
    ("python3 -c \"import os; os.system(f'git update-ref {ref} feature')\"", False),
    ("python3 - <<'EOF'\nimport subprocess\nsubprocess.run(['git', 'commit', '-m', 'x'])\nEOF", True),
    ("perl -e 'system(\"git\", \"branch\", \"-f\", \"autoresearch/x\", \"feature\")'", False),
    ("node -e \"require('child_process').execSync('git commit -m x')\"", True),
    ("tee .git/refs/heads/autoresearch/x < /dev/null", False),
    ("rm .git/hooks/reference-transaction", False),
    ("ln -sf feature .git/refs/heads/autoresearch/y", False),
    ("echo 'ref: refs/heads/autoresearch/x' > .git/HEAD", False),
    ("cd .git && echo abc > refs/heads/autoresearch/x", False),
    ("echo abc > \"$(git rev-parse --git-dir)/refs/heads/autoresearch/x\"", False),
    ("python3 -c \"open('.git/refs/heads/autoresearch/x', 'w').write('abc')\"", False),
    ("sh -c 'git commit -m x'", True),
    ("eval \"git commit -m x\"", True),
    ("echo 'git commit -m x' | bash", True),
    ("bash <<'EOF'\ngit commit -m x\nEOF", True),
    ("bash -o pipefail -c 'git commit -m x'", True),
    ("command git commit -m x", True),
    ("env GIT_TRACE=0 git commit -m x", True),
    ("nohup git commit -m x &", True),
    ("timeout 10 git commit -m x", True),
    ("/usr/bin/git commit -m x", True),
    ("\"git\" commit -m x", True),
    ("git -C \"$PWD\" commit -m x", True),
    ("cd \"$(git rev-parse --show-toplevel)\" && git commit -m x", True),
    ("(cd sub && git commit -m x)", True),
    ("echo \"$(git commit -m x)\"", True),
    ("if true; then git commit -m x; fi", True),
    ("git update-ref refs/heads/autoresearch/x $(git rev-parse feature)", False),
    ("git commit-tree -p HEAD -m x HEAD^{tree} | xargs git update-ref refs/heads/autoresearch/x", False),
    ("$(git --exec-path)/git-update-ref refs/heads/autoresearch/x feature", False),
    ("find . -maxdepth 0 -exec git branch -f autoresearch/x feature \\;", False),
    ("git stash && git checkout autoresearch/x && git stash pop && git commit -am x", False),
    ("GIT_DIR=$SOMEWHERE_UNSET git commit -m x", False),
]

# Commands that only mention git, or name the directory through $PWD or git itself: never refused.
HARMLESS = [
    ('grep -rn "git commit" .', True),
    ("rg 'git push --force' README.md", True),
    ('echo "use git commit to save"', True),
    ("echo 'git commit' > notes.txt", True),
    ('git log --grep "git commit" --oneline', True),
    ('git -C "$PWD" status', True),
    ('git -C "$(git rev-parse --show-toplevel)" log -1', True),
    ('cd "$(git rev-parse --show-toplevel)" && git diff', True),
    ('cd $PWD && ls', True),
    ('git -C "$PWD" commit -m x', False),
    ('cd "$(git rev-parse --show-toplevel)" && git commit -m x', False),
    ("git commit -m 'docs: explain git update-ref refs/heads/autoresearch/x'", False),
    ("cat .git/HEAD; ls .git/refs/heads; git show-ref", True),
    ("cp .git/HEAD head-copy.txt", True),
    ("${CC:-cc} --version", True),
    ("python3 -c \"print('hello')\"", True),
    ("python3 -c \"import subprocess; subprocess.run(['git', 'log', '-1'])\"", True),
    ("G=git; $G status", True),
    ("git config user.name 'Some One'", True),
    ("git config --get alias.ci", True),
    ("sed -i s/a/b/ a.txt", True),
    ("git push . feature:feature2", False),
    ("echo a | xargs git log --oneline -1", True),
]


@pytest.fixture
def moving(repo: Path) -> Path:
    """The guard's fixture repository with a branch one commit ahead of main, and a folder."""
    (repo / "sub").mkdir()
    git(repo, "checkout", "-q", "feature")
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "b.txt")
    git(repo, "commit", "-q", "-m", "b")
    return repo


@pytest.mark.parametrize(("command", "on_session_branch"), BRANCH_MOVES)
def test_the_guard_sees_through_spellings_of_a_branch_move(
        moving: Path, tmp_path: Path, command: str, on_session_branch: bool) -> None:
    git(moving, "checkout", "-q", "autoresearch/x" if on_session_branch else "main")
    result = run_hook("guard", bash_event(moving, command), tmp_path)
    assert result.returncode == 2, f"{command!r} got through"
    assert "commit_winner" in result.stderr


@pytest.mark.parametrize(("command", "on_session_branch"), HARMLESS)
def test_the_guard_lets_commands_that_only_mention_git_run(
        moving: Path, tmp_path: Path, command: str, on_session_branch: bool) -> None:
    git(moving, "checkout", "-q", "autoresearch/x" if on_session_branch else "main")
    result = run_hook("guard", bash_event(moving, command), tmp_path)
    assert result.returncode == 0, result.stderr


def edit_event(cwd: Path, tool: str, path: Path) -> dict[str, Any]:
    """A PreToolUse event as Claude Code sends it for the Write, Edit and MultiEdit tools."""
    given: dict[str, Any] = {"file_path": str(path)}
    given.update({"Write": {"content": "0123abc\n"}, "Edit": {"old_string": "a", "new_string": "b"},
                  "MultiEdit": {"edits": [{"old_string": "a", "new_string": "b"}]}}[tool])
    return {"session_id": "5e1f4c2a", "transcript_path": str(cwd / "t.jsonl"), "cwd": str(cwd),
            "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": tool,
            "tool_input": given, "tool_use_id": "toolu_02"}


@pytest.mark.parametrize(("tool", "target"), [
    ("Write", ".git/refs/heads/autoresearch/x"), ("Edit", ".git/packed-refs"), ("MultiEdit", ".git/config"),
    ("Write", ".git/hooks/reference-transaction"), ("Write", "link/heads/autoresearch/x"),
])
def test_the_edit_tools_never_write_a_git_directory_beside_session_branches(
        repo: Path, tmp_path: Path, tool: str, target: str) -> None:
    (repo / "link").symlink_to(repo / ".git" / "refs")  # a name that does not say .git
    result = run_hook("guard", edit_event(repo, tool, repo / target), tmp_path)
    assert result.returncode == 2 and "git directory" in result.stderr and "commit_winner" in result.stderr


def test_the_edit_tools_write_elsewhere_and_in_other_repositories(repo: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("a\n")
    init_repo(plain)
    for cwd, path in ((repo, repo / "src" / "x.c"), (repo, repo / ".gitignore"), (repo, repo / ".github" / "ci.yml"),
                      (plain, plain / ".git" / "config")):
        for tool in ("Write", "Edit", "MultiEdit"):
            result = run_hook("guard", edit_event(cwd, tool, path), tmp_path)
            assert result.returncode == 0, (tool, path, result.stderr)
