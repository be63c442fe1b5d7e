"""Every runner job, built in one place from the session's settings.

On the wire a job is a JSON-able dict (the runner is standard-library only and reads it from job.json,
locally and on a worker); here it is typed (`port.JobSpec`) and built once. `JobMaker` gives each kind of
job (an experiment, a validation of the session head, a trial of the checks, a platform's check of the
head, a profile, the holdout) its fields from the session's settings, with one environment (`environment`)
and one confinement (`confinement`); `placed` adds where the executor put the trees, the log, the lock and
the session's scripts. Executors place trees and run jobs; they add no other field.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp.core import gitops, sandbox
from autoresearch_mcp.core.config import Platform, SessionConfig, job_env
from autoresearch_mcp.core.port import VALIDATION_RUNS, Job, JobSpec, SandboxSpec
from autoresearch_mcp.core.worktrees import Worktrees

FOCUS_ENV = "AUTORESEARCH_FOCUS"


def environment(session_env: dict[str, str], platform: Platform, focus: Sequence[str] = ()) -> dict[str, str]:
    """The one environment a job's build, bench and checks get beside the runner's (jobenv.run_env adds the
    compiler cache, the threads and the baseline's tree): the session's (its settings, the recipe's model),
    then the platform's, then the focus an experiment names."""
    return {**session_env, **job_env(platform), **({FOCUS_ENV: ",".join(focus)} if focus else {})}


def confinement(mode: str, frozen: Sequence[str] = (), read_only: Sequence[str] = (),
                readable: Sequence[str] = (), private: Sequence[str] = (), git: Sequence[str] = ()) -> SandboxSpec:
    """The one sandbox spec of a job (core/sandbox.py reads it): the session's `sandbox` mode, the protected
    files bound read-only, the commands that see their tree read-only, paths a private /tmp would hide, and
    the user's checkout and git directory hidden from every command (`private`; a build reads `git`). The
    executor adds the session's scripts where it stores them (`placed`)."""
    spec = SandboxSpec(mode=mode, frozen=list(frozen), read_only=list(read_only))
    if readable:
        spec["readable"] = list(readable)
    if private:
        spec["private"] = list(private)
        spec["git"] = list(git)
    return spec


def checkout(repo: gitops.Repo) -> tuple[list[str], list[str]]:
    """The folders of the user's checkout no command sees, and its git directory, which a build reads
    (read-only): its work tree (the session head's files and `.autoresearch/`) and its git directory (its refs
    name the session head), also where that lies outside the work tree."""
    folders = [Path(repo.working_tree_dir or repo.git_dir).resolve()]
    git_dir = Path(repo.common_dir).resolve()
    if not any(f == git_dir or f in git_dir.parents for f in folders):
        folders.append(git_dir)
    return [str(f) for f in folders], [str(git_dir)]


def frozen(spec: JobSpec) -> list[str]:
    """The protected files a job's commands see read-only."""
    return list((spec.get("sandbox") or {}).get("frozen") or [])


def placed(job: Job, *, baseline_dir: str, candidate_dir: str | None, log_path: str | None, machine_lock: str,
           scripts: dict[str, str], frozen_from: str | None = None) -> dict[str, Any]:
    """The runner's job file: `job`'s spec where the executor placed it (its trees, log, machine lock, the
    session's scripts, the base commit's, bound over the trees, and where the protected files' bytes are
    stored when the executor keeps them)."""
    box: dict[str, Any] = {**(job.spec.get("sandbox") or confinement(sandbox.CONFINED)), "scripts": scripts}
    if frozen_from is not None:
        box["frozen_from"] = frozen_from
    return {**job.spec, "experiment_id": job.experiment_id, "baseline_dir": baseline_dir,
            "candidate_dir": candidate_dir, "log_path": log_path, "machine_lock": machine_lock, "sandbox": box}


def profile_placed(job: Job, placed_job: dict[str, Any], tree: str, data: str) -> dict[str, Any]:
    """profiler.py's job file: the placed profile job with the tree it profiles (its own baseline), the content
    that tree holds, and where the raw perf.data goes."""
    baseline = job.candidate_commit == job.base_commit
    return {**placed_job, "baseline_dir": tree, "profile_id": job.spec["profile"], "tree": tree, "data": data,
            "content": job.spec.get("baseline_tree" if baseline else "candidate_tree")}


def here(spec: JobSpec, worktrees: Worktrees, commit: str, tree: Path, name: str = "server") -> dict[str, Any]:
    """A job the server runs itself on this machine, placed in `tree` (its own baseline: a comparing check
    compares it with itself), with the machine's lock and the session's scripts at `commit`."""
    return placed(Job(name, commit, commit, Path(), spec=spec), baseline_dir=str(tree), candidate_dir=None,
                  log_path=None, machine_lock=str(worktrees.machine_lock()), scripts=worktrees.scripts(commit),
                  frozen_from=worktrees.frozen_store(commit, frozen(spec)))


@dataclass(frozen=True)
class JobMaker:
    """Builds the jobs of one session from its settings (`config`) and its environment (`env`: the
    benchmark's settings and the recipe's model)."""

    repo: gitops.Repo
    config: SessionConfig
    env: dict[str, str] = field(default_factory=dict)

    def _common(self, commit: str, platform: Platform | None, read_only: Sequence[str] | None = None,
                focus: Sequence[str] = ()) -> JobSpec:
        """What every job of the session carries: timeouts, threads, environment, platform, confinement
        (the protected files as `commit` has them)."""
        c = self.config
        host = c.all_platforms[0]
        private, git = checkout(self.repo)
        platform = platform or host
        return JobSpec(
            timeouts=c.timeouts.for_job(), threads=c.threads, env=environment(self.env, platform, focus),
            platform=platform.name, measure=platform.measure,
            worktree_variant=None if platform.name == host.name else platform.name,
            # every command of the job sees these read-only: a build that rewrites the benchmark's source
            # after the launch's check cannot get it compiled
            sandbox=confinement(c.sandbox, gitops.protected_files(self.repo, commit, c.protected),
                                list(c.read_only_runs or []) if read_only is None else read_only,
                                private=private, git=git))

    def experiment(self, judging: dict[str, Any], design: dict[str, Any], stops: list[int], base_tree: str,
                   candidate_tree: str, incremental: bool, platform: Platform | None = None,
                   focus: Sequence[str] = (), seed: int | None = None) -> JobSpec:
        """One experiment's A/B on one platform (the host's first); `seed` draws each pair's order."""
        spec = self._common(base_tree, platform, focus=focus)
        spec["metric"] = str(judging["metric"])
        spec["design"] = design
        spec["judging"] = judging
        spec["stops"] = stops
        spec["seed"] = random.SystemRandom().randrange(2**32) if seed is None else seed
        spec["run_checks"] = True
        spec["incremental"] = incremental
        spec["baseline_tree"] = base_tree
        spec["candidate_tree"] = candidate_tree
        return spec

    def _head(self, commit: str, content: str, platform: Platform | None, runs: int) -> JobSpec:
        spec = self._common(commit, platform)
        spec["validate"] = runs
        spec["pairing"] = self.config.pairing
        spec["metric"] = self.config.metric
        spec["baseline_tree"] = content
        return spec

    def validation(self, commit: str, content: str) -> JobSpec:
        """Build the session head and bench it VALIDATION_RUNS times, then (but for a recipe's bench, whose shape
        is known) alone and at half duty (start_session: the bench's shape)."""
        spec = self._head(commit, content, None, VALIDATION_RUNS)
        spec["shape_trial"] = not self.config.recipe  # a recipe's bench is known: it does fixed work
        return spec

    def checks_trial(self, commit: str, content: str) -> JobSpec:
        """Run the checks on the built session head as they are, then with the tree read-only (start_session
        chooses which commands see their tree read-only)."""
        spec = self._head(commit, content, None, 0)
        spec["checks_trial"] = True
        return spec

    def head_check(self, commit: str, content: str, platform: Platform) -> JobSpec:
        """Build the unchanged session head on another platform and run its checks there (start_session)."""
        spec = self._head(commit, content, platform, 0)
        spec["run_checks"] = True
        return spec

    def profile(self, profile_id: str, base: str, base_tree: str, candidate_tree: str, data: str) -> JobSpec:
        """Build a tree (the session head's, or a candidate's) and run its benchmark once under perf, its raw
        perf.data written to `data` on this machine (a worker keeps its own)."""
        spec = self._common(base, None)
        spec["profile"] = profile_id
        spec["baseline_tree"] = base_tree
        spec["candidate_tree"] = candidate_tree
        spec["profile_data"] = data
        return spec

    def holdout(self, base: str, base_tree: str, candidate_tree: str, command: list[str], pairs: int,
                timeout_s: float, seed: int) -> JobSpec:
        """The hidden holdout's A/B: `pairs` interleaved pairs of `command` in both built trees, each pair's
        order drawn from `seed` (recorded, so the verdict can be replayed). The command and the folders of
        the paths it names are readable inside the confinement."""
        spec = self._common(base, None)
        named = [Path(a) for a in command if a.startswith("/")]
        spec["sandbox"]["readable"] = [str(p) for p in named] + [str(p.parent) for p in named]
        spec["holdout"] = {"command": command, "pairs": pairs, "timeout_s": timeout_s}
        spec["seed"] = seed
        spec["baseline_tree"] = base_tree
        spec["candidate_tree"] = candidate_tree
        return spec
