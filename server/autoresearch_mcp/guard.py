"""The PreToolUse guard (hooks/hooks.json): an early, friendly refusal of whatever would move, rewrite or
delete a session branch `autoresearch/*` (or the server's `refs/autoresearch/*`) outside commit_winner.

- **Bash**: the command is read as the shell reads it (shellwords.py), and every git it runs is judged:
  commit and amend, merge, rebase, cherry-pick, revert, am, pull, reset, branch -f/-m/-c/-d, checkout -B,
  switch -C, worktree add -B, update-ref, symbolic-ref, fetch or push into such a branch (a push into the
  repository itself too), force-push and remote deletion, replace, fast-import, receive-pack, and the git
  config that adds an alias, moves the hooks (core.hooksPath) or includes other files. It follows `cd`,
  `-C`, aliases (also those the command defines), variables the command sets, `$PWD`, known command
  substitutions (`$(git rev-parse --show-toplevel)`, `$(echo ...)`, `$(pwd)`), wrappers (env, sudo,
  xargs, timeout...), scripts run by a shell (`bash -c`, `eval`, here-documents, `echo ... | sh`, a script
  file) and the strings of a one-line program (`python3 -c`, `perl -e`...). Text that is only data
  (`grep -rn "git commit" .`) is not a command. A write into the git directory of a repository with
  session branches (its refs, packed-refs, HEAD, config, hooks) is refused.
- **Write, Edit, MultiEdit**: a file inside the git directory of a repository with session branches.

It fails closed: what it cannot resolve where it matters is refused (an unknown git subcommand, alias or
program name on a session branch, a directory it cannot resolve, a script it cannot read, a program that
runs git in a way it cannot follow beside session branches). One commit is the agent's own: the
benchmark and checks, on a session branch that lacks them (start_session's setup step). The real guard
is elsewhere: the reference-transaction hook start_session installs refuses these moves whatever
program makes them, and the server holds the branch to its ledger.

Standard library only, Python 3.8 syntax: hooks/run runs this file with the system python3, so the
guard holds before (and without) the plugin's venv.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __name__ == "__main__":  # run as a script by hooks/run: the package is not installed for this python3
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autoresearch_mcp import shellwords
from autoresearch_mcp.shellwords import LIT, SUB, VAR, Command, Word

PROTECTED = "autoresearch/"
ALL = "autoresearch/*"  # the session branches as a whole (a command that could touch any of them)
SCRIPTS = ("autoresearch.sh", "autoresearch.checks.sh")  # until both are committed, a session is being set up
UNKNOWN = "?"  # a branch, directory or word the guard cannot tell: treated as a session branch (fail closed)
STARTED = time.monotonic()
DEADLINE_S = 20.0  # answer well within hooks.json's 30 s timeout, before Claude Code gives up on the hook
DENY_EXIT = 2  # PreToolUse: exit 2 blocks the tool call and shows stderr to Claude (exit 1 would not)
MAX_SCRIPT = 256 * 1024  # a script file read to judge what it runs
EDIT_TOOLS = ("Write", "Edit", "MultiEdit")
_FORCE = ("-f", "--force", "--force-with-lease", "--force-if-includes")
_ENDERS = ("--abort", "--quit")  # end a merge, rebase or pick in progress: the branch stays where it was
# Subcommands that never move a branch; anything neither here nor judged below is refused on a session branch.
_SAFE = frozenset({
    "add", "annotate", "apply", "archive", "bisect", "blame", "bundle", "cat-file", "check-attr",
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
_SHADOW_REMOTE = "refs/remotes/autoresearch/"  # refs/remotes/<name> is what git tries for <name> after refs/heads
# What runs the words after it: shell keywords, and programs that run a command (their options with a value).
_KEYWORDS = frozenset({"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"})
_WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "--user", "--group"}),
    "doas": frozenset({"-u", "-C"}), "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "nice": frozenset({"-n", "--adjustment"}), "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "nohup": frozenset(), "stdbuf": frozenset({"-i", "-o", "-e"}), "exec": frozenset({"-a"}),
    "command": frozenset(), "builtin": frozenset(), "ionice": frozenset({"-c", "-n", "-p"}),
    "chronic": frozenset(), "setsid": frozenset(), "unbuffer": frozenset(), "xargs": frozenset({
        "-a", "--arg-file", "-d", "--delimiter", "-E", "-e", "--eof", "-I", "-i", "--replace", "-L", "-l",
        "--max-lines", "-n", "--max-args", "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"}),
}
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh"})
_INTERPRETERS = {"python": ("-c",), "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval", "-p", "--print"),
                 "nodejs": ("-e", "--eval"), "php": ("-r",), "lua": ("-e",), "deno": ("eval",), "bun": ("-e", "--eval")}
# Programs that only read the files they are given (their output may be redirected, which is judged apart).
_READERS = frozenset({
    "cat", "less", "more", "head", "tail", "ls", "grep", "egrep", "fgrep", "rg", "ag", "stat", "file", "wc", "diff",
    "cmp", "du", "tree", "xxd", "od", "hexdump", "echo", "printf", "test", "[", "[[", "realpath", "readlink",
    "basename", "dirname", "md5sum", "sha1sum", "sha256sum", "strings", "jq", "git", "cd", "pushd", "true",
    "false", ":", "type", "which", "whereis", "column", "sort", "uniq", "cut", "tr", "nl", "bat", "fd",
})
_DESTINATION_LAST = frozenset({"cp", "ln", "install", "rsync", "scp"})  # only their last path is written
_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_NAME_EQ = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_GIT_WORD = re.compile(r"(?<![\w.-])git(?![\w-])")
_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"|\'((?:[^\'\\\n]|\\.)*)\'')
_PLACEHOLDER = re.compile(r"#?\{[^{}]*\}|%\(?\w*\)?[sdr]|\$\{[^}]*\}")  # f-strings, format, %s, ruby, js templates
_UNKNOWN_VALUE = "${__autoresearch_unknown__}"  # what a script's unknown piece becomes: a word it cannot resolve
if TYPE_CHECKING:  # the hook runs on the system python3, which may predate subscripted builtins at run time
    _Judge = Callable[["_Guard", "_Repo", list[str], str], str | None]


# --- the entry -----------------------------------------------------------------------------------------


def guard(event: dict[str, Any]) -> str | None:
    """Why this tool call must not run, or None to let it run."""
    tool, given = event.get("tool_name"), event.get("tool_input") or {}
    cwd = str(event.get("cwd") or ".")
    if tool == "Bash" and isinstance(given.get("command"), str):
        return _Guard().command(given["command"], cwd)
    if tool in EDIT_TOOLS and isinstance(given.get("file_path"), str):
        path = given["file_path"]
        if _Guard().internal(path, cwd):
            return _refuse(f"{tool} {path}", ALL, "the file is inside the git directory of a repository with session "
                                                  "branches, where refs, packed-refs, HEAD, config and hooks decide "
                                                  "where branches point and which guard runs")
    return None


class _Guard:
    """Judges one command; remembers what earlier parts of it did (a checkout, an alias, a variable)."""

    def __init__(self) -> None:
        # repository -> the branches HEAD may be on after an earlier checkout in the command (None: where it was)
        self.switched: dict[str, set[str | None]] = {}
        self.pending: dict[str, str] = {}  # a checkout in the previous git call, certain only if `&&` follows it
        self.chained = False  # only `&&` since the last git call
        self.aliases: dict[str, str] = {}  # git aliases the command defines (git config alias.x ...)
        self.variables: dict[str, str | None] = {}  # shell variables it sets (None: to what it cannot tell)
        self.depth = 0  # alias and script nesting

    # --- shell --------------------------------------------------------------------------------------------

    def command(self, script: str, cwd: str | None) -> str | None:
        """Why the shell script `script` (run in cwd) must not run."""
        self.depth += 1
        try:
            if self.depth > 8:
                return _refuse(script[:200], UNKNOWN, "it nests scripts or aliases too deeply to follow")
            stack: list[str | None] = []
            previous: Command | None = None  # the command whose output this one reads (a pipeline)
            for item in shellwords.split(script):
                if isinstance(item, str):
                    if item == "(":
                        stack.append(cwd)
                    elif stack:
                        cwd = stack.pop()
                    previous = None
                    continue
                reason, cwd = self.simple(item, cwd, previous)
                if reason:
                    return reason
                previous = item if item.end in ("|", "|&") else None
                self.chained = self.chained and item.end == "&&"
            return None
        finally:
            self.depth -= 1

    def simple(self, cmd: Command, cwd: str | None, previous: Command | None
               ) -> tuple[str | None, str | None]:
        """Why one simple command must not run, and the directory the commands after it run in."""
        for word in [*cmd.words, *(w for _, w in cmd.redirects), *cmd.heredocs]:
            for kind, text, _ in word.parts:
                if kind == SUB:  # $(...), `...`, <(...): run before the command, in its directory
                    reason = self.command(text, cwd)
                    if reason:
                        return reason, cwd
        for op, written in cmd.redirects:
            if op in _WRITES and self.internal(self.resolve(written, cwd), cwd):
                return _refuse(cmd_text(cmd), ALL, "it writes inside the git directory"), cwd
        words: list[Word] = list(cmd.words)
        env: dict[str, str] = {}
        assigned = _assignment(words[0]) if words else None
        while assigned is not None:
            name, value = assigned
            env[name] = self.resolve(value, cwd) or UNKNOWN
            if all(_assignment(w) for w in words):  # no command: variables of the shell, for what follows
                self.variables[name] = self.resolve(value, cwd)
            words.pop(0)
            assigned = _assignment(words[0]) if words else None
        fields = [field for w in words for field in self.fields(w, cwd)]
        values = [value for value, _ in fields]
        start, placeholders, cwd_for = self.unwrap(values, env, cwd)
        if start >= len(values):
            return None, cwd
        program, args = values[start], values[start + 1:]
        name = _program(program) or ""
        if name in ("cd", "pushd"):
            target = next((a for a in args if a is None or not a.startswith("-") or a == "-"), "~")
            new = None if cwd is None or target is None or target == "-" else \
                os.path.normpath(os.path.join(cwd, os.path.expanduser(target)))
            return None, new
        if name in ("export", "declare", "local", "readonly", "typeset"):
            for word in words:
                found = _assignment(word)
                if found:
                    self.variables[found[0]] = self.resolve(found[1], cwd)
            return None, cwd
        if program is None or name == "git" or (name.startswith("git-") and self.dashed(name, cwd_for)):
            head = [] if program is None or name == "git" else [name[len("git-"):]]
            given = [UNKNOWN if a is None or (placeholders and any(p in a for p in placeholders)) else a
                     for a in args]
            return self.git(head + given + ([UNKNOWN] if placeholders is not None else []), cwd_for, env,
                            maybe=program is None), cwd
        if name in _SHELLS or name in ("eval", "source", "."):
            reason = self.shell(name, args, cmd, previous, cwd_for)
        elif _interpreter(name):
            reason = self.program(_interpreter(name), args, cmd, previous, cwd_for)
        else:
            reason = None
        if reason:
            return reason, cwd
        if name not in _READERS:  # find -exec git ..., watch git ..., parallel git ...: a git among the words
            for j, (field, quoted) in enumerate(fields[start + 1:]):
                if field is not None and not quoted and _program(field) == "git":
                    tail = args[j + 1:]
                    end = next((k for k, a in enumerate(tail) if a in (";", "+")), len(tail))
                    reason = self.git([UNKNOWN if a is None or a == "{}" else a for a in tail[:end]], cwd_for, env)
                    if reason:
                        return reason, cwd
        if any(self.internal(a, cwd_for) for a in _written(name, args)):
            return _refuse(cmd_text(cmd), ALL, "it writes inside the git directory"), cwd
        return None, cwd

    def fields(self, word: Word, cwd: str | None) -> list[tuple[str | None, bool]]:
        """The words the shell makes of `word` (an unquoted expansion is split at blanks), each with
        whether it was quoted; None for one the guard cannot resolve."""
        value = self.resolve(word, cwd)
        split = value is not None and any(kind != LIT and not quoted for kind, _, quoted in word.parts)
        if split and value is not None:
            return [(v, False) for v in value.split()]
        return [(value, word.quoted)]

    def unwrap(self, values: list[str | None], env: dict[str, str], cwd: str | None
               ) -> tuple[int, set[str] | None, str | None]:
        """Skip keywords and wrappers (env, sudo, xargs...): the index of the program they run; for xargs,
        the words it replaces by its input (its other input comes after them: None without xargs); and
        the directory the program runs in (env -C)."""
        i = 0
        placeholders: set[str] | None = None
        while i < len(values):
            name = _program(values[i])
            if name in _KEYWORDS:
                i += 1
                continue
            if name is None or name not in _WRAPPERS:
                break
            valued = _WRAPPERS[name]
            i += 1
            if name == "xargs":
                placeholders = placeholders or set()
            while i < len(values) and (values[i] or "").startswith("-") and values[i] not in ("-", "--"):
                option = values[i] or ""
                value = values[i + 1] if i + 1 < len(values) else None
                if name == "env" and option in ("-C", "--chdir"):
                    cwd = None if cwd is None or value is None else os.path.join(cwd, value)
                if name == "xargs" and placeholders is not None and (option in ("-I", "-i", "--replace")
                                                                     or option.startswith(("-I", "--replace="))):
                    given = value if option in ("-I", "--replace") else option.partition("=")[2] or option[2:]
                    placeholders.add(given or "{}")
                if name == "command" and option in ("-v", "-V"):
                    return len(values), None, cwd  # prints what the name is; runs nothing
                i += 2 if option in valued else 1
            if i < len(values) and values[i] == "--":
                i += 1
            if name == "env":
                while i < len(values) and _NAME_EQ.match(values[i] or ""):
                    key, _, value_ = (values[i] or "").partition("=")
                    env[key] = value_
                    i += 1
            if name == "timeout" and i < len(values):
                i += 1  # the duration
        return i, placeholders, cwd

    def shell(self, name: str | None, args: list[str | None], cmd: Command, previous: Command | None,
              cwd: str | None) -> str | None:
        """A shell, eval or source: judge the script it runs, or refuse one it cannot read on a session branch."""
        script: str | None = None
        if name == "eval":
            script = " ".join(a for a in args if a is not None) if all(a is not None for a in args) else None
        elif name in ("source", "."):
            script = _read(args[0], cwd) if args and args[0] is not None else None
        else:
            flags: list[str] = []
            positional: list[str | None] = []
            skip = False
            for a in args:
                if skip:
                    skip = False
                elif a is not None and a[:1] in "-+" and len(a) > 1 and not a.startswith("--"):
                    flags.append(a)
                    skip = a in ("-o", "+o", "-O", "+O")
                elif a is None or not a.startswith("--"):
                    positional.append(a)
            if any("c" in f for f in flags if f.startswith("-")):
                script = positional[0] if positional else None
            elif positional:
                script = _read(positional[0], cwd) if positional[0] is not None else None
            else:
                script = self.stdin(cmd, previous, cwd)
        if script is not None:
            return self.command(script, cwd)
        repo = _Repo(cwd, [], {})
        return _refuse(cmd_text(cmd), self.current(repo), "it runs a script the guard cannot read") \
            if _protected(self.current(repo)) else None

    def program(self, options: tuple[str, ...], args: list[str | None], cmd: Command,
                previous: Command | None, cwd: str | None) -> str | None:
        """An interpreter (python, perl...): judge the strings of a one-line program (`-c`, `-e`, stdin)."""
        code: str | None = None
        for i, arg in enumerate(args):
            if arg in options or (arg or "").startswith(tuple(o for o in options if o.startswith("-"))):
                code = args[i + 1] if arg in options and i + 1 < len(args) else (arg or "")[2:]
                break
            if arg == "-" or arg is None or not arg.startswith("-"):
                code = self.stdin(cmd, previous, cwd) if arg == "-" else ""  # a script file: out of its sight
                break
        else:
            code = self.stdin(cmd, previous, cwd)
        if code is None:
            code = _UNKNOWN_VALUE + " git"  # unreadable: judged as a program that may run git
        return self.code(code, cwd, cmd_text(cmd))

    def code(self, code: str, cwd: str | None, what: str) -> str | None:
        """A program's text: its paths into a git directory, and the git commands its strings spell."""
        if any(self.internal(m.group(1) or m.group(2) or "", cwd) for m in _LITERAL.finditer(code)):
            return _refuse(what, ALL, "it writes inside the git directory")
        if not _GIT_WORD.search(code):
            return None
        followed = False
        literals = list(_LITERAL.finditer(code))
        for k, match in enumerate(literals):
            text = _PLACEHOLDER.sub(_UNKNOWN_VALUE, match.group(1) if match.group(1) is not None else match.group(2))
            if _program(text) == "git":  # ['git', 'update-ref', ...]: the literals that follow, while only commas
                followed, args, end = True, [], match.end()
                for nxt in literals[k + 1:]:
                    if code[end:nxt.start()].strip(" \t,") or _PLACEHOLDER.search(nxt.group(0)):
                        break
                    args.append(nxt.group(1) if nxt.group(1) is not None else nxt.group(2))
                    end = nxt.end()
                closed = code[end:].lstrip(" \t,")[:1] in ("]", ")")
                reason = self.git(args + ([] if closed else [UNKNOWN]), cwd, {})
            elif _GIT_WORD.search(text) and any(c.isspace() for c in text):  # "git commit -m x", run by a shell
                followed, reason = True, self.command(text, cwd)
            else:
                reason = None
            if reason:
                return reason
        repo = _Repo(cwd, [], {})
        if not followed and repo.has_session_refs():
            return _refuse(what, ALL, "it runs git in a way the guard cannot follow")
        return None

    def stdin(self, cmd: Command, previous: Command | None, cwd: str | None) -> str | None:
        """What the command reads on its standard input, when the guard can tell ("" when nothing)."""
        for op, target in cmd.redirects:
            if op == "<<<":
                return self.script_text(target, cwd) + "\n"
            if op == "<":
                value = self.resolve(target, cwd)
                return _read(value, cwd) if value is not None else None
        if cmd.heredocs:
            return self.script_text(cmd.heredocs[-1], cwd)
        if previous is None:
            return ""
        values = [self.resolve(w, cwd) for w in previous.words]
        if values[:1] in (["echo"], ["printf"]) and all(v is not None for v in values):
            return " ".join(v or "" for v in values[1:] if not (v or "").startswith("-")) + "\n"
        if values[:1] == ["cat"] and len(values) > 1 and all(v is not None for v in values):
            texts = [_read(v, cwd) for v in values[1:]]
            return "".join(t or "" for t in texts) if all(t is not None for t in texts) else None
        return None

    def resolve(self, word: Word, cwd: str | None) -> str | None:
        """The word's value as the shell would expand it, or None when the guard cannot tell."""
        out = []
        for i, (kind, text, quoted) in enumerate(word.parts):
            if kind == LIT:
                out.append(os.path.expanduser(text) if i == 0 and not quoted and text.startswith("~") else text)
                continue
            value = self.variable(text, cwd) if kind == VAR else self.substitution(text, cwd) if kind == SUB else None
            if value is None:
                return None
            out.append(value)
        return "".join(out)

    def script_text(self, word: Word, cwd: str | None) -> str:
        """A script's text: what the guard resolves, and a word it cannot resolve for the rest."""
        parts = []
        for kind, text, _ in word.parts:
            value = text if kind == LIT else self.variable(text, cwd) if kind == VAR else \
                self.substitution(text, cwd) if kind == SUB else None
            parts.append(_UNKNOWN_VALUE if value is None else value)
        return "".join(parts)

    def variable(self, text: str, cwd: str | None) -> str | None:
        """$NAME or ${NAME}, ${NAME:-default}, ${NAME-default}: from the command, $PWD, or the environment."""
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?)-(.*))?", text, re.S)
        if match is None:
            return None
        name, colon, default = match.group(1), match.group(2), match.group(3)
        if name in self.variables:
            value = self.variables[name]
        elif name == "PWD":
            value = cwd
        else:
            value = os.environ.get(name)
            if value is None and default is None:
                return None
        if default is not None and (value is None or (colon and value == "")):
            return default if "$" not in default and "`" not in default else None
        return value

    def substitution(self, script: str, cwd: str | None) -> str | None:
        """The output of a command substitution the guard knows without running it, else None."""
        items = shellwords.split(script.strip())
        if len(items) != 1 or isinstance(items[0], str) or items[0].redirects:
            return None
        values = [self.resolve(w, cwd) for w in items[0].words]
        if not values or any(v is None for v in values):
            return None
        words: list[str] = [v or "" for v in values]
        if words == ["pwd"]:
            return cwd
        if words[0] == "echo" and not any(w.startswith("-") for w in words[1:]):
            return " ".join(words[1:])
        if words[0] in ("which", "realpath") or words[:2] in (["command", "-v"], ["type", "-P"]):
            target = words[-1]
            return (shutil.which(target) if words[0] != "realpath" else
                    os.path.realpath(os.path.join(cwd, target)) if cwd is not None else None)
        asked = words[1:] if words[0] == "git" else []
        if asked == ["--exec-path"]:
            return _Repo(cwd, [], {}).exec_path()
        if len(asked) == 2 and asked[0] == "rev-parse" and asked[1] in (
                "--show-toplevel", "--git-dir", "--git-common-dir", "--absolute-git-dir"):
            return _Repo(cwd, [], {}).rev_parse_path(asked[1])
        return None

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
                if top is not None and _Repo(top, [], {}).has_session_refs():
                    return True
        return False

    # --- git ----------------------------------------------------------------------------------------------

    def dashed(self, name: str, cwd: str | None) -> bool:
        """Whether `git-<sub>` is one of git's own programs (git-update-ref ...)."""
        return _Repo(cwd, [], {}).is_command(name[4:])

    def git(self, args: list[str], cwd: str | None, env: dict[str, str], maybe: bool = False) -> str | None:
        """A git call of the command: an earlier checkout is certain only when `&&` joins it to this one."""
        if any(v == UNKNOWN for k, v in env.items() if k.startswith("GIT_")):
            cwd = None  # GIT_DIR=$SOMEWHERE: a repository the guard cannot tell
        for key, target in self.pending.items():
            self.switched[key] = {target} if self.chained else {*self.switched.get(key, {None}), target}
        self.pending = {}
        self.chained = True
        return self.invocation(args, cwd, env, maybe)

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
                cwd = None if cwd is None or value == UNKNOWN or _unresolved(value) else \
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
        repo = _Repo(cwd, lookup, env)
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
        return self.update_refs(repo, rest, what) or self.head_mover(repo, rest, what)

    def update_refs(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        """rebase --update-refs (or rebase.updateRefs) moves every branch pointing into what it rebases."""
        if any(a in _ENDERS for a in rest) or "--no-update-refs" in rest:
            return None
        if ("--update-refs" in rest or repo.config_true("rebase.updateRefs")) and repo.has_session_refs():
            return _refuse(what, ALL, "--update-refs moves every branch that points into the commits it rebases")
        return None

    def tag(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        """A tag named like a session branch shadows it: git resolves autoresearch/<tag> to refs/tags first.
        Listing, verifying and deleting (how a shadowing tag is put right) stay allowed."""
        flags = _short_flags(rest)
        if flags & {"l", "--list", "v", "--verify", "d", "--delete", "n"} and not flags & {"a", "s", "f", "m", "F"}:
            return None
        name = next(iter(_positional("tag", rest)), None)
        return _refuse(what, name, "a tag named so shadows the session branch") if _protected(name) else None

    def pull(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        rebases = "--rebase" in rest or any(a.startswith("--rebase=") for a in rest) or "-r" in rest
        return self.fetch(repo, rest, what) or (self.update_refs(repo, rest, what) if rebases else None) \
            or self.head_mover(repo, rest, what)

    def fetch(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        """A refspec `src:dst` writes dst; a session branch there is moved (remote-tracking refs are fine)."""
        for spec in _positional("fetch", rest)[1:]:
            dst = spec.lstrip("+").partition(":")[2]
            # a remote-tracking ref is fine, unless a remote named autoresearch makes it shadow a session branch
            if _protected(dst) and not (dst.startswith("refs/remotes/") and not dst.startswith(_SHADOW_REMOTE)):
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
            return self.from_input(repo, rest, what)
        target = next(iter(_positional("update-ref", rest)), "")
        if _protected(target):
            return _refuse(what, target)
        current = self.current(repo)
        return _refuse(what, current) if target == "HEAD" and _protected(current) else None

    def from_input(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        """fast-import, receive-pack, update-ref --stdin: they write the refs their input names."""
        return _refuse(what, ALL, "it writes the refs its input names") if repo.has_session_refs() else None

    def symbolic_ref(self, repo: _Repo, rest: list[str], what: str) -> str | None:
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

    def push(self, repo: _Repo, rest: list[str], what: str, sub: str = "push") -> str | None:
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

    def send_pack(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        return self.push(repo, rest, what, "send-pack")

    def into_itself(self, repo: _Repo, remote: str) -> bool:
        """Whether a push to `remote` (a name, URL or path) lands in this same repository (unknown: yes)."""
        if remote in (".", UNKNOWN) or repo.cwd is None:
            return True
        url = remote if re.match(r"(/|\./|\.\./|~|file://)", remote) else repo.remote_url(remote)
        if url is None or not re.match(r"(/|\./|\.\./|~|file://)", url):
            return False  # a remote elsewhere: its branches are not the session's
        path = os.path.join(repo.cwd, os.path.expanduser(url[len("file://"):] if url.startswith("file://") else url))
        if not os.path.isdir(path):
            return False
        mine, theirs = repo.common_dir(), _Repo(path, [], {}).common_dir()
        return mine is None or theirs is None or os.path.realpath(mine) == os.path.realpath(theirs)

    def replace(self, repo: _Repo, rest: list[str], what: str) -> str | None:
        if not _positional("replace", rest) or {"-l", "--list", "-d", "--delete"} & set(rest):
            return None
        return _refuse(what, ALL, "a replacement object changes what git shows for a commit") \
            if repo.has_session_refs() else None

    def config(self, repo: _Repo, rest: list[str], what: str) -> str | None:
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

    def filter_branch(self, repo: _Repo, rest: list[str], what: str) -> str | None:
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
    "receive-pack": _Guard.from_input, "tag": _Guard.tag,
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
        """Whether the repository has session branches (or the guard cannot tell: fail closed)."""
        if self.cwd is not None and not os.path.isdir(self.cwd):
            return False  # no repository there (yet)
        found = self._git("for-each-ref", "--count=1", "refs/heads/autoresearch/", "refs/autoresearch/")
        return self.cwd is None or (found is None and self._git("rev-parse", "--git-dir") is not None) or bool(found)

    def alias(self, name: str) -> str | None:
        return self._git("config", "--get", f"alias.{name}")

    def config_true(self, key: str) -> bool:
        return self._git("config", "--type=bool", "--get", key) == "true"

    def remote_url(self, name: str) -> str | None:
        return self._git("config", "--get", f"remote.{name}.url")

    def common_dir(self) -> str | None:
        return self._git("rev-parse", "--path-format=absolute", "--git-common-dir")

    def rev_parse_path(self, option: str) -> str | None:
        """A path `git rev-parse` gives (--show-toplevel, --git-dir...), absolute."""
        return self._git("rev-parse", "--path-format=absolute", option) or None

    def exec_path(self) -> str | None:
        return self._git("--exec-path")

    def is_command(self, name: str) -> bool:
        """Whether git would run something for `git name` (a builtin or a git-name program)."""
        exec_path = self.exec_path() or ""
        return shutil.which(f"git-{name}", path=os.pathsep.join([exec_path, os.environ.get("PATH", "")])) is not None


# --- words -------------------------------------------------------------------------------------------------


def cmd_text(cmd: Command) -> str:
    """A command as the agent wrote it, for a refusal's message."""
    return " ".join([*(w.raw for w in cmd.words), *(op + w.raw for op, w in cmd.redirects)])[:300] or "the command"


def _assignment(word: Word) -> tuple[str, Word] | None:
    """`NAME=value` (the name unquoted, as the shell requires): the name and the value as a word."""
    if not word.parts or word.parts[0][0] != LIT or word.parts[0][2]:
        return None
    match = _NAME_EQ.match(word.parts[0][1])
    if match is None:
        return None
    value = Word()
    rest = word.parts[0][1][match.end():]
    if rest:
        value.add(LIT, rest, False)
    for part in word.parts[1:]:
        value.add(*part)
    return match.group(0)[:-1], value


def _git_dir_top(path: str) -> str | None:
    """The folder that holds the `.git` directory `path` lies in (or is), None when it lies in none."""
    parts = path.replace("\\", "/").split("/")
    if ".git" not in parts:
        return None
    return "/".join(parts[:parts.index(".git")]) or ("/" if path.startswith("/") else ".")


def _written(name: str, args: list[str | None]) -> list[str | None]:
    """The arguments a program may write to: none for one that only reads (find without -delete or
    -exec, sed without -i), the last for cp and its kind, all of them for any other."""
    given = [a for a in args if a is not None]
    if name in _READERS or (name == "find" and not {"-delete", "-exec", "-execdir", "-ok", "-okdir"} & set(given)) \
            or (name == "sed" and not any(a.startswith(("-i", "--in-place")) for a in given)):
        return []
    return args[-1:] if name in _DESTINATION_LAST else args


def _program(value: str | None) -> str | None:
    return os.path.basename(value) if value is not None else None


def _interpreter(name: str | None) -> tuple[str, ...]:
    """The options that take a one-line program, for an interpreter's name (python3.11 is python)."""
    base = re.sub(r"[\d.]+$", "", name or "")
    return _INTERPRETERS.get(base, ())


def _read(path: str | None, cwd: str | None) -> str | None:
    """A script file's text, None when it cannot be read (or is larger than MAX_SCRIPT)."""
    if path is None or (cwd is None and not os.path.isabs(path)):
        return None
    try:
        with open(os.path.join(cwd or "/", os.path.expanduser(path)), "rb") as fh:
            data = fh.read(MAX_SCRIPT + 1)
    except OSError:
        return None
    return data.decode("utf-8", "replace") if len(data) <= MAX_SCRIPT else None


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
    where = ("the session branches autoresearch/*" if branch == ALL else
             "a session branch it cannot resolve" if branch == UNKNOWN or _unresolved(branch) else
             f"the session branch {branch}")
    because = f" ({why})" if why else ""
    return (f"autoresearch: `{what}` is refused on {where}{because}: commits there go through "
            "commit_winner, which keeps only a measured, checked winner with its evidence, and the branch's history "
            "is the session's record. Launch the change as an experiment (launch_experiment) and commit it with "
            "commit_winner; to leave the session, check out another branch. A person can still run git in a "
            "terminal.")


def main() -> int:
    """`guard.py` with the PreToolUse event on stdin: exit 2 (the reason on stderr) denies the tool call."""
    reason = guard(json.load(sys.stdin))
    if reason:
        print(reason, file=sys.stderr)
        return DENY_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
