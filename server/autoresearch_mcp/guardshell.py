"""The guard's evaluator of the shell: what a Bash command line would do, as effects, without running it.

It reads the command as the shell reads it (shellwords.py) and walks it the way the shell would run it,
following `cd`, variables the command sets, `$PWD`, known command substitutions (`$(git rev-parse
--show-toplevel)`, `$(echo ...)`, `$(pwd)`), shell aliases (`alias g=git`, which Claude Code's shell
snapshot expands: `shopt -s expand_aliases`), wrappers (env, sudo, xargs, timeout...), scripts run by a
shell (`bash -c`, `eval`, here-documents, `echo ... | sh`, a script file) and the strings of a one-line
program (`python3 -c`, `perl -e`...). What it finds are effects, handed in order to a policy (guard.py)
that judges each and may stop the walk:

- `GitCall`: a git invocation, with its words (global options such as `-C` and `-c` included), the
  directory and environment it runs with.
- `Write`: a path the command may write (a redirection, tee, cp/mv/ln/install targets, sed -i, dd of=,
  a path a one-line program names).
- `Blind`: something that may run git which the evaluator cannot read (a script file it cannot open, a
  program whose git calls it cannot follow, nesting too deep).

Text that is only data (`grep -rn "git commit" .`, `python3 -c "print('git commit')"`) is no effect. A
word it cannot resolve is UNKNOWN, and the policy treats it as the worst it could be (fail closed).

Standard library only, Python 3.8 syntax, and cheap to import: the PreToolUse hook runs it with the system
python3 before every Bash call.
"""

from __future__ import annotations

import os

from autoresearch_mcp import shellwords
from autoresearch_mcp.shellwords import LIT, SUB, VAR, Command, Word

TYPE_CHECKING = False  # typing is not imported: its import costs the hook more than the rest of it
if TYPE_CHECKING:
    import re
    from collections.abc import Callable

    _Program = Callable[["Shell", "_Simple"], "str | None"]

UNKNOWN = "?"  # a branch, directory or word the evaluator cannot tell
UNKNOWN_VALUE = "${__autoresearch_unknown__}"  # what a script's unknown piece becomes: a word it cannot resolve
MAX_SCRIPT = 256 * 1024  # a script file read to judge what it runs
MAX_DEPTH = 8  # aliases, scripts and substitutions nested deeper are refused
# What runs the words after it: shell keywords, and programs that run a command (their options with a value).
KEYWORDS = frozenset({"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"})
WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "--user", "--group"}),
    "doas": frozenset({"-u", "-C"}), "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "nice": frozenset({"-n", "--adjustment"}), "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "nohup": frozenset(), "stdbuf": frozenset({"-i", "-o", "-e"}), "exec": frozenset({"-a"}),
    "command": frozenset(), "builtin": frozenset(), "ionice": frozenset({"-c", "-n", "-p"}),
    "chronic": frozenset(), "setsid": frozenset(), "unbuffer": frozenset(), "xargs": frozenset({
        "-a", "--arg-file", "-d", "--delimiter", "-E", "-e", "--eof", "-I", "-i", "--replace", "-L", "-l",
        "--max-lines", "-n", "--max-args", "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"}),
}
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh"})
INTERPRETERS = {"python": ("-c",), "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval", "-p", "--print"),
                "nodejs": ("-e", "--eval"), "php": ("-r",), "lua": ("-e",), "deno": ("eval",), "bun": ("-e", "--eval")}
