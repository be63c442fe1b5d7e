"""The agent's notes: what it tried and learned, in `.autoresearch/notes.md` beside the ledger.

The session folder is excluded from git, so a note never enters a candidate snapshot or a commit,
and `restore_worktree` (git clean without -x) leaves it alone. The notes outlive the agent's
context: `list_experiments` returns their tail, the report shows them, and the agent (or the
person) may also edit the file directly.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from autoresearch_mcp import safefs
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.store.config import state_dir

NOTES_FILE = "notes.md"
AGREED = "Agreed:"  # how the note recording the goal, constraints and budget agreed with the user starts
MAX_NOTE_CHARS = 4000
TAIL_CHARS = 6000  # what list_experiments returns: the latest notes, enough to resume from
_HEADER = "# autoresearch notes\n\nWhat was tried and learned, newest last (written by add_note).\n\n"


def notes_path(root: Path) -> Path:
    return state_dir(root) / NOTES_FILE


def add(root: Path, text: str, now: dt.datetime | None = None) -> tuple[Path, int]:
    """Append one dated entry; returns the file and how many entries it now holds."""
    body = text.strip()
    if not body:
        raise InputError("the note is empty; write what you tried or learned, with its source")
    if len(body) > MAX_NOTE_CHARS:
        raise InputError(f"the note has {len(body)} characters, more than {MAX_NOTE_CHARS}; split it into "
                         "several findings (one per note) or put long material in a file and note its path")
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    lines = body.splitlines()
    entry = f"- {stamp}: {lines[0]}\n" + "".join(f"  {line}\n" for line in lines[1:])
    path = notes_path(root)
    with safefs.open_write(root, path, "a") as fh:  # never through a link planted in .autoresearch/
        if fh.tell() == 0:
            fh.write(_HEADER)
        fh.write(entry)
    return path, count(path.read_text(encoding="utf-8"))


def count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("- "))


def read(root: Path, limit: int | None = TAIL_CHARS) -> str | None:
    """The notes (their last `limit` characters, from a line start), or None when there are none."""
    path = notes_path(root)
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if limit is not None and len(text) > limit:
        tail = text[-limit:]
        text = "[earlier notes cut; the whole file: " + str(path) + "]\n" + tail[tail.find("\n") + 1:]
    return text or None


def agreement(root: Path) -> str | None:
    """The latest note that records the agreement with the user (it starts with `Agreed:`), whole: the
    hooks show it after the agent's context was compacted, however many notes came after it."""
    path = notes_path(root)
    if not path.exists():
        return None
    found: list[str] | None = None
    entry: list[str] | None = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("- "):
            entry = [line.partition(": ")[2]]  # after the date stamp
            found = entry if entry[0].startswith(AGREED) else found
        elif line.startswith("  ") and entry is not None:
            entry.append(line[2:])
        else:
            entry = None
    return "\n".join(found) if found else None
