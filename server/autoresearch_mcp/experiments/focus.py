"""What a focus experiment may be judged on: the names it acts on, and whether the change touches them.

A focus (`launch_experiment(focus=[...])`) judges a change where it acts (an op's time) instead of end to
end. That is only honest for code the change really edits: a change that only moves code around (layout)
can speed one function up by luck of alignment, and the same is true of any function the change does not
touch. So a focus is refused unless the change edits, beyond moving lines, code that names it (a changed
line, or the function a changed line is in); the untouched controls the benchmark times beside the focus
then show what layout alone does, and the judge asks the focus to beat that (core/decide.py).
"""

from __future__ import annotations

import re
from collections import Counter

from autoresearch_mcp.errors import InputError, RefusedError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_NAMES = 8
_HUNK = re.compile(r"^@@ [^@]* @@ ?(?P<func>.*)$")
_TOKEN = re.compile(r"[A-Za-z0-9]+")


def names(focus: list[str] | None) -> list[str]:
    """The focus as given, checked: identifiers (e.g. ggml op names RMS_NORM, MUL), at most MAX_NAMES."""
    out = [str(n).strip() for n in focus or []]
    if len(out) > MAX_NAMES:
        raise InputError(f"focus names at most {MAX_NAMES} things (several names are one chain, e.g. "
                         "['RMS_NORM', 'MUL']); launch separate experiments for separate changes")
    bad = [n for n in out if not NAME.match(n)]
    if bad:
        raise InputError(f"focus names must be identifiers such as RMS_NORM or parse_header, not {bad[:3]}")
    if len(set(out)) != len(out):
        raise InputError(f"focus lists a name twice: {out}")
    return out


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text.replace("_", " "))]


def mentions(text: str, name: str) -> bool:
    """Whether `text` mentions `name` as whole words, spelt with or without separators (RMS_NORM in
    ggml_compute_forward_rms_norm_f32, SOFT_MAX in softmax)."""
    want = "".join(_tokens(name))
    have = _tokens(text)
    for start in range(len(have)):
        joined = ""
        for token in have[start:]:
            joined += token
            if joined == want:
                return True
            if len(joined) >= len(want) or not want.startswith(joined):
                break
    return False


def edited(diff: str) -> tuple[list[str], list[str]]:
    """(the lines a change edits beyond moving them, the enclosing functions of those lines): removed and
    added lines that do not reappear on the other side, blank lines aside."""
    removed: Counter[str] = Counter()
    added: Counter[str] = Counter()
    where: dict[str, set[str]] = {}
    func = ""
    for line in diff.splitlines():
        if line.startswith(("+++", "---", "diff --git", "index ")):
            continue
        hunk = _HUNK.match(line)
        if hunk:
            func = hunk.group("func").strip()
            continue
        if line[:1] in "+-":
            body = line[1:].strip()
            if not body:
                continue
            (added if line[0] == "+" else removed)[body] += 1
            where.setdefault(body, set()).add(func)
    residue = (added - removed) + (removed - added)
    return list(residue), sorted({f for body in residue for f in where.get(body, ()) if f})


def check(diff: str, focus: list[str]) -> None:
    """Refuse a focus the change does not touch, and any focus for a change that only moves code."""
    lines, functions = edited(diff)
    if not lines:
        raise RefusedError(
            "the change only moves code (every removed line reappears elsewhere): a focus metric would measure "
            "layout luck, not the change. Judge it end to end: launch it without focus")
    touched = [n for n in focus if any(mentions(text, n) for text in (*lines, *functions))]
    if not touched:
        shown = ", ".join(functions[:5]) or "no named function"
        raise RefusedError(
            f"the change does not touch code that names {', '.join(focus)} (it edits {len(lines)} line(s) in "
            f"{shown}): a focus must be what the change acts on, or an untouched op's luck could pass for a win. "
            "Name the op or function the change edits, or launch without focus to judge it end to end")