# Programs that only read the files they are given (their output may be redirected, which is judged apart).
READERS = frozenset({
    "cat", "less", "more", "head", "tail", "ls", "grep", "egrep", "fgrep", "rg", "ag", "stat", "file", "wc", "diff",
    "cmp", "du", "tree", "xxd", "od", "hexdump", "echo", "printf", "test", "[", "[[", "realpath", "readlink",
    "basename", "dirname", "md5sum", "sha1sum", "sha256sum", "strings", "jq", "git", "cd", "pushd", "true",
    "false", ":", "type", "which", "whereis", "column", "sort", "uniq", "cut", "tr", "nl", "bat", "fd",
})
DESTINATION_LAST = frozenset({"cp", "ln", "install", "rsync", "scp"})  # only their last path is written
WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
# Patterns, compiled on first use (pattern()): a command without a one-line program never imports re,
# whose import (enum, functools, collections) costs as much as the rest of the guard.
_PATTERNS = {
    "git word": r"(?<![\w.-])git(?![\w-])",
    "literal": r'"((?:[^"\\\n]|\\.)*)"|\'((?:[^\'\\\n]|\\.)*)\'',
    "placeholder": r"#?\{[^{}]*\}|%\(?\w*\)?[sdr]|\$\{[^}]*\}",  # f-strings, format, %s, ruby, js templates
    "callee": r"([A-Za-z_][\w.]*!?)\s*$",
}
_COMPILED: dict[str, re.Pattern[str]] = {}
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")
# Calls whose string arguments a one-line program only shows (print('git commit') is text, not a command);
# `write` is not among them (a shell's stdin can be written to).
_PRINTERS = frozenset({"print", "println", "printf", "puts", "echo", "say", "log", "info", "debug", "warn",
                       "warning", "error", "format", "str", "repr", "len", "upper", "lower", "strip", "dumps"})


# --- effects -------------------------------------------------------------------------------------------------


class GitCall:
    """`git args...` run in `cwd` with `env` (variables set for it); `maybe`: the program's name is a word
    the evaluator cannot resolve, so it may be git; `joined`: only `&&` joins it to the git call before it
    (so that call's checkout is certain to have happened)."""

    __slots__ = ("args", "cwd", "env", "joined", "maybe")

    def __init__(self, args: list[str], cwd: str | None, env: dict[str, str], maybe: bool = False,
                 joined: bool = False) -> None:
        self.args, self.cwd, self.env, self.maybe, self.joined = args, cwd, env, maybe, joined

    def __repr__(self) -> str:
        return f"GitCall({self.args!r}, cwd={self.cwd!r})"


class Write:
    """A path (relative to cwd; None: one the evaluator cannot resolve) the command `what` may write."""

    __slots__ = ("cwd", "path", "what")

    def __init__(self, path: str | None, cwd: str | None, what: str) -> None:
        self.path, self.cwd, self.what = path, cwd, what

    def __repr__(self) -> str:
        return f"Write({self.path!r}, cwd={self.cwd!r})"


class Blind:
    """Something the evaluator cannot read that may run git: `scope` says where that matters ("branch": on
    a session branch; "repo": beside session branches; "always")."""

    __slots__ = ("cwd", "scope", "what", "why")

    def __init__(self, cwd: str | None, what: str, why: str, scope: str) -> None:
        self.cwd, self.what, self.why, self.scope = cwd, what, why, scope

    def __repr__(self) -> str:
        return f"Blind({self.what!r}, {self.scope})"


if TYPE_CHECKING:
    Effect = GitCall | Write | Blind


class Oracle:
    """What the evaluator asks git to resolve a word (guard.py answers with read-only git calls)."""

    def exec_path(self, cwd: str | None) -> str | None:
        return None

    def rev_parse_path(self, cwd: str | None, option: str) -> str | None:
        return None

    def is_command(self, cwd: str | None, name: str) -> bool:
        return True


class _Simple:
    """One simple command being evaluated: its words resolved, the program and its arguments."""

    __slots__ = ("cmd", "cwd", "env", "fields", "placeholders", "previous", "run_in", "start", "words")

    def __init__(self, cmd: Command, previous: Command | None, cwd: str | None) -> None:
        self.cmd, self.previous, self.cwd = cmd, previous, cwd
        self.env: dict[str, str] = {}
        self.words: list[Word] = list(cmd.words)
        self.fields: list[tuple[str | None, bool]] = []
        self.start = 0
        self.placeholders: set[str] | None = None
        self.run_in = cwd  # the directory the program runs in (env -C)

    @property
    def program(self) -> str | None:
        return self.fields[self.start][0]

    @property
    def name(self) -> str:
        return program_name(self.program) or ""

    @property
    def args(self) -> list[str | None]:
        return [value for value, _ in self.fields[self.start + 1:]]

    @property
    def what(self) -> str:
        return cmd_text(self.cmd)


