"""The plugin's Claude Code hooks (hooks/hooks.json); each reads the event's JSON object on stdin.

- `session-start` (SessionStart): in a repository with a session, its state as context for the agent,
  with the agreement and the running experiments also after /compact and /clear.
- `stop` (Stop): a reminder when experiments still run or cloud workers may still be up.

The PreToolUse guard of the session branches is guard.py (standard library only, run by hooks/run with
the system python3); these two run inside the package.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autoresearch_mcp.store.records import Record


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
    from autoresearch_mcp.models import FINAL_STATUSES
    from autoresearch_mcp.store.ledger import Ledger, fold

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
    from autoresearch_mcp.store.records import parse

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
    """`hooks.py session-start|stop` with the event on stdin."""
    name = argv[0] if argv else ""
    event = json.load(sys.stdin)
    if name == "session-start":
        sys.stdout.write(session_start(event))
        return 0
    if name == "stop":
        decision = stop(event)
        if decision:
            print(json.dumps(decision))
        return 0
    print(f"unknown hook {name!r}: expected session-start or stop", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
