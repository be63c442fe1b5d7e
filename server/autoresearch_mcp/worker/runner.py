"""The runner: every job a worker runs, by its kind (an experiment's A/B, a validation, the holdout, a profile...).

This file and its siblings are deliberately standard-library only: the local executor runs it as
`python3 runner.py JOB.json`, the SkyPilot executor ships the very same bytes to a VM, and the package imports
them for single runs (`start_session`). Its last stdout line is one machine-readable result line
(`AUTORESEARCH_RESULT {json}`, channel.py) that `parse_result_line` reads, whatever the executor. The siblings,
one concept each: metricparse (METRIC lines), procs (one command: its process group, cgroup, output and outside
measures), turns (pairs in turns), jobenv (a phase's environment and confinement), machinelock (the machine's
turn), builds (a tree built once per content), channel (the keyed result lines), jobfile (the typed job records),
outcomes (the typed outcome of each kind, what a handler returns), profiler (a profile and the counters under perf).

`main` reads the job file into its record (jobfile.read) and runs the handler its kind names (`HANDLERS`).

The statistics that need scipy (critical values of the sequential design) are computed by the
server and passed in the job; the runner only applies them, so the same decision rule is used
while pairs are being added and when the server recomputes the verdict from the raw samples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import random
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import (
    builds,
    channel,
    decide,
    jobenv,
    jobfile,
    machinelock,
    measuretrees,
    metricparse,
    outcomes,
    procs,
    profiler,
    sandbox,
    turns,
)
from .outcomes import Sample

Run = tuple[procs.CommandResult, metricparse.ParsedMetrics, list[str]]  # one bench run: result, metrics, problems

def host_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"hostname": socket.gethostname(), "cpu_model": cpu, "cpus": os.cpu_count(),
            "platform": platform.platform()}


BENCH = ["bash", "./autoresearch.sh", "bench"]


def _bench(side: jobenv.Prepared, role: str, index: int, position: int, spec: decide.Spec, job: jobfile.Job,
           log: Any) -> Sample:
    """One sample: `processes_per_sample` runs of the bench (each its own process), each metric the median of
    its runs, beside the harness's outside measures of the same runs (HARNESS_WALL, HARNESS_CPU)."""
    k = max(1, int(spec.processes_per_sample))
    runs: list[tuple[procs.CommandResult, metricparse.ParsedMetrics, list[str]]] = []
    for r in range(k):
        log.write(f"[autoresearch] bench {role} run {index}" + (f" (process {r + 1} of {k})" if k > 1 else "") + "\n")
        log.flush()
        side.forget()
        res = side.run(BENCH, job.timeouts["bench"], log)
        parsed = metricparse.parse_metrics(res.output)
        runs.append((res, parsed, _bench_problems(res, parsed, spec, job)))
        if runs[-1][2]:
            break
    return _sample(runs, role, index, position, spec)


def _bench_turns(order: list[tuple[str, jobenv.Prepared]], index: int, spec: decide.Spec, job: jobfile.Job,
                 log: Any) -> list[Sample]:
    """One pair in turns (decide.TURNS): `processes_per_sample` times both sides' bench at once, in turns, the
    first turn the first side's of `order`; each judged metric read from its CPU-time form."""
    k = max(1, int(spec.processes_per_sample))
    runs: dict[str, list[Run]] = {role: [] for role, _ in order}
    for r in range(k):
        log.write(f"[autoresearch] bench pair {index} in turns of {decide.TURN_MS} ms, "
                  f"{' first, then '.join(role for role, _ in order)}"
                  + (f" (processes {r + 1} of {k})" if k > 1 else "") + "\n")
        log.flush()
        results = _turns_again(order, index, job, log)
        for (role, _), res in ((order[j], results[j]) for j in range(len(order))):  # (3.8: no zip strict)
            parsed = metricparse.parse_metrics(res.output)
            problems = _bench_problems(res, parsed, spec, job)
            if not problems:
                share = res.wall_s / res.span_s if res.wall_s and res.span_s else None
                directions = {n: rule.direction for n, rule in spec.rules(list(parsed.values)).items()}
                taken, problems = decide.turn_values(parsed.values, decide.turn_judged(parsed.values, spec), share,
                                                     directions, wall=spec.turn_clock == "wall", timed=spec.timed)
                values = {n: parsed.values[o] * f for n, (o, f) in taken.items()}
                steps = {n: parsed.steps[o] * f for n, (o, f) in taken.items() if o in parsed.steps}
                parsed = metricparse.ParsedMetrics(values, parsed.lines, parsed.problems, steps)
            runs[role].append((res, parsed, problems))
        if any(run[-1][2] for run in runs.values()):
            break
    return [_sample(runs[role], role, index, pos, spec) for pos, (role, _) in enumerate(order)]


