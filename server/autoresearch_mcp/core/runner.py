"""The one runner: single benchmark runs, and the whole A/B protocol of one experiment.

This file is deliberately standard-library only and self-contained: the local executor runs it as
`python3 runner.py JOB.json`, the SkyPilot executor ships the very same bytes to a VM, and the
package imports it for single runs (`start_session`). Its last stdout line is one machine-readable
result line (`AUTORESEARCH_RESULT {json}`) that `parse_result_line` reads, whatever the executor.

The statistics that need scipy (critical values of the sequential design) are computed by the
server and passed in the job; the runner only applies them, so the same decision rule is used
while pairs are being added and when the server recomputes the verdict from the raw samples.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import math
import os
import platform
import random
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__:  # imported by the server
    from . import cgroups, decide, sandbox
else:  # run as a script (locally, or on a worker beside decide.py, sandbox.py and cgroups.py)
    import cgroups  # type: ignore[no-redef,import-not-found]
    import decide  # type: ignore[no-redef,import-not-found]
    import sandbox  # type: ignore[no-redef,import-not-found]

METRIC_RE = re.compile(r"^\s*METRIC\s+([A-Za-z_][A-Za-z0-9_.\-/:+]*)\s*=\s*(\S+)\s*$")
# A METRIC line that does not start its line: the output before it left its line open, and a line joined so is
# refused, never dropped (a program could otherwise print its own line and glue the bench's real one to it).
JOINED_RE = re.compile(r"\S.*?METRIC\s+[A-Za-z_][A-Za-z0-9_.\-/:+]*\s*=")
RESULT_PREFIX = "AUTORESEARCH_RESULT "
EVENT_PREFIX = "AUTORESEARCH_EVENT "
BUILT_MARKER = ".autoresearch-built"
STATS_LOG = ".autoresearch-ccache-stats"
TAIL_CHARS = 4000
# What is kept of one command's output (the log and the parser see no more): its head and its tail,
# and the METRIC lines of the part between them up to a limit.
HEAD_BYTES = 64 * 1024
KEEP_TAIL_BYTES = 64 * 1024
METRIC_BYTES = 1024 * 1024
# Every process a job starts carries this variable (a value unique to the run), so whatever escapes
# its process group (`setsid cmd &`, a daemon) can still be found and killed.
JOB_ENV = "AUTORESEARCH_JOB"
BASELINE_ENV = "AUTORESEARCH_BASELINE_TREE"  # the checks' baseline tree (run_env)
# The one rule for a metric value, applied before any arithmetic, here and in the server: finite and
# of a magnitude arithmetic on a few hundred samples cannot overflow or underflow (or exactly 0).
VALUE_MAX = 1e30
VALUE_MIN = 1e-30
MAX_LISTED = 20  # problems or METRIC lines listed per run; the rest are counted
MAX_METRICS = 50  # distinct metric names read from one run
MAX_LINE_CHARS = 300


# --- parsing -------------------------------------------------------------------------------------


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


# --- one command ---------------------------------------------------------------------------------


@dataclass
class CommandResult:
    argv: list[str]
    exit_code: int | None
    duration_s: float
    timed_out: bool
    output: str
    dropped_metric_lines: int = 0  # METRIC lines beyond what is kept of a huge output
    # Taken from outside the command (its reaping by this process), where nothing it runs can reach: the
    # wall time from its start to its end, and the CPU time (user + system) of every process of its tree
    # that was waited for (under bubblewrap, every process of the job: its PID namespace's init reaps them).
    wall_s: float | None = None
    cpu_s: float | None = None
    # What the harness saw go wrong from outside (a bound passed, a turn's stop that failed): the run is unusable
    problem: str | None = None
    span_s: float | None = None  # in turns: the wall time from its start to its end, the other side's turns in it

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.problem is None

    def tail(self, chars: int = TAIL_CHARS) -> str:
        return self.output[-chars:]


def kill_group(pgid: int, grace_s: float = 2.0) -> None:
    """SIGTERM a process group, then SIGKILL whatever is left after a grace period."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _ancestors() -> set[int]:
    """This process and its ancestors (which may carry a job's marker too, and must live)."""
    pids, pid = {os.getpid()}, os.getppid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def kill_marked(job: str, rounds: int = 5) -> int:
    """SIGKILL every process whose environment holds JOB_ENV=`job` (Linux /proc; elsewhere nothing).

    This finds what left the process group (`setsid cmd &`, a double fork); it cannot find a process
    that cleared its environment. Repeated a few rounds, as a process may fork while we sweep.
    """
    needle = f"{JOB_ENV}={job}".encode()
    if not job or not os.path.isdir("/proc"):
        return 0
    spare, killed = _ancestors(), 0
    for _ in range(rounds):
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) in spare:
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as fh:
                    environ = fh.read()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                found.append(int(entry.name))
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += len(found)
        time.sleep(0.02)
    return killed


SCRATCH_POLL_S = 0.02  # how often a running command's scratch is read (one small file of its group)
_current_pgid: int | None = None
_command_count = 0
# Python 3.11 starts the child in its own group race-free; cloud images often ship 3.8-3.10.
_NEW_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
)


def _metric_lines(region: bytes) -> Iterator[bytes]:
    """Every whole line of `region` that holds the word METRIC anywhere (one joined to another line's end too,
    which parse_metrics refuses rather than loses)."""
    i = region.find(b"METRIC")
    while i >= 0:
        end = region.find(b"\n", i)
        if end < 0:
            return
        yield region[region.rfind(b"\n", 0, i) + 1:end + 1]
        i = region.find(b"METRIC", end)


class Capture:
    """A command's output as the runner drains it from a pipe: the head, the tail, and the METRIC
    lines between them (up to METRIC_BYTES), so a 20 MB output is neither held nor stored whole.
    Chunks are scanned with a regular expression, not line by line: a chatty benchmark costs the
    runner little CPU while it is being measured."""

    def __init__(self) -> None:
        self.head = b""
        self.rest = bytearray()  # after the head: the tail, plus what is not scanned yet
        self.middle: list[bytes] = []
        self.middle_size = 0
        self.cut = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        if len(self.head) < HEAD_BYTES:
            room = HEAD_BYTES - len(self.head)
            end = chunk.find(b"\n", room - 1) + 1 if len(chunk) >= room else 0
            if len(chunk) < room or (end == 0 and len(chunk) - room < 65536):
                self.head += chunk  # the head ends at a line's end (or a line's piece, for endless lines)
                return
            end = end or room
            self.head += chunk[:end]
            chunk = chunk[end:]
        self.rest += chunk
        if len(self.rest) > 2 * KEEP_TAIL_BYTES:
            # at a line's end, or inside a line longer than the tail itself
            keep_from = self.rest.rfind(b"\n", 0, len(self.rest) - KEEP_TAIL_BYTES) + 1 or \
                len(self.rest) - KEEP_TAIL_BYTES
            self._cut(bytes(self.rest[:keep_from]))
            del self.rest[:keep_from]

    def _cut(self, region: bytes) -> None:
        self.cut += len(region)
        for line in _metric_lines(region):
            if self.middle_size + len(line) <= METRIC_BYTES:
                self.middle.append(line)
                self.middle_size += len(line)
            else:
                self.dropped += 1

    def text(self) -> str:
        parts = [self.head]
        if self.cut:
            parts.append(f"\n[autoresearch] {self.cut} bytes of output cut here; the "
                         f"{len(self.middle)} METRIC lines among them follow\n".encode())
            parts += self.middle
            if self.dropped:
                parts.append(f"[autoresearch] {self.dropped} more METRIC lines dropped\n".encode())
        parts.append(bytes(self.rest))
        return b"".join(parts).decode("utf-8", errors="replace")


