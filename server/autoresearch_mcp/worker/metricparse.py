"""METRIC lines: what a run printed, read into values, problems and the printed resolution of each.

Standard library only, like the runner beside it (shipped with it to a worker). A value that is not a finite
number in range, a name printed twice with different values, or a METRIC line joined to other output is a
problem, never a silent 0, a silent pick or a dropped line."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from . import decide

METRIC_RE = re.compile(r"^\s*METRIC\s+([A-Za-z_][A-Za-z0-9_.\-/:+]*)\s*=\s*(\S+)\s*$")


# A METRIC line that does not start its line: the output before it left its line open, and a line joined so is
# refused, never dropped (a program could otherwise print its own line and glue the bench's real one to it).
JOINED_RE = re.compile(r"\S.*?METRIC\s+[A-Za-z_][A-Za-z0-9_.\-/:+]*\s*=")


# The one rule for a metric value, applied before any arithmetic, here and in the server: finite and
# of a magnitude arithmetic on a few hundred samples cannot overflow or underflow (or exactly 0).
VALUE_MAX = 1e30


VALUE_MIN = 1e-30


MAX_LISTED = 20  # problems or METRIC lines listed per run; the rest are counted


MAX_METRICS = 50  # distinct metric names read from one run


MAX_LINE_CHARS = 300


@dataclass
class ParsedMetrics:
    values: dict[str, float]
    lines: list[str]
    problems: list[str]
    steps: dict[str, float] = field(default_factory=dict)  # the step of each value's last printed digit


def check_value(value: float) -> str | None:
    """Why `value` cannot be used as a metric value, or None when it can."""
    if not math.isfinite(value):
        return "is not finite"
    if value != 0 and not VALUE_MIN <= abs(value) <= VALUE_MAX:
        return f"is out of range (a magnitude between {VALUE_MIN:g} and {VALUE_MAX:g}, or 0)"
    return None


def _short(line: str) -> str:
    line = line.strip()
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + f"... ({len(line)} chars)"


class _Counted:
    """A list of messages that keeps the first MAX_LISTED and counts the rest, and counts repeats
    of one kind instead of listing each (200,000 malformed lines make one entry, not 200,000)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.kinds: dict[str, int] = {}
        self.more = 0

    def add(self, kind: str, message: str) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if self.kinds[kind] == 1 and len(self.items) < MAX_LISTED:
            self.items.append(message)
        else:
            self.more += 1

    def done(self) -> list[str]:
        out = list(self.items)
        repeated = {k: n - 1 for k, n in self.kinds.items() if n > 1}
        for kind, n in repeated.items():
            out.append(f"... and {n} more {kind}")
        unlisted = self.more - sum(repeated.values())
        if unlisted > 0:
            out.append(f"... and {unlisted} more problems")
        return out


def parse_metrics(text: str) -> ParsedMetrics:
    """Read `METRIC name=value` lines; anything else is ignored.

    A value that is not a finite number in range, or a name printed twice with different values, is
    a problem, never a silent 0 or a silent pick: that is how a parser reports 52 t/s for 14.
    Problems and lines are listed up to MAX_LISTED and counted beyond, so the answer stays small.
    """
    values: dict[str, float] = {}
    steps: dict[str, float] = {}
    ambiguous: set[str] = set()
    lines: list[str] = []
    extra_lines = 0
    problems = _Counted()
    for line in text.splitlines():
        m = METRIC_RE.match(line)
        if not m:
            if line.lstrip().startswith("METRIC"):
                problems.add("malformed METRIC lines",
                             f"malformed METRIC line (expected `METRIC name=number`): {_short(line)!r}")
            elif "METRIC" in line and JOINED_RE.match(line.lstrip()):
                problems.add("METRIC lines joined to other output",
                             f"a METRIC line joined to the end of other output (what was printed before it left its "
                             f"line open; a METRIC line must start its own line): {_short(line)!r}")
            continue
        if len(lines) < MAX_LISTED * 5:
            lines.append(_short(line.rstrip()))
        else:
            extra_lines += 1
        name, raw = m.group(1), m.group(2)
        try:
            value = float(raw)
        except ValueError:
            problems.add(f"values of {name} that are not numbers", f"{name}: {_short(raw)!r} is not a number")
            continue
        why = check_value(value)
        if why:
            problems.add(f"unusable values of {name}", f"{name}: {_short(raw)!r} {why}")
            continue
        if name not in values and len(values) >= MAX_METRICS:
            problems.add("metrics beyond the limit", f"{name}: more than {MAX_METRICS} metrics; the rest are ignored")
            continue
        if name in values and values[name] != value:
            problems.add(f"repeated values of {name}",
                         f"{name}: printed more than once with different values ({values[name]} and {value})")
            ambiguous.add(name)
            continue
        values[name] = value
        step = decide.printed_step(raw)
        if step is not None:
            steps[name] = max(step, steps.get(name, 0.0))
    if extra_lines:
        lines.append(f"... and {extra_lines} more METRIC lines")
    # an ambiguous metric is no metric: the harness must not pick one of the values
    kept = {k: v for k, v in values.items() if k not in ambiguous}
    return ParsedMetrics(kept, lines, problems.done(), {k: v for k, v in steps.items() if k in kept})


def metric_lines(region: bytes) -> Iterator[bytes]:
    """Every whole line of `region` that holds the word METRIC anywhere (one joined to another line's end too,
    which parse_metrics refuses rather than loses)."""
    i = region.find(b"METRIC")
    while i >= 0:
        end = region.find(b"\n", i)
        if end < 0:
            return
        yield region[region.rfind(b"\n", 0, i) + 1:end + 1]
        i = region.find(b"METRIC", end)


def kept_output(text: str, limit: int = 20000) -> str:
    """A validation run's output as the server reads it, bounded: the head, the METRIC lines between (as
    many as fit) and the tail; the primary metric printed first survives a flood of other lines."""
    if len(text) <= limit:
        return text
    half = limit // 2
    head_end = text.rfind("\n", 0, half) + 1 or half
    tail_start = text.find("\n", len(text) - half) + 1 or len(text) - half
    middle = text[head_end:tail_start].encode("utf-8", errors="replace")
    metric = b"".join(metric_lines(middle))
    metric = metric[:metric.rfind(b"\n", 0, limit) + 1]
    return (text[:head_end] + "[autoresearch] output cut here; the METRIC lines between follow\n"
            + metric.decode("utf-8", errors="replace") + text[tail_start:])
