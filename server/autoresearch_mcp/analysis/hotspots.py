"""Where the time goes: one benchmark run under `perf record`, read back as hot functions and lines.

The run uses the session's own build (the baseline at the session head, or an experiment's
candidate) in the worktree the experiments share, under the machine lock a benchmark holds, so a
profile never overlaps a measurement. `perf report --sort dso,sym,srcline` gives samples per source
line; summed per function they give the function's self time. Source lines need debug info (-g);
without it the functions are still right and the result says how to get lines.

The profile is saved under .autoresearch/profiles/ so find_passes can rank its findings by it.
"""

from __future__ import annotations

import re
import shutil
import signal
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_mcp import safefs
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.executors.local import LocalExecutor
from autoresearch_mcp.experiments import platforms, runner, snapshot
from autoresearch_mcp.models import HotFunction, HotLine, ProfileResult
from autoresearch_mcp.session import BENCH_SCRIPT, state_dir
from autoresearch_mcp.state import Session

FREQUENCY_HZ = 999
SEPARATOR = "\x1f"
REPORT_TIMEOUT_S = 600.0
INTERRUPT_GRACE_S = 5.0
SAVED_FUNCTIONS = 200
FEW_SAMPLES = 1000
MAX_KEPT_SOURCES = 50
MAX_KEPT_BYTES = 8 * 2**20
CODE_CHARS = 160
SRCLINE = re.compile(r"^(?P<file>.+):(?P<line>\d+)(?: \(discriminator \d+\))?$")
PERMISSION_HINT = re.compile(r"perf_event_paranoid|Permission denied|No permission|not permitted", re.I)


def profiles_dir(repo_root: Path) -> Path:
    return state_dir(repo_root) / "profiles"


def sources_dir(repo_root: Path, profile_id: str) -> Path:
    """The profiled build's copies of the source files its hot lines are in (line numbers match them)."""
    return profiles_dir(repo_root) / f"{profile_id}.src"


@dataclass
class _Function:
    name: str
    dso: str
    samples: int = 0
    lines: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))


def parse_report(text: str) -> tuple[str, dict[tuple[str, str], _Function]]:
    """The sampled event and, per (dso, symbol), its samples and samples per source line.

    Reads `perf report --stdio --no-children -t <SEP> -F overhead,sample,dso,sym,srcline`.
    """
    event = re.search(r"of event '([^']+)'", text)
    functions: dict[tuple[str, str], _Function] = {}
    for line in text.splitlines():
        if line.startswith("#") or SEPARATOR not in line:
            continue
        fields = [f.strip() for f in line.split(SEPARATOR)]
        if len(fields) < 5:
            continue
        try:
            samples = int(fields[1])
        except ValueError:
            continue
        dso, sym, srcline = fields[2], re.sub(r"^\[[.kgu]\]\s*", "", fields[3]), fields[4]
        fn = functions.setdefault((dso, sym), _Function(sym, dso))
        fn.samples += samples
        m = SRCLINE.match(srcline)
        if m and int(m.group("line")) > 0 and not m.group("file").startswith("??"):
            fn.lines[(m.group("file"), int(m.group("line")))] += samples
    return (event.group(1) if event else "unknown"), functions