# --- the evaluator -------------------------------------------------------------------------------------------


class Shell:
    """Evaluates command lines, handing each effect to `judge` (which answers why it must not happen, or
    None); remembers what earlier parts of the command did (a variable, an alias, a directory)."""

    def __init__(self, judge: Callable[[Effect], str | None], oracle: Oracle) -> None:
        self.judge, self.oracle = judge, oracle
        self.variables: dict[str, str | None] = {}  # shell variables it sets (None: to what it cannot tell)
        self.aliases: dict[str, str] = {}  # shell aliases it defines
        self.chained = False  # only `&&` since the last git call
        self.depth = 0  # alias, script and substitution nesting
        self.new_cwd: str | None = None  # where a cd leaves the commands after it

    def command(self, script: str, cwd: str | None) -> str | None:
        """Why the shell script `script` (run in cwd) must not run: the first effect the judge refuses."""
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                return self.judge(Blind(cwd, script[:200], "it nests scripts or aliases too deeply to follow",
                                        "always"))
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

    def git(self, args: list[str], cwd: str | None, env: dict[str, str], maybe: bool = False) -> str | None:
        joined, self.chained = self.chained, True
        return self.judge(GitCall(args, cwd, env, maybe, joined))

    def simple(self, cmd: Command, cwd: str | None, previous: Command | None) -> tuple[str | None, str | None]:
        """Why one simple command must not run, and the directory the commands after it run in."""
        for word in [*cmd.words, *(w for _, w in cmd.redirects), *cmd.heredocs]:
            for kind, text, _ in word.parts:
                if kind == SUB:  # $(...), `...`, <(...): run before the command, in its directory
                    reason = self.command(text, cwd)
                    if reason:
                        return reason, cwd
        for op, written in cmd.redirects:
            if op in WRITES:
                reason = self.judge(Write(self.resolve(written, cwd), cwd, cmd_text(cmd)))
                if reason:
                    return reason, cwd
        s = _Simple(cmd, previous, cwd)
        assigned = _assignment(s.words[0]) if s.words else None
        while assigned is not None:
            name, value = assigned
            s.env[name] = self.resolve(value, cwd) or UNKNOWN
            if all(_assignment(w) for w in s.words):  # no command: variables of the shell, for what follows
                self.variables[name] = self.resolve(value, cwd)
            s.words.pop(0)
            assigned = _assignment(s.words[0]) if s.words else None
        alias = self.expand_alias(s.words)
        if alias is not None:
            name, text = alias
            body = self.aliases.pop(name)  # an alias never expands itself again
            try:
                return self.command(text, cwd), cwd
            finally:
                self.aliases[name] = body
        s.fields = [field for w in s.words for field in self.fields(w, cwd)]
        self.unwrap(s)
        if s.start >= len(s.fields):
            return None, cwd
        self.new_cwd = cwd
        reason = self.run_program(s)
        return reason, self.new_cwd

    def run_program(self, s: _Simple) -> str | None:
        """The effects of the program a simple command runs: by its name (PROGRAMS), then a git among its
        words (find -exec git ..., watch git ...), then the paths it may write."""
        name = s.name
        judge = PROGRAMS.get(name) or self.family(s)
        if judge is not None:
            reason = judge(self, s)
            if reason or judge in _FINAL:
                return reason
        args = s.args
        if name not in READERS:
            for j, (field, quoted) in enumerate(s.fields[s.start + 1:]):
                if field is not None and not quoted and program_name(field) == "git":
                    tail = args[j + 1:]
                    end = next((k for k, a in enumerate(tail) if a in (";", "+")), len(tail))
                    reason = self.git([UNKNOWN if a is None or a == "{}" else a for a in tail[:end]], s.run_in, s.env)
                    if reason:
                        return reason
        for path in written(name, args):
            reason = self.judge(Write(path, s.run_in, s.what))
            if reason:
                return reason
        return None

    def family(self, s: _Simple) -> _Program | None:
        """The programs known by the shape of their name: a word that may be git (unresolved), git-<sub>,
        python3.11 and its kind, the shells."""
        name = s.name
        if s.program is None or (name.startswith("git-") and self.oracle.is_command(s.run_in, name[4:])):
            return Shell.git_program
        if interpreter_options(name):
            return Shell.interpreter
        return Shell.shell if name in SHELLS else None

    # --- programs (PROGRAMS) ----------------------------------------------------------------------------

    def cd(self, s: _Simple) -> str | None:
        args, cwd = s.args, s.cwd
        target = next((a for a in args if a is None or not a.startswith("-") or a == "-"), "~")
        self.new_cwd = None if cwd is None or target is None or target == "-" else \
            os.path.normpath(os.path.join(cwd, os.path.expanduser(target)))
        return None

    def declare(self, s: _Simple) -> str | None:
        for word in s.words:
            found = _assignment(word)
            if found:
                self.variables[found[0]] = self.resolve(found[1], s.cwd)
        return None

    def alias(self, s: _Simple) -> str | None:
        """`alias name=value`: expanded where a later command starts with `name`."""
        for value in s.args:
            name, eq, body = (value or "").partition("=")
            if eq and name:
                self.aliases[name] = body
            elif value is None:
                self.aliases[UNKNOWN] = UNKNOWN_VALUE  # an alias it cannot tell: every first word may be one
        return None

    def unalias(self, s: _Simple) -> str | None:
        for value in s.args:
            if value == "-a":
                self.aliases.clear()
            self.aliases.pop(value or "", None)
        return None

    def git_program(self, s: _Simple) -> str | None:
        name, args = s.name, s.args
        head = [] if s.program is None or name == "git" else [name[len("git-"):]]
        given = [UNKNOWN if a is None or (s.placeholders and any(p in a for p in s.placeholders)) else a
                 for a in args]
        return self.git(head + given + ([UNKNOWN] if s.placeholders is not None else []), s.run_in, s.env,
                        maybe=s.program is None)

    def shell(self, s: _Simple) -> str | None:
        """A shell, eval or source: the script it runs, or a Blind effect for one it cannot read."""
        name, args, cwd = s.name, s.args, s.run_in
        script: str | None = None
        if name == "eval":
            script = " ".join(a for a in args if a is not None) if all(a is not None for a in args) else None
        elif name in ("source", "."):
            script = read_file(args[0], cwd) if args and args[0] is not None else None
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
                script = read_file(positional[0], cwd) if positional[0] is not None else None
            else:
                script = self.stdin(s.cmd, s.previous, cwd)
        if script is not None:
            return self.command(script, cwd)
        return self.judge(Blind(cwd, s.what, "it runs a script the guard cannot read", "branch"))

    def interpreter(self, s: _Simple) -> str | None:
        """An interpreter (python, perl...): the strings of a one-line program (`-c`, `-e`, stdin)."""
        options, args, cwd = interpreter_options(s.name), s.args, s.run_in
        code: str | None = None
        for i, arg in enumerate(args):
            if arg in options or (arg or "").startswith(tuple(o for o in options if o.startswith("-"))):
                code = args[i + 1] if arg in options and i + 1 < len(args) else (arg or "")[2:]
                break
            if arg == "-" or arg is None or not arg.startswith("-"):
                code = self.stdin(s.cmd, s.previous, cwd) if arg == "-" else ""  # a script file: out of its sight
                break
        else:
            code = self.stdin(s.cmd, s.previous, cwd)
        if code is None:
            code = UNKNOWN_VALUE + " git"  # unreadable: judged as a program that may run git
        return self.code(code, cwd, s.what)

    def code(self, code: str, cwd: str | None, what: str) -> str | None:
        """A program's text: the paths its strings name, and the git commands its strings spell."""
        literals = list(pattern("literal").finditer(code))
        shown = [m for m in literals if _shown(code, m.start())]  # print('git commit'): text
        for match in literals:
            value = match.group(1) if match.group(1) is not None else match.group(2)
            if value and match not in shown:
                reason = self.judge(Write(value, cwd, what))
                if reason:
                    return reason
        if not pattern("git word").search(_without(code, shown)):
            return None
        followed = False
        for k, match in enumerate(literals):
            if match in shown:
                continue
            given = match.group(1) if match.group(1) is not None else match.group(2)
            text = pattern("placeholder").sub(UNKNOWN_VALUE, given)
            if program_name(text) == "git":  # ['git', 'update-ref', ...]: the literals that follow, while only commas
                followed, args, end = True, [], match.end()
                for nxt in literals[k + 1:]:
                    if code[end:nxt.start()].strip(" \t,") or pattern("placeholder").search(nxt.group(0)):
                        break
                    args.append(nxt.group(1) if nxt.group(1) is not None else nxt.group(2))
                    end = nxt.end()
                closed = code[end:].lstrip(" \t,")[:1] in ("]", ")")
                reason = self.git(args + ([] if closed else [UNKNOWN]), cwd, {})
            elif pattern("git word").search(text) and any(c.isspace() for c in text):  # "git commit", run by a shell
                followed, reason = True, self.command(text, cwd)
            else:
                reason = None
            if reason:
                return reason
        if not followed:
            return self.judge(Blind(cwd, what, "it runs git in a way the guard cannot follow", "repo"))
        return None

    # --- words ------------------------------------------------------------------------------------------

    def expand_alias(self, words: list[Word]) -> tuple[str, str] | None:
        """The alias these words start with (an unquoted alias name first) and the command line it makes."""
        if not words or not self.aliases or words[0].quoted:
            return None
        first = words[0].literal()
        name = first if first in self.aliases else UNKNOWN if UNKNOWN in self.aliases else None
        if first is None or name is None:
            return None
        return name, " ".join([self.aliases[name], *(w.raw for w in words[1:])])

    def fields(self, word: Word, cwd: str | None) -> list[tuple[str | None, bool]]:
        """The words the shell makes of `word` (an unquoted expansion is split at blanks), each with
        whether it was quoted; None for one the evaluator cannot resolve."""
        value = self.resolve(word, cwd)
        split = value is not None and any(kind != LIT and not quoted for kind, _, quoted in word.parts)
        if split and value is not None:
            return [(v, False) for v in value.split()]
        return [(value, word.quoted)]

    def unwrap(self, s: _Simple) -> None:
        """Skip keywords and wrappers (env, sudo, xargs...) to the program they run: its index; for xargs,
        the words it replaces by its input (its other input comes after them: None without xargs); and
        the directory the program runs in (env -C)."""
        values = [value for value, _ in s.fields]
        i = 0
        while i < len(values):
            name = program_name(values[i])
            if name in KEYWORDS:
                i += 1
                continue
            if name is None or name not in WRAPPERS:
                break
            valued = WRAPPERS[name]
            i += 1
            if name == "xargs":
                s.placeholders = s.placeholders or set()
            while i < len(values) and (values[i] or "").startswith("-") and values[i] not in ("-", "--"):
                option = values[i] or ""
                value = values[i + 1] if i + 1 < len(values) else None
                if name == "env" and option in ("-C", "--chdir"):
                    s.run_in = None if s.run_in is None or value is None else os.path.join(s.run_in, value)
                if name == "xargs" and s.placeholders is not None and (
                        option in ("-I", "-i", "--replace") or option.startswith(("-I", "--replace="))):
                    given = value if option in ("-I", "--replace") else option.partition("=")[2] or option[2:]
                    s.placeholders.add(given or "{}")
                if name == "command" and option in ("-v", "-V"):
                    s.start = len(values)  # prints what the name is; runs nothing
                    return
                i += 2 if option in valued else 1
            if i < len(values) and values[i] == "--":
                i += 1
            if name == "env":
                while i < len(values) and name_length(values[i] or "") is not None:
                    key, _, value_ = (values[i] or "").partition("=")
                    s.env[key] = value_
                    i += 1
            if name == "timeout" and i < len(values):
                i += 1  # the duration
        s.start = i

    def stdin(self, cmd: Command, previous: Command | None, cwd: str | None) -> str | None:
        """What the command reads on its standard input, when the evaluator can tell ("" when nothing)."""
        for op, target in cmd.redirects:
            if op == "<<<":
                return self.script_text(target, cwd) + "\n"
            if op == "<":
                value = self.resolve(target, cwd)
                return read_file(value, cwd) if value is not None else None
        if cmd.heredocs:
            return self.script_text(cmd.heredocs[-1], cwd)
        if previous is None:
            return ""
        values = [self.resolve(w, cwd) for w in previous.words]
        if values[:1] in (["echo"], ["printf"]) and all(v is not None for v in values):
            return " ".join(v or "" for v in values[1:] if not (v or "").startswith("-")) + "\n"
        if values[:1] == ["cat"] and len(values) > 1 and all(v is not None for v in values):
            texts = [read_file(v, cwd) for v in values[1:]]
            return "".join(t or "" for t in texts) if all(t is not None for t in texts) else None
        return None

    def resolve(self, word: Word, cwd: str | None) -> str | None:
        """The word's value as the shell would expand it, or None when the evaluator cannot tell."""
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
        """A script's text: what the evaluator resolves, and a word it cannot resolve for the rest."""
        parts = []
        for kind, text, _ in word.parts:
            value = text if kind == LIT else self.variable(text, cwd) if kind == VAR else \
                self.substitution(text, cwd) if kind == SUB else None
            parts.append(UNKNOWN_VALUE if value is None else value)
        return "".join(parts)

    def variable(self, text: str, cwd: str | None) -> str | None:
        """$NAME or ${NAME}, ${NAME:-default}, ${NAME-default}: from the command, $PWD, or the environment."""
        end = _name_end(text)
        if not end:
            return None
        name, rest = text[:end], text[end:]
        colon = ":" if rest.startswith(":-") else ""
        if rest and not rest.startswith(("-", ":-")):
            return None  # ${NAME%x}, ${NAME/a/b}...: an expansion it does not follow
        default = rest[len(colon) + 1:] if rest else None
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
        """The output of a command substitution the evaluator knows without running it, else None."""
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
            import shutil  # only here: the hook's usual path never needs it

            target = words[-1]
            return (shutil.which(target) if words[0] != "realpath" else
                    os.path.realpath(os.path.join(cwd, target)) if cwd is not None else None)
        asked = words[1:] if words[0] == "git" else []
        if asked == ["--exec-path"]:
            return self.oracle.exec_path(cwd)
        if len(asked) == 2 and asked[0] == "rev-parse" and asked[1] in (
                "--show-toplevel", "--git-dir", "--git-common-dir", "--absolute-git-dir"):
            return self.oracle.rev_parse_path(cwd, asked[1])
        return None


