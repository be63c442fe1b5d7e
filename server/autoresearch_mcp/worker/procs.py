"""One command of a job as the runner starts it: its own process group (and, confined, its own cgroup), its
output drained from a pipe (head, tail and METRIC lines), its leader reaped by wait4 in a thread, and every
process of it ended before its result is returned; its wall and CPU time taken from outside it. Standard
library only (shipped beside the runner)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cgroups, metricparse, sandbox

TAIL_CHARS = 4000


# What is kept of one command's output (the log and the parser see no more): its head and its tail,
# and the METRIC lines of the part between them up to a limit.
HEAD_BYTES = 64 * 1024


KEEP_TAIL_BYTES = 64 * 1024


METRIC_BYTES = 1024 * 1024


# Every process a job starts carries this variable (a value unique to the run), so whatever escapes
# its process group (`setsid cmd &`, a daemon) can still be found and killed.
JOB_ENV = "AUTORESEARCH_JOB"


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
MEMORY_POLL_S = 0.05  # how often the memory of a command no memory cgroup counts is read (its processes' statm)


_current_pgid: int | None = None


_command_count = 0


# Python 3.11 starts the child in its own group race-free; cloud images often ship 3.8-3.10.
_NEW_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
)


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
        for line in metricparse.metric_lines(region):
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

    started = Started.of(argv, cwd, env, confine, outside)
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
    if started.before is not None and reap_orphans() and started.group_cpu_s is None:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = (after.ru_utime - started.before.ru_utime) + (after.ru_stime - started.before.ru_stime)
    return started.result(timed_out, timeout_s, log, cpu_s)


class Started:
    """One command started as run_command starts it: its own process group, its output drained by a thread,
    its leader reaped by another; `end` kills whatever of it is left and closes its output."""

    def __init__(self, proc: subprocess.Popen[bytes], argv: list[str], marker: str, capture: Capture, read_fd: int,
                 launch: sandbox.Launch | None, before: Any, group: cgroups.Group | None,
                 init: Init | None = None) -> None:
        self.proc, self.argv, self.marker, self.capture, self.read_fd = proc, argv, marker, capture, read_fd
        self.launch, self.before, self.group, self.init = launch, before, group, init
        self.start = time.monotonic()
        self.own_s = 0.0  # in turns: the wall time of its own turns
        self.problem: str | None = None
        self.group_cpu_s: float | None = None  # its group's CPU time, or that its init gives (nsinit.py)
        self.stop = threading.Event()
        self.reader = threading.Thread(target=_drain, args=(read_fd, capture, self.stop), daemon=True)
        self.reader.start()
        self.reaped = _Reaper(proc, self.start)
        if group is not None and group.has("memory"):
            threading.Thread(target=self._bound_scratch, daemon=True).start()
        elif init is not None or group is not None:  # no memory cgroup: the runner watches what it uses
            threading.Thread(target=self._watch_memory, daemon=True).start()

    def pids(self) -> list[int]:
        """Every process of the command now (its group's, or its PID namespace's below its init)."""
        if self.group is not None:
            return self.group.pids()
        if self.init is not None and self.init.pid():
            return [p for p in tree(self.init.pid() or 0) if p != self.init.pid()]
        return []

    def cpu_now(self) -> float | None:
        """The CPU time of every process of the command so far, read from outside it (a turn's measure)."""
        if self.group is not None and self.group.has("cpu"):
            return self.group.cpu_s()
        if self.init is not None:
            return self.init.cpu_now()
        return None

    def _watch_memory(self) -> None:
        """End the command once its processes' own memory together reaches the job's bound (sandbox.memory_limit):
        where no memory cgroup counts it, the runner reads it every MEMORY_POLL_S (its private /tmp and /run are
        bounded by their own size)."""
        limit = sandbox.memory_limit()
        while limit and not self.reaped.wait(MEMORY_POLL_S):
            used = private_bytes(self.pids())
            if used >= limit:
                self.problem = (f"the job reached its memory limit ({limit / 2**20:.0f} MiB for its processes, "
                                "watched by the runner: no memory cgroup can be made here): the command was ended")
                if self.group is not None:
                    self.group.kill()
                for pid in (self.init.pid() if self.init is not None else None, self.proc.pid):
                    if pid:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(pid, signal.SIGKILL)
                return

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
           confine: sandbox.Confinement | sandbox.Launch | None, outside: list[str] | None = None) -> Started:
        global _command_count
        # Every command carries a marker: the job's (inherited) or one of its own, swept when it ends.
        env = dict(os.environ if env is None else env)
        _command_count += 1
        marker = env.setdefault(JOB_ENV, f"cmd-{os.getpid()}-{_command_count}-{time.time_ns()}")
        fds: list[int] = []
        launch = None if confine is None else sandbox.launch(confine, env)
        group, init = None, None
        if launch is not None and not launch.confinement.off:
            # a group of its own where one can be made: its CPU time, its freezer, its kill, its memory bound; where
            # none stops and counts it, an init of our own in its PID namespace (nsinit.py)
            group = sandbox.group()
            if group is None or not (group.has("cpu") and group.has("freeze")):
                init = Init.new()
            argv, env, fds = sandbox.command(argv, launch, env, into=group, init=init.far_ends() if init else None)
        elif launch is not None:
            argv, env, fds = sandbox.command(argv, launch, env)
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
            if init is not None:
                init.close()
            if group is not None:
                group.remove()
            raise
        finally:
            os.close(write_fd)
            for fd in fds:
                os.close(fd)
        return cls(proc, argv, marker, Capture(), read_fd, launch, before, group, init)

    def end(self) -> None:
        """Leftovers of the group (a backgrounded helper, a leader that ignored SIGTERM) must not disturb later
        runs, nor write to the output once it is read. Under its own init, the init ends it first, so that what
        it ran is still counted."""
        if self.init is not None and not self.reaped.done.is_set():
            self.init.end_command()
            self.reaped.wait(1.0)
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
        if self.init is not None:
            if self.group_cpu_s is None:
                self.group_cpu_s = self.init.final_cpu()
            self.init.close()
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