def profile_hotspots(session: Session, experiment_id: str | None, top: int, lines: int) -> ProfileResult:
    """Run the benchmark once under perf record in the build of the session head or of a candidate."""
    executor = session.manager.executor
    if isinstance(executor, platforms.Fleet):  # other platforms: profile on the measured host
        executor = executor.host
    if not isinstance(executor, LocalExecutor):
        raise StateError(
            "profile_hotspots runs the benchmark on this machine, but this session runs experiments on "
            f"{executor.name} workers, where it cannot profile yet. Resume the session locally to profile: "
            f"start_session(repo, metric, direction, executor='local', tag='{session.config.tag}'), then switch "
            "back with executor='sky'")
    perf = shutil.which("perf")
    if perf is None:
        raise StateError("perf is not installed: install it (Debian: apt-get install linux-perf; Ubuntu: "
                         "apt-get install linux-tools-$(uname -r)) and call profile_hotspots again")
    repo, config = session.repo, session.config
    if experiment_id is None:
        build, commit, role = "baseline", snapshot.head_commit(repo, config.branch), "baseline"
    else:
        build, commit, role = experiment_id, session.manager.fetch(experiment_id, 0).candidate_commit, "candidate"
    root = Path(repo.working_dir)
    profile_id = uuid.uuid4().hex[:10]
    out_dir = profiles_dir(root)
    safefs.ensure_dir(root, out_dir)  # the server's files are never written through a link
    data = out_dir / f"{profile_id}.perf.data"
    worktrees = executor.worktrees
    env = platforms.job_env(config.all_platforms[0])
    tree = worktrees.acquire(commit)
    try:
        with safefs.open_write(root, state_dir(root) / "logs" / f"profile-{profile_id}.log", "w") as log:
            built = runner.build_tree(str(tree), config.timeouts.build, log, snapshot.tree_of(repo, commit),
                                      machine_lock=str(worktrees.machine_lock()), env=env)
            if built.command is not None and not built.command.ok:
                raise StateError(f"`{BENCH_SCRIPT} build` of {build} failed in {tree}:\n{built.command.tail(2000)}")
            # The benchmark lock: a profile must not overlap a measurement, nor be disturbed by one.
            with runner.file_lock(str(worktrees.machine_lock())):
                rec = runner.run_command(
                    [perf, "record", "--no-buildid-cache", "-F", str(FREQUENCY_HZ), "-o", str(data), "--", "bash",
                     f"./{BENCH_SCRIPT}",
                     "bench"], tree, config.timeouts.bench, env=runner.bench_env(role, 0, config.threads, env),
                    log=log, stop_signal=signal.SIGINT, grace_s=INTERRUPT_GRACE_S)
        if not data.exists() or data.stat().st_size == 0:
            raise StateError(_record_failure(rec.output))
        report = runner.run_command(
            [perf, "report", "-i", str(data), "--stdio", "--no-children", "--full-source-path", "-t", SEPARATOR,
             "-F", "overhead,sample,dso,sym,srcline"], tree, REPORT_TIMEOUT_S)
        event, functions = parse_report(report.output)
        total = sum(f.samples for f in functions.values())
        if total == 0:
            raise StateError(f"perf recorded no samples: the benchmark ran for {rec.duration_s:.2f} s; "
                             f"{_record_failure(rec.output)}")
        ranked = sorted(functions.values(), key=lambda f: -f.samples)[:SAVED_FUNCTIONS]
        hot = [_hot_function(f, total, tree, root) for f in ranked]
        _keep_sources(hot, tree, root, sources_dir(root, profile_id))
        report_path = out_dir / f"{profile_id}.txt"
        safefs.write_text(root, report_path, report.output)
    finally:
        worktrees.release(tree)
    notes = _notes(hot, event, rec, total)
    saved = ProfileResult(profile_id=profile_id, build=build, commit=commit, event=event, total_samples=total,
                          functions=hot, report_path=str(report_path), perf_data_path=str(data),
                          bench_exit_code=rec.exit_code, notes=notes)
    safefs.write_text(root, out_dir / f"{profile_id}.json", saved.model_dump_json())
    shown = [f.model_copy(update={"lines": f.lines[:lines]}) for f in hot[:top]]
    return saved.model_copy(update={"functions": shown})


def _keep_sources(hot: list[HotFunction], tree: Path, root: Path, dest: Path) -> None:
    """Copy the files of the hot lines out of the build tree, which may be reused or removed later."""
    files = list(dict.fromkeys(line.file for f in hot for line in f.lines))[:MAX_KEPT_SOURCES]
    for rel in files:
        source = tree / rel
        if not Path(rel).is_absolute() and source.is_file() and source.stat().st_size <= MAX_KEPT_BYTES:
            safefs.write_bytes(root, dest / rel, source.read_bytes())