# The programs the evaluator knows by name; any other runs as a program that may write its arguments.
PROGRAMS: dict[str, _Program] = {
    "cd": Shell.cd, "pushd": Shell.cd,
    "export": Shell.declare, "declare": Shell.declare, "local": Shell.declare, "readonly": Shell.declare,
    "typeset": Shell.declare,
    "alias": Shell.alias, "unalias": Shell.unalias,
    "git": Shell.git_program,
    "eval": Shell.shell, "source": Shell.shell, ".": Shell.shell,
}
_FINAL = frozenset({Shell.cd, Shell.declare, Shell.alias, Shell.unalias, Shell.git_program})  # nothing else to see


# --- words ---------------------------------------------------------------------------------------------------


def pattern(name: str) -> re.Pattern[str]:
    """One of _PATTERNS, compiled."""
    found = _COMPILED.get(name)
    if found is None:
        import re

        found = _COMPILED[name] = re.compile(_PATTERNS[name])
    return found


def _name_end(text: str) -> int:
    """The length of the shell variable name `text` starts with (0: none)."""
    if not text or text[0] not in _NAME_START:
        return 0
    end = 1
    while end < len(text) and text[end] in _NAME_CHARS:
        end += 1
    return end


def name_length(text: str) -> int | None:
    """The length of the shell variable name `text` starts with when `=` follows it (NAME=...), else None."""
    end = _name_end(text)
    return end if end and text[end:end + 1] == "=" else None


