"""Hardware counters from `perf stat`: instructions per cycle and cache misses, where perf can count.

Many VMs expose no performance-monitoring unit: perf then runs but reports `<not supported>` for
every hardware event. That is reported plainly, never as zeros; the software counter task-clock
still gives how many CPUs the command kept busy.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from autoresearch_mcp.models import CounterReport

EVENTS = ("task-clock", "cycles", "instructions", "cache-references", "cache-misses")
HARDWARE_EVENTS = EVENTS[1:]
PROBE_COMMAND = "true"


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


def _run_in_group(argv: list[str], cwd: Path | None, timeout_s: float) -> tuple[int | None, str, float]:
    """Run argv in its own process group; on timeout, kill the whole group. (exit, stderr, seconds)"""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return None, err, time.perf_counter() - started
    return proc.returncode, err, time.perf_counter() - started


def perf_counters(command: str | None, *, cwd: Path | None = None, timeout_s: float = 300.0) -> CounterReport:
    """Count `command` (a shell command) with perf stat; without one, only check that counting works."""
    perf = shutil.which("perf")
    if perf is None:
        return CounterReport(available=False, command=command,
                             reason="perf is not installed (Debian/Ubuntu: linux-perf or linux-tools); "
                                    "no cache-miss or instructions-per-cycle figures")
    with tempfile.TemporaryDirectory(prefix="autoresearch-perf-") as tmp:
        out_file = Path(tmp) / "perf.csv"
        argv = [perf, "stat", "-x", ",", "-o", str(out_file), "-e", ",".join(EVENTS), "--",
                "sh", "-c", command or PROBE_COMMAND]
        exit_code, stderr, elapsed = _run_in_group(argv, cwd, timeout_s)
        text = out_file.read_text(errors="replace") if out_file.exists() else ""
    counts = parse_perf_csv(text)
    report = CounterReport(available=False, command=command)
    if command is not None:
        report.exit_code, report.elapsed_s = exit_code, round(elapsed, 4)
        if exit_code is None:
            report.notes.append(f"the command was killed after {timeout_s:.0f} s; the counts cover that time")
        elif exit_code != 0:
            report.notes.append(f"the command exited with {exit_code}: the counts may not describe a full run")
        task_clock_ms = counts.get("task-clock")
        if task_clock_ms is not None and elapsed > 0:
            report.cpus_utilized = round(task_clock_ms / 1000.0 / elapsed, 3)
    if not counts:
        report.reason = f"perf stat could not count here: {stderr.strip()[-400:] or 'no output'}" + (
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