# A pair whose stop failed (a side's processes not all stopped in time, once in hundreds of turns of a busy
# multi-threaded program) is run again, the same sides in the same order, up to this many times a round of an
# experiment: a hiccup loses no experiment, and a candidate cannot have more than these few of its runs left out by
# making its stops fail (it fails, as before, once they are spent).
STOP_RETRIES = 3
_stop_retries = {"left": STOP_RETRIES}


def _turns_again(order: list[tuple[str, jobenv.Prepared]], index: int, job: jobfile.Job,
                 log: Any) -> list[procs.CommandResult]:
    """One run of both sides' bench in turns, run again where a stop failed while retries are left."""
    while True:
        jobenv.forget_pages(*dict.fromkeys(side.tree for _, side in order))  # the two trees, each once
        results = turns.run_in_turns([(side, BENCH) for _, side in order], job.timeouts["bench"], log)
        stop_failed = any((r.problem or "").startswith(turns.STOP_FAILED) for r in results)
        if not stop_failed or _stop_retries["left"] <= 0:
            return results
        _stop_retries["left"] -= 1
        log.write(f"[autoresearch] pair {index}: a turn's stop failed, so this run of the pair is left out and run "
                  f"again ({STOP_RETRIES - _stop_retries['left']} of at most {STOP_RETRIES} a round)\n")