def cmd_text(cmd: Command) -> str:
    """A command as the agent wrote it, for a refusal's message."""
    return " ".join([*(w.raw for w in cmd.words), *(op + w.raw for op, w in cmd.redirects)])[:300] or "the command"


def _assignment(word: Word) -> tuple[str, Word] | None:
    """`NAME=value` (the name unquoted, as the shell requires): the name and the value as a word."""
    if not word.parts or word.parts[0][0] != LIT or word.parts[0][2]:
        return None
    end = name_length(word.parts[0][1])
    if end is None:
        return None
    value = Word()
    rest = word.parts[0][1][end + 1:]
    if rest:
        value.add(LIT, rest, False)
    for part in word.parts[1:]:
        value.add(*part)
    return word.parts[0][1][:end], value


def written(name: str, args: list[str | None]) -> list[str | None]:
    """The arguments a program may write to: none for one that only reads (find without -delete or
    -exec, sed without -i), the last for cp and its kind, all of them for any other."""
    given = [a for a in args if a is not None]
    if name in READERS or (name == "find" and not {"-delete", "-exec", "-execdir", "-ok", "-okdir"} & set(given)) \
            or (name == "sed" and not any(a.startswith(("-i", "--in-place")) for a in given)):
        return []
    return args[-1:] if name in DESTINATION_LAST else args


