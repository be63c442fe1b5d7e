"""The plugin's Claude Code hooks (hooks/hooks.json); each reads the event's JSON object on stdin.

- `guard` (PreToolUse, Bash): refuses the git commands that would move, rewrite or delete a session
  branch `autoresearch/*` (and the server's `refs/autoresearch/*`) outside commit_winner: commit and
  amend, merge, rebase, cherry-pick, revert, am, pull, reset, branch -f/-m/-c/-d, checkout -B,
  switch -C, worktree add -B, update-ref, fetch into such a branch, force-push and remote deletion.
  It fails closed: a git command it cannot place (an unknown subcommand or alias on a session branch,
  a directory it cannot resolve, `update-ref --stdin` beside session branches) is refused too.
  It reads the Bash command the agent sends; a program that runs git itself is out of its sight.
  One commit is the agent's own: the benchmark and checks, on a session branch that lacks them
  (start_session's setup step).
- `session-start` (SessionStart): in a repository with a session, its state as context for the agent,
  with the agreement and the running experiments also after /compact and /clear.
- `stop` (Stop): a reminder when experiments still run or cloud workers may still be up.

`guard` uses the standard library only and `hooks/run` runs this file with the system python3, so
the guard holds before (and without) the plugin's venv; the other two run inside the package.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

PROTECTED = "autoresearch/"
SCRIPTS = ("autoresearch.sh", "autoresearch.checks.sh")  # until both are committed, a session is being set up
UNKNOWN = "?"  # a branch or directory the guard cannot tell: treated as a session branch (fail closed)
STARTED = time.monotonic()
DEADLINE_S = 20.0  # answer well within hooks.json's 30 s timeout, before Claude Code gives up on the hook
DENY_EXIT = 2  # PreToolUse: exit 2 blocks the tool call and shows stderr to Claude (exit 1 would not)
_SEPARATOR_CHARS = frozenset(";&|()\n")
_SHELL_PUNCTUATION = "();<>|&\n"
_FORCE = ("-f", "--force", "--force-with-lease", "--force-if-includes")
_ENDERS = ("--abort", "--quit")  # end a merge, rebase or pick in progress: the branch stays where it was
# Subcommands that never move a branch; anything neither here nor judged below is refused on a session branch.
_SAFE = frozenset({
    "add", "annotate", "apply", "archive", "bisect", "blame", "bundle", "cat-file", "check-attr",
    "check-ignore", "check-mailmap", "check-ref-format", "cherry", "clean", "clone", "column", "commit-graph",
    "commit-tree", "config", "count-objects", "credential", "describe", "diff", "diff-files", "diff-index",
    "diff-tree", "difftool", "fast-export", "format-patch", "fsck", "gc", "grep", "hash-object", "help",
    "index-pack", "init", "interpret-trailers", "log", "ls-files", "ls-remote", "ls-tree", "maintenance",
    "merge-base", "merge-file", "merge-tree", "mergetool", "mktag", "mktree", "mv", "name-rev", "notes",
    "pack-objects", "prune", "range-diff", "read-tree", "reflog", "remote", "repack", "request-pull", "rerere",
    "restore", "rev-list", "rev-parse", "rm", "shortlog", "show", "show-branch", "show-ref", "sparse-checkout",
    "stash", "status", "submodule", "tag", "unpack-objects", "update-index", "var", "verify-commit",
    "verify-pack", "verify-tag", "version", "whatchanged", "write-tree", "for-each-ref",
})
# Options whose value is the next word, per subcommand (so the value is not taken for a branch or a path).
_VALUED = {
    "": frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env",
                   "--super-prefix", "--list-cmds"}),
    "branch": frozenset({"-u", "--set-upstream-to", "--contains", "--no-contains", "--merged", "--no-merged",
                         "--points-at", "--sort", "--format"}),
    "checkout": frozenset({"-b", "-B", "--orphan", "--conflict", "--pathspec-from-file"}),
    "switch": frozenset({"-c", "-C", "--create", "--force-create", "--orphan", "--conflict"}),
    "rebase": frozenset({"--onto", "-s", "--strategy", "-X", "--strategy-option", "-x", "--exec", "-C",
                         "--whitespace", "-S", "--gpg-sign"}),
    "reset": frozenset({"--pathspec-from-file"}),
    "update-ref": frozenset({"-m"}),
    "symbolic-ref": frozenset({"-m"}),
    "worktree": frozenset({"-b", "-B", "--reason", "--expire"}),
    "push": frozenset({"-o", "--push-option", "--repo", "--receive-pack", "--exec"}),
    "fetch": frozenset({"--depth", "--deepen", "--shallow-since", "--shallow-exclude", "-j", "--jobs",
                        "--upload-pack", "--refmap", "-o", "--server-option", "--negotiation-tip"}),
    "pull": frozenset({"-s", "--strategy", "-X", "--strategy-option", "--depth", "--upload-pack", "-j"}),
}
# git's arguments, the directory (None: unknown), GIT_* variables, and whether only `&&` joins it to the git before
if TYPE_CHECKING:  # the hook runs on the system python3, which may predate subscripted builtins at run time
    from autoresearch_mcp.core.records import Record

    _Call = tuple[list[str], str | None, dict[str, str], bool]


# --- guard ------------------------------------------------------------------------------------------


def guard(event: dict[str, Any]) -> str | None:
    """Why this Bash command must not run, or None to let it run."""
    command = (event.get("tool_input") or {}).get("command")
    if event.get("tool_name") != "Bash" or not isinstance(command, str):
        return None
    return _Guard().command(command, str(event.get("cwd") or "."))


class _Guard:
    """Judges the git invocations of one Bash command; remembers the branch a checkout earlier in it moved to."""

    def __init__(self) -> None:
        # repository -> the branches HEAD may be on after an earlier checkout in the command (None: where it was)
        self.switched: dict[str, set[str | None]] = {}
        self.pending: dict[str, str] = {}  # a checkout in the previous git call, certain only if `&&` follows it
        self.depth = 0  # alias and script nesting

    def command(self, command: str, cwd: str | None) -> str | None:
        self.depth += 1
        try:
            if self.depth > 8:
                return _refuse(command, UNKNOWN, "it nests scripts or aliases too deeply to follow")
            for args, where, env, chained in _git_calls(command, cwd):
                for key, target in self.pending.items():
                    self.switched[key] = {target} if chained else {*self.switched.get(key, {None}), target}
                self.pending = {}
                reason = self.invocation(args, where, env)
                if reason:
                    return reason
            return None
        finally:
            self.depth -= 1

    def invocation(self, args: list[str], cwd: str | None, env: dict[str, str]) -> str | None:
        """Why `git args...` (run in cwd) must not run."""
        i = 0
        aliases: dict[str, str] = {}  # from `git -c alias.name=...`
        lookup: list[str] = []  # the options that choose the repository, for the guard's own git calls
        while i < len(args) and args[i].startswith("-"):
            option, value = args[i], args[i + 1] if i + 1 < len(args) else ""
            if option in _VALUED[""]:
                i += 1
            if option == "-C":
                cwd = None if cwd is None or _unresolved(value) else os.path.join(cwd, os.path.expanduser(value))
            elif option == "-c" and value.startswith("alias."):
                name, _, body = value[len("alias."):].partition("=")
                aliases[name] = body
            elif option in ("--git-dir", "--work-tree"):
                lookup += [option, value]
            elif option.startswith(("--git-dir=", "--work-tree=")):
                lookup.append(option)
            i += 1
        if i >= len(args):
            return None
        sub, rest = args[i], args[i + 1:]
        repo = _Repo(cwd, lookup, env)
        what = " ".join(["git", *args])
        if sub in _SAFE:
            return None
        judge = _JUDGES.get(sub)
        if judge is not None:
            return judge(self, repo, rest, what)
        definition = aliases[sub] if sub in aliases else repo.alias(sub)
        if definition is not None:  # an alias runs what it stands for
            if definition.startswith("!"):
                return self.command(definition[1:] + " " + " ".join(shlex.quote(a) for a in rest), cwd)
            return self.command(shlex.join(["git", *args[:i], *shlex.split(definition), *rest]), cwd)
        if not repo.is_command(sub):
            return None  # git answers "not a git command" and does nothing
        current = self.current(repo)
        hit = current if _protected(current) else next((a for a in rest if PROTECTED in a), None)
        return _refuse(what, hit, f"autoresearch cannot tell whether `git {sub}` moves it") if hit else None

    def current(self, repo: _Repo) -> str | None:
        """The branch HEAD is on; of several possible ones, a session branch first."""
        if repo.cwd is None:
            return UNKNOWN
        candidates = [repo.branch() if c is None else c for c in self.switched.get(repo.key, {None})]
        return next((c for c in candidates if _protected(c)), candidates[0])

    def head_mover(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        """commit, merge, cherry-pick, revert, am, pull...: they move the branch checked out."""
        if any(a in _ENDERS for a in rest):
            return None
        current = self.current(repo)
        return _refuse(what, current) if _protected(current) else None

    def commit(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        current = self.current(repo)
        if current is not None and _protected(current) and not _unresolved(current) and current != UNKNOWN \
                and "--amend" not in rest and not repo.has_scripts(current):
            return None  # setup: start_session asks for the benchmark and checks to be committed on its branch
        return self.head_mover(repo, rest, what)

    def reset(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        current = self.current(repo)
        if not _protected(current):
            return None
        if "--hard" in rest or any(a in ("--soft", "--keep", "--merge") for a in rest) or repo.cwd is None:
            return _refuse(what, current)
        before = rest[:rest.index("--")] if "--" in rest else rest
        target = next(iter(_positional("reset", before)), None)
        # `git reset <commit>` moves the branch; `git reset [HEAD] [--] <paths>` only unstages
        if target is not None and ("--" in rest or repo.is_commit(target)) and not repo.same_as_head(target):
            return _refuse(what, current)
        return None

    def rebase(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        named = _positional("rebase", rest)[1:2]  # `git rebase <upstream> <branch>` checks out <branch> first
        if named and _protected(named[0]) and not any(a in _ENDERS for a in rest):
            return _refuse(what, named[0])
        return self.head_mover(repo, rest, what)

    def pull(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        return self.fetch(repo, rest, what) or self.head_mover(repo, rest, what)

    def fetch(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        """A refspec `src:dst` writes dst; a session branch there is moved (remote-tracking refs are fine)."""
        for spec in _positional("fetch", rest)[1:]:
            dst = spec.lstrip("+").partition(":")[2]
            if _protected(dst) and not dst.startswith(("refs/remotes/", "refs/tags/")):
                return _refuse(what, dst)
        return None

    def checkout(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        return self.switch_to(repo, rest, what, "checkout")

    def switch(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        return self.switch_to(repo, rest, what, "switch")

    def switch_to(self, repo: _Repo, rest: list[str], what: str, sub: str) -> str | None:
        """checkout and switch: -B/-C may reset a branch; otherwise note where HEAD goes for the calls after."""
        created = _option_values(rest, {"-b", "-B", "-c", "-C", "--create", "--force-create", "--orphan"})
        forced = _option_values(rest, {"-B", "-C", "--force-create"})
        if forced and _protected(forced[-1]):
            return _refuse(what, forced[-1])
        if repo.cwd is None:
            return None
        targets = _positional(sub, rest)
        if created:
            self.pending[repo.key] = created[-1]
        elif "--detach" in rest or ("-d" in rest and sub == "switch"):
            self.pending[repo.key] = "(detached)"
        elif "--" not in rest and len(targets) == 1:
            target = targets[0]
            if target == "-":
                target = repo.previous_branch() or UNKNOWN
            if _protected(target) or repo.is_branch(target):
                self.pending[repo.key] = target
            # otherwise a commit (detached HEAD) or paths: judged as if still on the current branch
        return None

    def branch(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        flags = _short_flags(rest)
        names = _positional("branch", rest)
        if flags & {"d", "D", "--delete"}:
            targets = names
        elif flags & {"m", "M", "--move"}:
            targets = names if len(names) >= 2 else [self.current(repo) or "", *names]
        elif flags & {"c", "C", "--copy"}:
            targets = names[-1:]
        elif flags & {"f", "--force"}:
            targets = names[:1]
        else:
            return None  # listing, creating a new branch, upstream and description settings
        hit = next((t for t in targets if _protected(t)), None)
        return _refuse(what, hit) if hit else None

    def worktree(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        forced = _option_values(rest, {"-B"})
        return _refuse(what, forced[-1]) if forced and _protected(forced[-1]) else None

    def update_ref(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        if "--stdin" in rest:
            return _refuse(what, "autoresearch/*") if repo.has_session_refs() else None
        target = next(iter(_positional("update-ref", rest)), "")
        if _protected(target):
            return _refuse(what, target)
        current = self.current(repo)
        return _refuse(what, current) if target == "HEAD" and _protected(current) else None

    def symbolic_ref(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        names = _positional("symbolic-ref", rest)
        writes = len(names) >= 2 or bool({"-d", "--delete"} & set(rest))
        return _refuse(what, names[0]) if writes and names and _protected(names[0]) else None

    def push(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        refspecs = _positional("push", rest)[1:]  # after the remote
        named = [a for a in refspecs if _protected(a)]
        if ("--delete" in rest or "-d" in rest or any(a.startswith(":") for a in named)) and named:
            return _refuse(what, named[0])
        forced = any(a.startswith(_FORCE) for a in rest) or any(a.startswith("+") for a in refspecs)
        if "--mirror" in rest or "--prune" in rest or (forced and ({"--all", "--branches"} & set(rest))):
            return _refuse(what, "autoresearch/*") if repo.has_session_refs() else None
        if not forced:
            return None
        hit = next((t for t in named if t.lstrip("+") != "HEAD"), None)
        if hit is None and (not refspecs or any(t.lstrip("+").partition(":")[0] == "HEAD" for t in refspecs)):
            current = self.current(repo)
            hit = current if _protected(current) else None
        return _refuse(what, hit) if hit else None

    def filter_branch(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        if "--all" in rest or "--branches" in rest:
            return _refuse(what, "autoresearch/*") if repo.has_session_refs() else None
        hit = next((a for a in rest if _protected(a)), None)
        return _refuse(what, hit) if hit else self.head_mover(repo, rest, what)


_JUDGES = {
    "commit": _Guard.commit, "merge": _Guard.head_mover, "cherry-pick": _Guard.head_mover,
    "revert": _Guard.head_mover, "am": _Guard.head_mover, "subtree": _Guard.head_mover,
    "reset": _Guard.reset, "rebase": _Guard.rebase, "pull": _Guard.pull, "fetch": _Guard.fetch,
    "checkout": _Guard.checkout, "switch": _Guard.switch, "branch": _Guard.branch, "worktree": _Guard.worktree,
    "update-ref": _Guard.update_ref, "symbolic-ref": _Guard.symbolic_ref, "push": _Guard.push,
    "filter-branch": _Guard.filter_branch, "filter-repo": _Guard.filter_branch,
}


class _Repo:
    """Read-only questions to git about the repository a git invocation works in."""

    def __init__(self, cwd: str | None, lookup: list[str], env: dict[str, str]) -> None:
        self.cwd, self.lookup, self.env = cwd, lookup, {**os.environ, **env}
        self.key = f"{cwd}\0{lookup}\0{sorted(env.items())}"

    def _git(self, *args: str) -> str | None:
        """git's output, None when it answers no; the agent's `-c` options are never passed on.

        A git that cannot run or outlasts the hook's time raises, and hooks/run refuses the command.
        """
        if self.cwd is None:
            return None
        left = DEADLINE_S - (time.monotonic() - STARTED)
        if left <= 0:
            raise TimeoutError(f"the guard took over {DEADLINE_S:g} s (Claude Code stops it at 30 s)")
        out = subprocess.run(["git", "-C", self.cwd, *self.lookup, *args], capture_output=True, text=True,
                             timeout=left, env=self.env)
        return out.stdout.strip() if out.returncode == 0 else None

    def branch(self) -> str | None:
        if self.cwd is not None and not os.path.isdir(self.cwd):
            return UNKNOWN  # a directory the command itself creates first (git worktree add, mkdir)
        return self._git("symbolic-ref", "--short", "-q", "HEAD") or None

    def previous_branch(self) -> str | None:
        full = self._git("rev-parse", "--symbolic-full-name", "@{-1}") or ""
        return full[len("refs/heads/"):] if full.startswith("refs/heads/") else None

    def is_branch(self, name: str) -> bool:
        return self._git("show-ref", "--verify", "-q", f"refs/heads/{name}") is not None

    def is_commit(self, name: str) -> bool:
        return self._git("rev-parse", "--verify", "-q", "--end-of-options", f"{name}^{{commit}}") is not None

    def same_as_head(self, name: str) -> bool:
        head = self._git("rev-parse", "--verify", "-q", "HEAD^{commit}")
        return head is not None and head == self._git("rev-parse", "--verify", "-q", "--end-of-options",
                                                      f"{name}^{{commit}}")

    def has_scripts(self, branch: str) -> bool:
        """Whether the branch holds the benchmark and the checks (session.BENCH_SCRIPT, CHECKS_SCRIPT)."""
        listed = self._git("ls-tree", "--full-tree", "--name-only", f"refs/heads/{branch}", "--", *SCRIPTS)
        return listed is None or len(listed.split()) == len(SCRIPTS)

    def has_session_refs(self) -> bool:
        found = self._git("for-each-ref", "--count=1", "refs/heads/autoresearch/", "refs/autoresearch/")
        return self.cwd is None or found is None or bool(found)

    def alias(self, name: str) -> str | None:
        return self._git("config", "--get", f"alias.{name}")

    def is_command(self, name: str) -> bool:
        """Whether git would run something for `git name` (a builtin or a git-name program)."""
        exec_path = self._git("--exec-path") or ""
        return shutil.which(f"git-{name}", path=os.pathsep.join([exec_path, os.environ.get("PATH", "")])) is not None


def _git_calls(command: str, cwd: str | None) -> list[_Call]:
    """Every `git ...` in a shell command with the directory it runs in (following `cd`), scripts included."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=_SHELL_PUNCTUATION)
    lexer.whitespace_split = True
    lexer.whitespace = " \t\r"  # a newline separates commands
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: judge the words as they stand
        tokens = command.split()
    found: list[_Call] = []
    env: dict[str, str] = {}
    stack: list[str | None] = []
    segment: list[str] = []
    chained = False  # only `&&` since the last git call
    for token in [*tokens, ";"]:
        if token and set(token) <= set(_SHELL_PUNCTUATION) and set(token) & _SEPARATOR_CHARS:
            lead = 0
            while lead < len(segment) and (segment[lead] in ("export", "env") or _assignment(segment[lead], env)):
                lead += 1
            words = segment[lead:]
            if words[:1] in (["cd"], ["pushd"]):
                target = next((w for w in words[1:] if not w.startswith("-") or w == "-"), "~")
                cwd = None if cwd is None or _unresolved(target) or target == "-" else os.path.normpath(
                    os.path.join(cwd, os.path.expanduser(target)))
            for i, word in enumerate(words):
                if os.path.basename(word) == "git":
                    found.append((words[i + 1:], cwd, dict(env), chained))
                    chained = True
                elif any(c.isspace() for c in word) and (i == 0 or words[i - 1] not in ("-m", "--message")):
                    found += _git_calls(word, cwd)  # a script passed as one word: bash -c "git ...", eval
            segment = []
            chained = chained and token == "&&"
            if "(" in token:
                stack.append(cwd)
            if ")" in token and stack:
                cwd = stack.pop()
            continue
        segment.append(token)
    return found


