"""The runner's perf jobs: a profile (one benchmark run under `perf record`, read back as hot functions and their
hottest source lines) and the counters of analyze_bounds (commands run under the machine's turn).

Standard library only, like the runner beside it, and for the same reason: the runner runs a profile job as it
runs any other (`runner.HANDLERS`), locally and on a worker, where the build, its sources and the raw perf.data
stay; only the parsed functions and a bounded part of the report come back, in the runner's result line. So both
executors read a profile with one parser.

`perf report --sort dso,sym,srcline` gives samples per source line; summed per function they give
the function's self time. Source lines need debug info (-g); without it the functions are still right.
"""

from __future__ import annotations

import dataclasses
import glob
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from . import builds, jobenv, jobfile, machinelock, outcomes, procs, sandbox

FREQUENCY_HZ = 999
SEPARATOR = "\x1f"
REPORT_TIMEOUT_S = 600.0
VERSION_TIMEOUT_S = 30.0
INTERRUPT_GRACE_S = 5.0
SAVED_FUNCTIONS = 50  # as many as the tool shows at most; find_passes reads the first 15
SAVED_LINES = 20
REPORT_ROWS = 2000  # rows of the perf report a worker sends back (the top of it: sorted by samples)
REPORT_CHARS = 256_000
CODE_CHARS = 160
TAIL_CHARS = 800
COUNTED_CHARS = 64_000  # of each counted command's output (the probe's result line is its last)
SRCLINE = re.compile(r"^(?P<file>.+):(?P<line>\d+)(?: \(discriminator \d+\))?$")
PERMISSION_HINT = re.compile(r"perf_event_paranoid|Permission denied|No permission|not permitted", re.I)