def program_name(value: str | None) -> str | None:
    return os.path.basename(value) if value is not None else None


def interpreter_options(name: str | None) -> tuple[str, ...]:
    """The options that take a one-line program, for an interpreter's name (python3.11 is python)."""
    base = (name or "").rstrip("0123456789.")
    return INTERPRETERS.get(base, ())


def read_file(path: str | None, cwd: str | None) -> str | None:
    """A script file's text, None when it cannot be read (or is larger than MAX_SCRIPT)."""
    if path is None or (cwd is None and not os.path.isabs(path)):
        return None
    try:
        with open(os.path.join(cwd or "/", os.path.expanduser(path)), "rb") as fh:
            data = fh.read(MAX_SCRIPT + 1)
    except OSError:
        return None
    return data.decode("utf-8", "replace") if len(data) <= MAX_SCRIPT else None


def _shown(code: str, start: int) -> bool:
    """Whether the string literal at `start` is an argument of a call that only shows text (print(...))."""
    depth = 0
    for i in range(start - 1, -1, -1):
        c = code[i]
        if c in ")]}":
            depth += 1
        elif c in "([{":
            if depth == 0:
                callee = pattern("callee").search(code[:i]) if c == "(" else None
                return callee is not None and callee.group(1).rstrip("!").rsplit(".", 1)[-1] in _PRINTERS
            depth -= 1
        elif c in ";\n" and depth == 0:
            return False
    return False


def _without(code: str, literals: list[re.Match[str]]) -> str:
    """`code` with these literals cut out."""
    out, pos = [], 0
    for m in literals:
        out.append(code[pos:m.start()])
        pos = m.end()
    out.append(code[pos:])
    return "".join(out)