def _assignment(word: str, env: dict[str, str]) -> bool:
    """`NAME=value` before a command; GIT_* ones (GIT_DIR, GIT_WORK_TREE...) are kept for the git calls after it."""
    name, eq, value = word.partition("=")
    if not eq or not name.replace("_", "a").isalnum() or name[:1].isdigit():
        return False
    if name.startswith("GIT_"):
        env[name] = value
    return True


def _unresolved(word: str) -> bool:
    return "$" in os.path.expandvars(word) or "`" in word


def _protected(name: str | None) -> bool:
    """A session branch or ref, or a name the guard cannot resolve (fail closed)."""
    return name is not None and (PROTECTED in name or name == UNKNOWN or _unresolved(name))


def _positional(sub: str, rest: list[str]) -> list[str]:
    """The arguments that are not options nor options' values."""
    out, skip = [], False
    valued = _VALUED.get(sub, frozenset())
    for a in rest:
        if skip:
            skip = False
        elif a.startswith("-") and a != "-":
            skip = a in valued
        else:
            out.append(a)
    return out


def _option_values(rest: list[str], options: set[str]) -> list[str]:
    """The values given to these options, as `-B name`, `-Bname` or `--force-create=name`."""
    values = []
    for i, a in enumerate(rest):
        if a in options and i + 1 < len(rest):
            values.append(rest[i + 1])
        elif a[:2] in options and len(a) > 2 and a[1] != "-":
            values.append(a[2:])
        elif a.partition("=")[0] in options and "=" in a:
            values.append(a.partition("=")[2])
    return values


