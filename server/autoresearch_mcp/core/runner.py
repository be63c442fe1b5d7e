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
import json
import math
import os
import platform
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__:  # imported by the server
    from . import decide
else:  # run as a script (here or on a worker), beside decide.py
    import decide  # type: ignore[no-redef,import-not-found]

METRIC_RE = re.compile(r"^\s*METRIC\s+([A-Za-z_][A-Za-z0-9_.\-/:+]*)\s*=\s*(\S+)\s*$")
RESULT_PREFIX = "AUTORESEARCH_RESULT "
EVENT_PREFIX = "AUTORESEARCH_EVENT "
BUILT_MARKER = ".autoresearch-built"
TAIL_CHARS = 4000
# Every process a job starts carries this variable (a value unique to the run), so whatever escapes
# its process group (`setsid cmd &`, a daemon) can still be found and killed.
JOB_ENV = "AUTORESEARCH_JOB"
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

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

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


_current_pgid: int | None = None
_command_count = 0
# Python 3.11 starts the child in its own group race-free; cloud images often ship 3.8-3.10.
_NEW_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
)


def run_command(
    argv: list[str],
    cwd: str | os.PathLike[str],
    timeout_s: float,
    env: dict[str, str] | None = None,
    log: Any | None = None,
    stop_signal: int = signal.SIGTERM,
    grace_s: float = 2.0,
) -> CommandResult:
    """Run one command in its own process group; on timeout the group gets `stop_signal`, and
    whatever still runs after `grace_s` is killed.

    Output (stdout and stderr merged) goes to a temporary file, then to `log` if given, so a
    chatty benchmark can neither fill a pipe nor our memory while it runs.
    """
    global _current_pgid, _command_count
    import tempfile

    # Every command carries a marker: the job's (inherited) or one of its own, swept when it ends.
    env = dict(os.environ if env is None else env)
    _command_count += 1
    marker = env.setdefault(JOB_ENV, f"cmd-{os.getpid()}-{_command_count}-{time.time_ns()}")
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            **_NEW_GROUP,
        )
        _current_pgid = proc.pid
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, stop_signal)
            # reap the leader as soon as it goes: an unreaped leader keeps its group alive
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
        finally:
            # Leftovers of the group (a backgrounded helper, a leader that ignored SIGTERM) must not
            # disturb later runs.
            kill_group(proc.pid, grace_s=0.5)
            proc.wait()
            _current_pgid = None
            kill_marked(marker)
        duration = time.monotonic() - start
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    if log is not None:
        log.write(text)
        if timed_out:
            log.write(f"\n[autoresearch] timed out after {timeout_s:g} s; process group killed\n")
        log.flush()
    return CommandResult(list(argv), None if timed_out else proc.returncode, duration, timed_out, text)


