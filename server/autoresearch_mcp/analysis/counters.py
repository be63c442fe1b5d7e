"""Hardware counters from `perf stat`: instructions per cycle and cache misses, where perf can count.

Many VMs expose no performance-monitoring unit: perf then runs but reports `<not supported>` for
every hardware event. That is reported plainly, never as zeros; the software counter task-clock
still gives how many CPUs the command kept busy.
"""

from __future__ import annotations

import functools
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from autoresearch_mcp.errors import ExternalError
from autoresearch_mcp.executors.jobs import JobMaker
from autoresearch_mcp.models import CounterReport
from autoresearch_mcp.worker import outcomes, runner
from autoresearch_mcp.worker.procs import CommandResult

EVENTS = ("task-clock", "cycles", "instructions", "cache-references", "cache-misses")
HARDWARE_EVENTS = EVENTS[1:]
PROBE_COMMAND = "true"
PROBE_TIMEOUT_S = 30.0


def parse_perf_csv(text: str) -> dict[str, float | None]:
    """Read `perf stat -x,` output: value, unit, event, ... per line; None for uncounted events.

    Hybrid CPUs print one line per core type (`cpu_core/cycles/`, `cpu_atom/cycles/`): summed.
    """
    counts: dict[str, float | None] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 3:
            continue
        event = fields[2].strip()
        if "/" in event:
            event = event.strip("/").split("/")[-1]
        event = event.split(":")[0]
        try:
            value: float | None = float(fields[0])
        except ValueError:  # <not supported>, <not counted>
            value = None
        previous = counts.get(event)
        counts[event] = value if previous is None else previous + (value or 0.0)
    return counts


def run_counted(commands: list[tuple[list[str], str, float, bool]], machine_lock: str | None) -> list[CommandResult]:
    """Commands of analyze_bounds run on this machine as a counters job (jobs.JobMaker.counters), under the
    machine's turn (`machine_lock`): each (argv, cwd, timeout_s, interrupt) with its result."""
    job = JobMaker.counters(commands).placed(
        experiment_id=f"counters-{uuid.uuid4().hex[:10]}", baseline_dir=None, candidate_dir=None, log_path=None,
        machine_lock=machine_lock or "", scripts={})
    counted = outcomes.read(outcomes.Counters, runner.run(job, sys.stderr))
    failure = counted.failure()
    if failure is not None:
        raise ExternalError(f"the counters job failed ({failure.phase}): {failure.error}")
    return [CommandResult(argv, r["exit_code"], float(r["duration_s"]), bool(r["timed_out"]), str(r["output"]))
            for (argv, *_), r in zip(commands, counted.commands, strict=True)]


def perf_counters(command: str | None, *, cwd: Path | None = None, timeout_s: float = 300.0,
                  machine_lock: str | None = None) -> CounterReport:
    """Count `command` (a shell command) with perf stat, under the machine's turn; without one, only check that
    counting works (checked once per process: the answer does not change while the server runs)."""
    if command is None:
        return _probe(machine_lock).model_copy(deep=True)
    return _count(command, cwd, timeout_s, machine_lock)


@functools.cache
def _probe(machine_lock: str | None) -> CounterReport:
    return _count(None, None, PROBE_TIMEOUT_S, machine_lock)


def _count(command: str | None, cwd: Path | None, timeout_s: float, machine_lock: str | None) -> CounterReport:
    perf = shutil.which("perf")
    if perf is None:
        return CounterReport(available=False, command=command,
                             reason="perf is not installed (Debian/Ubuntu: linux-perf or linux-tools); "
                                    "no cache-miss or instructions-per-cycle figures")
    with tempfile.TemporaryDirectory(prefix="autoresearch-perf-") as tmp:
        out_file = Path(tmp) / "perf.csv"
        argv = [perf, "stat", "-x", ",", "-o", str(out_file), "-e", ",".join(EVENTS), "--",
                "sh", "-c", command or PROBE_COMMAND]
        # At the timeout the group gets SIGINT first, which perf stat answers by stopping the command
        # and writing the counts so far; whatever still runs after the grace period is killed.
        run = run_counted([(argv, str(cwd or Path.cwd()), timeout_s, True)], machine_lock)[0]
        text = out_file.read_text(errors="replace") if out_file.exists() else ""
    counts = parse_perf_csv(text)
    report = CounterReport(available=False, command=command)
    if command is not None:
        report.exit_code, report.elapsed_s = run.exit_code, round(run.duration_s, 4)
        if run.timed_out and counts:
            report.notes.append(f"timed out after {timeout_s:g} s and was stopped; the counts cover that time")
        elif run.exit_code not in (None, 0):
            report.notes.append(f"the command exited with {run.exit_code}: the counts may not describe a "
                                "full run")
        task_clock_ms = counts.get("task-clock")
        if task_clock_ms is not None and run.duration_s > 0:
            report.cpus_utilized = round(task_clock_ms / 1000.0 / run.duration_s, 3)
    if not counts and run.timed_out:
        report.reason = (f"the command timed out after {timeout_s:g} s and perf stat had to be killed before "
                         "it wrote any counts (the command ignored SIGINT): count a shorter run, or raise "
                         "the timeout")
        return report
    if not counts:
        report.reason = f"perf stat could not count here: {run.output.strip()[-400:] or 'no output'}" + (
            " (kernel.perf_event_paranoid may forbid it: see /proc/sys/kernel/perf_event_paranoid)")
        return report
    report.unsupported = [e for e in HARDWARE_EVENTS if counts.get(e) is None]
    if len(report.unsupported) == len(HARDWARE_EVENTS):
        report.reason = ("perf stat runs, but every hardware event (cycles, instructions, cache-references, "
                         "cache-misses) is <not supported>: this machine exposes no hardware performance "
                         "counters (usual in VMs whose hypervisor hides the PMU). Use the roofline "
                         "fractions alone, or run on bare metal for counters.")
        return report
    report.available = True
    report.cycles, report.instructions = counts.get("cycles"), counts.get("instructions")
    report.cache_references, report.cache_misses = counts.get("cache-references"), counts.get("cache-misses")
    if report.cycles and report.instructions is not None:
        report.instructions_per_cycle = round(report.instructions / report.cycles, 3)
    if report.cache_references and report.cache_misses is not None:
        report.cache_miss_rate = round(report.cache_misses / report.cache_references, 4)
    if command is None:
        report.notes.append("counters work here: pass `command` (e.g. one benchmark run) to count it")
    else:
        report.notes.append("IPC below ~1 with a high miss rate points at memory stalls; IPC above ~2 at "
                            "dense compute. `cache-misses` means last-level misses on Intel and differs "
                            "between CPU vendors: compare runs on the same machine, not across machines.")
    return report