def _short_flags(rest: list[str]) -> set[str]:
    """Flags present: the letters of `-dr`-style bundles and whole `--long` options."""
    flags: set[str] = set()
    for a in rest:
        if a.startswith("--"):
            flags.add(a.partition("=")[0])
        elif a.startswith("-") and len(a) > 1:
            flags.update(a[1:])
    return flags


def _refuse(what: str, branch: str | None, why: str = "") -> str:
    branch = branch or UNKNOWN
    where = "a session branch it cannot resolve" if branch == UNKNOWN or _unresolved(branch) else \
        f"the session branch {branch}"
    because = f" ({why})" if why else ""
    return (f"autoresearch: `{what}` is refused on {where}{because}: commits there go through "
            "commit_winner, which keeps only a measured, checked winner with its evidence, and the branch's history "
            "is the session's record. Launch the change as an experiment (launch_experiment) and commit it with "
            "commit_winner; to leave the session, check out another branch. A person can still run git in a "
            "terminal.")


# --- session-start and stop (inside the installed package) --------------------------------------------


def _session_root(event: dict[str, Any]) -> Path | None:
    """The top of the repository Claude Code works in, when a session was started there."""
    try:
        out = subprocess.run(["git", "-C", str(event.get("cwd") or "."), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    root = Path(out.stdout.strip()) if out.returncode == 0 else None
    return root if root and (root / ".autoresearch" / "config.json").is_file() else None


def session_start(event: dict[str, Any]) -> str:
    """The session's state for the agent's context, or nothing outside a session.

    After /compact and /clear (`source`) the same MCP server still runs and still measures: running
    experiments are running. After a start or a resume a new server binds the session and marks what the
    last one left unfinished `lost`."""
    root = _session_root(event)
    if root is None:
        return ""
    from autoresearch_mcp import notes, report
    from autoresearch_mcp.errors import AutoresearchError

    try:
        data = report.load(str(root))
    except AutoresearchError as exc:
        return f"autoresearch: the session in {root} cannot be read: {exc}\n"
    same_server = event.get("source") in ("compact", "clear")
    running = [r.exp for r in data.rows if r.outcome == report.RUNNING]
    lines = ["autoresearch: this repository has an optimization session (follow the /autoresearch brief).",
             report.summarize(data)]
    agreed = notes.agreement(root)
    lines.append(f"The agreement with the user (the latest {notes.AGREED!r} note): {agreed}" if agreed else
                 f"No {notes.AGREED!r} note yet: record the goal, constraints, budget and when to stop agreed with the "
                 f"user with add_note(text=\"{notes.AGREED} ...\").")
    if running:
        listed = ", ".join(f"{e.experiment_id} {e.title!r} ({e.status})" for e in running)
        if same_server:
            first = running[0].experiment_id
            lines.append(f"Still running (the server keeps measuring through /compact and /clear): {listed}. Wait for "
                         f"each with `fetch_sky_logs(experiment_id=\"{first}\", wait_s=600)` and act on its verdict; "
                         "do not launch them again.")
        else:
            lines.append(f"Running when the last server stopped: {listed}. The server marks them lost when it binds "
                         "the session; run each again with `launch_experiment(source=\"experiment\", "
                         "experiment_id=...)` (rounds that finished are kept).")
    text = notes.read(root, limit=1500)
    lines.append(f"Latest notes ({notes.notes_path(root)}):\n{text}" if text else
                 "No notes yet: record findings with add_note.")
    lines.append("The server is still bound to this session: continue from here; `list_experiments()` shows the "
                 "ledger and the notes." if same_server else
                 "To resume: `list_experiments()` shows the ledger and the notes; if it answers that there is no "
                 "session, start_session with the same tag binds it again.")
    return "\n".join(lines) + "\n"


def stop(event: dict[str, Any]) -> dict[str, Any] | None:
    """Block the first stop once with a reminder when work is still in flight; never twice in a row."""
    if event.get("stop_hook_active"):
        return None
    root = _session_root(event)
    if root is None:
        return None
    from autoresearch_mcp.core.ledger import Ledger, fold
    from autoresearch_mcp.models import FINAL_STATUSES

    # Stop runs at the end of every turn: the config is read as JSON, since the package's config model
    # would import the statistics stack (scipy) for its defaults.
    state = root / ".autoresearch"
    config = json.loads((state / "config.json").read_text())
    session_id = str(config.get("session_id"))
    records, _ = Ledger(state / "ledger.jsonl").records()
    # a host winner still checked on other platforms (issue 16) is still running too
    running = [e for e in fold(records).experiments.values()
               if e.launch.session_id == session_id and (e.status not in FINAL_STATUSES or any(
                   p.status not in FINAL_STATUSES for p in e.platforms.values()))]
    workers = cloud_workers(records, session_id)
    idle_minutes = (config.get("sky") or {}).get("idle_minutes_to_autostop", "some")
    if not running and not workers:
        return None
    parts = []
    if running:
        parts.append(f"{len(running)} experiment(s) are still running: "
                     + ", ".join(f"{e.experiment_id} ({e.title}, {e.status})" for e in running)
                     + ". Follow them with fetch_sky_logs(experiment_id, wait_s=...) and act on their verdicts, "
                     "or tell the person they are still running")
    if workers:
        parts.append(f"cloud workers may still be up and costing money: {', '.join(workers)} (autostop downs them "
                     f"after {idle_minutes} idle minutes). If the session is over or paused, "
                     "call stop_workers")
    return {"decision": "block", "reason": "autoresearch: " + "; ".join(parts) + "."}


def cloud_workers(records: list[Record] | list[dict[str, Any]], session_id: str) -> list[str]:
    """Clusters this session's experiments ran on since its last stop_workers, in order of first use
    (records, or the JSON objects of the ledger's lines)."""
    from autoresearch_mcp.core.records import parse

    mine: set[str] = set()
    used: dict[str, None] = {}
    for rec in (r if not isinstance(r, dict) else parse(r) for r in records):
        if rec.type == "launch" and rec.session_id == session_id:
            mine.add(rec.experiment_id)
        elif rec.type in ("status", "platform") and rec.experiment_id in mine:  # platform: its own workers
            cluster = rec.runtime.get("cluster")
            if isinstance(cluster, str):
                used[cluster] = None
        elif rec.type == "workers" and rec.session_id == session_id:
            used.clear()
    return list(used)


def main(argv: list[str]) -> int:
    """`hooks.py guard|session-start|stop` with the event on stdin (exit 2 denies a guarded command)."""
    name = argv[0] if argv else ""
    event = json.load(sys.stdin)
    if name == "guard":
        reason = guard(event)
        if reason:
            print(reason, file=sys.stderr)
            return DENY_EXIT
        return 0
    if name == "session-start":
        sys.stdout.write(session_start(event))
        return 0
    if name == "stop":
        decision = stop(event)
        if decision:
            print(json.dumps(decision))
        return 0
    print(f"unknown hook {name!r}: expected guard, session-start or stop", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