def _drain(fd: int, capture: Capture, stop: threading.Event) -> None:
    """Read the command's pipe into `capture` until its end (every writer gone), or, once `stop` is set,
    until what is already in it is read (a writer that escaped an unconfined command may hold it open)."""
    deadline = None
    while True:
        if stop.is_set() and deadline is None:
            deadline = time.monotonic() + 1.0
        ready, _, _ = select.select([fd], [], [], 0.0 if deadline else 0.1)
        if not ready or (deadline is not None and time.monotonic() > deadline):
            if deadline is not None:
                break
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        capture.add(chunk)


def run_command(
    argv: list[str],
    cwd: str | os.PathLike[str],
    timeout_s: float,
    env: dict[str, str] | None = None,
    log: Any | None = None,
    stop_signal: int = signal.SIGTERM,
    grace_s: float = 2.0,
    confine: sandbox.Confinement | sandbox.Launch | None = None,
    outside: list[str] | None = None,
) -> CommandResult:
    """Run one command in its own process group; on timeout the group gets `stop_signal`, and
    whatever still runs after `grace_s` is killed.

    With `confine` (every build, bench and checks command of a job: its confinement, or the launch prepared
    for all its runs) the command runs as sandbox.command wraps it, after `outside` (a wrapper that runs
    unconfined, such as perf record).
    Its output (stdout and stderr merged) is a pipe this process drains, keeping the head, the tail
    and the METRIC lines; every process of the command is killed before the output is returned.
    """
    global _current_pgid

    started = _Started.of(argv, cwd, env, confine, outside)
    _current_pgid = started.proc.pid
    timed_out = False
    try:
        if not started.reaped.wait(timeout_s):
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(started.proc.pid, stop_signal)
            # reap the leader as soon as it goes: an unreaped leader keeps its group alive
            started.reaped.wait(grace_s)
    finally:
        started.end()
        _current_pgid = None
    cpu_s = started.reaped.cpu_s if started.launch is None or started.launch.confinement.off else started.group_cpu_s
    if started.before is not None and _reap_orphans() and started.group_cpu_s is None:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = (after.ru_utime - started.before.ru_utime) + (after.ru_stime - started.before.ru_stime)
    return started.result(timed_out, timeout_s, log, cpu_s)


class _Started:
    """One command started as run_command starts it: its own process group, its output drained by a thread,
    its leader reaped by another; `end` kills whatever of it is left and closes its output."""

    def __init__(self, proc: subprocess.Popen[bytes], argv: list[str], marker: str, capture: Capture, read_fd: int,
                 launch: sandbox.Launch | None, before: Any, group: cgroups.Group | None) -> None:
        self.proc, self.argv, self.marker, self.capture, self.read_fd = proc, argv, marker, capture, read_fd
        self.launch, self.before, self.group = launch, before, group
        self.start = time.monotonic()
        self.own_s = 0.0  # in turns: the wall time of its own turns
        self.problem: str | None = None
        self.group_cpu_s: float | None = None  # its group's CPU time, or its PID namespace init's (_init_cpu_s)
        self.info_fd: int | None = None  # where bubblewrap wrote its init's pid
        self.stop = threading.Event()
        self.reader = threading.Thread(target=_drain, args=(read_fd, capture, self.stop), daemon=True)
        self.reader.start()
        self.reaped = _Reaper(proc, self.start)
        if group is not None and group.has("memory"):
            threading.Thread(target=self._bound_scratch, daemon=True).start()

    def _bound_scratch(self) -> None:
        """End the command once its scratch (its private /tmp and /run, its shared memory: memory the kernel
        charges to its group) reaches the bound (sandbox.TMP_BYTES): it has filled what it may use."""
        assert self.group is not None
        while not self.reaped.wait(SCRATCH_POLL_S):
            used = cgroups.scratch(self.group)
            if used is not None and used >= sandbox.TMP_BYTES * 0.99:
                bound = sandbox.TMP_BYTES / 2**20
                self.problem = (f"the job filled its scratch space ({used / 2**20:.0f} MiB of memory-backed files in "
                                f"its private /tmp, /run and shared memory; the bound is {bound:.0f} MiB, counted "
                                "in its memory): the command was ended")
                self.group.kill()
                return

    @classmethod
    def of(cls, argv: list[str], cwd: str | os.PathLike[str], env: dict[str, str] | None,
           confine: sandbox.Confinement | sandbox.Launch | None, outside: list[str] | None = None) -> _Started:
        global _command_count
        # Every command carries a marker: the job's (inherited) or one of its own, swept when it ends.
        env = dict(os.environ if env is None else env)
        _command_count += 1
        marker = env.setdefault(JOB_ENV, f"cmd-{os.getpid()}-{_command_count}-{time.time_ns()}")
        fds: list[int] = []
        launch = None if confine is None else sandbox.launch(confine, env)
        group, info = None, None
        if launch is not None:
            # a group of its own where one can be made: its CPU time, its freezer, its kill, its memory bound
            group = None if launch.confinement.off or "memory" in sandbox.lacking() else sandbox.group()
            if not launch.confinement.off and _subreaper and (group is None or not group.has("cpu")):
                info = os.pipe()  # where no group counts it: the job's init, waited for by its pid (_init_cpu_s)
            argv, env, fds = sandbox.command(argv, launch, env, into=group, info_fd=info[1] if info else None)
        argv = [*(outside or []), *argv]
        read_fd, write_fd = os.pipe()
        before = resource.getrusage(resource.RUSAGE_CHILDREN) if _subreaper else None
        try:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=write_fd, stderr=subprocess.STDOUT,
                pass_fds=fds, **_NEW_GROUP,
            )
        except BaseException:
            os.close(read_fd)
            if info is not None:
                os.close(info[0])
            if group is not None:
                group.remove()
            raise
        finally:
            os.close(write_fd)
            for fd in fds:
                os.close(fd)
        started = cls(proc, argv, marker, Capture(), read_fd, launch, before, group)
        started.info_fd = info[0] if info else None
        return started

    def end(self) -> None:
        """Leftovers of the group (a backgrounded helper, a leader that ignored SIGTERM) must not disturb later
        runs, nor write to the output once it is read."""
        kill_group(self.proc.pid, grace_s=0.5)
        self.reaped.wait(None)
        kill_marked(self.marker)
        if self.group is not None:
            self.group.kill()  # what outlived its namespace's end, or escaped it (an unconfined one)
            self.group_cpu_s = self.group.cpu_s()
            limit = self.group.memory_hit()
            if limit is not None and self.problem is None:
                self.problem = (f"the job reached its memory limit ({limit / 2**20:.0f} MiB for its processes and its "
                                "memory-backed files together)")
            self.group.remove()
        if self.info_fd is not None:
            self.group_cpu_s = self.group_cpu_s if self.group_cpu_s is not None else _init_cpu_s(self.info_fd)
            os.close(self.info_fd)
            self.info_fd = None
        self.stop.set()
        self.reader.join()
        os.close(self.read_fd)

    def result(self, timed_out: bool, timeout_s: float, log: Any | None, cpu_s: float | None) -> CommandResult:
        text = self.capture.text()
        if self.problem is not None:
            text += f"\n[autoresearch] {self.problem}\n"
        if log is not None:
            log.write(text)
            if timed_out:
                log.write(f"\n[autoresearch] timed out after {timeout_s:g} s; process group killed\n")
            log.flush()
        return CommandResult(list(self.argv), None if timed_out else self.proc.returncode,
                             time.monotonic() - self.start, timed_out, text, self.capture.dropped,
                             self.reaped.wall_s, cpu_s, self.problem)


