"""The guard's read-only questions to git about the repository a git invocation works in (guard.py asks them).

Standard library only, like the guard: each question runs git with posix_spawn (no subprocess import), is
asked once per run (a command asks the same questions again), and all of them within the hook's deadline.
"""

from __future__ import annotations

import os
import time

from autoresearch_mcp.guardshell import UNKNOWN

STARTED = time.monotonic()
DEADLINE_S = 20.0  # answer well within hooks.json's 30 s timeout, before Claude Code gives up on the hook
SCRIPTS = ("autoresearch.sh", "autoresearch.checks.sh")  # until both are committed, a session is being set up
SET_UP_REF = "refs/autoresearch/setup/"  # + a tag: the session has launched nothing, its branch takes set-up commits

_ASKED: dict[tuple[str, tuple[str, ...]], str | None] = {}  # git's answers in this run (the repository does not change)


class GitQuestions:
    """Read-only questions to git about the repository a git invocation works in."""

    def __init__(self, cwd: str | None, lookup: list[str], env: dict[str, str]) -> None:
        self.cwd, self.lookup, self.env = cwd, lookup, {**os.environ, **env}
        self.key = f"{cwd}\0{lookup}\0{sorted(env.items())}"

    def _asked(self, *args: str) -> str | None:
        """git's output, None when it answers no (or there is no directory to ask in), asked once per run: one
        command asks the same questions again (the branch, the session refs)."""
        if self.cwd is None:
            return None
        key = (self.key, args)
        if key not in _ASKED:
            _ASKED[key] = self._git(*args)
        return _ASKED[key]

    def _git(self, *args: str) -> str | None:
        """git's output, None when it answers no; the agent's `-c` options are never passed on.

        A git that cannot run or outlasts the hook's time raises, and hooks/run refuses the command.
        """
        left = DEADLINE_S - (time.monotonic() - STARTED)
        if left <= 0:
            raise TimeoutError(f"the guard took over {DEADLINE_S:g} s (Claude Code stops it at 30 s)")
        status, out = _spawn(["git", "-C", self.cwd or ".", *self.lookup, *args], self.env, left)
        return out.strip() if status == 0 else None

    def branch(self) -> str | None:
        if self.cwd is not None and not os.path.isdir(self.cwd):
            return UNKNOWN  # a directory the command itself creates first (git worktree add, mkdir)
        return self._asked("symbolic-ref", "--short", "-q", "HEAD") or None

    def previous_branch(self) -> str | None:
        full = self._asked("rev-parse", "--symbolic-full-name", "@{-1}") or ""
        return full[len("refs/heads/"):] if full.startswith("refs/heads/") else None

    def is_branch(self, name: str) -> bool:
        return self._asked("show-ref", "--verify", "-q", f"refs/heads/{name}") is not None

    def is_commit(self, name: str) -> bool:
        return self._asked("rev-parse", "--verify", "-q", "--end-of-options", f"{name}^{{commit}}") is not None

    def same_as_head(self, name: str) -> bool:
        head = self._asked("rev-parse", "--verify", "-q", "HEAD^{commit}")
        return head is not None and head == self._asked("rev-parse", "--verify", "-q", "--end-of-options",
                                                      f"{name}^{{commit}}")

    def has_scripts(self, branch: str) -> bool:
        """Whether the branch holds the benchmark and the checks (session.BENCH_SCRIPT, CHECKS_SCRIPT)."""
        listed = self._asked("ls-tree", "--full-tree", "--name-only", f"refs/heads/{branch}", "--", *SCRIPTS)
        return listed is None or len(listed.split()) == len(SCRIPTS)

    def takes_set_up(self, branch: str) -> bool:
        """Whether the session branch takes a set-up commit (its scripts alone): it lacks them, or its session has
        launched no experiment yet (start_session's ref gitops.SETUP_REF, which the first launch deletes)."""
        if not self.has_scripts(branch):
            return True
        tag = branch[len("autoresearch/"):]
        return self._asked("rev-parse", "-q", "--verify", SET_UP_REF + tag) is not None

    def staged(self) -> list[str] | None:
        """The paths the index holds changed from HEAD, from the top of the work tree."""
        out = self._asked("diff", "--cached", "--name-only", "-z")
        return None if out is None else [p for p in out.split("\0") if p]

    def listed(self, kinds: list[str], specs: list[str]) -> list[str] | None:
        """`git ls-files` of these kinds (--modified, --others: not ignored) under pathspecs (the whole tree
        without any), from the top of the work tree; None when the guard cannot tell."""
        if any(s == UNKNOWN or unresolved(s) for s in [*kinds, *specs]):
            return None
        out = self._asked("ls-files", "-z", "--full-name", "--exclude-standard", *kinds, "--", *(specs or [":/"]))
        return None if out is None else [p for p in out.split("\0") if p]

    def has_session_refs(self) -> bool:
        """Whether the repository has session branches (or the guard cannot tell: fail closed)."""
        if self.cwd is not None and not os.path.isdir(self.cwd):
            return False  # no repository there (yet)
        found = self._asked("for-each-ref", "--count=1", "refs/heads/autoresearch/", "refs/autoresearch/")
        return self.cwd is None or (found is None and self._asked("rev-parse", "--git-dir") is not None) or bool(found)

    def alias(self, name: str) -> str | None:
        return self._asked("config", "--get", f"alias.{name}")

    def config_true(self, key: str) -> bool:
        return self._asked("config", "--type=bool", "--get", key) == "true"

    def remote_url(self, name: str) -> str | None:
        return self._asked("config", "--get", f"remote.{name}.url")

    def common_dir(self) -> str | None:
        return self._asked("rev-parse", "--path-format=absolute", "--git-common-dir")

    def rev_parse_path(self, option: str) -> str | None:
        """A path `git rev-parse` gives (--show-toplevel, --git-dir...), absolute."""
        return self._asked("rev-parse", "--path-format=absolute", option) or None

    def exec_path(self) -> str | None:
        return self._asked("--exec-path")

    def is_command(self, name: str) -> bool:
        """Whether git would run something for `git name` (a builtin or a git-name program)."""
        exec_path = self.exec_path() or ""
        import shutil

        return shutil.which(f"git-{name}", path=os.pathsep.join([exec_path, os.environ.get("PATH", "")])) is not None


def unresolved(word: str) -> bool:
    """Whether `word` still holds a variable or a command substitution: a word the guard cannot resolve."""
    return "$" in os.path.expandvars(word) or "`" in word


def _spawn(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run `argv` (found on PATH) with stdin and stderr on /dev/null: its exit status and its output.

    posix_spawn with a pipe rather than subprocess, whose import (signal, threading, selectors...) costs the
    hook more than the git it runs. A program still running after `timeout` seconds is killed and raises."""
    if not hasattr(os, "posix_spawnp"):
        import subprocess

        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        return done.returncode, done.stdout
    import select

    read, write = os.pipe()  # neither is inherited; the child's stdout is a copy of `write`
    try:
        pid = os.posix_spawnp(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_DUP2, write, 1),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    finally:
        os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read], [], [], left)[0]:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise TimeoutError(f"{argv[0]} outlasted {timeout:.1f} s")
            chunk = os.read(read, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
    _, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    return code, b"".join(chunks).decode("utf-8", "surrogateescape")
