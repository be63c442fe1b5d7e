"""What a focus experiment may be judged on: the names it acts on, and whether the change touches them.

A focus (`launch_experiment(focus=[...])`) judges a change where it acts (an op's time) instead of end to
end. That is only honest for code the change really edits: a change that only moves code around (layout)
can speed one function up by luck of alignment, and the same is true of any function the change does not
touch. So a focus is refused unless the change edits, beyond moving lines, code that names it (a changed
line, or the function a changed line is in); the untouched controls the benchmark times beside the focus
then show what layout alone does, and the judge asks the focus to beat that (worker/decide.py).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from autoresearch_mcp import progress
from autoresearch_mcp.errors import InputError, RefusedError
from autoresearch_mcp.executors import profiles
from autoresearch_mcp.git import gitops
from autoresearch_mcp.store.config import state_dir
from autoresearch_mcp.worker import profiler
from autoresearch_mcp.worker.decide import FOCUS_PREFIX

if TYPE_CHECKING:
    from autoresearch_mcp.experiments.manager import ExperimentManager
    from autoresearch_mcp.store.ledger import ExperimentState

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
SEEN_HZ = 19_999  # an op of 0.05% of a one-second run still gets about ten samples (perf caps the rate it allows)
_CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
MAX_NAMES = 8
_HUNK = re.compile(r"^@@ [^@]* @@ ?(?P<func>.*)$")
_TOKEN = re.compile(r"[A-Za-z0-9]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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


# a comment: /* ... */ within a line, // to its end, a script's `#` line (not the C preprocessor's), and the lines of a
# block comment (one that opens it, one that goes on with `*` and a space, one that closes it)
_COMMENT = re.compile(r"/\*.*?\*/|//.*$"
                      r"|^\s*#(?!\s*(?:include|define|undef|if|ifdef|ifndef|elif|else|endif|pragma|error|line)\b).*$"
                      r"|^\s*/\*.*$|^\s*\*(?:\s|/|$).*$")


def code_of(line: str) -> str:
    """A changed line's code: its comments (C, C++, a script's `#` line, a block comment's lines) and spacing left
    out; "" where it holds none. A change to a comment changes no code."""
    return " ".join(_COMMENT.sub(" ", line).split())


def edited(diff: str) -> tuple[list[str], list[str]]:
    """(the code lines a change edits beyond moving them, the enclosing functions of those lines): removed and
    added lines whose code does not reappear on the other side; comments and spacing aside (code_of)."""
    lines, functions = edits(diff)
    return lines, sorted(functions)


def edits(diff: str) -> tuple[list[str], dict[str, list[str]]]:
    """(the code lines a change edits beyond moving them, each enclosing function with its edited lines)."""
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
            body = code_of(line[1:])
            if not body:
                continue
            (added if line[0] == "+" else removed)[body] += 1
            where.setdefault(body, set()).add(func)
    residue = (added - removed) + (removed - added)
    functions: dict[str, list[str]] = {}
    for body in residue:
        for f in where.get(body, ()):
            if f:
                functions.setdefault(f, []).append(body)
    return list(residue), functions


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


def rests_on_focus(exp: ExperimentState) -> bool:
    """Whether the experiment's win is its focus alone: no end-to-end objective won with it."""
    won = exp.analysis.won
    return bool(exp.launch.focus) and bool(won) and all(name.startswith(FOCUS_PREFIX) for name in won)