# --- pairs in turns (decide.TURNS) ------------------------------------------------------------------

# the process groups of the commands running in turns, with their cgroups (thawed and killed on SIGTERM)
_turn_groups: dict[int, cgroups.Group | None] = {}


_HAS_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
    return out


def _parents() -> dict[int, list[int]]:
    """Every process's children, from each one's parent in /proc/<pid>/stat (a kernel without
    /proc/<pid>/task/<tid>/children)."""
    below: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{entry.name}/stat") as fh:
                below.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    return below


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it (parents first), read from /proc/<pid>/task/<tid>/children (or, where
    the kernel has no such file, from every process's parent). A job's every process is below its command's
    leader: confined, an orphan goes to the job's PID namespace's init."""
    below = None if _HAS_CHILDREN else _parents()
    out, todo, seen = [], [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        todo.extend(_children(p) if below is None else below.get(p, []))
    return out


def _stopped(pid: int) -> bool:
    """Whether `pid` is stopped, gone or a zombie (it runs no more)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("T", "t", "Z", "X")


def hold(pid: int, stop: bool, rounds: int = 200) -> bool:
    """Stop (SIGSTOP) or continue (SIGCONT) every process of `pid`'s tree; whether it is all stopped (or all
    continued). Stopping walks the tree again until every process shows stopped: one may fork while it is
    walked, and a stopped one cannot (a process in an uninterruptible wait stops when it leaves it)."""
    for _ in range(rounds):
        pending = False
        for p in _tree(pid):
            if stop and _stopped(p):
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGSTOP if stop else signal.SIGCONT)
            pending = stop
        if not pending:
            return True
        time.sleep(0.0002)
    return False


_turn_rng = random.Random()  # turn lengths (seeded from the system: no rhythm a program could learn in advance)


def _pause(s: _Started, stop: bool) -> bool:
    """Stop (or continue) every process of a command running in turns: its group frozen where the machine gives
    a freezer (no signal, nothing a process sees), else SIGSTOP to its tree; whether it all is."""
    if s.group is not None and s.group.has("freeze"):
        return s.group.freeze() if stop else s.group.thaw()
    return hold(s.proc.pid, stop)


def run_in_turns(runs: list[tuple[Prepared, list[str]]], timeout_s: float, log: Any,
                 duty: float | None = None) -> list[CommandResult]:
    """Run the commands at once, each given the CPU in turns while the others are stopped (frozen), in the order
    given; one that ends leaves the turns to the others. A burst of a neighbour's work then falls on every side
    of the pair. Each turn's length is drawn at random around decide.TURN_MS, so no program can place its waits
    at a turn's end. Each command's wall clock runs on while it is stopped, so what it prints must time CPU
    (decide.in_turns); its result's `wall_s` is the wall time of its own turns and its `cpu_s` the CPU time of
    its whole group, orphans included (where the machine gives a group). A stop that fails (a process forking
    faster than it is stopped) makes every run of the pair unusable, saying so. `timeout_s` is each command's:
    the turns end, and whatever still runs is killed, once they have run for the sum of them. With `duty`, a
    command left alone keeps being stopped so that it runs that share of the time (the checks of a session in
    turns, which must not tell a bench from a check; a calibration run at half duty)."""
    started: list[_Started] = []
    deadline = time.monotonic() + timeout_s * len(runs) / (duty or 1.0)
    late: list[_Started] = []  # still running when the turns timed out
    failed: str | None = None

    def turn() -> float:
        return decide.TURN_MS / 1000 * _turn_rng.uniform(0.5, 1.5)

    def stop(s: _Started) -> None:
        nonlocal failed
        if not _pause(s, stop=True) and failed is None:
            failed = ("a turn's stop failed: not every process of a side could be stopped in time (a process that "
                      "forks faster than it is stopped?), so the pair's turns are not each side's own")
    try:
        for side, argv in runs:  # each starts at its first turn; the others are stopped by then
            s = _Started.of(argv, side.tree, side.env, side.launch)
            started.append(s)
            _turn_groups[s.proc.pid] = s.group
            ended = s.reaped.wait(turn())
            s.own_s += time.monotonic() - s.start
            if not ended:
                stop(s)
        while failed is None:
            alive = [s for s in started if not s.reaped.done.is_set()]
            if not alive:
                break
            if time.monotonic() > deadline:
                late = alive
                break
            for s in alive:
                _pause(s, stop=False)
                t = time.monotonic()
                ended = s.reaped.wait(max(0.0, deadline - t) if len(alive) == 1 and not duty else turn())
                s.own_s += time.monotonic() - t
                if not ended:
                    stop(s)
                    if len(alive) == 1 and duty:
                        time.sleep(turn() * (1 / duty - 1))  # the turns of a side that is not there
                if failed is not None:
                    break
    finally:
        for s in started:
            _pause(s, stop=False)  # a stopped process would hold its SIGTERM until continued
            s.end()
            _turn_groups.pop(s.proc.pid, None)
    if _subreaper:
        _reap_orphans()  # the jobs' PID namespace inits, reparented here
    results = []
    for s in started:
        if failed is not None:
            s.problem = s.problem or failed
        res = s.result(s in late, timeout_s, log, s.group_cpu_s)
        res.wall_s = None if s in late else round(s.own_s, 6)
        res.span_s = s.reaped.wall_s
        results.append(res)
    return results


# Set in a runner process (become_subreaper): every process its commands leave is reparented to it, and
# reaped by it, so RUSAGE_CHILDREN holds the CPU time of each command's whole tree. bubblewrap's outer process
# exits without reaping the PID namespace's init (which reaped the job's every process): the init comes here.
_subreaper = False
PR_SET_CHILD_SUBREAPER = 36
ORPHANS_WAIT_S = 5.0


def become_subreaper() -> bool:
    """Make this process the reaper of whatever its commands leave (Linux); whether it now is. Only for a
    process whose only children are its commands (the runner's): it reaps every child that ends."""
    global _subreaper
    with contextlib.suppress(Exception):
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
            _subreaper = True
    return _subreaper


def _reap_orphans() -> bool:
    """Reap every child this process still has (what a command left, reparented here), waiting up to
    ORPHANS_WAIT_S for them to end; whether none is left (then RUSAGE_CHILDREN counts the whole tree)."""
    deadline = time.monotonic() + ORPHANS_WAIT_S
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)


def _init_cpu_s(info_fd: int) -> float | None:
    """The CPU time of a confined command's every process, from its PID namespace's init: bubblewrap wrote the
    init's pid to `info_fd`, and its outer process leaves the init to this process (a subreaper) to reap; the init
    reaped each process of the job (an orphan too), so its rusage holds them all. None where it cannot be had."""
    try:
        os.set_blocking(info_fd, False)
        pid = int(json.loads(os.read(info_fd, 65536).decode() or "{}").get("child-pid") or 0)
    except (OSError, ValueError, AttributeError):
        return None
    deadline = time.monotonic() + ORPHANS_WAIT_S
    while pid > 0:
        try:
            got, _, usage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:  # not ours (this process is no subreaper), or reaped already
            return None
        if got:
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            return None
        time.sleep(0.002)
    return None