def _sample(runs: list[Run], role: str, index: int, position: int,
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
        # in turns, the wall time of each run's own turns only (turns.run_in_turns), and its group's CPU time where the
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


def _bench_problems(res: procs.CommandResult, parsed: metricparse.ParsedMetrics, spec: decide.Spec,
                    job: jobfile.Job) -> list[str]:
    """What makes one bench run unusable: its exit, a metric a verdict needs missing or not positive, or a
    metric in the harness's own names (which only the harness measures)."""
    problems = list(parsed.problems)
    if res.dropped_metric_lines:
        problems.append(f"{res.dropped_metric_lines} METRIC lines beyond the {procs.METRIC_BYTES} bytes kept of a huge "
                        "output were dropped")
    if res.problem is not None:
        problems.append(res.problem)
    elif res.timed_out:
        problems.append(f"bench timed out after {job.timeouts['bench']:g} s")
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


def _build_both(job: jobfile.Experiment | jobfile.Holdout, log: Any, out: outcomes.Measured) -> bool:
    """Build the job's baseline, then its candidate (each reused when built already); False, with the failure
    in `out`, when one fails."""
    t0 = time.monotonic()
    for role, tree, content in (("baseline", job.baseline_dir, job.baseline_tree),
                                ("candidate", job.candidate_dir, job.candidate_tree)):
        assert tree is not None  # placed
        built = builds.build_tree(tree, job.timeouts["build"], log, content, job.machine_lock,
                                  jobenv.run_env(job, tree), sandbox.for_job(job, tree))
        out.build[role] = built.record()
        res = built.command
        if res is not None and not res.ok:
            why = "timed out" if res.timed_out else f"exited with status {res.exit_code}"
            out.status, out.phase = "failed", "build"
            out.error = f"{role} build {why}:\n{res.tail()}"
            out.durations["build"] = time.monotonic() - t0
            return False
    jobenv.settle()  # every page the builds wrote written back, so each run can start with none resident
    out.durations["build"] = round(time.monotonic() - t0, 3)
    return True


def _sides(job: jobfile.Experiment | jobfile.Holdout) -> list[tuple[str, jobenv.Prepared]]:
    """Both sides' bench commands, prepared once for all their runs, each side in a fresh copy of its built tree and
    shown its own copy of the other's (measuretrees: nothing of either tells a side, and nothing a side does to what
    it is shown reaches the other side), the copies' pages written back (each run drops them)."""
    built = {"baseline": str(job.baseline_dir), "candidate": str(job.candidate_dir)}
    made = measuretrees.make(job.experiment_id, built)
    jobenv.settle()
    return [(role, jobenv.Prepared.of(job, made.own[role], "bench", shown=made.view[role]))
            for role in ("baseline", "candidate")]


def run_holdout(job: jobfile.Holdout, log: Any) -> outcomes.Holdout:
    """The hidden holdout's A/B (commit_winner): both trees built (reused from the experiment), then `pairs`
    interleaved pairs of the holdout's command, confined as a bench is, each pair's order a coin of the job's
    `seed`. Only the values of its METRIC lines come back; the server judges them."""
    out = outcomes.Holdout(job.experiment_id, host=host_info())
    if not _build_both(job, log, out):
        return out
    sides = _sides(job)
    rng = random.Random(job.seed)
    _stop_retries["left"] = STOP_RETRIES
    for i in range(job.pairs):
        order = sides[::-1] if rng.random() < 0.5 else sides
        for pos, (role, side) in enumerate(order):
            with machinelock.machine_turn(job.machine_lock):
                side.forget()
                res = side.run(list(job.command), job.timeout_s, log)
            values = metricparse.parse_metrics(res.output).values
            if not res.ok or not values:
                why = "timed out" if res.timed_out else f"exited with status {res.exit_code}"
                out.status, out.phase = "failed", "bench"
                out.error = f"the holdout {why} on the {role} (or printed no METRIC line) in pair {i}"
                return out
            out.samples.append(Sample(i, role, pos, res.exit_code, round(res.duration_s, 4), res.timed_out, values))
    return out


def run_experiment(job: jobfile.Experiment, log: Any) -> outcomes.Experiment:
    out = outcomes.Experiment(job.experiment_id, host=host_info())
    channel.emit("status", status="building")
    if not _build_both(job, log, out):
        return out

    # The checks come first: a candidate that is not correct is never worth its pairs (and is never a winner).
    if job.run_checks:
        channel.emit("status", status="checking")
        t2 = time.monotonic()
        out.checks = run_checks(job, str(job.candidate_dir), log)
        out.durations["checks"] = round(time.monotonic() - t2, 3)
        if not out.checks["passed"]:
            out.status = "checks_failed"
            return out

    plan = decide.Plan.from_dict(job.design)
    spec = decide.Spec.from_dict(job.judging)
    # every pair's order is a coin of its own: the randomization the tests rest on (worker/decide.py)
    rng = random.Random(job.seed)
    _stop_retries["left"] = STOP_RETRIES
    prior: list[dict[str, Any]] = list(job.prior_samples)  # earlier rounds of the same experiment
    first = len({int(s["pair"]) for s in prior})
    stops = sorted(int(n) for n in job.stops)  # where this round judges; the last ends it
    # An unmeasured platform (an emulator: its timings mean nothing) builds and runs the checks only.
    measured = job.measure
    if measured:
        channel.emit("status", status="running")
    lock = job.machine_lock if measured else None
    sides = _sides(job) if measured else []
    t1 = time.monotonic()
    waited = 0.0
    i = first
    while measured and i < stops[-1]:
        t_wait = time.monotonic()
        with machinelock.machine_turn(lock):
            waited += time.monotonic() - t_wait  # lock wait is not bench time
            if i == first:
                for w in range(plan.warmup):
                    if spec.pairing == decide.TURNS:
                        out.warmup.extend(_bench_turns(sides, -1 - w, spec, job, log))
                        continue
                    for role, side in sides:
                        out.warmup.append(_bench(side, role, -1 - w, 0, spec, job, log))
            turn_end = min(stops[-1], i + machinelock.TURN_PAIRS)
            while i < turn_end and out.stop_reason is None:
                order = list(sides)
                if rng.random() < 0.5:
                    order.reverse()
                pair = _bench_turns(order, i, spec, job, log) if spec.pairing == decide.TURNS else None
                for pos, (role, side) in enumerate(order):
                    s = pair[pos] if pair is not None else _bench(side, role, i, pos, spec, job, log)
                    out.samples.append(s)
                    channel.emit("sample", pair=i, role=role, metrics=s.metrics, problems=s.problems)
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
                    channel.emit("look", pairs=i, verdict=decision.verdict)
                    if decision.final or i == stops[-1]:
                        out.stop_reason = decision.verdict
        if out.stop_reason is not None:
            break
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


def run_checks(job: jobfile.Job, tree: str, log: Any) -> dict[str, Any]:
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
    argv, timeout = ["bash", "./" + sandbox.CHECKS_SCRIPT], float(job.timeouts["checks"])
    # In a session whose pairs run in turns the checks are stopped and continued as a bench is (at half duty):
    # a program cannot tell its checks from its bench by being stopped.
    try:
        with machinelock.machine_turn(job.machine_lock, shared=True):
            checks = jobenv.Prepared.of(job, tree, "checks")
            checks.forget()  # no page of an earlier run resident: the checks start as a bench does
            if job.judged_in_turns:
                res = turns.run_in_turns([(checks, argv)], timeout, log, duty=0.5)[0]
            else:
                res = checks.run(argv, timeout, log)
    except OSError as exc:
        return {"ran": False, "passed": False, "note": f"the session's {sandbox.CHECKS_SCRIPT} could not be run "
                f"in {tree} ({type(exc).__name__}: {exc}); the checks failed"}
    return {"ran": True, "passed": res.ok, "exit_code": res.exit_code, "timed_out": res.timed_out,
            "duration_s": round(res.duration_s, 3), "tail": res.tail(1500)}


def open_log(path: str) -> Any:
    """Append to the experiment's log, refusing a symbolic link in its place (O_NOFOLLOW)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    return os.fdopen(fd, "a", encoding="utf-8", errors="replace")


def _on_term(signum: int, _frame: Any) -> None:
    # Cancel: take the running build/bench group down with us, then leave.
    for cgroup in list(turns.running.values()):
        if cgroup is not None:
            cgroup.kill()
    for group in [procs.current_group(), *turns.running]:
        if group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGCONT)
            procs.kill_group(group, grace_s=1.0)
    procs.kill_marked(os.environ.get(procs.JOB_ENV, ""))
    measuretrees.remove_all()
    raise SystemExit(128 + signum)


def start_job(job_file: str) -> jobfile.Job:
    """What a runner does first: read the job and, before any command runs, its secret from stdin; become
    non-dumpable; mark every process it will start."""
    channel._not_dumpable()
    channel.set_secret(sys.stdin.readline().strip())
    sys.stdin.close()
    job = read_job(job_file)
    # unique per run (an experiment id alone may repeat: a retry, another session, another checkout)
    os.environ.setdefault(procs.JOB_ENV, f"{job.experiment_id or 'job'}.{os.getpid()}.{time.time_ns()}")
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    procs.become_subreaper()
    return job


def read_job(job_file: str) -> jobfile.Job:
    """The record of a job file, its paths made absolute where it lies (sandbox.resolve)."""
    data: dict[str, Any] = json.loads(Path(job_file).read_text())
    sandbox.resolve(data, str(Path(job_file).parent))
    return jobfile.read(data)


def refusal(job: jobfile.Job) -> str | None:
    """Why the job's commands cannot run as the session asks (no confinement here), or None."""
    return None if not job.confined or sandbox.mode_of(job) == sandbox.OFF else sandbox.unavailable()


def prebuild(job: jobfile.Job) -> None:
    """Build the baseline tree of a worker's job ahead of the candidate (the compiler cache warms)."""
    tree = job.baseline_dir
    if refusal(job) is None and tree is not None:
        builds.build_tree(tree, float(job.timeouts["build"]), sys.stderr, job.baseline_tree, "machine.lock",
                          jobenv.run_env(job, tree), sandbox.for_job(job, tree))


def run_validation(job: jobfile.Validation, log: Any) -> outcomes.Validation:
    """A validation of the session head (start_session, here or on a worker), and its two trials: build the
    base tree (the build later experiments reuse) and bench it `runs` times (then, for a validation, the bench's
    shape); for a checks trial, the checks as they are and, when they pass, with the tree read-only; for another
    platform's head check, the checks as they are. Raw results, bounded."""
    tree = str(job.baseline_dir)
    confine = sandbox.for_job(job, tree)
    channel.emit("progress", message=f"building {tree} (autoresearch.sh build)")
    built = builds.build_tree(tree, float(job.timeouts["build"]), log, job.baseline_tree, job.machine_lock,
                              jobenv.run_env(job, tree), confine)
    out = outcomes.Validation(job.experiment_id, tree=tree, build_s=built.duration_s,
                              sandbox=sandbox.describe(confine.off, confine.share))
    cmd = built.command
    if cmd is not None:
        out.build = {"exit_code": cmd.exit_code, "duration_s": cmd.duration_s, "timed_out": cmd.timed_out,
                     "output": cmd.output[-20000:]}
    if cmd is not None and not cmd.ok:
        channel.emit("progress", message=f"the build failed after {built.duration_s:.1f} s")
        return out
    channel.emit("progress", message=f"built in {built.duration_s:.1f} s" if cmd is not None else "build reused")
    jobenv.settle()
    bench = jobenv.Prepared.of(job, tree, "bench")
    before = tree_state(tree)
    out.runs = validation_runs(job, bench, log)
    if job.shape_trial and len(out.runs) == job.runs and all(r["exit_code"] == 0 for r in out.runs):
        out.shape = shape_trial(bench, float(job.timeouts["bench"]), job.machine_lock, log)
    out.writes = tree_changes(before, tree_state(tree))
    if job.kind in (jobfile.CHECKS_TRIAL, jobfile.HEAD_CHECK):
        before = tree_state(tree)
        checks = out.checks = run_checks(job, tree, log)
        out.checks_writes = tree_changes(before, tree_state(tree))
        if job.kind == jobfile.CHECKS_TRIAL and checks["ran"] and checks["passed"]:
            read_only = dataclasses.replace(job, sandbox={**job.sandbox, "read_only": ["checks"]})
            out.checks_read_only = run_checks(read_only, tree, log)
    return out


def validation_runs(job: jobfile.Validation, bench: jobenv.Prepared, log: Any) -> list[dict[str, Any]]:
    """The validation's `runs` bench runs, until one fails or misses the metric. In turns, two runs at a time in
    turns, as an experiment's pairs run: a run's CPU time depends on it (each turn starts with caches the other
    filled), and the baseline's drift is judged against these runs."""
    threads = bench.env["AUTORESEARCH_THREADS"]
    if job.runs:
        log.write(f"[autoresearch] {job.runs} runs, AUTORESEARCH_THREADS={threads}\n")
    at_once = 2 if job.judged_in_turns else 1
    runs: list[dict[str, Any]] = []
    while len(runs) < job.runs:
        i, k = len(runs), min(at_once, job.runs - len(runs))
        channel.emit("progress", message=f"bench run {i + 1}{f'-{i + k}' if k > 1 else ''} of {job.runs} at "
                                 f"{threads} thread(s)" + (" in turns" if k > 1 else ""))
        timeout = float(job.timeouts["bench"])
        with machinelock.machine_turn(job.machine_lock):
            bench.forget()
            results = (turns.run_in_turns([(bench, BENCH)] * k, timeout, log) if k > 1
                       else [bench.run(BENCH, timeout, log)])
        runs.extend({"exit_code": res.exit_code, "duration_s": res.duration_s, "timed_out": res.timed_out,
                     "output": metricparse.kept_output(res.output), "wall_s": res.wall_s, "span_s": res.span_s,
                     "cpu_s": res.cpu_s}
                    for res in results)
        if any(not res.ok or job.metric not in metricparse.parse_metrics(res.output).values for res in results):
            break
    return runs


def shape_trial(bench: jobenv.Prepared, timeout_s: float, lock: str | None, log: Any) -> dict[str, Any]:
    """One bench run alone, then one stopped half of the time (half duty): a bench that does fixed work takes
    about twice as long at half duty, one that runs for a fixed time about as long. Each run's wall time and
    metrics."""
    channel.emit("progress", message="one bench run alone and one at half duty: does the bench do fixed work?")
    with machinelock.machine_turn(lock):
        bench.forget()
        full = bench.run(BENCH, timeout_s, log)
        bench.forget()
        half = turns.run_in_turns([(bench, BENCH)], timeout_s, log, duty=0.5)[0]
    return {"ok": full.ok and half.ok, "full_s": full.wall_s, "half_s": half.span_s,
            "full": metricparse.parse_metrics(full.output).values,
            "half": metricparse.parse_metrics(half.output).values}


# What the runner does with each kind of job: a new kind is a record (jobfile), its outcome's (outcomes), a builder
# (jobs.JobMaker) and a line here. Each handler returns the job's outcome (the runner's result line).
HANDLERS: dict[str, Callable[[Any, Any], outcomes.Outcome]] = {
    jobfile.EXPERIMENT: run_experiment,
    jobfile.HOLDOUT: run_holdout,
    jobfile.VALIDATION: run_validation,
    jobfile.CHECKS_TRIAL: run_validation,
    jobfile.HEAD_CHECK: run_validation,
    jobfile.PROFILE: profiler.run_profile,
    jobfile.COUNTERS: profiler.run_counters,
}


def run(job: jobfile.Job, log: Any) -> dict[str, Any]:
    """The job's result, whatever happens: its handler's outcome, or the failure that kept it from one."""
    refused = refusal(job)
    if refused is None and job.confined and sandbox.mode_of(job) != sandbox.OFF:
        log.write(f"[autoresearch] how this machine measures each command: {sandbox.side_measure()}\n")
    try:
        result = (outcomes.Failure("sandbox", refused).outcome(job.experiment_id) if refused
                  else HANDLERS[job.kind](job, log))
    except Exception as exc:  # the result line must be printed whatever happened
        result = outcomes.Failure("runner", f"{type(exc).__name__}: {exc}").outcome(job.experiment_id)
    if result.sandbox is None:  # how its commands ran: confined (bubblewrap), or off by the user's choice
        result.sandbox = sandbox.describe(sandbox.mode_of(job) == sandbox.OFF, sandbox.shares_of(job))
    return result.to_dict()


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python -m autoresearch_mcp.worker JOB.json [--prebuild]", file=sys.stderr)
        return 2
    if argv[2:] == ["--prebuild"]:
        prebuild(read_job(argv[1]))
        return 0
    try:
        job = start_job(argv[1])
    except (OSError, ValueError) as exc:  # a job this runner cannot read: said in its result line
        print(channel.machine_line(channel.RESULT_PREFIX, outcomes.Failure("runner", str(exc)).outcome("?").to_dict(),
                                   compact=True), flush=True)
        return 0
    with open_log(job.log_path) if job.log_path else contextlib.nullcontext(sys.stderr) as log:
        try:
            result = run(job, log)
        finally:
            measuretrees.remove_all()
    print(channel.machine_line(channel.RESULT_PREFIX, result, compact=True), flush=True)
    return 0
