"""Where the time goes: one benchmark run under `perf record`, read back as hot functions and lines.

The run uses the session's own build (the baseline at the session head, or an experiment's
candidate). On this machine it runs in the worktree the experiments share, under the machine lock a
benchmark holds; on SkyPilot workers it is one more job of the worker pool, alone on its worker like
every job, so a profile never overlaps a measurement. Both run worker/profiler.py, so both read
the report with the same code; a worker keeps the raw perf.data and sends back the parsed functions
and the top of the report. Source lines need debug info (-g); without it the functions are still
right and the result says how to get lines.

The profile is saved under .autoresearch/profiles/, with the hot source files as the profiled commit
has them, so find_passes can rank its findings by it.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoresearch_mcp import progress, safefs
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.executors import profiles
from autoresearch_mcp.git import gitops
from autoresearch_mcp.models import HotFunction, ProfileResult
from autoresearch_mcp.session import Session
from autoresearch_mcp.store.config import BENCH_SCRIPT, state_dir
from autoresearch_mcp.store.records import ProfileRecord
from autoresearch_mcp.worker import outcomes, profiler

FEW_SAMPLES = 1000
MAX_KEPT_SOURCES = 50
MAX_KEPT_BYTES = 8 * 2**20
# What a SkyPilot worker (Ubuntu images) needs to profile: perf for its kernel (a container has no
# package for its host's kernel: the generic tools then serve), and perf_event_paranoid at 1 for the
# job's non-root user (Ubuntu sets 4, which refuses every unprivileged perf_event_open).
WORKER_PERF_SETUP = [
    "sudo apt-get update -qq",
    "sudo apt-get install -y -qq linux-tools-common linux-tools-$(uname -r) || sudo apt-get install -y -qq "
    "linux-tools-generic || sudo apt-get install -y -qq linux-perf",
]
WORKER_PARANOID_SETUP = "sudo sysctl -w kernel.perf_event_paranoid=1"


def profiles_dir(repo_root: Path) -> Path:
    return state_dir(repo_root) / "profiles"


def sources_dir(repo_root: Path, profile_id: str) -> Path:
    """The profiled build's copies of the source files its hot lines are in (line numbers match them)."""
    return profiles_dir(repo_root) / f"{profile_id}.src"


@dataclass(frozen=True)
class _Target:
    """The build to profile: `baseline` (the session head) or an experiment's candidate on its base."""

    build: str
    base: str
    commit: str

    @property
    def role(self) -> str:
        return "baseline" if self.build == "baseline" else "candidate"


@dataclass
class _Run:
    """What profiler.py answered, where it ran, and what the run cost (cloud workers only)."""

    profile: outcomes.Profile
    where: str
    worker: str | None = None
    cost_usd: float | None = None


def profile_hotspots(session: Session, experiment_id: str | None, top: int, lines: int) -> ProfileResult:
    """Run the benchmark once under perf record in the build of the session head or of a candidate."""
    repo, config = session.repo, session.config
    if experiment_id is None:
        head = gitops.branch_commit(repo, config.branch)
        target = _Target("baseline", head, head)
    else:
        launch = session.manager.get(experiment_id).launch
        target = _Target(experiment_id, launch.base_commit, launch.candidate_commit)
    root = Path(repo.working_dir)
    profile_id = uuid.uuid4().hex[:10]
    safefs.ensure_dir(root, profiles_dir(root))  # the server's files are never written through a link
    run = _run(session, target, profile_id)
    profile = run.profile
    hot = [HotFunction.model_validate(f) for f in profile.functions]
    report_path = profiles_dir(root) / f"{profile_id}.txt"
    safefs.write_text(root, report_path, profile.report)
    saved = ProfileResult(
        profile_id=profile_id, build=target.build, commit=target.commit, event=profile.event,
        total_samples=profile.total_samples, functions=hot, report_path=str(report_path),
        perf_data_path=profile.perf_data, bench_exit_code=profile.bench["exit_code"],
        worker=run.worker, cost_usd=run.cost_usd, notes=_notes(hot, run))
    safefs.write_text(root, profiles_dir(root) / f"{profile_id}.json", saved.model_dump_json())
    session.manager.record_profile(ProfileRecord(session_id=config.session_id, profile_id=profile_id,
                                                 build=target.build, commit=target.commit, worker=run.worker,
                                                 cost_usd=run.cost_usd))
    shown = [f.model_copy(update={"lines": f.lines[:lines]}) for f in hot[:top]]
    return saved.model_copy(update={"functions": shown})


def _run(session: Session, target: _Target, profile_id: str) -> _Run:
    """One profile job through the session's executor (on this machine, or alone on a worker of the pool):
    it builds the target and profiles it; the hot files come from git."""
    repo, config = session.repo, session.config
    root = Path(repo.working_dir)
    progress.report(f"profiling {target.build}: build, then the benchmark once under perf record")
    ran = profiles.run(session.manager.executor, session.manager.jobs, profile_id, target.base, target.commit,
                       profiles_dir(root) / f"{profile_id}.perf.data",
                       state_dir(root) / "logs" / f"profile-{profile_id}.log")
    if not ran.answered:  # the job's failure, not the profile's
        failure = ran.outcome.failure()
        why = failure.error if failure is not None else "its result holds no profile"
        raise StateError(f"the profile job did not finish: {why}. Its log: {ran.log_path}")
    profile = ran.outcome
    run = (_Run(dataclasses.replace(profile, perf_data=f"{ran.worker}:{profile.perf_data}"), f"worker {ran.worker}",
                ran.worker, ran.cost_usd) if ran.remote else _Run(profile, "this machine"))
    _check(run, target, config.tag)
    _keep_sources(profile.functions, lambda rel: gitops.file_at(repo, target.commit, rel, MAX_KEPT_BYTES),
                  root, sources_dir(root, profile_id))
    return run