class _Reaper:
    """Reaps a command's leader with wait4 in a thread of its own, so the wall time ends when the command
    does and the CPU time is the kernel's account of its whole waited-for tree (not this process's
    RUSAGE_CHILDREN, which other commands of the same process, run at the same time, would add to)."""

    def __init__(self, proc: subprocess.Popen[bytes], start: float) -> None:
        self.proc, self.start = proc, start
        self.wall_s: float | None = None
        self.cpu_s: float | None = None
        self.done = threading.Event()
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        try:
            while True:
                try:
                    _, status, usage = os.wait4(self.proc.pid, 0)
                    break
                except InterruptedError:
                    continue
            self.wall_s = time.monotonic() - self.start
            self.cpu_s = usage.ru_utime + usage.ru_stime
            self.proc.returncode = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                                    else os.WEXITSTATUS(status) if os.WIFEXITED(status) else status)
        except ChildProcessError:  # reaped elsewhere (it never is here): no measure, the status as Popen has it
            self.proc.wait()
        finally:
            self.done.set()

    def wait(self, timeout_s: float | None) -> bool:
        """Whether the leader has ended within `timeout_s` (None: wait for it)."""
        return self.done.wait(timeout_s)


def run_env(job: dict[str, Any], tree: str | os.PathLike[str], phase: str = "build") -> dict[str, str]:
    """The one environment of a job's `phase` commands (build, bench, checks) in `tree`: nothing in it tells a
    baseline from a candidate, nor a bench from a check. The compiler cache's variables, the job's `env` (the
    platform's, the recipe's model), its threads and, for the checks and the bench, the tree to compare with
    (`BASELINE_ENV`, sandbox.compared_tree): the checks compare with the baseline's, and each side's bench sees
    the other side's, so a program that is right only when the variable is set is right in its bench too."""
    env = {k: v for k, v in os.environ.items() if k not in ("AUTORESEARCH_ROLE", "AUTORESEARCH_RUN", BASELINE_ENV)}
    env.update(compiler_cache_env(str(tree)))
    env.update(job.get("env") or {})
    env["AUTORESEARCH_THREADS"] = str(job.get("threads") or os.cpu_count() or 1)
    other = sandbox.compared_tree(job, str(tree), phase)
    if other is not None:
        env[BASELINE_ENV] = other
    return env


@dataclass(frozen=True)
class Prepared:
    """The commands of one phase of a job in one tree, prepared once for all their runs: their environment, and
    their confinement with bubblewrap's command line (what must be fresh in each run, sandbox.command makes). A
    bench turn then holds the machine's lock only to run them."""

    tree: str
    env: dict[str, str]
    launch: sandbox.Launch

    @classmethod
    def of(cls, job: dict[str, Any], tree: str, phase: str) -> Prepared:
        env = run_env(job, tree, phase)
        return cls(str(tree), env, sandbox.launch(sandbox.for_job(job, tree, phase), env))

    def run(self, argv: list[str], timeout_s: float, log: Any) -> CommandResult:
        return run_command(argv, self.tree, timeout_s, env=self.env, log=log, confine=self.launch)


# --- the A/B protocol ----------------------------------------------------------------------------


@dataclass
class Sample:
    pair: int
    role: str
    position: int
    exit_code: int | None
    duration_s: float
    timed_out: bool
    metrics: dict[str, float]
    problems: list[str] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)  # printed resolution of each metric
    processes: int = 1  # the bench runs (processes) whose median each metric is


@dataclass
class Outcome:
    experiment_id: str
    status: str = "done"
    phase: str | None = None
    error: str | None = None
    samples: list[Sample] = field(default_factory=list)
    warmup: list[Sample] = field(default_factory=list)
    stop_reason: str | None = None
    look: dict[str, Any] | None = None  # the analysis at the look the run stopped at (a Look)
    build: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    sandbox: str | None = None  # how the commands ran: confined (bubblewrap) or off


def host_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"hostname": socket.gethostname(), "cpu_model": cpu, "cpus": os.cpu_count(),
            "platform": platform.platform()}


def emit(kind: str, **data: Any) -> None:
    print(machine_line(EVENT_PREFIX, {"event": kind, **data}), flush=True)


# --- the result channel ---------------------------------------------------------------------------
#
# The runner's stdout is read by the executor; a job's output never goes there (it is drained from a
# pipe into the log), and every line the runner means carries a code of its payload keyed by the job's
# secret, which the executor gives the runner on stdin before any command runs: a line a job printed,
# on a worker whose log mixes the two, or wrote anywhere else, is not the runner's. The secret itself is
# never printed: a job can read the worker's log (the whole file system is readable to it), and what it
# finds there lets it forge no line.

_secret = ""


def _code(secret: str, prefix: str, text: str) -> str:
    return hmac.new(secret.encode(), f"{prefix}{text}".encode(), hashlib.sha256).hexdigest()[:32]


def machine_line(prefix: str, payload: dict[str, Any], secret: str | None = None, compact: bool = False) -> str:
    """One of the runner's lines: `prefix`, the code of the payload keyed by the job's secret (this
    process's unless given), the payload."""
    text = json.dumps(payload, separators=(",", ":") if compact else None)
    return f"{prefix}{_code(_secret if secret is None else secret, prefix, text)} {text}"


def read_machine_line(line: str, prefix: str, secret: str) -> dict[str, Any] | None:
    """The payload of one of the runner's lines whose code `secret` gives; None for any other line."""
    if not secret or not line.startswith(prefix):
        return None
    code, _, text = line[len(prefix):].partition(" ")
    if not hmac.compare_digest(code, _code(secret, prefix, text)):
        return None
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _not_dumpable() -> None:
    """No process of the same user may read this one's memory or open its files through /proc."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


@contextlib.contextmanager
def file_lock(path: str | None, shared: bool = False) -> Iterator[None]:
    """An flock; the kernel releases it if this process dies, so it never goes stale.

    The machine lock is a readers-writer lock: builds and checks hold it shared (they may overlap
    each other), a benchmark holds it exclusively, so nothing of ours loads the CPU while we measure.
    """
    if not path:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def compiler_cache_env(tree: str) -> dict[str, str]:
    """Settings that let builds in worktrees at different paths share one compiler cache.

    CCACHE_BASEDIR makes paths inside the tree relative in the cache key and CCACHE_NOHASHDIR
    leaves the working directory out of it, so the same file in another worktree is a hit; the
    CMake launcher variables are read by CMake >= 3.17 when a build directory is configured, and
    AUTORESEARCH_CCACHE lets a Makefile say `CC="$AUTORESEARCH_CCACHE cc"`. Empty without a cache.
    """
    import shutil

    tool = shutil.which("ccache") or shutil.which("sccache")
    if tool is None:
        return {}
    env = {"AUTORESEARCH_CCACHE": tool}
    for lang in ("C", "CXX", "CUDA"):
        env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] = os.environ.get(f"CMAKE_{lang}_COMPILER_LAUNCHER", tool)
    if Path(tool).name == "ccache":
        env.update({"CCACHE_BASEDIR": str(Path(tree).resolve()), "CCACHE_NOHASHDIR": "1"})
    return env


def _cache_counts(stats_log: Path) -> dict[str, int] | None:
    """Hits and misses of one build, from ccache's per-compilation stats log (None: no log)."""
    if not stats_log.exists():
        return None
    hits = misses = 0
    for record in stats_log.read_text(errors="replace").split("# ")[1:]:
        fields = record.split()
        if "direct_cache_hit" in fields or "preprocessed_cache_hit" in fields:
            hits += 1
        elif "cache_miss" in fields:
            misses += 1
    return {"hits": hits, "misses": misses}