def seen_running(manager: ExperimentManager, exp: ExperimentState) -> str:
    """What shows the focus running in the program: the candidate's benchmark, run once under perf as a session's
    run is (no AUTORESEARCH_FOCUS, so no op benchmark: the program alone), has samples in a function that names
    the focus or that the change edits. A focus win on code the program never runs would otherwise be committed
    on the op's time while the program cannot gain from it. Refused (RefusedError) when no sample is there, or
    when perf cannot say."""
    repo, launch = manager.repo, exp.launch
    wanted = list(launch.focus)
    by_function = edits(gitops.diff_hunks(repo, launch.base_commit, launch.candidate_commit))[1]
    # a function counts by its name only where the base has it (one the change adds and names after the op, called
    # from code the program runs, is no proof the op runs); an edited one (its code, not a comment) where it names
    # the focus itself or its edit names it with a name the base has (a call, a case of the op), never by any edit
    # to it (a call added to main of a new function named after the op)
    # (only words that name the focus are looked for in the base: a tree of llama.cpp's size is read once, for a few)
    idents = {w for body in (*by_function, *(b for bodies in by_function.values() for b in bodies))
              for w in _IDENT.findall(body) if any(mentions(w, n) for n in wanted)}
    in_base = gitops.words_at(repo, launch.base_commit, idents)

    def names_focus(words: list[str]) -> bool:
        return any(mentions(w, n) for w in words if w in in_base for n in wanted)

    edited_names = {m.group(1) for f, bodies in by_function.items() for m in [_CALLED.search(f)] if m
                    and (names_focus([m.group(1)]) or names_focus([w for b in bodies for w in _IDENT.findall(b)]))}
    profile_id = uuid.uuid4().hex[:10]
    logs = state_dir(Path(repo.working_dir)) / "logs"
    data = logs / f"focus-{profile_id}.perf.data"
    progress.report(f"is {', '.join(wanted)} run by the program? its benchmark once under perf, without the focus")
    ran = profiles.run(manager.executor, manager.jobs, profile_id, launch.base_commit, launch.candidate_commit, data,
                       logs / f"focus-{profile_id}.log", SEEN_HZ, functions_only=True)
    profile = ran.outcome
    Path(profile.perf_data or data).unlink(missing_ok=True)
    failure = profile.failure()
    if profile.status != "done":
        why = failure.error if failure is not None else "no profile"
        raise RefusedError(
            f"experiment {exp.experiment_id} won on its focus alone ({', '.join(exp.analysis.won)}), and whether "
            f"the program runs that code could not be seen here: perf could not profile its benchmark "
            f"({why[:300]}). Make perf run (profile_hotspots says how), or judge the change end to end: "
            f"launch it again without focus")
    total = profile.total_samples
    sampled = profiler.parse_report(profile.report)[1]  # every function of the report's rows, a line each
    # a sampled function counts by its name where it names the focus: only those names are looked for in the base (a
    # profile's hundreds of symbols, kernel ones and raw addresses among them, are not)
    sampled_names = {bare(name) for (_dso, name) in sampled if any(mentions(name, n) for n in wanted)}
    old_names = gitops.words_at(repo, launch.base_commit, sampled_names)
    hits = [(name, int(f["samples"])) for (_dso, name), f in sampled.items()
            if f["samples"] > 0 and ((bare(name) in old_names and any(mentions(name, n) for n in wanted))
                                      or is_edited(name, edited_names))]
    if not hits:
        raise RefusedError(
            f"experiment {exp.experiment_id} won on its focus alone ({', '.join(exp.analysis.won)}), but the "
            f"program does not run that code: of {total} samples of its benchmark (run once under perf, without "
            f"the focus), none is in a function that names {', '.join(wanted)} (and that the base has) or whose "
            f"code the change edits where it names them ({', '.join(sorted(edited_names)[:5]) or 'none found'}). "
            "An op's win the program never runs is no "
            "gain to it: focus on an op it runs (profile_hotspots), or judge the change end to end")
    samples = sum(n for _, n in hits)
    names = ", ".join(name for name, _ in sorted(hits, key=lambda h: -h[1])[:3])
    return f"{100.0 * samples / max(total, 1):.2g}% of the program's samples in {names} (perf, without the focus)"


def bare(symbol: str) -> str:
    """A sampled symbol's function name: without its C++ parameters and template arguments, its namespace or
    class, and the compiler's suffixes (foo.constprop.0, foo.cold)."""
    head = re.split(r"[(<]", symbol.strip(), maxsplit=1)[0]
    name = re.split(r"::|\s", head.strip())[-1]
    return name.split(".", 1)[0]


def is_edited(symbol: str, names: set[str]) -> bool:
    """Whether a sampled symbol is a function the change edits: the same name, or that name less its last part
    (a typed variant, rms_norm_f32, inlined into its dispatcher, rms_norm)."""
    name = bare(symbol)
    return bool(name) and any(name == n or name == n.rsplit("_", 1)[0] for n in names if n)