def find_perf() -> tuple[str | None, str]:
    """A perf that runs here, or None and what was found instead.

    Ubuntu's /usr/bin/perf (linux-tools-common) is a wrapper that fails unless the tools of the
    running kernel are installed (linux-tools-$(uname -r)); any installed /usr/lib/linux-tools/*/perf
    then still works (perf reads older and newer kernels' events), which is what a container gets.
    """
    seen = []
    found = shutil.which("perf")
    kernel_tools = sorted(glob.glob("/usr/lib/linux-tools/*/perf"), reverse=True)
    for perf in ([found] if found else []) + kernel_tools:
        try:
            proc = subprocess.run([perf, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            seen.append(f"{perf}: {exc}")
            continue
        if proc.returncode == 0:
            return perf, proc.stdout.strip()
        seen.append(f"{perf} --version exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[:TAIL_CHARS]}")
    return None, "; ".join(seen) or "no perf on PATH"


def paranoid() -> str:
    try:
        return Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    except OSError:
        return "unknown"


def parse_report(text: str) -> tuple[str, dict[tuple[str, str], dict[str, Any]]]:
    """The sampled event and, per (dso, symbol), its samples and samples per (file, line).

    Reads `perf report --stdio --no-children -t <SEP> -F overhead,sample,dso,sym,srcline` (or without srcline:
    the functions alone).
    """
    event = re.search(r"of event '([^']+)'", text)
    functions: dict[tuple[str, str], dict[str, Any]] = {}
    for line in text.splitlines():
        if line.startswith("#") or SEPARATOR not in line:
            continue
        fields = [f.strip() for f in line.split(SEPARATOR)] + [""]
        if len(fields) < 5:
            continue
        try:
            samples = int(fields[1])
        except ValueError:
            continue
        dso, sym, srcline = fields[2], re.sub(r"^\[[.kgu]\]\s*", "", fields[3]), fields[4]
        fn = functions.setdefault((dso, sym), {"name": sym, "dso": dso, "samples": 0, "lines": {}})
        fn["samples"] += samples
        m = SRCLINE.match(srcline)
        if m and int(m.group("line")) > 0 and not m.group("file").startswith("??"):
            key = (m.group("file"), int(m.group("line")))
            fn["lines"][key] = fn["lines"].get(key, 0) + samples
    return (event.group(1) if event else "unknown"), functions


def in_tree(path: Path, tree: Path) -> Path | None:
    """The path of a source file relative to the build tree, or None for a file outside it.

    Debug info can name another directory than the tree: with a shared compiler cache an object
    compiled in another worktree keeps that worktree's path. The longest tail of the path that
    exists in the tree is then the file.
    """
    try:
        return path.relative_to(tree)
    except ValueError:
        pass
    parts = path.parts
    for i in range(1, len(parts)):
        tail = Path(*parts[i:])
        if (tree / tail).is_file():
            return tail
    return None


def summarize(report: str, tree: Path) -> dict[str, Any]:
    """The event, the total samples and the hottest functions (as models.HotFunction reads them):
    files relative to the tree when inside it, each hot line with its code read in the tree."""
    event, functions = parse_report(report)
    total = sum(f["samples"] for f in functions.values())
    ranked = sorted(functions.values(), key=lambda f: -f["samples"])[:SAVED_FUNCTIONS]
    hot = []
    for fn in ranked:
        lines = []
        for (file, line), samples in sorted(fn["lines"].items(), key=lambda kv: -kv[1])[:SAVED_LINES]:
            rel = in_tree(Path(file), tree)
            lines.append({"file": str(rel) if rel is not None else file, "line": line, "samples": samples,
                          "share_pct": _pct(samples, total),
                          "code": _source_line(tree / rel if rel is not None else Path(file), line)})
        hot.append({"name": fn["name"], "dso": fn["dso"], "samples": fn["samples"],
                    "share_pct": _pct(fn["samples"], total), "lines": lines})
    return {"event": event, "total_samples": total, "functions": hot}


def _pct(samples: int, total: int) -> float:
    return round(100.0 * samples / total, 2) if total else 0.0


def _source_line(path: Path, line: int) -> str:
    try:
        with open(path, errors="replace") as fh:
            for i, text in enumerate(fh, start=1):
                if i == line:
                    return text.strip()[:CODE_CHARS]
    except OSError:
        pass
    return ""


def profile(perf: str, tree: Path, data: Path, bench_timeout_s: float, env: dict[str, str], log: Any,
            machine_lock: str | None, confine: sandbox.Confinement, frequency_hz: int = FREQUENCY_HZ,
            functions_only: bool = False) -> dict[str, Any]:
    """Run the built tree's benchmark once under perf record and read the report back.

    perf runs outside the confinement (it writes perf.data where the job cannot) and follows the
    benchmark into it.

    The benchmark holds the machine lock exclusively, as a measured run does: a profile never
    overlaps a measurement, nor is disturbed by one. The result says what went wrong (`problem`)
    rather than raising, so a worker can send it back in its result line.
    """
    data.parent.mkdir(parents=True, exist_ok=True)
    with machinelock.machine_turn(machine_lock):  # the machine's turn, as a bench's: a waiting experiment alternates
        rec = procs.run_command(
            ["bash", "./autoresearch.sh", "bench"], tree, bench_timeout_s, env=env, log=log,
            stop_signal=signal.SIGINT, grace_s=INTERRUPT_GRACE_S, confine=confine,
            outside=[perf, "record", "--no-buildid-cache", "-F", str(frequency_hz), "-o", str(data), "--"])
    out: dict[str, Any] = {"status": "failed", "problem": None, "paranoid": paranoid(),
                           "bench": {"exit_code": rec.exit_code, "timed_out": rec.timed_out,
                                     "duration_s": round(rec.duration_s, 3)}}
    if not data.exists() or data.stat().st_size == 0:
        return {**out, "problem": "record", "detail": rec.output.strip()[-TAIL_CHARS:] or "no output",
                "refused": bool(PERMISSION_HINT.search(rec.output))}
    if not rec.timed_out and rec.exit_code != 0:  # perf record exits with the benchmark's status
        return {**out, "problem": "bench", "detail": rec.output.strip()[-TAIL_CHARS:] or "no output"}
    fields = "overhead,sample,dso,sym" + ("" if functions_only else ",srcline")  # a line each function, or each line
    report = procs.run_command(
        [perf, "report", "-i", str(data), "--stdio", "--no-children", "--full-source-path", "-t", SEPARATOR,
         "-F", fields], tree, REPORT_TIMEOUT_S)
    summary = summarize(report.output, tree)
    if summary["total_samples"] == 0:
        return {**out, "problem": "no_samples", "detail": rec.output.strip()[-TAIL_CHARS:] or "no output",
                "refused": bool(PERMISSION_HINT.search(rec.output))}
    return {**out, **summary, "status": "done", "report": report.output}


def bounded(result: dict[str, Any], rows: int = REPORT_ROWS, chars: int = REPORT_CHARS) -> dict[str, Any]:
    """The result with the hottest rows of its report (perf sorts them), at most `rows` and `chars`."""
    kept, size, dropped = [], 0, 0
    for line in str(result.get("report") or "").splitlines(keepends=True):
        if not line.startswith("#"):
            if dropped or rows <= 0 or size + len(line) > chars:
                dropped += 1
                continue
            rows -= 1
        size += len(line)
        kept.append(line)
    return {**result, "report": "".join(kept), "report_rows_dropped": dropped}


def run_profile(job: jobfile.Profile, log: Any) -> outcomes.Profile:
    """A profile job: build the profiled tree (the candidate's where the job has one; a build of the same content
    is reused), its own baseline, and profile it."""
    perf, seen = find_perf()
    if perf is None:
        return outcomes.Profile(job.experiment_id, status="failed", problem="no_perf", detail=seen)
    tree = Path(str(job.candidate_dir or job.baseline_dir)).resolve()
    job = dataclasses.replace(job, baseline_dir=str(tree), candidate_dir=None)  # a profiled tree is its own baseline
    env = jobenv.run_env(job, tree)
    built = builds.build_tree(str(tree), float(job.timeouts["build"]), log, job.profiled_content,
                              machine_lock=job.machine_lock, env=env, confine=sandbox.for_job(job, str(tree)))
    if built.command is not None and not built.command.ok:
        return outcomes.Profile(job.experiment_id, status="failed", problem="build", detail=built.command.tail(2000))
    data = Path(job.data).expanduser().resolve()
    result = profile(perf, tree, data, float(job.timeouts["bench"]), env, log, job.machine_lock,
                     sandbox.for_job(job, str(tree), "bench"), job.frequency_hz, job.functions_only)
    return outcomes.Profile(job.experiment_id, **bounded({**result, "perf": seen, "perf_data": str(data)}))


def run_counters(job: jobfile.Counters, log: Any) -> outcomes.Counters:
    """A counters job (analyze_bounds): its commands one after the other, outside any confinement, under the
    machine's turn as a bench is, so neither perf stat's command nor the peak probe loads the CPU during another
    experiment's pairs. At its timeout a command marked `interrupt` gets SIGINT first (perf stat then stops its
    command and writes the counts so far). Each command's exit, time and the tail of its output."""
    results = []
    with machinelock.machine_turn(job.machine_lock):
        for command in job.commands:
            res = procs.run_command(list(command["argv"]), str(command["cwd"]), float(command["timeout_s"]),
                                    stop_signal=signal.SIGINT if command.get("interrupt") else signal.SIGTERM,
                                    grace_s=INTERRUPT_GRACE_S)
            results.append({"exit_code": res.exit_code, "duration_s": res.duration_s, "timed_out": res.timed_out,
                            "output": res.output[-COUNTED_CHARS:]})
    return outcomes.Counters(job.experiment_id, commands=results)