@dataclass
class BuildResult:
    """One tree's build: `reused` when an earlier build of the same content was kept."""

    mode: str  # "reused", "fresh" or "incremental"
    duration_s: float = 0.0
    command: CommandResult | None = None
    cache: dict[str, int] | None = None

    @property
    def ok(self) -> bool:
        return self.command is None or self.command.ok

    def record(self) -> dict[str, Any]:
        return {"mode": self.mode, "reused": self.mode == "reused", "duration_s": round(self.duration_s, 3),
                "cache": self.cache}


def build_tree(
    tree: str, timeout_s: float, log: Any, content: str | None = None, machine_lock: str | None = None,
    env: dict[str, str] | None = None, confine: sandbox.Confinement | None = None,
) -> BuildResult:
    """Build one tree unless it already holds a build of `content` (a git tree id).

    `env` is the job's environment (run_env; without it, one of no job); `confine` how the build runs
    (every job's build is confined: only the server's own tests of this function pass None).

    The marker records which content was built, so a persistent build directory that moved to
    other content builds again (incrementally), while a tree with the same content is reused.
    Without `content` (a tree whose content never changes) any finished build is reused.
    """
    marker = Path(tree) / BUILT_MARKER
    tree_lock = str(Path(tree).parent / (Path(tree).name + ".build.lock"))
    with file_lock(tree_lock), machine_turn(machine_lock, shared=True):
        built = _read_marker(marker)
        if built is not None and (content is None or built.get("content") == content):
            log.write(f"[autoresearch] reusing the build of {tree}\n")
            return BuildResult("reused")
        mode = "fresh" if built is None else "incremental"
        marker.unlink(missing_ok=True)
        log.write(f"[autoresearch] build {tree} ({mode})\n")
        log.flush()
        # inside the tree: the only place of the job's a confined build can write (its figures are cosmetic)
        stats = Path(tree) / STATS_LOG
        stats.unlink(missing_ok=True)
        full = {**(env if env is not None else run_env({}, tree))}
        if "CCACHE_BASEDIR" in full:
            full["CCACHE_STATSLOG"] = str(stats.resolve())
        res = run_command(["bash", "./autoresearch.sh", "build"], tree, timeout_s, env=full, log=log,
                          confine=confine)
        cache = _cache_counts(stats)
        stats.unlink(missing_ok=True)
        if res.ok:
            # whatever the build left at the marker's path (a link, say) is replaced, never written through
            marker.unlink(missing_ok=True)
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps({"content": content, "duration_s": res.duration_s}))
        return BuildResult(mode, res.duration_s, res, cache)