def bench_env(role: str, index: int, threads: int | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    env["AUTORESEARCH_ROLE"] = role
    env["AUTORESEARCH_RUN"] = str(index)
    env["AUTORESEARCH_THREADS"] = str(threads or os.cpu_count() or 1)
    return env


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
    print(EVENT_PREFIX + json.dumps({"event": kind, **data}), flush=True)


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


def compiler_cache_env(tree: str, stats_log: str | None = None) -> dict[str, str]:
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
        if stats_log:
            env["CCACHE_STATSLOG"] = stats_log
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
    env: dict[str, str] | None = None,
) -> BuildResult:
    """Build one tree unless it already holds a build of `content` (a git tree id).

    `env` (a platform's: cross compiler, AUTORESEARCH_PLATFORM...) comes on top of the process's.

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
        stats = Path(tree).parent / (Path(tree).name + ".ccache-stats")
        stats.unlink(missing_ok=True)
        full = {**os.environ, **compiler_cache_env(tree, str(stats)), **(env or {})}
        res = run_command(["bash", "./autoresearch.sh", "build"], tree, timeout_s, env=full, log=log)
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


def _bench(tree: str, role: str, index: int, position: int, job: dict[str, Any], log: Any) -> Sample:
    log.write(f"[autoresearch] bench {role} run {index}\n")
    log.flush()
    res = run_command(["bash", "./autoresearch.sh", "bench"], tree, job["timeouts"]["bench"],
                      env=bench_env(role, index, job.get("threads"), job.get("env")), log=log)
    parsed = parse_metrics(res.output)
    problems = list(parsed.problems)
    spec = decide.Spec.from_dict(job["judging"])
    if res.timed_out:
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
    return Sample(index, role, position, res.exit_code, round(res.duration_s, 4), res.timed_out,
                  parsed.values, problems, parsed.steps)


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


def run_experiment(job: dict[str, Any], log: Any) -> Outcome:
    out = Outcome(job["experiment_id"], host=host_info())
    base, cand = job["baseline_dir"], job["candidate_dir"]
    t0 = time.monotonic()

    emit("status", status="building")
    for role, tree in (("baseline", base), ("candidate", cand)):
        built = build_tree(tree, job["timeouts"]["build"], log, job.get(f"{role}_tree"), job.get("machine_lock"),
                           job.get("env"))
        out.build[role] = built.record()
        res = built.command
        if res is not None and not res.ok:
            why = "timed out" if res.timed_out else f"exited with status {res.exit_code}"
            out.status, out.phase = "failed", "build"
            out.error = f"{role} build {why}:\n{res.tail()}"
            out.durations["build"] = time.monotonic() - t0
            return out
    out.durations["build"] = round(time.monotonic() - t0, 3)

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
    t1 = time.monotonic()
    waited = 0.0
    i = first
    while measured and i < stops[-1]:
        t_wait = time.monotonic()
        with machine_turn(lock):
            waited += time.monotonic() - t_wait  # lock wait is not bench time
            if i == first:
                for w in range(plan.warmup):
                    for role, tree in (("baseline", base), ("candidate", cand)):
                        out.warmup.append(_bench(tree, role, -1 - w, 0, job, log))
            turn_end = min(stops[-1], i + TURN_PAIRS)
            while i < turn_end and out.stop_reason is None:
                order = [("baseline", base), ("candidate", cand)]
                if rng.random() < 0.5:
                    order.reverse()
                for pos, (role, tree) in enumerate(order):
                    s = _bench(tree, role, i, pos, job, log)
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
                                            final_n=stops[-1])
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
    if out.status == "failed":
        return out

    # Every candidate that reaches a verdict (noisy and invalid ones too) gets a checks result.
    if job.get("run_checks", True):
        emit("status", status="checking")
        t2 = time.monotonic()
        checks = Path(cand) / "autoresearch.checks.sh"
        if checks.exists():
            log.write("[autoresearch] checks\n")
            log.flush()
            env = checks_env(base, job)
            with machine_turn(job.get("machine_lock"), shared=True):
                res = run_command(["bash", "./autoresearch.checks.sh"], cand, job["timeouts"]["checks"], env=env,
                                  log=log)
            out.checks = {"ran": True, "passed": res.ok, "exit_code": res.exit_code,
                          "timed_out": res.timed_out, "duration_s": round(res.duration_s, 3),
                          "tail": res.tail(1500)}
            if not res.ok:
                out.status = "checks_failed"
        else:
            out.checks = {"ran": False, "passed": True, "note": "no autoresearch.checks.sh"}
        out.durations["checks"] = round(time.monotonic() - t2, 3)
    return out


def checks_env(baseline_dir: str, job: dict[str, Any]) -> dict[str, str]:
    """The checks' environment: the baseline's built tree to compare outputs with, and the job's settings."""
    env = {**os.environ, **(job.get("env") or {})}
    env["AUTORESEARCH_BASELINE_TREE"] = str(Path(baseline_dir).resolve())
    env["AUTORESEARCH_THREADS"] = str(job.get("threads") or os.cpu_count() or 1)
    return env


def result_line(outcome: Outcome) -> str:
    return RESULT_PREFIX + json.dumps(asdict(outcome), separators=(",", ":"))


def parse_result_line(text: str) -> dict[str, Any] | None:
    """The last result line in `text` (a log or a job's stdout), or None if the run never finished."""
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            parsed: dict[str, Any] = json.loads(line[len(RESULT_PREFIX):])
            return parsed
    return None


def open_log(path: str) -> Any:
    """Append to the experiment's log, refusing a symbolic link in its place (O_NOFOLLOW)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    return os.fdopen(fd, "a", encoding="utf-8", errors="replace")


def _on_term(signum: int, _frame: Any) -> None:
    # Cancel: take the running build/bench group down with us, then leave.
    if _current_pgid is not None:
        kill_group(_current_pgid, grace_s=1.0)
    kill_marked(os.environ.get(JOB_ENV, ""))
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: runner.py JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[1]).read_text())
    # unique per run (an experiment id alone may repeat: a retry, another session, another checkout)
    os.environ.setdefault(JOB_ENV, f"{job.get('experiment_id', 'job')}.{os.getpid()}.{time.time_ns()}")
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    log_path = job.get("log_path")
    with open_log(log_path) if log_path else contextlib.nullcontext(sys.stderr) as log:
        try:
            outcome = run_experiment(job, log)
        except Exception as exc:  # the result line must be printed whatever happened
            outcome = Outcome(job.get("experiment_id", "?"), status="failed", phase="runner",
                              error=f"{type(exc).__name__}: {exc}")
    print(result_line(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