def load_profile(session: Session, profile_id: str) -> ProfileResult:
    """A profile saved by profile_hotspots in this session's repository."""
    repo_root = Path(session.repo.working_dir)
    path = profiles_dir(repo_root) / f"{profile_id}.json"
    if not re.fullmatch(r"[0-9a-f]{10}", profile_id) or not path.exists():
        known = sorted(p.stem for p in profiles_dir(repo_root).glob("*.json"))[-5:] \
            if profiles_dir(repo_root).exists() else []
        raise InputError(f"no profile {profile_id!r} in this session (saved: {', '.join(known) or 'none'}): "
                         "run profile_hotspots first and pass its profile_id")
    return ProfileResult.model_validate_json(path.read_text())


def _hot_function(fn: _Function, total: int, tree: Path, root: Path) -> HotFunction:
    ranked = sorted(fn.lines.items(), key=lambda kv: -kv[1])[:20]
    hot_lines = []
    for (file, line), samples in ranked:
        rel = _in_tree(Path(file), tree)
        hot_lines.append(HotLine(file=str(rel) if rel is not None else file, line=line, samples=samples,
                                 share_pct=_pct(samples, total),
                                 code=_source_line(tree / rel if rel is not None else Path(file), line)))
    return HotFunction(name=fn.name, dso=fn.dso, samples=fn.samples, share_pct=_pct(fn.samples, total),
                       lines=hot_lines)


def _in_tree(path: Path, tree: Path) -> Path | None:
    """The path of a source file relative to the build tree, or None for a file outside it.

    Debug info can name another directory than the tree: with a shared compiler cache an object
    compiled in another worktree keeps that worktree's path. The longest tail of the path that
    exists in the tree is then the file.
    """
    if path.is_relative_to(tree):
        return path.relative_to(tree)
    parts = path.parts
    for i in range(1, len(parts)):
        tail = Path(*parts[i:])
        if (tree / tail).is_file():
            return tail
    return None


def _pct(samples: int, total: int) -> float:
    return round(100.0 * samples / total, 2)


def _source_line(path: Path, line: int) -> str:
    try:
        with open(path, errors="replace") as fh:
            for i, text in enumerate(fh, start=1):
                if i == line:
                    return text.strip()[:CODE_CHARS]
    except OSError:
        pass
    return ""


def _record_failure(output: str) -> str:
    tail = output.strip()[-800:] or "no output"
    if PERMISSION_HINT.search(output):
        paranoid = _paranoid()
        return (f"perf may not record here (kernel.perf_event_paranoid is {paranoid}). Run the server as root, "
                "or lower it: sudo sysctl -w kernel.perf_event_paranoid=1 (persist it in /etc/sysctl.d/); in a "
                f"container, allow perf_event_open (CAP_PERFMON or a seccomp profile that permits it). perf said: "
                f"{tail}")
    return f"perf record wrote no data. Its output: {tail}"


def _paranoid() -> str:
    try:
        return Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    except OSError:
        return "unknown"


def _notes(hot: list[HotFunction], event: str, rec: runner.CommandResult, total: int) -> list[str]:
    notes = []
    if total < FEW_SAMPLES:
        notes.append(f"only {total} samples ({FREQUENCY_HZ} a second of CPU time): shares below a few percent "
                     "are noise; profile a longer run (e.g. more iterations in the benchmark) for finer detail")
    if rec.timed_out:
        notes.append("the benchmark timed out and was stopped; the profile covers the time until then")
    elif rec.exit_code not in (0, None):
        notes.append(f"the benchmark exited with {rec.exit_code}: the profile may not describe a full run")
    if hot and not any(f.lines for f in hot[:5]):
        notes.append("no source lines: the build has no debug info. -g belongs in the compiler flags of "
                     f"{BENCH_SCRIPT} build (CMake: -DCMAKE_BUILD_TYPE=RelWithDebInfo; keeps -O2), a change to the "
                     "benchmark that only the person makes: ask them to commit it on the session branch (the "
                     "plugin's hook refuses your commits there), then profile again")
    if event.startswith("cpu-clock"):
        notes.append("sampled with the cpu-clock timer (this machine exposes no hardware cycle counter): shares "
                     "are of time on CPU, which is what matters here")
    notes.append("next: find_passes(profile_id=...) looks for extra passes over the same buffer in these "
                 "functions")
    return notes