def _read_marker(marker: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


BENCH = ["bash", "./autoresearch.sh", "bench"]


def _bench(side: Prepared, role: str, index: int, position: int, spec: decide.Spec, job: dict[str, Any],
           log: Any) -> Sample:
    """One sample: `processes_per_sample` runs of the bench (each its own process), each metric the median of
    its runs, beside the harness's outside measures of the same runs (HARNESS_WALL, HARNESS_CPU)."""
    k = max(1, int(spec.processes_per_sample))
    runs: list[tuple[CommandResult, ParsedMetrics, list[str]]] = []
    for r in range(k):
        log.write(f"[autoresearch] bench {role} run {index}" + (f" (process {r + 1} of {k})" if k > 1 else "") + "\n")
        log.flush()
        res = side.run(BENCH, job["timeouts"]["bench"], log)
        parsed = parse_metrics(res.output)
        runs.append((res, parsed, _bench_problems(res, parsed, spec, job)))
        if runs[-1][2]:
            break
    return _sample(runs, role, index, position, spec)


def _bench_turns(order: list[tuple[str, Prepared]], index: int, spec: decide.Spec, job: dict[str, Any],
                 log: Any) -> list[Sample]:
    """One pair in turns (decide.TURNS): `processes_per_sample` times both sides' bench at once, in turns, the
    first turn the first side's of `order`; each judged metric read from its CPU-time form."""
    k = max(1, int(spec.processes_per_sample))
    runs: dict[str, list[tuple[CommandResult, ParsedMetrics, list[str]]]] = {role: [] for role, _ in order}
    for r in range(k):
        log.write(f"[autoresearch] bench pair {index} in turns of {decide.TURN_MS} ms, "
                  f"{' first, then '.join(role for role, _ in order)}"
                  + (f" (processes {r + 1} of {k})" if k > 1 else "") + "\n")
        log.flush()
        results = run_in_turns([(side, BENCH) for _, side in order], job["timeouts"]["bench"], log)
        for (role, _), res in ((order[j], results[j]) for j in range(len(order))):  # (3.8: no zip strict)
            parsed = parse_metrics(res.output)
            problems = _bench_problems(res, parsed, spec, job)
            if not problems:
                share = res.wall_s / res.span_s if res.wall_s and res.span_s else None
                directions = {n: rule.direction for n, rule in spec.rules(list(parsed.values)).items()}
                taken, problems = decide.turn_values(parsed.values, decide.turn_judged(parsed.values, spec), share,
                                                     directions)
                values = {n: parsed.values[o] * f for n, (o, f) in taken.items()}
                steps = {n: parsed.steps[o] * f for n, (o, f) in taken.items() if o in parsed.steps}
                parsed = ParsedMetrics(values, parsed.lines, parsed.problems, steps)
            runs[role].append((res, parsed, problems))
        if any(run[-1][2] for run in runs.values()):
            break
    return [_sample(runs[role], role, index, pos, spec) for pos, (role, _) in enumerate(order)]


def _sample(runs: list[tuple[CommandResult, ParsedMetrics, list[str]]], role: str, index: int, position: int,
            spec: decide.Spec) -> Sample:
    """The sample of one side's runs: each metric their median, and (run one at a time) the harness's outside
    wall and CPU time of the same runs; a run's problems make the sample unusable."""
    res, parsed, problems = runs[-1]
    values: dict[str, float] = {}
    steps: dict[str, float] = {}
    if not problems:
        names = set.intersection(*(set(p.values) for _, p, _ in runs))
        for name in sorted(names, key=list(parsed.values).index):
            values[name] = _median([p.values[name] for _, p, _ in runs])
            if any(name in p.steps for _, p, _ in runs):
                steps[name] = max(p.steps.get(name, 0.0) for _, p, _ in runs)
        walls = [r.wall_s for r, _, _ in runs]
        cpus = [r.cpu_s for r, _, _ in runs]
        # in turns, the wall time of each run's own turns only (run_in_turns), and its group's CPU time where the
        # machine gives each side a group (the side's processes alone, orphans included)
        turns = spec.pairing == decide.TURNS
        has_cpu = all(c is not None and c > 0 for c in cpus)
        if all(w is not None and w > 0 for w in walls) and (turns or has_cpu):
            values[decide.HARNESS_WALL] = round(_median([float(w) for w in walls if w is not None]), 6)
            steps[decide.HARNESS_WALL] = 1e-6
            if has_cpu:
                values[decide.HARNESS_CPU] = round(_median([float(c) for c in cpus if c is not None]), 6)
                steps[decide.HARNESS_CPU] = 1e-6
            work = values.get(decide.WORK)
            if work is not None and work > 0:  # the outside measures per unit of the work the run says it did
                for name in (decide.HARNESS_WALL, decide.HARNESS_CPU):
                    if name in values:
                        values[name + decide.PER_OP] = values[name] / work
                        steps[name + decide.PER_OP] = 1e-6 / work
    return Sample(index, role, position, res.exit_code, round(sum(r.duration_s for r, _, _ in runs), 4), res.timed_out,
                  values, problems, steps, len(runs))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _bench_problems(res: CommandResult, parsed: ParsedMetrics, spec: decide.Spec, job: dict[str, Any]) -> list[str]:
    """What makes one bench run unusable: its exit, a metric a verdict needs missing or not positive, or a
    metric in the harness's own names (which only the harness measures)."""
    problems = list(parsed.problems)
    if res.dropped_metric_lines:
        problems.append(f"{res.dropped_metric_lines} METRIC lines beyond the {METRIC_BYTES} bytes kept of a huge "
                        "output were dropped")
    if res.problem is not None:
        problems.append(res.problem)
    elif res.timed_out:
        problems.append(f"bench timed out after {job['timeouts']['bench']:g} s")
    elif res.exit_code != 0:
        problems.append(f"bench exited with status {res.exit_code}")
    elif spec.metric not in parsed.values:
        problems.append(f"primary metric {spec.metric!r} missing from the bench output")
    else:
        # every metric a verdict depends on (objectives, guards, the focus) must be in every run, and be a
        # positive number: the comparison is a ratio
        for name in spec.required():
            if name not in parsed.values:
                problems.append(f"metric {name!r} missing from the bench output")
        if spec.focus and not any(n.startswith(decide.FOCUS_PREFIX) for n in parsed.values):
            problems.append(f"no {decide.FOCUS_PREFIX}<name> metric in the bench output, although "
                            f"AUTORESEARCH_FOCUS={','.join(spec.focus)} was set")
        for name in spec.rules(list(parsed.values)):
            if not parsed.values[name] > 0:
                problems.append(f"metric {name!r} is {parsed.values[name]!r}: the comparison is a ratio, so the "
                                "value must be positive")
    own = [name for name in parsed.values if name.startswith(decide.HARNESS_PREFIX)]
    if own:
        problems.append(f"the bench printed {', '.join(own[:3])}: {decide.HARNESS_PREFIX}* metrics are the harness's "
                        "own measures of each run, taken from outside it")
    return problems


# How many pairs an experiment measures in one turn of the machine before another experiment waiting for it
# gets its turn: experiments sharing a machine alternate, so a clear one is not held up by an undecidable one.
TURN_PAIRS = 2


@contextlib.contextmanager
def machine_turn(path: str | None, shared: bool = False) -> Iterator[None]:
    """The machine lock, taken in turn: whoever waits for it is registered, and a bench that ends a turn
    while someone waits lets them have the machine before it takes it again (`yield_turn`)."""
    if not path:
        yield
        return
    waiting = Path(path + ".wait")
    waiting.mkdir(parents=True, exist_ok=True)
    mark = waiting / f"{os.getpid()}.{time.time_ns()}"
    mark.touch()
    try:
        with file_lock(path, shared):
            mark.unlink(missing_ok=True)
            _count_turn(path)
            yield
    finally:
        mark.unlink(missing_ok=True)


def _count_turn(path: str) -> None:
    with open(path + ".turns", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        text = fh.read().strip()
        fh.seek(0)
        fh.truncate()
        fh.write(str(int(text) + 1 if text.isdigit() else 1))


def _turns(path: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        return int(Path(path + ".turns").read_text().strip() or 0)
    return 0


def _others_waiting(path: str) -> bool:
    me = str(os.getpid())
    for mark in Path(path + ".wait").glob("*.*"):
        pid = mark.name.split(".", 1)[0]
        if pid == me or not pid.isdigit():
            continue
        if os.path.exists(f"/proc/{pid}") or not os.path.isdir("/proc"):
            return True
        mark.unlink(missing_ok=True)  # left by a process that died while it waited
    return False


def yield_turn(path: str | None, timeout_s: float = 3600.0) -> None:
    """After a turn: if another job waits for the machine, wait until it has taken its turn."""
    if not path or not _others_waiting(path):
        return
    before = _turns(path)
    deadline = time.monotonic() + timeout_s
    while _turns(path) == before and _others_waiting(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def _build_both(job: dict[str, Any], log: Any, out: Outcome) -> bool:
    """Build the job's baseline, then its candidate (each reused when built already); False, with the failure
    in `out`, when one fails."""
    t0 = time.monotonic()
    for role in ("baseline", "candidate"):
        tree = job[f"{role}_dir"]
        built = build_tree(tree, job["timeouts"]["build"], log, job.get(f"{role}_tree"), job.get("machine_lock"),
                           run_env(job, tree), sandbox.for_job(job, tree))
        out.build[role] = built.record()
        res = built.command
        if res is not None and not res.ok:
            why = "timed out" if res.timed_out else f"exited with status {res.exit_code}"
            out.status, out.phase = "failed", "build"
            out.error = f"{role} build {why}:\n{res.tail()}"
            out.durations["build"] = time.monotonic() - t0
            return False
    out.durations["build"] = round(time.monotonic() - t0, 3)
    return True


def run_holdout(job: dict[str, Any], log: Any) -> Outcome:
    """The hidden holdout's A/B (commit_winner): both trees built (reused from the experiment), then `pairs`
    interleaved pairs of the holdout's command, confined as a bench is, each pair's order a coin of the job's
    `seed`. Only the values of its METRIC lines come back; the server judges them."""
    out = Outcome(job["experiment_id"], host=host_info())
    spec = job["holdout"]
    if not _build_both(job, log, out):
        return out
    sides = [(role, Prepared.of(job, job[f"{role}_dir"], "bench")) for role in ("baseline", "candidate")]
    rng = random.Random(job["seed"])
    for i in range(int(spec["pairs"])):
        order = sides[::-1] if rng.random() < 0.5 else sides
        for pos, (role, side) in enumerate(order):
            with machine_turn(job.get("machine_lock")):
                res = side.run(list(spec["command"]), float(spec["timeout_s"]), log)
            values = parse_metrics(res.output).values
            if not res.ok or not values:
                why = "timed out" if res.timed_out else f"exited with status {res.exit_code}"
                out.status, out.phase = "failed", "bench"
                out.error = f"the holdout {why} on the {role} (or printed no METRIC line) in pair {i}"
                return out
            out.samples.append(Sample(i, role, pos, res.exit_code, round(res.duration_s, 4), res.timed_out, values))
    return out


def run_experiment(job: dict[str, Any], log: Any) -> Outcome:
    out = Outcome(job["experiment_id"], host=host_info())
    emit("status", status="building")
    if not _build_both(job, log, out):
        return out

    # The checks come first: a candidate that is not correct is never worth its pairs (and is never a winner).
    if job.get("run_checks", True):
        emit("status", status="checking")
        t2 = time.monotonic()
        out.checks = run_checks(job, job["candidate_dir"], log)
        out.durations["checks"] = round(time.monotonic() - t2, 3)
        if not out.checks["passed"]:
            out.status = "checks_failed"
            return out

    plan = decide.Plan.from_dict(job["design"])
    spec = decide.Spec.from_dict(job["judging"])
    # every pair's order is a coin of its own: the randomization the tests rest on (core/decide.py)
    rng = random.Random(job.get("seed"))
    prior: list[dict[str, Any]] = list(job.get("prior_samples") or [])  # earlier rounds of the same experiment
    first = len({int(s["pair"]) for s in prior})
    stops = sorted(int(n) for n in job["stops"])  # where this round judges; the last ends it
    # An unmeasured platform (an emulator: its timings mean nothing) builds and runs the checks only.
    measured = job.get("measure", True)
    if measured:
        emit("status", status="running")
    lock = job.get("machine_lock") if measured else None
    sides = [(role, Prepared.of(job, job[f"{role}_dir"], "bench")) for role in ("baseline", "candidate")]
    t1 = time.monotonic()
    waited = 0.0
    i = first
    while measured and i < stops[-1]:
        t_wait = time.monotonic()
        with machine_turn(lock):
            waited += time.monotonic() - t_wait  # lock wait is not bench time
            if i == first:
                for w in range(plan.warmup):
                    if spec.pairing == decide.TURNS:
                        out.warmup.extend(_bench_turns(sides, -1 - w, spec, job, log))
                        continue
                    for role, side in sides:
                        out.warmup.append(_bench(side, role, -1 - w, 0, spec, job, log))
            turn_end = min(stops[-1], i + TURN_PAIRS)
            while i < turn_end and out.stop_reason is None:
                order = list(sides)
                if rng.random() < 0.5:
                    order.reverse()
                pair = _bench_turns(order, i, spec, job, log) if spec.pairing == decide.TURNS else None
                for pos, (role, side) in enumerate(order):
                    s = pair[pos] if pair is not None else _bench(side, role, i, pos, spec, job, log)
                    out.samples.append(s)
                    emit("sample", pair=i, role=role, metrics=s.metrics, problems=s.problems)
                    if s.problems:
                        failed = s.timed_out or s.exit_code != 0
                        out.status = "failed" if failed else "done"
                        out.phase = "bench"
                        out.stop_reason = "invalid"
                        out.error = f"{role} run {i}: " + "; ".join(s.problems)
                        break
                i += 1
                if out.stop_reason is None and i in stops:
                    decision = decide.judge(prior + [asdict(x) for x in out.samples], spec, plan, n=i,
                                            final_n=stops[-1], start_n=first)
                    lead = next((j for j in decision.metrics.values() if j.rule.role == "focus"),
                                decision.metrics.get(spec.metric))
                    out.look = {"pairs": i, "verdict": decision.verdict, "final": decision.final,
                                "spread": lead.look.spread if lead is not None else None}
                    emit("look", pairs=i, verdict=decision.verdict)
                    if decision.final or i == stops[-1]:
                        out.stop_reason = decision.verdict
        if out.stop_reason is not None:
            break
        yield_turn(lock)
    out.durations["bench"] = round(time.monotonic() - t1 - waited, 3)
    return out


def tree_state(tree: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """Each file and link of `tree` (its .git aside) with its size and modification time: what a command
    wrote into the tree shows as a difference between two of these."""
    top = str(tree)
    out: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(top):
        if root == top:
            dirs[:] = [d for d in dirs if d != ".git"]
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(root, d)))]:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[os.path.relpath(path, top)] = (st.st_size, st.st_mtime_ns)
    return out


def tree_changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], limit: int = 10) -> list[str]:
    """The paths created, changed or removed between two tree_state()s, the first `limit` of them."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))[:limit]


def run_checks(job: dict[str, Any], tree: str, log: Any) -> dict[str, Any]:
    """The session's checks on `tree`, as the checks result of an outcome.

    A session that has checks (the session's scripts hold autoresearch.checks.sh) runs its own bytes
    whatever the tree holds, and a script that cannot be put in place or run fails the checks: it never
    reads as "no checks". Without the session's scripts (a job of no session), the tree's script runs.
    """
    c = sandbox.for_job(job, tree, "checks")
    has = sandbox.CHECKS_SCRIPT in c.scripts if c.scripts else (Path(tree) / sandbox.CHECKS_SCRIPT).exists()
    if not has:
        return {"ran": False, "passed": True, "note": "no autoresearch.checks.sh"}
    log.write("[autoresearch] checks\n")
    log.flush()
    argv, timeout = ["bash", "./" + sandbox.CHECKS_SCRIPT], float(job["timeouts"]["checks"])
    # In a session whose pairs run in turns the checks are stopped and continued as a bench is (at half duty):
    # a program cannot tell its checks from its bench by being stopped.
    turns = decide.TURNS in (job.get("pairing"), (job.get("judging") or {}).get("pairing"))
    try:
        with machine_turn(job.get("machine_lock"), shared=True):
            if turns:
                res = run_in_turns([(Prepared.of(job, tree, "checks"), argv)], timeout, log, duty=0.5)[0]
            else:
                res = run_command(argv, tree, timeout, env=run_env(job, tree, "checks"), log=log, confine=c)
    except OSError as exc:
        return {"ran": False, "passed": False, "note": f"the session's {sandbox.CHECKS_SCRIPT} could not be run "
                f"in {tree} ({type(exc).__name__}: {exc}); the checks failed"}
    return {"ran": True, "passed": res.ok, "exit_code": res.exit_code, "timed_out": res.timed_out,
            "duration_s": round(res.duration_s, 3), "tail": res.tail(1500)}


def result_line(outcome: Outcome, secret: str | None = None) -> str:
    return machine_line(RESULT_PREFIX, asdict(outcome), secret, compact=True)


def parse_result_line(text: str, secret: str) -> dict[str, Any] | None:
    """The last result line carrying `secret` in `text` (a log or the runner's stdout), or None if the
    run never finished (a line without the secret is not the runner's, whatever it says)."""
    for line in reversed(text.splitlines()):
        parsed = read_machine_line(line, RESULT_PREFIX, secret)
        if parsed is not None:
            return parsed
    return None


def open_log(path: str) -> Any:
    """Append to the experiment's log, refusing a symbolic link in its place (O_NOFOLLOW)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    return os.fdopen(fd, "a", encoding="utf-8", errors="replace")


def _on_term(signum: int, _frame: Any) -> None:
    # Cancel: take the running build/bench group down with us, then leave.
    for cgroup in list(_turn_groups.values()):
        if cgroup is not None:
            cgroup.kill()
    for group in [_current_pgid, *_turn_groups]:
        if group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGCONT)
            kill_group(group, grace_s=1.0)
    kill_marked(os.environ.get(JOB_ENV, ""))
    raise SystemExit(128 + signum)


def start_job(job_file: str, what: str) -> dict[str, Any]:
    """What a runner (or the profiler beside it) does first: read the job and, before any command runs,
    its secret from stdin; become non-dumpable; mark every process it will start."""
    global _secret
    _not_dumpable()
    _secret = sys.stdin.readline().strip()
    sys.stdin.close()
    job: dict[str, Any] = json.loads(Path(job_file).read_text())
    sandbox.resolve(job, str(Path(job_file).parent))
    # unique per run (an experiment id alone may repeat: a retry, another session, another checkout)
    os.environ.setdefault(JOB_ENV, f"{job.get(what, 'job')}.{os.getpid()}.{time.time_ns()}")
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    become_subreaper()
    return job


def refusal(job: dict[str, Any]) -> str | None:
    """Why the job's commands cannot run as the session asks (no confinement here), or None."""
    return None if sandbox.mode_of(job) == sandbox.OFF else sandbox.unavailable()


def prebuild(job: dict[str, Any], tree: str) -> None:
    """Build the baseline `tree` of a worker's job ahead of the candidate (the compiler cache warms)."""
    if refusal(job) is None:
        job = {**job, "baseline_dir": tree}
        build_tree(tree, float(job["timeouts"]["build"]), sys.stderr, job.get("baseline_tree"), "machine.lock",
                   run_env(job, tree), sandbox.for_job(job, tree))


def kept_output(text: str, limit: int = 20000) -> str:
    """A validation run's output as the server reads it, bounded: the head, the METRIC lines between (as
    many as fit) and the tail; the primary metric printed first survives a flood of other lines."""
    if len(text) <= limit:
        return text
    half = limit // 2
    head_end = text.rfind("\n", 0, half) + 1 or half
    tail_start = text.find("\n", len(text) - half) + 1 or len(text) - half
    middle = text[head_end:tail_start].encode("utf-8", errors="replace")
    metric = b"".join(_metric_lines(middle))
    metric = metric[:metric.rfind(b"\n", 0, limit) + 1]
    return (text[:head_end] + "[autoresearch] output cut here; the METRIC lines between follow\n"
            + metric.decode("utf-8", errors="replace") + text[tail_start:])


def run_validation(job: dict[str, Any], log: Any) -> dict[str, Any]:
    """A validation of the session head (start_session, here or on a worker): build the base tree (the build
    later experiments reuse) and bench it `validate` times; with `checks_trial`, then run the checks as they
    are and, when they pass, with the tree read-only; with `run_checks` (another platform's check of the
    head), the checks only as they are. Raw results, bounded."""
    tree = job["baseline_dir"]
    env, confine = run_env(job, tree), sandbox.for_job(job, tree)
    emit("progress", message=f"building {tree} (autoresearch.sh build)")
    built = build_tree(tree, float(job["timeouts"]["build"]), log, job.get("baseline_tree"), job.get("machine_lock"),
                       env, confine)
    out: dict[str, Any] = {"tree": str(tree), "build_s": built.duration_s, "build": None, "runs": [],
                           "sandbox": sandbox.describe(confine.off, confine.share)}
    cmd = built.command
    if cmd is not None:
        out["build"] = {"exit_code": cmd.exit_code, "duration_s": cmd.duration_s, "timed_out": cmd.timed_out,
                        "output": cmd.output[-20000:]}
    if cmd is not None and not cmd.ok:
        emit("progress", message=f"the build failed after {built.duration_s:.1f} s")
        return out
    emit("progress", message=f"built in {built.duration_s:.1f} s" if cmd is not None else "build reused")
    bench = Prepared.of(job, tree, "bench")
    before = tree_state(tree)
    if job["validate"]:
        log.write(f"[autoresearch] {job['validate']} runs, AUTORESEARCH_THREADS={env['AUTORESEARCH_THREADS']}\n")
    # in turns, two runs at a time in turns, as an experiment's pairs run: a run's CPU time depends on it (each
    # turn starts with caches the other filled), and the baseline's drift is judged against these runs
    at_once = 2 if job.get("pairing") == decide.TURNS else 1
    total, i = int(job["validate"]), 0
    while i < total:
        k = min(at_once, total - i)
        emit("progress", message=f"bench run {i + 1}{f'-{i + k}' if k > 1 else ''} of {total} at "
                                 f"{env['AUTORESEARCH_THREADS']} thread(s)" + (" in turns" if k > 1 else ""))
        timeout = float(job["timeouts"]["bench"])
        with machine_turn(job.get("machine_lock")):
            results = run_in_turns([(bench, BENCH)] * k, timeout, log) if k > 1 else [bench.run(BENCH, timeout, log)]
        for res in results:
            out["runs"].append({"exit_code": res.exit_code, "duration_s": res.duration_s, "timed_out": res.timed_out,
                                "output": kept_output(res.output), "wall_s": res.wall_s, "span_s": res.span_s})
        i += k
        if any(not res.ok or job.get("metric") not in parse_metrics(res.output).values for res in results):
            break
    if job.get("shape_trial") and len(out["runs"]) == total and all(r["exit_code"] == 0 for r in out["runs"]):
        out["shape"] = shape_trial(bench, float(job["timeouts"]["bench"]), job.get("machine_lock"), log)
    out["writes"] = tree_changes(before, tree_state(tree))
    if job.get("checks_trial") or job.get("run_checks"):
        before = tree_state(tree)
        checks = out["checks"] = run_checks(job, tree, log)
        out["checks_writes"] = tree_changes(before, tree_state(tree))
        if job.get("checks_trial") and checks["ran"] and checks["passed"]:
            read_only = {**job, "sandbox": {**job["sandbox"], "read_only": ["checks"]}}
            out["checks_read_only"] = run_checks(read_only, tree, log)
    return out


def shape_trial(bench: Prepared, timeout_s: float, lock: str | None, log: Any) -> dict[str, Any]:
    """One bench run alone, then one stopped half of the time (half duty): a bench that does fixed work takes
    about twice as long at half duty, one that runs for a fixed time about as long. Each run's wall time and
    metrics."""
    emit("progress", message="one bench run alone and one at half duty: does the bench do fixed work?")
    with machine_turn(lock):
        full = bench.run(BENCH, timeout_s, log)
        half = run_in_turns([(bench, BENCH)], timeout_s, log, duty=0.5)[0]
    return {"ok": full.ok and half.ok, "full_s": full.wall_s, "half_s": half.span_s,
            "full": parse_metrics(full.output).values, "half": parse_metrics(half.output).values}


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: runner.py JOB.json [--prebuild]", file=sys.stderr)
        return 2
    if argv[2:] == ["--prebuild"]:
        job = json.loads(Path(argv[1]).read_text())
        sandbox.resolve(job, str(Path(argv[1]).parent))
        prebuild(job, job["baseline_dir"])
        return 0
    job = start_job(argv[1], "experiment_id")
    refused = refusal(job)
    log_path = job.get("log_path")
    with open_log(log_path) if log_path else contextlib.nullcontext(sys.stderr) as log:
        if "validate" in job:
            try:
                result = {"error": refused} if refused else run_validation(job, log)
            except Exception as exc:  # the result line must be printed whatever happened
                result = {"error": f"{type(exc).__name__}: {exc}"}
            print(machine_line(RESULT_PREFIX, result, compact=True), flush=True)
            return 0
        try:
            if refused:
                outcome = Outcome(job.get("experiment_id", "?"), status="failed", phase="sandbox", error=refused)
            else:
                outcome = run_holdout(job, log) if "holdout" in job else run_experiment(job, log)
        except Exception as exc:  # the result line must be printed whatever happened
            outcome = Outcome(job.get("experiment_id", "?"), status="failed", phase="runner",
                              error=f"{type(exc).__name__}: {exc}")
    outcome.sandbox = sandbox.describe(sandbox.mode_of(job) == sandbox.OFF, sandbox.shares_of(job))
    print(result_line(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
