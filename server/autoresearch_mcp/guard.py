"""The PreToolUse guard (hooks/hooks.json): an early, friendly refusal of whatever would move, rewrite,
shadow or delete a session branch `autoresearch/*` (or the server's `refs/autoresearch/*`) outside
commit_winner. It is a policy over effects: guardshell.py evaluates a Bash command line into the git
invocations and file writes it would make (following cd, variables, aliases, wrappers, scripts, one-line
programs), and this module judges each effect, in order, with a table of git subcommands (_JUDGES).

- **git**: commit and amend, merge, rebase (with --update-refs too, on any branch), cherry-pick, revert, am,
  pull, reset, branch -f/-m/-c/-d, checkout -B, switch -C, worktree add -B, update-ref, symbolic-ref, tag
  (a tag named autoresearch/... shadows the branch), fetch or push into such a branch (a push into the
  repository itself too), force-push and remote deletion, replace, fast-import, receive-pack, git run
  without the reference-transaction hook (-c core.hooksPath, GIT_CONFIG_*), and the git config that adds
  an alias, moves the hooks, sets rebase.updateRefs or includes other files. It follows `-C`, git aliases
  (also those the command defines) and the branch an earlier checkout of the command moved to.
- **writes**: into the git directory of a repository with session branches (its refs, packed-refs, HEAD,
  config, hooks).
- **Write, Edit, MultiEdit**: a file inside the git directory of a repository with session branches.

It fails closed: what it cannot resolve where it matters is refused (an unknown git subcommand, alias or
program name on a session branch, a directory it cannot resolve, a script it cannot read, a program that
runs git in a way it cannot follow beside session branches). One commit is the agent's own: the
benchmark and checks, on a session branch that lacks them or whose session has launched no experiment yet
(start_session's set-up step, issue 52), and that commit may hold nothing else. The real guard is
elsewhere: the reference-transaction hook start_session installs refuses these moves whatever program makes
them, and the server holds the branch to its ledger.

Standard library only, Python 3.8 syntax, and cheap: hooks/run runs this file with the system python3
(`-I -S`) before every Bash call, so it imports only what the call needs (no subprocess until git must be
asked, no typing). Its read-only questions to git are guardrepo.py's.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # run as a script by hooks/run: the package is not installed for this python3
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from autoresearch_mcp import guardshell
from autoresearch_mcp.guardrepo import SCRIPTS, GitQuestions, unresolved
from autoresearch_mcp.guardshell import UNKNOWN, GitCall, Write

TYPE_CHECKING = False  # typing is not imported at run time (see guardshell)
if TYPE_CHECKING:
    from collections.abc import Callable

    _Judge = Callable[["_Guard", "GitQuestions", list[str], str], "str | None"]

PROTECTED = "autoresearch/"
ALL = "autoresearch/*"  # the session branches as a whole (a command that could touch any of them)
DENY_EXIT = 2  # PreToolUse: exit 2 blocks the tool call and shows stderr to Claude (exit 1 would not)
EDIT_TOOLS = ("Write", "Edit", "MultiEdit")
_FORCE = ("-f", "--force", "--force-with-lease", "--force-if-includes")
_ENDERS = ("--abort", "--quit")  # end a merge, rebase or pick in progress: the branch stays where it was
# Subcommands that never move a branch; anything neither here nor judged below is refused on a session branch.
_SAFE = frozenset({
    "annotate", "apply", "archive", "bisect", "blame", "bundle", "cat-file", "check-attr",
    "check-ignore", "check-mailmap", "check-ref-format", "cherry", "clean", "clone", "column", "commit-graph",
    "commit-tree", "count-objects", "credential", "describe", "diff", "diff-files", "diff-index",
    "diff-tree", "difftool", "fast-export", "format-patch", "fsck", "gc", "grep", "hash-object", "help",
    "index-pack", "init", "interpret-trailers", "log", "ls-files", "ls-remote", "ls-tree", "maintenance",
    "merge-base", "merge-file", "merge-tree", "mergetool", "mktag", "mktree", "mv", "name-rev", "notes",
    "pack-objects", "prune", "range-diff", "read-tree", "reflog", "remote", "repack", "request-pull", "rerere",
    "restore", "rev-list", "rev-parse", "rm", "shortlog", "show", "show-branch", "show-ref", "sparse-checkout",
    "stash", "status", "submodule", "unpack-objects", "update-index", "var", "verify-commit",
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
    "send-pack": frozenset({"--receive-pack", "--exec", "--remote"}),
    "fetch": frozenset({"--depth", "--deepen", "--shallow-since", "--shallow-exclude", "-j", "--jobs",
                        "--upload-pack", "--refmap", "-o", "--server-option", "--negotiation-tip"}),
    "pull": frozenset({"-s", "--strategy", "-X", "--strategy-option", "--depth", "--upload-pack", "-j"}),
    "config": frozenset({"-f", "--file", "--blob", "--type", "--default", "--comment", "--value"}),
    "replace": frozenset({"--format"}),
    "tag": frozenset({"-m", "--message", "-F", "--file", "-u", "--local-user", "--sort", "--format", "--contains",
                      "--no-contains", "--points-at", "--merged", "--no-merged", "--cleanup", "--color"}),
}
# Settings that let a git call move refs the reference-transaction hook never sees (another hooks folder),
# or move branches besides the one checked out (rebase's --update-refs).
_UNHOOKED = ("core.hookspath", "rebase.updaterefs")
_LOCAL_URL = ("/", "./", "../", "~", "file://")  # a remote in this machine's file system
_SHADOW_REMOTE = "refs/remotes/autoresearch/"  # refs/remotes/<name> is what git tries for <name> after refs/heads

# --- the entry -----------------------------------------------------------------------------------------


def guard(event: dict[str, object]) -> str | None:
    """Why this tool call must not run, or None to let it run."""
    tool, given = event.get("tool_name"), event.get("tool_input") or {}
    cwd = str(event.get("cwd") or ".")
    if not isinstance(given, dict):
        return None
    if tool == "Bash" and isinstance(given.get("command"), str):
        return _Guard().shell.command(given["command"], cwd)
    if tool in EDIT_TOOLS and isinstance(given.get("file_path"), str):
        path = given["file_path"]
        if _Guard().internal(path, cwd):
            return _refuse(f"{tool} {path}", ALL, "the file is inside the git directory of a repository with session "
                                                  "branches, where refs, packed-refs, HEAD, config and hooks decide "
                                                  "where branches point and which guard runs")
    return None


class _Guard(guardshell.Oracle):
    """The policy: judges the effects of one command in order; remembers what earlier git calls of it did
    (a checkout, a git alias, the files it staged)."""

    def __init__(self) -> None:
        self.shell = guardshell.Shell(self.judge, self)
        # repository -> the branches HEAD may be on after an earlier checkout in the command (None: where it was)
        self.switched: dict[str, set[str | None]] = {}
        self.pending: dict[str, str] = {}  # a checkout in the previous git call, certain only if `&&` follows it
        self.aliases: dict[str, str] = {}  # git aliases the command defines (git config alias.x ...)
        self.adds: list[tuple[GitQuestions, list[str]]] = []  # the `git add` calls before (their repository, arguments)

    def judge(self, effect: guardshell.Effect) -> str | None:
        """Why this effect must not happen (None: let it)."""
        if isinstance(effect, GitCall):
            return self.git(effect)
        if isinstance(effect, Write):
            return _refuse(effect.what, ALL, "it writes inside the git directory") \
                if self.internal(effect.path, effect.cwd) else None
        repo = GitQuestions(effect.cwd, [], {})
        if effect.scope == "always":
            return _refuse(effect.what, UNKNOWN, effect.why)
        if effect.scope == "branch":
            current = self.current(repo)
            return _refuse(effect.what, current, effect.why) if _protected(current) else None
        return _refuse(effect.what, ALL, effect.why) if repo.has_session_refs() else None

    # --- what the evaluator asks git (guardshell.Oracle) ---------------------------------------------------

    def exec_path(self, cwd: str | None) -> str | None:
        return GitQuestions(cwd, [], {}).exec_path()

    def rev_parse_path(self, cwd: str | None, option: str) -> str | None:
        return GitQuestions(cwd, [], {}).rev_parse_path(option)

    def is_command(self, cwd: str | None, name: str) -> bool:
        return GitQuestions(cwd, [], {}).is_command(name)

    def internal(self, value: str | None, cwd: str | None) -> bool:
        """Whether the path `value` (relative to cwd) lies inside the git directory of a repository with
        session branches, as written or through links; in a directory the guard cannot tell, a path that
        names a .git directory counts (fail closed)."""
        if not value:
            return False
        for candidate in {value, value.partition("=")[2]} - {""}:  # dd of=.git/...
            expanded = os.path.expanduser(candidate)
            if cwd is None and not os.path.isabs(expanded):
                if _git_dir_top(candidate) is not None:
                    return True
                continue
            path = os.path.normpath(os.path.join(cwd or os.sep, expanded))
            for form in {path, os.path.realpath(path)}:
                top = _git_dir_top(form)
                if top is not None and GitQuestions(top, [], {}).has_session_refs():
                    return True
        return False

    # --- git ----------------------------------------------------------------------------------------------

    def git(self, call: GitCall) -> str | None:
        """A git call of the command: an earlier checkout is certain only when `&&` joins it to this one."""
        cwd = call.cwd
        if any(v == UNKNOWN for k, v in call.env.items() if k.startswith("GIT_")):
            cwd = None  # GIT_DIR=$SOMEWHERE: a repository the guard cannot tell
        for key, target in self.pending.items():
            self.switched[key] = {target} if call.joined else {*self.switched.get(key, {None}), target}
        self.pending = {}
        return self.invocation(call.args, cwd, call.env, call.maybe)

    def invocation(self, args: list[str], cwd: str | None, env: dict[str, str],
                   maybe: bool = False) -> str | None:
        """Why `git args...` (run in cwd) must not run. `maybe`: the program's name is a word the guard cannot
        resolve, so it may be git: judged as git when it names a git command."""
        i = 0
        aliases: dict[str, str] = {}  # from `git -c alias.name=...`
        unhooked = next((f"{k}=" for k in env if k.startswith("GIT_CONFIG")), None)  # settings of its own
        lookup: list[str] = []  # the options that choose the repository, for the guard's own git calls
        while i < len(args) and args[i].startswith("-"):
            option, value = args[i], args[i + 1] if i + 1 < len(args) else ""
            if option in _VALUED[""]:
                i += 1
            if option == "-C":
                cwd = None if cwd is None or value == UNKNOWN or unresolved(value) else \
                    os.path.join(cwd, os.path.expanduser(value))
            elif option == "-c" and value.startswith("alias."):
                name, _, body = value[len("alias."):].partition("=")
                aliases[name] = body
            elif option in ("-c", "--config-env") and value.partition("=")[0].lower() in _UNHOOKED:
                unhooked = value
            elif option.startswith("--config-env=") and option.partition("=")[2].partition("=")[0].lower() \
                    in _UNHOOKED:
                unhooked = option
            elif option in ("--git-dir", "--work-tree"):
                lookup += [option, value]
            elif option.startswith(("--git-dir=", "--work-tree=")):
                lookup.append(option)
            i += 1
        if i >= len(args):
            return None
        sub, rest = args[i], args[i + 1:]
        repo = GitQuestions(cwd, lookup, env)
        what = " ".join(["git", *args])
        if sub == UNKNOWN:
            current = self.current(repo)
            if _protected(current) or (not maybe and repo.has_session_refs()):
                return _refuse(what, current if _protected(current) else ALL, "it cannot tell which git command runs")
            return None
        if sub in _SAFE:
            return None
        if unhooked is not None and repo.has_session_refs():
            return _refuse(what, ALL, f"with {unhooked.partition('=')[0]} set for it, git would run without the "
                                      "reference-transaction hook or move branches besides the one checked out")
        judge = _JUDGES.get(sub)
        if judge is not None:
            return judge(self, repo, rest, what)
        definition = aliases.get(sub, self.aliases.get(sub.lower()))
        definition = definition if definition is not None else repo.alias(sub)
        if definition is not None:  # an alias runs what it stands for
            import shlex  # only here: most calls never need it

            if definition.startswith("!"):
                return self.shell.command(definition[1:] + " " + " ".join(shlex.quote(a) for a in rest), cwd)
            return self.shell.command(shlex.join(["git", *args[:i], *shlex.split(definition), *rest]), cwd)
        if not repo.is_command(sub):
            return None  # git answers "not a git command" and does nothing
        current = self.current(repo)
        hit = current if _protected(current) else next((a for a in rest if PROTECTED in a), None)
        return _refuse(what, hit, f"autoresearch cannot tell whether `git {sub}` moves it") if hit else None

    def current(self, repo: GitQuestions) -> str | None:
        """The branch HEAD is on; of several possible ones, a session branch first."""
        if repo.cwd is None:
            return UNKNOWN
        candidates = [repo.branch() if c is None else c for c in self.switched.get(repo.key, {None})]
        return next((c for c in candidates if _protected(c)), candidates[0])

    def head_mover(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        """commit, merge, cherry-pick, revert, am, pull...: they move the branch checked out."""
        if any(a in _ENDERS for a in rest):
            return None
        current = self.current(repo)
        return _refuse(what, current) if _protected(current) else None

    def add(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        """Stages files: no branch moves, but a commit after it in the command holds them."""
        self.adds.append((repo, rest))
        return None

    def commit(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        current = self.current(repo)
        if current is None or not _protected(current) or unresolved(current) or current == UNKNOWN \
                or "--amend" in rest:
            return self.head_mover(repo, rest, what)
        if repo.takes_set_up(current):
            return self.setup_commit(repo, rest, what, current)
        held = self.held(repo, rest)
        if held and held <= set(SCRIPTS):
            return _refuse(what, current, f"its session has launched experiments, so its {' and '.join(SCRIPTS)} stay "
                                          "as its experiments were measured with; to measure with changed ones, "
                                          "call start_session with a new tag and commit them on its branch before "
                                          "its first launch")
        return self.head_mover(repo, rest, what)

    def held(self, repo: GitQuestions, rest: list[str]) -> set[str] | None:
        """What a commit would hold: the index, what `git add` earlier in the command stages, -a, pathspecs (None:
        the guard cannot tell)."""
        options, specs = _commit_arguments(rest)
        held: set[str] | None = set()
        parts: list[list[str] | None] = []
        if specs and not options & {"i", "--include"}:  # `git commit <paths>`: those paths as they are now
            parts.append(repo.listed(["--modified", "--others"], specs))
        else:
            parts.append(repo.staged())
            parts += [r.listed(*_added(given)) for r, given in self.adds]
            if options & {"a", "--all"}:
                parts.append(repo.listed(["--modified"], []))
            if specs:
                parts.append(repo.listed(["--modified", "--others"], specs))
        if "--pathspec-from-file" in options:
            parts.append(None)
        for part in parts:
            held = None if held is None or part is None else held | set(part)
        return held

    def setup_commit(self, repo: GitQuestions, rest: list[str], what: str, current: str) -> str | None:
        """start_session's set-up step: the benchmark and checks committed on a session branch that lacks them or
        whose session has launched nothing yet, and nothing else (a kernel tweaked by hand in that commit would be
        the session's unmeasured start)."""
        held = self.held(repo, rest)
        if held == set():
            return self.head_mover(repo, rest, what)  # an empty commit is no set-up
        others = sorted(held - set(SCRIPTS)) if held is not None else None
        if others == []:
            return None
        shown = "files it cannot tell" if others is None else ", ".join(others[:8]) + (
            f" and {len(others) - 8} more" if len(others) > 8 else "")
        return _refuse(what, current, f"until the session's first experiment, its branch takes commits of "
                                      f"{SCRIPTS[0]} and {SCRIPTS[1]} alone (its benchmark set up), and this one would "
                                      f"also hold {shown}: commit them alone (git commit -m 'autoresearch: benchmark "
                                      f"and checks' -- {' '.join(SCRIPTS)}), then call start_session again with its "
                                      "tag to validate them")

    def reset(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
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

    def rebase(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        named = _positional("rebase", rest)[1:2]  # `git rebase <upstream> <branch>` checks out <branch> first
        if named and _protected(named[0]) and not any(a in _ENDERS for a in rest):
            return _refuse(what, named[0])
        return self.update_refs(repo, rest, what) or self.head_mover(repo, rest, what)

    def update_refs(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        """rebase --update-refs (or rebase.updateRefs) moves every branch pointing into what it rebases."""
        if any(a in _ENDERS for a in rest) or "--no-update-refs" in rest:
            return None
        if ("--update-refs" in rest or repo.config_true("rebase.updateRefs")) and repo.has_session_refs():
            return _refuse(what, ALL, "--update-refs moves every branch that points into the commits it rebases")
        return None

    def tag(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        """A tag named like a session branch shadows it: git resolves autoresearch/<tag> to refs/tags first.
        Listing, verifying and deleting (how a shadowing tag is put right) stay allowed."""
        flags = _short_flags(rest)
        if flags & {"l", "--list", "v", "--verify", "d", "--delete", "n"} and not flags & {"a", "s", "f", "m", "F"}:
            return None
        name = next(iter(_positional("tag", rest)), None)
        return _refuse(what, name, "a tag named so shadows the session branch") if _protected(name) else None

    def pull(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        rebases = "--rebase" in rest or any(a.startswith("--rebase=") for a in rest) or "-r" in rest
        return self.fetch(repo, rest, what) or (self.update_refs(repo, rest, what) if rebases else None) \
            or self.head_mover(repo, rest, what)

    def fetch(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        """A refspec `src:dst` writes dst; a session branch there is moved (remote-tracking refs are fine)."""
        for spec in _positional("fetch", rest)[1:]:
            dst = spec.lstrip("+").partition(":")[2]
            # a remote-tracking ref is fine, unless a remote named autoresearch makes it shadow a session branch
            if _protected(dst) and not (dst.startswith("refs/remotes/") and not dst.startswith(_SHADOW_REMOTE)):
                return _refuse(what, dst)
        return None

    def checkout(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        return self.switch_to(repo, rest, what, "checkout")

    def switch(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        return self.switch_to(repo, rest, what, "switch")

    def switch_to(self, repo: GitQuestions, rest: list[str], what: str, sub: str) -> str | None:
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

    def branch(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
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

    def worktree(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        forced = _option_values(rest, {"-B"})
        return _refuse(what, forced[-1]) if forced and _protected(forced[-1]) else None

    def update_ref(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        if "--stdin" in rest:
            return self.from_input(repo, rest, what)
        target = next(iter(_positional("update-ref", rest)), "")
        if _protected(target):
            return _refuse(what, target)
        current = self.current(repo)
        return _refuse(what, current) if target == "HEAD" and _protected(current) else None

    def from_input(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        """fast-import, receive-pack, update-ref --stdin: they write the refs their input names."""
        return _refuse(what, ALL, "it writes the refs its input names") if repo.has_session_refs() else None

    def symbolic_ref(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        names = _positional("symbolic-ref", rest)
        writes = len(names) >= 2 or bool({"-d", "--delete"} & set(rest))
        if writes and names and _protected(names[0]):
            return _refuse(what, names[0], "git runs no reference-transaction hook for a symbolic ref")
        if len(names) >= 2 and names[0] != "HEAD" and _protected(names[1]):  # a second name for the branch
            return _refuse(what, names[1], "a ref pointing at it moves it")
        if len(names) >= 2 and names[0] == "HEAD" and repo.cwd is not None:  # a checkout without the files
            target = names[1]
            self.pending[repo.key] = target[len("refs/heads/"):] if target.startswith("refs/heads/") else target
        return None

    def push(self, repo: GitQuestions, rest: list[str], what: str, sub: str = "push") -> str | None:
        positional = _positional(sub, rest)
        refspecs = positional[1:]  # after the remote
        if positional and self.into_itself(repo, positional[0]):  # `git push . x:autoresearch/t` moves it here
            for spec in refspecs:
                src, colon, dst = spec.lstrip("+").partition(":")
                target = dst if colon else src
                if _protected(target) and target != "HEAD":
                    return _refuse(what, target)
            if sub == "send-pack" or {"--all", "--branches", "--mirror"} & set(rest):
                return self.from_input(repo, rest, what) if not refspecs else None
        named = [a for a in refspecs if _protected(a)]
        if ("--delete" in rest or "-d" in rest or any(a.startswith(":") for a in named)) and named:
            return _refuse(what, named[0])
        forced = any(a.startswith(_FORCE) for a in rest) or any(a.startswith("+") for a in refspecs)
        if "--mirror" in rest or "--prune" in rest or (forced and ({"--all", "--branches"} & set(rest))):
            return _refuse(what, ALL) if repo.has_session_refs() else None
        if not forced:
            return None
        hit = next((t for t in named if t.lstrip("+") != "HEAD"), None)
        if hit is None and (not refspecs or any(t.lstrip("+").partition(":")[0] == "HEAD" for t in refspecs)):
            current = self.current(repo)
            hit = current if _protected(current) else None
        return _refuse(what, hit) if hit else None

    def send_pack(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        return self.push(repo, rest, what, "send-pack")

    def into_itself(self, repo: GitQuestions, remote: str) -> bool:
        """Whether a push to `remote` (a name, URL or path) lands in this same repository (unknown: yes)."""
        if remote in (".", UNKNOWN) or repo.cwd is None:
            return True
        url = remote if remote.startswith(_LOCAL_URL) else repo.remote_url(remote)
        if url is None or not url.startswith(_LOCAL_URL):
            return False  # a remote elsewhere: its branches are not the session's
        path = os.path.join(repo.cwd, os.path.expanduser(url[len("file://"):] if url.startswith("file://") else url))
        if not os.path.isdir(path):
            return False
        mine, theirs = repo.common_dir(), GitQuestions(path, [], {}).common_dir()
        return mine is None or theirs is None or os.path.realpath(mine) == os.path.realpath(theirs)

    def replace(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        if not _positional("replace", rest) or {"-l", "--list", "-d", "--delete"} & set(rest):
            return None
        return _refuse(what, ALL, "a replacement object changes what git shows for a commit") \
            if repo.has_session_refs() else None

    def config(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        """Only what could let later git calls slip by: an alias (remembered for the rest of the command),
        where the hooks live (core.hooksPath, the reference-transaction guard's folder) and included files."""
        positional = _positional("config", rest)
        verb = positional.pop(0) if positional and positional[0] in (
            "get", "set", "unset", "list", "edit", "rename-section", "remove-section") else None
        if verb == "edit" or {"-e", "--edit"} & set(rest):
            return _refuse(what, ALL, "it edits git's settings in an editor") if repo.has_session_refs() else None
        writes = verb in ("set", "unset", "rename-section", "remove-section") or bool(set(rest) & {
            "--add", "--replace-all", "--unset", "--unset-all", "--rename-section", "--remove-section"}) or (
            verb is None and len(positional) >= 2)
        if not writes or not positional:
            return None
        key = positional[0].lower()
        if key.startswith("alias.") and len(positional) >= 2:
            self.aliases[key[len("alias."):]] = positional[1]
        if key in ("core", "rebase", *_UNHOOKED) or key.startswith("include"):
            return _refuse(what, ALL, "it changes where git finds its hooks or settings") \
                if repo.has_session_refs() else None
        return None

    def filter_branch(self, repo: GitQuestions, rest: list[str], what: str) -> str | None:
        if "--all" in rest or "--branches" in rest:
            return _refuse(what, ALL) if repo.has_session_refs() else None
        hit = next((a for a in rest if _protected(a)), None)
        return _refuse(what, hit) if hit else self.head_mover(repo, rest, what)


_JUDGES: dict[str, _Judge] = {
    "commit": _Guard.commit, "merge": _Guard.head_mover, "cherry-pick": _Guard.head_mover,
    "revert": _Guard.head_mover, "am": _Guard.head_mover, "subtree": _Guard.head_mover,
    "reset": _Guard.reset, "rebase": _Guard.rebase, "pull": _Guard.pull, "fetch": _Guard.fetch,
    "checkout": _Guard.checkout, "switch": _Guard.switch, "branch": _Guard.branch, "worktree": _Guard.worktree,
    "update-ref": _Guard.update_ref, "symbolic-ref": _Guard.symbolic_ref, "push": _Guard.push,
    "send-pack": _Guard.send_pack, "filter-branch": _Guard.filter_branch, "filter-repo": _Guard.filter_branch,
    "replace": _Guard.replace, "config": _Guard.config, "fast-import": _Guard.from_input,
    "receive-pack": _Guard.from_input, "tag": _Guard.tag, "add": _Guard.add,
}


# --- words -------------------------------------------------------------------------------------------------


def _git_dir_top(path: str) -> str | None:
    """The folder that holds the `.git` directory `path` lies in (or is), None when it lies in none."""
    parts = path.replace("\\", "/").split("/")
    if ".git" not in parts:
        return None
    return "/".join(parts[:parts.index(".git")]) or ("/" if path.startswith("/") else ".")


def _protected(name: str | None) -> bool:
    """A session branch or ref, or a name the guard cannot resolve (fail closed)."""
    return name is not None and (PROTECTED in name or name == UNKNOWN or unresolved(name))


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


_COMMIT_VALUED = "mFCct"  # commit's short options whose value follows (in the same word or the next)
_COMMIT_VALUED_LONG = frozenset({"--message", "--file", "--reuse-message", "--reedit-message", "--author", "--date",
                                 "--fixup", "--squash", "--template", "--cleanup", "--trailer", "--pathspec-from-file"})


def _commit_arguments(rest: list[str]) -> tuple[set[str], list[str]]:
    """git commit's options (short letters, long names) and its pathspecs (`-am msg` holds the message)."""
    options: set[str] = set()
    specs: list[str] = []
    skip = False
    for i, a in enumerate(rest):
        if skip:
            skip = False
        elif a == "--":
            specs += rest[i + 1:]
            break
        elif a.startswith("--"):
            options.add(a.partition("=")[0])
            skip = a in _COMMIT_VALUED_LONG
        elif a.startswith("-") and len(a) > 1:
            letters = a[1:]
            cut = next((k for k, c in enumerate(letters) if c in _COMMIT_VALUED), None)
            options.update(letters if cut is None else letters[:cut + 1])
            skip = cut is not None and cut == len(letters) - 1
        else:
            specs.append(a)
    return options, specs


def _added(rest: list[str]) -> tuple[list[str], list[str]]:
    """What `git add <rest>` stages, as ls-files kinds and pathspecs (UNKNOWN: it cannot tell)."""
    flags = _short_flags(rest)
    specs = [a for a in rest if not a.startswith("-")] if "--" not in rest else rest[rest.index("--") + 1:]
    if flags & {"f", "--force", "--pathspec-from-file", "p", "--patch", "i", "--interactive", "e", "--edit"}:
        return [UNKNOWN], []
    if flags & {"u", "--update"}:
        return ["--modified"], specs
    if not specs and not flags & {"A", "--all", "--no-ignore-removal"}:
        return ["--modified"], ["."]  # `git add` alone stages nothing; counted as the folder's changes
    return ["--modified", "--others"], specs


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
    where = ("the session branches autoresearch/*" if branch == ALL else
             "a session branch it cannot resolve" if branch == UNKNOWN or unresolved(branch) else
             f"the session branch {branch}")
    because = f" ({why})" if why else ""
    return (f"autoresearch: `{what}` is refused on {where}{because}: commits there go through "
            "commit_winner, which keeps only a measured, checked winner with its evidence, and the branch's history "
            "is the session's record. Launch the change as an experiment (launch_experiment) and commit it with "
            "commit_winner; to leave the session, check out another branch. A person can still run git in a "
            "terminal.")


class _Decoding:
    """What the C scanner of json.decoder reads its settings from (json.loads' defaults)."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int, parse_constant = float, int, float


def read_event(text: str) -> dict[str, object]:
    """The event's JSON object, read with the C scanner json.decoder itself uses: importing json would import
    re as well, which costs more than the rest of the guard on most commands. json reads it when that fails."""
    try:
        from _json import make_scanner

        start = len(text) - len(text.lstrip())
        value, end = make_scanner(_Decoding())(text, start)  # type: ignore[arg-type]
        if isinstance(value, dict) and not text[end:].strip():
            return value
    except (ImportError, StopIteration, ValueError, TypeError):
        pass
    import json

    event = json.loads(text)
    return event if isinstance(event, dict) else {}


def main() -> int:
    """`guard.py` with the PreToolUse event on stdin: exit 2 (the reason on stderr) denies the tool call."""
    reason = guard(read_event(sys.stdin.read()))
    if reason:
        print(reason, file=sys.stderr)
        return DENY_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