# Set in a runner process (become_subreaper): every process its commands leave is reparented to it, and
# reaped by it, so RUSAGE_CHILDREN holds the CPU time of each command's whole tree. bubblewrap's outer process
# exits without reaping the PID namespace's init (which reaped the job's every process): the init comes here.
_subreaper = False


PR_SET_CHILD_SUBREAPER = 36


ORPHANS_WAIT_S = 5.0


def current_group() -> int | None:
    """The process group of the command running now (run_command's), if any: what a cancel takes down."""
    return _current_pgid


def subreaping() -> bool:
    """Whether this process reaps what its commands leave (become_subreaper)."""
    return _subreaper


def become_subreaper() -> bool:
    """Make this process the reaper of whatever its commands leave (Linux); whether it now is. Only for a
    process whose only children are its commands (the runner's): it reaps every child that ends."""
    global _subreaper
    with contextlib.suppress(Exception):
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
            _subreaper = True
    return _subreaper


def reap_orphans() -> bool:
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


# --- the processes of a command, read from /proc --------------------------------------------------------------

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


def tree(pid: int) -> list[int]:
    """`pid` and every process below it (parents first), read from /proc/<pid>/task/<tid>/children (or, where
    the kernel has no such file, from every process's parent). A confined job's every process is below its PID
    namespace's init: an orphan goes to it."""
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


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def private_bytes(pids: list[int]) -> int:
    """The memory of `pids` that is theirs (resident, less what is shared with others: /proc/<pid>/statm)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/statm") as fh:
            fields = fh.read().split()
            total += (int(fields[1]) - int(fields[2])) * _PAGE
    return total


def _run_time_s(pid: int) -> float:
    """The CPU time every thread of `pid` has had so far (schedstat's nanoseconds; 0 where it cannot be read)."""
    total = 0
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
    return total / 1e9


class Init:
    """The runner's end of a command's own init (nsinit.py): two pipes (asks, answers), and the init's pid as
    bubblewrap reports it (`--info-fd`)."""

    ANSWER_WAIT_S = 2.0  # an answer the init owes: it is never stopped, so only a machine stalled this long is late
    STOP_TRIES = 10  # a stop that did not complete (a process in the kernel) is asked again, not the pair lost

    def __init__(self, ask_w: int, ask_r: int, answer_r: int, answer_w: int, info_r: int, info_w: int) -> None:
        self.ask_w, self.answer_r, self.info_r = ask_w, answer_r, info_r
        self._far = (ask_r, answer_w, info_w)
        self._pid: int | None = None
        self._buffer = b""
        self.ended = False

    @classmethod
    def new(cls) -> Init:
        ask_r, ask_w = os.pipe()
        answer_r, answer_w = os.pipe()
        info_r, info_w = os.pipe()
        return cls(ask_w, ask_r, answer_r, answer_w, info_r, info_w)

    def far_ends(self) -> tuple[int, int, int]:
        """The descriptors the sandbox hands on: the init's asks and answers, and bubblewrap's info (closed here once
        the command has started, with the others the command inherits)."""
        return self._far

    def pid(self) -> int | None:
        """The init's pid (outside its namespace), once bubblewrap has said it."""
        if self._pid is None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                os.set_blocking(self.info_r, False)
                data = os.read(self.info_r, 65536).decode()
                self._pid = int(json.loads(data or "{}").get("child-pid") or 0) or None
        return self._pid

    def cpu_now(self) -> float | None:
        """The CPU time of every process of the command so far, from outside: each live one's threads, and what the
        init has reaped (its children's time, in clock ticks)."""
        init = self.pid()
        if init is None:
            return None
        try:
            with open(f"/proc/{init}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            reaped = (int(fields[13]) + int(fields[14])) / _TICK
        except (OSError, ValueError, IndexError):
            return None
        return reaped + sum(_run_time_s(p) for p in tree(init) if p != init)

    def _answer(self, wait_s: float) -> bytes:
        """The next answer (s, f or c), or E once the command has ended; b"" if none came in time."""
        deadline = time.monotonic() + wait_s
        while True:
            for byte in self._buffer:
                if byte in b"sfcE":
                    if byte != ord("E"):
                        self._buffer = self._buffer.replace(bytes([byte]), b"", 1)
                    else:
                        self.ended = True
                    return bytes([byte])
            left = deadline - time.monotonic()
            if left <= 0:
                return b""
            ready, _, _ = select.select([self.answer_r], [], [], left)
            if ready:
                chunk = os.read(self.answer_r, 4096)
                if not chunk:
                    self.ended = True
                    return b"E"
                self._buffer += chunk

    def pause(self, stop: bool) -> bool:
        """Stop (or continue) every process of the command at once; whether it all is. A stop that did not
        complete (a process in an uninterruptible wait) is asked again, up to STOP_TRIES times."""
        for _ in range(self.STOP_TRIES if stop else 1):
            if self.ended:
                return True
            try:
                os.write(self.ask_w, b"S" if stop else b"C")
            except OSError:  # the init has ended with its command: nothing is left to stop
                self.ended = True
                return True
            answer = self._answer(self.ANSWER_WAIT_S)
            if answer in (b"s", b"c", b"E"):
                return True
            if answer == b"":
                return False
        return False

    def end_command(self) -> None:
        """Ask the init to kill every process of the command (it then counts them and ends)."""
        if not self.ended:
            with contextlib.suppress(OSError):
                os.write(self.ask_w, b"K")

    def final_cpu(self) -> float | None:
        """The CPU time of every process the command ran, as its init gave it when the command ended."""
        self._answer(ORPHANS_WAIT_S)  # the init writes it just before it ends
        with contextlib.suppress(BlockingIOError, OSError):
            os.set_blocking(self.answer_r, False)
            self._buffer += os.read(self.answer_r, 4096)
        for line in self._buffer.decode(errors="replace").splitlines():
            part = line[line.find("E "):] if "E " in line else ""
            with contextlib.suppress(ValueError, IndexError):
                return float(part.split()[1])
        return None

    def close(self) -> None:
        """Close this end (the far ends are the command's: closed once it has started, with the others it inherits)."""
        for fd in (self.ask_w, self.answer_r, self.info_r):
            with contextlib.suppress(OSError):
                os.close(fd)


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
