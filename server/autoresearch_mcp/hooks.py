"""The plugin's Claude Code hooks (hooks/hooks.json); each reads the event's JSON object on stdin.

- `guard` (PreToolUse, Bash): refuses the git commands that would bypass commit_winner on a session
  branch `autoresearch/*` (commit, reset --hard, force-push, branch deletion); allows them elsewhere.
- `session-start` (SessionStart): in a repository with a session, its state as context for the agent.
- `stop` (Stop): a reminder when experiments still run or cloud workers may still be up.

`guard` uses the standard library only and `hooks/run` runs this file with the system python3, so
the guard holds before (and without) the plugin's venv; the other two run inside the package.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

PROTECTED = "autoresearch/"
DENY_EXIT = 2  # PreToolUse: exit 2 blocks the tool call and shows stderr to Claude (exit 1 would not)
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "|&", ";;"})
_GIT_OPTIONS_WITH_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"})
_FORCE = ("-f", "--force", "--force-with-lease", "--force-if-includes")


# --- guard ------------------------------------------------------------------------------------------


def guard(event: dict[str, Any]) -> str | None:
    """Why this Bash command must not run, or None to let it run."""
    command = (event.get("tool_input") or {}).get("command")
    if event.get("tool_name") != "Bash" or not isinstance(command, str) or "git" not in command:
        return None
    cwd = str(event.get("cwd") or ".")
    switched: str | None = None  # the branch an earlier `git checkout` of the same command moves to
    for args in _git_invocations(command):
        call = _parse(args, cwd)
        if call is None:
            continue
        sub, rest, where = call
        if sub in ("checkout", "switch"):
            targets = _positional(rest)
            switched = targets[0] if targets else switched
            continue
        reason = _judge(sub, rest, switched, where)
        if reason:
            return reason
    return None


def _git_invocations(command: str) -> list[list[str]]:
    """Argument lists of every `git ...` in a shell command, including inside `bash -c '...'`."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: judge the words as they stand
        tokens = command.split()
    found: list[list[str]] = []
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token in _SEPARATORS:
            for i, word in enumerate(segment):
                if Path(word).name == "git":
                    found.append(segment[i + 1:])
            segment = []
            continue
        if any(c.isspace() for c in token) and "git" in token:
            found += _git_invocations(token)  # a script passed as one word: bash -c "git ..."
        segment.append(token)
    return found


def _parse(args: list[str], cwd: str) -> tuple[str, list[str], str] | None:
    """(subcommand, its arguments, the directory git works in), past git's own options."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        option = args[i]
        if option in _GIT_OPTIONS_WITH_VALUE and i + 1 < len(args):
            if option == "-C":
                cwd = str(Path(cwd, args[i + 1]))
            i += 1
        i += 1
    return (args[i], args[i + 1:], cwd) if i < len(args) else None


def _positional(rest: list[str]) -> list[str]:
    return [a for a in rest if not a.startswith("-")]


def _judge(sub: str, rest: list[str], switched: str | None, where: str) -> str | None:
    """Why `git sub rest...` must not run; `switched` is the branch an earlier checkout moved to."""

    def branch() -> str | None:
        return switched or _branch(where)

    what = " ".join(["git", sub, *rest])
    named = [a for a in rest if PROTECTED in a]
    if sub == "branch" and any(a == "--delete" or (a[:1] == "-" and a[1:2] != "-" and set(a[1:]) & {"d", "D"})
                               for a in rest):
        return _refuse(what, named[0]) if named else None
    if sub == "update-ref" and "-d" in rest and named:
        return _refuse(what, named[0])
    if sub == "push":
        if ("--delete" in rest or "-d" in rest or any(a.startswith(":") for a in named)) and named:
            return _refuse(what, named[0])
        if any(a.startswith(_FORCE) for a in rest) or any(a.startswith("+") for a in named):
            refspecs = _positional(rest)[1:]  # after the remote
            targets = [t for t in refspecs if t != "HEAD"] if refspecs else []
            hit = next((t for t in targets if PROTECTED in t), None)
            if hit is None and (not targets or "HEAD" in refspecs):
                current = branch()
                hit = current if current and current.startswith(PROTECTED) else None
            return _refuse(what, hit) if hit else None
        return None
    if sub == "commit" or (sub == "reset" and "--hard" in rest):
        current = branch()
        if current and current.startswith(PROTECTED):
            return _refuse(what, current)
    return None


def _branch(cwd: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", cwd, "symbolic-ref", "--short", "-q", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _refuse(what: str, branch: str) -> str:
    return (f"autoresearch: `{what}` is refused on the session branch {branch}: commits there go through "
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
    """The session's state for the agent's context, or nothing outside a session."""
    root = _session_root(event)
    if root is None:
        return ""
    from autoresearch_mcp import notes, report
    from autoresearch_mcp.errors import AutoresearchError

    try:
        data = report.load(str(root))
    except AutoresearchError as exc:
        return f"autoresearch: the session in {root} cannot be read: {exc}\n"
    running = [r.exp for r in data.rows if r.outcome == report.RUNNING]
    lines = ["autoresearch: this repository has an optimization session (follow the /autoresearch brief).",
             report.summarize(data)]
    if running:
        lines.append("Unfinished when the last server stopped (the new server marks them lost; launch them again): "
                     + ", ".join(f"{e.experiment_id} {e.title!r}" for e in running))
    text = notes.read(root, limit=1500)
    lines.append(f"Latest notes ({notes.notes_path(root)}):\n{text}" if text else
                 "No notes yet: record findings with add_note.")
    lines.append("To resume: start_session with the same tag binds it again; list_experiments shows the ledger "
                 "and the notes.")
    return "\n".join(lines) + "\n"


def stop(event: dict[str, Any]) -> dict[str, Any] | None:
    """Block the first stop once with a reminder when work is still in flight; never twice in a row."""
    if event.get("stop_hook_active"):
        return None
    root = _session_root(event)
    if root is None:
        return None
    from autoresearch_mcp.experiments.ledger import Ledger, fold
    from autoresearch_mcp.models import FINAL_STATUSES

    # Stop runs at the end of every turn: the config is read as JSON, since the package's config model
    # would import the statistics stack (scipy) for its defaults.
    state = root / ".autoresearch"
    config = json.loads((state / "config.json").read_text())
    session_id = str(config.get("session_id"))
    records, _ = Ledger(state / "ledger.jsonl").records()
    running = [e for e in fold(records).experiments.values()
               if e.launch.get("session_id") == session_id and e.status not in FINAL_STATUSES]
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


def cloud_workers(records: list[dict[str, Any]], session_id: str) -> list[str]:
    """Clusters this session's experiments ran on since its last stop_workers, in order of first use."""
    mine: set[str] = set()
    used: dict[str, None] = {}
    for rec in records:
        kind = rec.get("type")
        if kind == "launch" and rec.get("session_id") == session_id:
            mine.add(str(rec.get("experiment_id")))
        elif kind == "status" and rec.get("experiment_id") in mine:
            cluster = (rec.get("runtime") or {}).get("cluster")
            if isinstance(cluster, str):
                used[cluster] = None
        elif kind == "workers" and rec.get("session_id") == session_id:
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
