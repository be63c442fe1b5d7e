"""Validating a session's benchmark before any experiment is trusted: build the head once, bench it twice,
choose the threads and which commands see their tree read-only, check the other platforms, and say what the
confinement does not promise."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_mcp import progress, safefs
from autoresearch_mcp.errors import StateError
from autoresearch_mcp.executors.jobs import JobMaker
from autoresearch_mcp.executors.port import VALIDATION_RUNS, Executor, Job, ValidationRun
from autoresearch_mcp.experiments import platforms as platforms_
from autoresearch_mcp.git import gitops
from autoresearch_mcp.measure import stats, summary
from autoresearch_mcp.models import BenchRun, MetricSummary, ThreadsTrial
from autoresearch_mcp.store.config import (
    BENCH_SCRIPT,
    CHECKS_SCRIPT,
    SessionConfig,
    config_path,
    judged_metrics,
    state_dir,
)
from autoresearch_mcp.worker import decide, metricparse, sandbox


@dataclass
class Validation:
    """The validation runs kept as the baseline, and (when start_session chose them) the threads."""

    runs: list[BenchRun]
    build_s: float
    warnings: list[str]
    threads: int | None = None  # chosen by steadiest_threads; None: the config's
    tried: list[ThreadsTrial] = field(default_factory=list)
    writes: list[str] | None = None  # what the bench runs wrote into their tree (None: not looked at)
    read_only: list[str] | None = None  # chosen by choose_read_only; None: the config's
    worker: str | None = None  # the cloud worker it ran on, as start_session reports it
    shape: str | None = None  # what the run at half duty showed of the bench (bench_shape)
    pairing: str | None = None  # chosen by choose_pairing; None: the config's
    pairing_note: str | None = None  # why
    turn_clock: str | None = None  # in turns, chosen from the runs (turn_clock); None: the config's
    metric_kinds: dict[str, str] = field(default_factory=dict)  # what each metric showed itself to be (metric_kinds)
    measured_share: dict[str, float] = field(default_factory=dict)  # the share of a run each one times


# A run at half duty that takes this much longer than one alone did fixed work; this little, ran for a fixed time.
FIXED_WORK_RATIO, FIXED_TIME_RATIO = 1.7, 1.45
SHAPE_MIN_S = 0.1  # a run shorter than a few turns of half duty tells nothing of its shape
SHORT_TURNS_S = 0.25  # in turns, a run shorter than this (about a dozen turns) is poorly measured


# In turns, what a session judges a time or rate on (config turn_clock): its CPU form, or its figure over the wall
# time of the run's own turns where the runs keep at least PARALLEL_CPUS busy (a multi-threaded program, whose gain
# from balance its CPU time may not show).
PARALLEL_CPUS = 1.3


def turn_clock(cpu_per_wall: list[float], threads: int) -> str:
    """The clock a session in turns judges times and rates on: wall where it runs several threads and its runs kept
    PARALLEL_CPUS or more busy in their own turns (the median run), else cpu."""
    if threads == 1 or not cpu_per_wall:
        return "cpu"
    ordered = sorted(cpu_per_wall)
    return "wall" if ordered[len(ordered) // 2] >= PARALLEL_CPUS else "cpu"


def side_measure(config: SessionConfig) -> str:
    """How each side of a pair is measured, as start_session says it (on this machine; a cloud worker's own)."""
    if config.sandbox == sandbox.OFF:
        return ("unconfined (sandbox off): a run's CPU time is its waited-for processes', and pairs in turns stop "
                "each side with SIGSTOP; nothing keeps a process from leaving its run")
    if config.executor == "sky":
        return ("on each cloud worker: each command in a cgroup of its own where the worker lets the runner make one "
                "(its CPU time of every process, a freezer for turns); where it does not, the runner's reaping and "
                "SIGSTOP")
    return sandbox.side_measure()


UNITS_PER_S = (1.0, 1e3, 1e6, 1e9)  # a time printed in s, ms, us or ns


def _share_of_run(seconds: list[float], walls: list[float]) -> float | None:
    """The share of its run each of `seconds` (a time the program took, in some unit: UNITS_PER_S) is, where one unit
    makes every one of them at most its run's wall time and at least a twentieth of it: their median (else None)."""
    for unit in UNITS_PER_S:
        shares = sorted(s / unit / w for s, w in zip(seconds, walls, strict=True))
        if all(0.05 <= x <= 1.02 for x in shares):
            return min(1.0, shares[len(shares) // 2])
    return None


def _times_its_run(values: list[float], walls: list[float]) -> bool:
    return _share_of_run(values, walls) is not None


def measured_shares(done: ValidationRun, kinds: dict[str, str]) -> dict[str, float]:
    """The share of each run's wall time that each time or rate of `kinds` times, from start_session's own runs: a
    time's seconds (in its unit) over the run's, or, for a rate beside the work the run did (METRIC ops=), the work
    over the rate. The harness's own time of a run must then show a claimed change by that share (decide.Spec
    .measured_share); a metric none of whose readings fits is left to the default share."""
    runs = _readings(done)
    out: dict[str, float] = {}
    for name, kind in kinds.items():
        seen = [(v, w) for v, w in runs if name in v and v[name] > 0]
        if len(seen) < 2:
            continue
        if kind == decide.TIME:
            share = _share_of_run([v[name] for v, _ in seen], [w for _, w in seen])
        elif kind == decide.RATE and all(v.get(decide.WORK, 0) > 0 for v, _ in seen):
            share = _share_of_run([v[decide.WORK] / v[name] for v, _ in seen], [w for _, w in seen])
        else:
            share = None
        if share is not None:
            out[name] = round(share, 3)
    return out


def _readings(done: ValidationRun) -> list[tuple[dict[str, float], float]]:
    """Each of start_session's runs' metrics beside the wall time its program's clock spanned (in turns, the other
    side's turns in it): the validation runs, and the shape trial's run alone."""
    runs = [(metricparse.parse_metrics(r.output).values, float(span))
            for r in done.runs if r.ok and (span := r.span_s or r.wall_s)]
    shape = done.shape or {}
    if shape.get("ok") and shape.get("full_s"):
        runs.append((shape.get("full") or {}, float(shape["full_s"])))
    return runs


def metric_kinds(done: ValidationRun, config: SessionConfig) -> dict[str, str]:
    """What each judged metric showed itself to be in start_session's own runs, whatever its name: a time of the
    bench's work where the run at half duty (runner.shape_trial) made it at least FIXED_TIME_RATIO times higher, a
    rate where as much lower; a time too where the runs' values differ (no clock reads the same twice), lower is
    better and each reads as a time of its own run (a program that mostly waits: half duty cannot stretch its
    waits); else steady (a size, a count, a score the program computes). A time or a rate is held to the harness's
    own time of the runs (decide.Spec.timed), so a program that forges its own clock is caught whatever it calls its
    figure; {} where the runs tell nothing."""
    shape = done.shape or {}
    runs = _readings(done)
    if len(runs) < 2:
        return {}
    out: dict[str, str] = {}
    for name in judged_metrics(config):
        seen = [(float(v[name]), float(w)) for v, w in runs if name in v and w]
        if len(seen) < 2 or not all(v > 0 for v, _ in seen):
            continue
        alone, halved = (shape.get("full") or {}).get(name), (shape.get("half") or {}).get(name)
        ratio = float(halved) / float(alone) if shape.get("ok") and alone and halved else 1.0
        lower = (config.guards[name].direction if name in config.guards else config.direction) == "lower"
        values = [v for v, _ in seen]
        out[name] = (decide.TIME if ratio >= FIXED_TIME_RATIO else decide.RATE if ratio <= 1 / FIXED_TIME_RATIO
                     else decide.TIME if lower and len(set(values)) > 1 and _times_its_run(values,
                                                                                            [w for _, w in seen])
                     else decide.STEADY)
    return out


def bench_shape(done: ValidationRun) -> tuple[str | None, list[str]]:
    """What the bench is, from one run alone and one at half duty (runner.shape_trial), as start_session says it,
    with a warning where the harness's outside check cannot confirm its figures."""
    shape = done.shape
    if not shape or not shape.get("ok") or not shape.get("full_s") or not shape.get("half_s"):
        return None, []
    ratio = float(shape["half_s"]) / float(shape["full_s"])
    seen = f"a run at half duty took {ratio:.2f}x as long as one alone"
    if float(shape["full_s"]) < SHAPE_MIN_S:  # it ends within its first turns: being stopped cannot show
        return (f"unclear (a run takes {float(shape['full_s']) * 1e3:.0f} ms, too short to tell fixed work from a "
                "fixed time): its figures are held to the harness's own time of each run", [])
    work = decide.WORK in shape.get("full", {})
    if ratio >= FIXED_WORK_RATIO:
        return (f"fixed work ({seen}): its figures are held to the harness's own CPU and wall time of each run"
                + (f" per unit of the work it prints ({decide.WORK})" if work else ""), [])
    if ratio > FIXED_TIME_RATIO:
        return (f"unclear ({seen}: part fixed work, part fixed time, or a long start): its figures are held to the "
                "harness's own time of each run" + (f" per unit of the work it prints ({decide.WORK})" if work
                                                       else ""), [])
    if work:
        return (f"fixed time ({seen}): its figures are held to the harness's own CPU and wall time per unit of the "
                f"work it prints ({decide.WORK}), a count that is the program's own", [
            f"the bench runs for a fixed time ({seen}) and prints the work it did: each claim is held to the "
            "harness's time per unit of that work, but the count is the program's own, and a candidate that prints "
            "more than it did would pass. Switch it to fixed work (a count of iterations on its command line, Go "
            "-benchtime=<N>x, Google Benchmark --benchmark_min_time=<N>x, pyperf --loops=<N>), where every figure "
            "is held to the harness's own time of the run"])
    return (f"fixed time ({seen}): the harness's own time of a run cannot confirm its figures", [
        f"the bench seems to run for a fixed time ({seen}): it takes as long whatever the code does, so the harness "
        "cannot confirm a claimed rate from outside and will refuse it. Let it print the work it did, "
        f"METRIC {decide.WORK}=<items, iterations or bytes>, or switch it to fixed work (Go -benchtime=<N>x, Google "
        "Benchmark --benchmark_min_time=<N>x, pyperf --loops=<N>, a compressor's iteration count)"])


def validate_benchmark(maker: JobMaker, head: str, executor: Executor) -> Validation:
    """Build `head` once and bench it VALIDATION_RUNS times, in the baseline tree experiments reuse: runner jobs
    of the session's executor (built by the session's `maker`, under the settings tried), on this machine or on a
    worker.

    On this machine, without `threads` in the config, the threads are chosen here (`steadiest_threads`), and
    without `read_only_runs`, which commands see their tree read-only (`choose_read_only`). On a worker, the
    bench does when its runs wrote nothing (the checks are not tried there).
    Raises with the raw output when the benchmark cannot be trusted at all (build or bench failure,
    a primary metric that is missing or not a number); returns warnings for softer problems.
    """
    repo, config = maker.repo, maker.config
    content = gitops.tree_of(repo, head)
    root = Path(config.repo)
    log_path = state_dir(root) / "logs" / "session-validation.log"
    with safefs.open_write(root, log_path, "w"):
        pass  # emptied once: each job appends to it

    def run(at: SessionConfig, trial: bool = False, pair: bool = False) -> ValidationRun:
        where = " on a cloud worker" if config.executor == "sky" else ""
        threads = f" at {at.threads} thread(s)" if at.threads else ""
        how = "in turns" if at.pairing == decide.TURNS else "one after the other"
        progress.report(f"running {CHECKS_SCRIPT} on the session head, then again with its tree read-only" if trial
                        else f"a pair of runs of the head {how}: which pairing is steadier here?" if pair
                        else f"validating the benchmark of {head[:12]}{where}{threads}: build once, bench "
                        f"{VALIDATION_RUNS} times")
        jobs = maker.with_config(at)
        spec = (jobs.checks_trial(head, content) if trial else jobs.validation(head, content, shape_trial=False)
                if pair else jobs.validation(head, content))
        return executor.validate(Job(f"validate-{uuid.uuid4().hex[:10]}", head, head, log_path, spec=spec))

    def measure_at(at: SessionConfig, pair: bool = False) -> Validation:
        done = run(at, pair=pair)
        # what each metric is, known by its runs, not its name (a pair of the pairing trial keeps what is known)
        kinds: dict[str, str] = dict(at.metric_kinds) or ({} if pair else metric_kinds(done, at))
        shares = dict(at.measured_share) or ({} if pair else measured_shares(done, kinds))
        at = at.model_copy(update={"metric_kinds": kinds, "measured_share": shares})
        clock = None
        if at.pairing == decide.TURNS and at.turn_clock is None:  # what its runs in turns keep busy decides
            clock = turn_clock([r.cpu_s / r.wall_s for r in done.runs if r.cpu_s and r.wall_s],
                                      at.threads if at.threads is not None else os.cpu_count() or 1)
            at = at.model_copy(update={"turn_clock": clock})
        validated = Validation(*judge_validation(done, at), writes=done.writes, turn_clock=clock, metric_kinds=kinds,
                               measured_share=shares)
        validated.worker = done.worker
        validated.shape, more = bench_shape(done)
        validated.warnings.extend(more)
        return validated

    def measure(threads: int | None) -> Validation:
        return measure_at(config.model_copy(update={"threads": threads}))

    if config.executor == "sky":
        validated = with_pairing(config, measure(config.threads), measure_at)
        if config.read_only_runs is None and validated.writes is not None:
            validated.read_only = [] if validated.writes else ["bench"]
            if validated.writes:
                validated.warnings.append(bench_writes(validated.writes, config))
        return validated
    if config.threads is not None:
        validated = measure(config.threads)
    else:
        cpus = os.cpu_count() or 1
        busy = busy_cpus()
        start = free_threads(cpus, busy)
        validated = steadiest_threads(measure, start, config)
        if start < cpus:
            validated.warnings.append(
                f"{busy:.1f} of this machine's {cpus} CPUs were busy with other work as the session started, so its "
                f"runs were tried from {start} thread(s), not {cpus}: threads that share their cores with other "
                "work wait for each other at every step and make the runs erratic (set `threads` in "
                f"{config_path(Path(config.repo))} and call start_session again to choose yourself)")
    validated = with_pairing(config, validated, measure_at)
    if config.read_only_runs is None:
        at = config.model_copy(update={"threads": validated.threads or config.threads,
                                       "pairing": validated.pairing or config.pairing})
        validated.read_only, more = choose_read_only(at, validated.writes, lambda: run(at, trial=True))
        validated.warnings.extend(more)
    return validated


# The pairing trial (choose_pairing): rounds of one pair of runs of the head one after the other, then one in turns,
# until PAIRING_ROUNDS rounds or PAIRING_BUDGET_S seconds (a slow bench measures fewer), the first always.
PAIRING_ROUNDS = 3
PAIRING_BUDGET_S = 60.0
# One after the other is chosen where it is steadier beyond what the trial's few pairs explain; else turns, where a
# later neighbour's burst falls on both sides.
PAIRING_CONFIDENCE = 0.8
SPREAD_FLOOR_PCT = 0.25


@dataclass
class PairingChoice:
    """How a session that names no `pairing` pairs its runs, why, and (in turns) the runs that are its baseline."""

    pairing: str
    why: str
    turns: Validation | None = None


def choose_pairing(config: SessionConfig, validated: Validation,
                   measure: Callable[[str], Validation]) -> PairingChoice:
    """How a session that names no `pairing` pairs its runs, and why: one after the other where turns cannot measure
    each side (the sandbox off: a side's processes are not its own), cannot judge a metric (an objective or guard
    printed in no form turns can judge) or would cut the runs into too few turns; elsewhere the steadier of the two
    as measured here: `measure(pairing)` runs one pair of the head's runs so, alternately, and the two runs of a
    pair of the same code should agree (pair_spread); one after the other where it is clearly steadier, else in
    turns.

    A neighbour's burst falls on both sides of a pair in turns, but a bench timing short loops on its own clock is
    cut by the other side's turns; which weighs more depends on the bench and the machine, so it is measured."""
    if config.sandbox == sandbox.OFF:
        return PairingChoice(decide.SEQUENTIAL, "one after the other: with the sandbox off a side's processes are "
                                                "not its own (no PID namespace, no cgroup), so turns could not "
                                                "measure each side alone")
    values = validated.runs[0].parsed if validated.runs else {}
    names = judged_metrics(config)
    kinds = validated.metric_kinds or dict(config.metric_kinds)
    timed = decide.Spec(config.metric, config.direction, 0.0, kinds=kinds).timed
    _, problems = decide.in_turns(values, names, scalable=True, timed=timed)
    if problems:
        return PairingChoice(decide.SEQUENTIAL, "one after the other: " + problems[0].split(":", 1)[0] + "; print "
                             "METRIC <name>.cpu=<the same, on CPU time> (or name it as a time or a rate) and set "
                             f"\"pairing\": \"{decide.TURNS}\" to pair in turns, where a neighbour's burst falls on "
                             "both sides")
    length = sorted(r.duration_s for r in validated.runs)[len(validated.runs) // 2] if validated.runs else 0.0
    if length < SHORT_TURNS_S:
        return PairingChoice(decide.SEQUENTIAL, f"one after the other: a run takes {length * 1e3:.0f} ms, a few "
                             f"turns of about {decide.TURN_MS} ms, which measure it poorly; a run of at least "
                             f"{SHORT_TURNS_S:g} s can pair in turns")
    one_by_one, in_turns = list(validated.runs), []
    turns: Validation | None = None  # its first pair in turns: the baseline, if turns are chosen
    t0 = time.monotonic()
    for i in range(PAIRING_ROUNDS):
        if i and time.monotonic() - t0 > PAIRING_BUDGET_S:
            break
        one_by_one += measure(decide.SEQUENTIAL).runs
        done = measure(decide.TURNS)
        in_turns += done.runs
        turns = turns or done
    seq, tur = pair_spread(one_by_one, names), pair_spread(in_turns, names)
    pairs = f"{len(one_by_one) // 2} and {len(in_turns) // 2} pairs of runs of the head"
    if tur is None or seq is None:
        return PairingChoice(decide.SEQUENTIAL, f"one after the other: the {pairs} gave no spread to compare (a "
                             "metric missing or zero)")
    measured = (f"two runs of the same code differed by {seq[1]:.2g}% ({seq[0]}) one after the other and by "
                f"{tur[1]:.2g}% ({tur[0]}) in turns, over {pairs}")
    # each pair's difference is one degree of freedom of its spread: the F test of clearly_steadier, on pairs; a
    # spread below SPREAD_FLOOR_PCT is as good as none (far below the least effect a session resolves)
    if stats.clearly_steadier(max(seq[1], SPREAD_FLOOR_PCT), len(one_by_one) // 2 + 1, max(tur[1], SPREAD_FLOOR_PCT),
                              len(in_turns) // 2 + 1, PAIRING_CONFIDENCE):
        return PairingChoice(decide.SEQUENTIAL, f"one after the other: measured steadier here ({measured}; a bench "
                             "that times itself on its own clock is cut by the other side's turns). \"pairing\": "
                             f"\"{decide.TURNS}\" in the config pairs in turns")
    steadier = "measured steadier" if tur[1] < seq[1] else "measured as steady, within what these pairs can tell,"
    return PairingChoice(decide.TURNS, f"in turns of about {decide.TURN_MS} ms, the two runs of a pair at once (each "
                         "stopped while the other runs), so a neighbour's burst falls on both sides: "
                         f"{steadier} here ({measured}). \"pairing\": \"{decide.SEQUENTIAL}\" in the config pairs "
                         "one after the other", turns)


def pair_spread(runs: list[BenchRun], names: list[str]) -> tuple[str, float] | None:
    """The judged metric whose two runs of a pair (runs 2i and 2i+1, the same code) differ most, and by how much:
    the root mean square of each pair's difference, % of the pair's mean. None without a pair that has them all."""
    worst: tuple[str, float] | None = None
    for name in names:
        diffs = []
        for a, b in zip(runs[0::2], runs[1::2], strict=False):
            x, y = a.parsed.get(name), b.parsed.get(name)
            if x is not None and y is not None and x + y != 0:
                diffs.append(200.0 * (x - y) / (x + y))
        if not diffs:
            return None
        spread = (sum(d * d for d in diffs) / len(diffs)) ** 0.5
        if worst is None or spread > worst[1]:
            worst = (name, spread)
    return worst


def with_pairing(config: SessionConfig, validated: Validation,
                 measure_at: Callable[..., Validation]) -> Validation:
    """The validation of a session whose config names no `pairing`, with the pairing chosen (choose_pairing); in
    turns, its baseline is the runs in turns, as its experiments' pairs will be."""
    if config.pairing is not None:
        return validated
    at = config.model_copy(update={"threads": validated.threads or config.threads,
                                   "metric_kinds": validated.metric_kinds, "measured_share": validated.measured_share})
    choice = choose_pairing(config, validated,
                            lambda pairing: measure_at(at.model_copy(update={"pairing": pairing}), pair=True))
    again = choice.turns
    if choice.pairing == decide.TURNS and again is not None:
        validated = Validation(again.runs, validated.build_s + again.build_s,
                               [*validated.warnings, *(w for w in again.warnings if w not in validated.warnings)],
                               validated.threads, validated.tried, validated.writes, worker=again.worker,
                               shape=validated.shape or again.shape, turn_clock=again.turn_clock,
                               metric_kinds=validated.metric_kinds, measured_share=validated.measured_share)
    validated.pairing, validated.pairing_note = choice.pairing, choice.why
    return validated


BUSY_WINDOWS, BUSY_WINDOW_S = 4, 0.5  # how start_session looks at the machine's other work before choosing threads


def _cpu_ticks(text: str) -> tuple[float, float, int] | None:
    """(all ticks, idle ticks, CPUs) of /proc/stat's text: idle counts iowait; steal counts as busy (another
    machine's work on the same host)."""
    lines = text.splitlines()
    fields = lines[0].split() if lines else []
    if len(fields) < 5 or fields[0] != "cpu":
        return None
    ticks = [float(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal (guest is in user)
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu") and line[3:4].isdigit())
    return sum(ticks), ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0), max(1, cpus)


def busy_cpus(window_s: float = BUSY_WINDOW_S, windows: int = BUSY_WINDOWS,
              read: Callable[[], str] | None = None) -> float:
    """How many CPUs' worth of other work this machine is doing now: the busy share of /proc/stat's ticks in each
    of `windows` windows of `window_s`, this process's own CPU time left out, at its most (a neighbour that works
    in bursts takes a core whenever it works); 0 where /proc/stat cannot be read."""
    def ticks() -> tuple[float, float, int] | None:
        try:
            if read is not None:
                return _cpu_ticks(read())
            with open("/proc/stat") as fh:
                return _cpu_ticks(fh.read())
        except (OSError, ValueError):
            return None

    most = 0.0
    before, own_before, t0 = ticks(), os.times(), time.monotonic()
    for _ in range(max(1, windows)):
        time.sleep(window_s)
        after, own_after, t1 = ticks(), os.times(), time.monotonic()
        if before is None or after is None or after[0] <= before[0] or t1 <= t0:
            return most
        share = 1.0 - (after[1] - before[1]) / (after[0] - before[0])
        own = (own_after.user + own_after.system - own_before.user - own_before.system) / (t1 - t0)
        most = max(most, min(float(after[2]), share * after[2] - own))
        before, own_before, t0 = after, own_after, t1
    return most


def free_threads(cpus: int, busy: float) -> int:
    """The threads a session's runs start from: one per CPU not taken by other work (a CPU counts as taken from
    half of one busy), at least one."""
    return max(1, cpus - int(busy + 0.5))


def steadiest_threads(measure: Callable[[int], Validation], default: int, config: SessionConfig) -> Validation:
    """Validation runs at `default` threads, then, while a judged metric's noise is over the noise
    limit, at half as many (down to one); the runs of the steadiest count are kept.

    Threads that share a machine with other work spin at every barrier while a neighbour holds their
    core: on a shared 2-vCPU VM, two llama-bench threads gave a baseline-against-itself spread of
    174-190% and one thread 4.5-16%. The count is then fixed for the session (config `threads`).
    """
    names = judged_metrics(config)
    limit = 100.0 * config.noise_limit
    tried: list[tuple[ThreadsTrial, Validation]] = []
    build_s, threads = 0.0, max(1, default)
    while True:
        done = measure(threads)
        build_s += done.build_s
        noise = {n: round(100.0 * (summary.summarize([r.parsed[n] for r in done.runs])["cv"] or 0.0), 2)
                 for n in names}
        tried.append((ThreadsTrial(threads=threads, noise_pct=noise), done))
        progress.report(f"threads {threads}: noise " + ", ".join(f"{n} {v:g}%" for n, v in noise.items()))
        if max(noise.values()) <= limit or threads == 1:
            break
        threads //= 2
    # The fewest threads tried, unless more were steadier beyond what the noise of those few runs explains: two
    # noisy runs a count cannot tell a single-threaded benchmark's 2 threads from 1.
    fewest = tried[-1]
    steadier = [t for t in tried[:-1] if stats.clearly_steadier(
        max(t[0].noise_pct.values()) / 100, len(t[1].runs), max(fewest[0].noise_pct.values()) / 100,
        len(fewest[1].runs))]
    trial, kept = min(steadier, key=lambda t: max(t[0].noise_pct.values())) if steadier else fewest
    warnings = list(kept.warnings)

    def noisiest(t: ThreadsTrial) -> str:
        name = max(t.noise_pct, key=lambda n: t.noise_pct[n])
        return f"{name} {t.noise_pct[name]:.1f}% at {t.threads} thread{'s' if t.threads > 1 else ''}"

    if len(tried) > 1:
        warnings.append(
            f"the benchmark's noise (the runs' coefficient of variation) was over the limit of {limit:g}% with "
            f"{tried[0][0].threads} threads, so fewer were measured ({'; '.join(noisiest(t) for t, _ in tried)}); "
            f"the session measures with {trial.threads} (`threads` in {config_path(Path(config.repo))}: set it "
            "there and call start_session again to choose yourself)")
    if max(trial.noise_pct.values()) > limit:
        warnings.append(f"the steadiest setting is still over the noise limit of {limit:g}% ({noisiest(trial)}): "
                        "expect many pairs or `noisy` verdicts; make one run longer or use a quieter machine")
    return Validation(kept.runs, build_s, warnings, trial.threads, [t for t, _ in tried], kept.writes,
                      shape=kept.shape, turn_clock=kept.turn_clock, metric_kinds=kept.metric_kinds,
                      measured_share=kept.measured_share)


WRITE_TO_TMP = ("write to $TMPDIR instead (a private /tmp for each command), then set read_only_runs to null in "
                "{config} and call start_session again")


def confinement_warnings(setting: str) -> list[str]:
    """What the session's confinement does not promise on this machine, and what it opened up by choice."""
    mode, shares = sandbox.parse_mode(setting)
    if mode == sandbox.OFF:
        return []
    out = [f"{why}: the session does not promise that" for why in sandbox.lacking().values()]
    if sandbox.NETWORK in shares:
        out.append("the network is shared by the session's choice (\"sandbox\": {\"share\": [\"network\"]}): a "
                   "job reaches the machine's network and its local services, and a candidate could leave a "
                   "service slow for the baseline's runs; start the service inside the benchmark where you can")
    if sandbox.CHECKOUT in shares:
        out.append("your checkout is shared by the session's choice (\"sandbox\": {\"share\": [\"checkout\"]}): "
                   "every job sees its files, its git directory and .autoresearch/, so a candidate's code can tell "
                   "the baseline's tree from its own (its content is the session head's) and run slower as the "
                   "baseline; keep it only for a benchmark that reads files git does not track in your "
                   "checkout (a build reads the git directory without it)")
    return out


def bench_writes(writes: list[str], config: SessionConfig) -> str:
    """The warning for a benchmark whose validation runs wrote `writes` into their tree."""
    return (f"the benchmark wrote into its tree ({', '.join(writes)}), so its runs keep a writable tree and a "
            "candidate's program could keep state from one run to the next: "
            + WRITE_TO_TMP.format(config=config_path(Path(config.repo))))


def choose_read_only(config: SessionConfig, writes: list[str] | None,
                     trial: Callable[[], ValidationRun]) -> tuple[list[str], list[str]]:
    """Which commands see their tree read-only once it is built, and warnings for the others.

    The bench does when its validation runs wrote nothing into the tree. The checks run twice on the
    head (`trial`, a checks trial job): as they are (a head whose checks fail is said at once, not after the
    first experiment; what they keep in the baseline's tree for later checks, such as the recipe's reference
    logits, is kept), then with the tree read-only; they do when that run passes too. A read-only tree keeps
    a candidate's program from keeping state from one run to the next (its answers, remembered) or from the
    checks to the pairs.
    """
    chosen: list[str] = []
    warnings: list[str] = []
    fix = WRITE_TO_TMP.format(config=config_path(Path(config.repo)))
    if writes:
        warnings.append(bench_writes(writes, config))
    elif writes is not None:
        chosen.append("bench")
    done = trial()
    checks, again, wrote = done.checks or {}, done.checks_read_only, done.checks_writes or []
    if not checks.get("ran") and checks.get("passed", True):
        return chosen, warnings  # no checks script
    if not checks.get("passed"):
        warnings.append(f"{CHECKS_SCRIPT} fails on the session head itself ({checks.get('note') or 'exit '}"
                        f"{checks.get('exit_code', '')}), so every candidate would fail it; fix the checks. Output "
                        f"tail:\n{checks.get('tail', '')}")
    elif again is not None and not again["passed"]:
        where = f" (it wrote {', '.join(wrote)})" if wrote else ""
        warnings.append(f"{CHECKS_SCRIPT} fails with its tree read-only{where}, so the checks keep a writable tree "
                        f"and could leave state for the pairs that follow them: {fix}")
    else:
        chosen.append("checks")
    return chosen, warnings


def judge_validation(done: ValidationRun, config: SessionConfig) -> tuple[list[BenchRun], float, list[str]]:
    """The validation runs as BenchRuns, or the error that says why the benchmark cannot be trusted."""
    build = done.build
    if build is not None and not build.ok:
        why = (f"timed out after {config.timeouts.build:g} s (its process group was killed)"
               if build.timed_out else f"exited with status {build.exit_code}")
        raise StateError(f"`{BENCH_SCRIPT} build` {why} in {done.where}. Output tail:\n{build.tail(3000)}")
    warnings: list[str] = []
    runs: list[BenchRun] = []
    for i, res in enumerate(done.runs):
        parsed = metricparse.parse_metrics(res.output)
        if config.pairing == decide.TURNS and res.ok:  # judged as experiments judge them: on their CPU time
            share = res.wall_s / res.span_s if res.wall_s and res.span_s else None
            directions: dict[str, str] = {
                name: config.guards[name].direction if name in config.guards else config.direction
                for name in judged_metrics(config)}
            timed = decide.Spec(config.metric, config.direction, 0.0, kinds=dict(config.metric_kinds)).timed
            taken, turn_problems = decide.turn_values(parsed.values, judged_metrics(config), share, directions,
                                                      wall=config.turn_clock == "wall", timed=timed)
            if turn_problems:
                raise StateError(f"run {i}: {turn_problems[0]}. Pairs run in turns (config pairing "
                                 f"{decide.TURNS!r}): print each objective's and guard's CPU-time form, or set "
                                 f"\"pairing\": \"{decide.SEQUENTIAL}\" in {config_path(Path(config.repo))}")
            parsed.values = {n: parsed.values[o] * f for n, (o, f) in taken.items()}
        runs.append(BenchRun(index=i, exit_code=res.exit_code, duration_s=round(res.duration_s, 3),
                             timed_out=res.timed_out, raw_metric_lines=parsed.lines, parsed=parsed.values,
                             problems=parsed.problems))
        if res.timed_out:
            raise StateError(
                f"`{BENCH_SCRIPT} bench` timed out after {config.timeouts.bench:g} s; its whole process "
                f"group was killed. Make one run shorter, or raise timeouts.bench in "
                f"{config_path(Path(config.repo))}. Output tail:\n{res.tail(2000)}")
        if res.exit_code != 0:
            raise StateError(f"`{BENCH_SCRIPT} bench` exited with status {res.exit_code}. "
                             f"Output tail:\n{res.tail(3000)}")
        if config.metric not in parsed.values:
            shown = "\n".join(parsed.lines) or "(no METRIC line at all)"
            extra = ("; problems: " + "; ".join(parsed.problems)) if parsed.problems else ""
            raise StateError(
                f"run {i}: the primary metric {config.metric!r} is missing or not a finite number"
                f"{extra}. A missing metric is an error, never 0. The METRIC lines printed were:\n"
                f"{shown}\nFix autoresearch.sh so it prints `METRIC {config.metric}=<number>`.")
        warnings.extend(f"run {i}: {p}" for p in parsed.problems)
    if len(runs) < VALIDATION_RUNS:
        raise StateError(f"the benchmark ran {len(runs)} of {VALIDATION_RUNS} validation runs on {done.where}; "
                         "see .autoresearch/logs/session-validation.log")
    for name in judged_metrics(config):
        absent = [r.index for r in runs if name not in r.parsed]
        if absent:
            role = "objective" if name in config.objective_metrics() else "guard"
            raise StateError(
                f"the {role} metric {name!r} (from {config_path(Path(config.repo))}) is missing from run(s) {absent}; "
                "the METRIC lines printed were:\n" + "\n".join(ln for r in runs for ln in r.raw_metric_lines)
                + f"\nMake the benchmark print it, or remove it from {role}s")
    names = sorted({n for r in runs for n in r.parsed})
    for name in names:
        missing = [r.index for r in runs if name not in r.parsed]
        if missing:
            warnings.append(f"metric {name!r} is missing in run(s) {missing}: it will make experiments invalid")
    own = sorted(r.wall_s for r in done.runs if r.wall_s)
    if config.pairing == decide.TURNS and own and own[len(own) // 2] < SHORT_TURNS_S:
        warnings.append(
            f"a bench run takes {own[len(own) // 2] * 1e3:.0f} ms of its own turns: a run of a few turns of about "
            f"{decide.TURN_MS} ms is poorly measured in turns (its start and its end weigh as much as its work); "
            f"make one run last at least {SHORT_TURNS_S:g} s (more iterations), or pair one after the other")
    return runs, done.build_s, warnings


def baseline_summary(runs: list[BenchRun]) -> dict[str, MetricSummary]:
    names = sorted({n for r in runs for n in r.parsed})
    return {n: MetricSummary(**summary.summarize([r.parsed[n] for r in runs if n in r.parsed])) for n in names}


def spread_pct(values: list[float]) -> float | None:
    if len(values) < 2 or not all(v > 0 for v in values):
        return None
    return round((max(values) - min(values)) / (sum(values) / len(values)) * 100.0, 3)


def validate_platforms(maker: JobMaker, head: str, executor: Executor) -> list[str]:
    """Build the session head on every extra local platform and run the checks there (a head check job of
    that platform's executor), so a platform where the unchanged code already fails is an error now, not a
    refused winner later. No lines for a session that names no platforms."""
    config = maker.config
    if not config.platforms:
        return []
    content = gitops.tree_of(maker.repo, head)
    root = Path(config.repo)
    lines = [config.all_platforms[0].label + ": validated above"]
    for p in config.all_platforms[1:]:
        if p.executor != "local":
            lines.append(f"{p.label}: checked on its workers once the host has a winner")
            continue
        progress.report(f"platform {p.label}: build and checks")
        log_path = state_dir(root) / "logs" / f"session-validation-{p.name}.log"
        with safefs.open_write(root, log_path, "w"):
            pass
        done = executor.validate(Job(f"check-{p.name}-{uuid.uuid4().hex[:8]}", head, head, log_path,
                                     spec=maker.head_check(head, content, p)))
        lines.append(platforms_.validate_head(p, done, log_path))
    return lines