def _check(run: _Run, target: _Target, tag: str) -> None:
    """Raise what went wrong in profiler.py's answer, with what to do where it ran."""
    profile, where = run.profile, run.where
    problem, detail = profile.problem, profile.detail or ""
    if profile.status == "done":
        return
    on_worker = run.worker is not None
    relaunch = (f"; then stop_workers(mode='down') and start_session(..., tag='{tag}') again, so workers launch "
                "anew with it (setup runs when a worker launches), and call profile_hotspots again")
    if problem == "no_perf" and not on_worker:
        raise StateError(f"perf does not run here ({detail}): install it (Debian: apt-get install linux-perf; "
                         "Ubuntu: apt-get install linux-tools-common linux-tools-$(uname -r)) and call "
                         "profile_hotspots again")
    if problem == "no_perf":
        setup = ", ".join(f'"{c}"' for c in [*WORKER_PERF_SETUP, WORKER_PARANOID_SETUP])
        raise StateError(f"perf does not run on {where} ({detail}). Add to `sky.setup` in .autoresearch/config.json: "
                         f"{setup}{relaunch}")
    if problem == "build":
        raise StateError(f"`{BENCH_SCRIPT} build` of {target.build} failed on {where}:\n{detail}")
    if problem == "bench":
        raise StateError(f"`{BENCH_SCRIPT} bench` of {target.build} exited with status {profile.bench['exit_code']} "
                         f"under perf on {where}, so there is no profile of it. Its output:\n{detail}")
    if profile.refused:
        if not on_worker:
            fix = ("run the server as root, or lower it: sudo sysctl -w kernel.perf_event_paranoid=1 (persist it in "
                   "/etc/sysctl.d/); in a container, allow perf_event_open (CAP_PERFMON or a seccomp profile that "
                   "permits it)")
        elif str(profile.host.get("cloud") or "").lower() == "kubernetes":
            fix = ("a pod cannot lower its node's setting: give the worker pods CAP_PERFMON (in ~/.sky/config.yaml, "
                   "kubernetes.pod_config: spec.containers[0].securityContext.capabilities.add: [PERFMON]) or use "
                   "nodes where it is 1 or lower; then stop_workers(mode='down') and call profile_hotspots again")
        else:
            fix = f'add "{WORKER_PARANOID_SETUP}" to `sky.setup` in .autoresearch/config.json{relaunch}'
        raise StateError(f"perf may not record on {where} (kernel.perf_event_paranoid is {profile.paranoid}): "
                         f"{fix}. perf said: {detail}")
    if problem == "no_samples":
        raise StateError(f"perf recorded no samples on {where}: the benchmark ran for "
                         f"{profile.bench['duration_s']:.2f} s; perf said: {detail}")
    if problem == "record":
        raise StateError(f"perf record wrote no data on {where}. Its output: {detail}")
    raise StateError(f"the profile failed on {where}: {detail}")


def _keep_sources(functions: list[dict[str, Any]], read: Callable[[str], bytes | None], root: Path,
                  dest: Path) -> None:
    """Keep copies of the files of the hot lines (the build tree may be reused, removed, or on a worker)."""
    files = list(dict.fromkeys(line["file"] for f in functions for line in f["lines"]))[:MAX_KEPT_SOURCES]
    for rel in files:
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            continue
        data = read(rel)
        if data is not None:
            safefs.write_bytes(root, dest / rel, data)


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


def _notes(hot: list[HotFunction], run: _Run) -> list[str]:
    profile, notes = run.profile, []
    total, event, bench = profile.total_samples, profile.event, profile.bench
    if total < FEW_SAMPLES:
        notes.append(f"only {total} samples ({profiler.FREQUENCY_HZ} a second of CPU time): shares below a few "
                     "percent are noise; profile a longer run (e.g. more iterations in the benchmark) for finer detail")
    if bench["timed_out"]:
        notes.append("the benchmark timed out and was stopped; the profile covers the time until then")
    if hot and not any(f.lines for f in hot[:5]):
        notes.append("no source lines: the build has no debug info. -g belongs in the compiler flags of "
                     f"{BENCH_SCRIPT} build (CMake: -DCMAKE_BUILD_TYPE=RelWithDebInfo; keeps -O2), a change to the "
                     "benchmark that only the person makes: ask them to commit it on the session branch (the "
                     "plugin's hook refuses your commits there), then profile again")
    if event.startswith("cpu-clock"):
        notes.append(f"sampled with the cpu-clock timer ({run.where} exposes no hardware cycle counter): shares "
                     "are of time on CPU, which is what matters here")
    if run.worker is not None:
        dropped = profile.report_rows_dropped
        notes.append(f"profiled on {run.where}, alone there; the raw perf.data stays on it (`ssh {run.worker}`, "
                     f"`perf report -i <path>`) until it is downed" + (
                         f"; report_path holds the top of the report ({dropped} colder rows left out)"
                         if dropped else ""))
    notes.append("next: find_passes(profile_id=...) looks for extra passes over the same buffer in these "
                 "functions")
    return notes
