"""Every runner job, built in one place from the session's settings.

A job is a typed record of its kind (worker/jobfile.py: the runner, standard-library only, reads it back from
job.json, locally and on a worker). `JobMaker` gives each kind (an experiment, a validation of the session head, a
trial of the checks, a platform's check of the head, a profile, the holdout, the counters) its fields from the
session's settings, with one environment (`environment`) and one confinement (`confinement`); an executor places
the record (`jobfile.Job.placed`: its trees, log, lock and the session's scripts) and adds no other field.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp.executors.port import VALIDATION_RUNS
from autoresearch_mcp.git import gitops
from autoresearch_mcp.store.config import Platform, SessionConfig, job_env
from autoresearch_mcp.worker import jobfile
from autoresearch_mcp.worker.jobfile import SandboxSpec

FOCUS_ENV = "AUTORESEARCH_FOCUS"


def environment(session_env: dict[str, str], platform: Platform, focus: Sequence[str] = ()) -> dict[str, str]:
    """The one environment a job's build, bench and checks get beside the runner's (jobenv.run_env adds the
    compiler cache, the threads and the baseline's tree): the session's (its settings, the recipe's model),
    then the platform's, then the focus an experiment names."""
    return {**session_env, **job_env(platform), **({FOCUS_ENV: ",".join(focus)} if focus else {})}


def confinement(mode: str, frozen: Sequence[str] = (), read_only: Sequence[str] = (),
                readable: Sequence[str] = (), private: Sequence[str] = (), git: Sequence[str] = ()) -> SandboxSpec:
    """The one sandbox spec of a job (worker/sandbox.py reads it): the session's `sandbox` mode, the protected
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


@dataclass(frozen=True)
class JobMaker:
    """Builds the jobs of one session from its settings (`config`) and its environment (`env`: the
    benchmark's settings and the recipe's model). A session has one (its manager's; start_session's while it
    validates), made again for other settings with `with_config`."""

    repo: gitops.Repo
    config: SessionConfig
    env: dict[str, str] = field(default_factory=dict)

    def with_config(self, config: SessionConfig) -> JobMaker:
        """The same session's jobs under other settings (start_session tries threads and pairings)."""
        return dataclasses.replace(self, config=config)

    def _common(self, commit: str, platform: Platform | None, read_only: Sequence[str] | None = None,
                focus: Sequence[str] = ()) -> dict[str, Any]:
        """What every job of the session carries: timeouts, threads, environment, platform, confinement
        (the protected files as `commit` has them)."""
        c = self.config
        host = c.all_platforms[0]
        private, git = checkout(self.repo)
        platform = platform or host
        return {
            "timeouts": c.timeouts.for_job(), "threads": c.threads, "env": environment(self.env, platform, focus),
            "platform": platform.name, "measure": platform.measure,
            "worktree_variant": None if platform.name == host.name else platform.name,
            # every command of the job sees these read-only: a build that rewrites the benchmark's source
            # after the launch's check cannot get it compiled
            "sandbox": confinement(c.sandbox, gitops.protected_files(self.repo, commit, c.protected),
                                   list(c.read_only_runs or []) if read_only is None else read_only,
                                   private=private, git=git)}

    def experiment(self, judging: dict[str, Any], design: dict[str, Any], stops: list[int], base_tree: str,
                   candidate_tree: str, incremental: bool, platform: Platform | None = None,
                   focus: Sequence[str] = (), seed: int | None = None,
                   prior_samples: Sequence[dict[str, Any]] = ()) -> jobfile.Experiment:
        """One experiment's A/B on one platform (the host's first); `seed` draws each pair's order;
        `prior_samples`, a continuation's earlier rounds, are pooled with its pairs."""
        return jobfile.Experiment(
            **self._common(base_tree, platform, focus=focus), metric=str(judging["metric"]), design=design,
            judging=judging, stops=stops, seed=random.SystemRandom().randrange(2**32) if seed is None else seed,
            incremental=incremental, baseline_tree=base_tree, candidate_tree=candidate_tree,
            prior_samples=list(prior_samples))

    def _head(self, commit: str, content: str, platform: Platform | None = None) -> dict[str, Any]:
        return {**self._common(commit, platform), "pairing": self.config.pairing or "sequential",
                "metric": self.config.metric, "baseline_tree": content}

    def validation(self, commit: str, content: str, shape_trial: bool = True) -> jobfile.Validation:
        """Build the session head and bench it VALIDATION_RUNS times, then (but for a recipe's bench, whose shape
        is known, or without `shape_trial`: a pair of the pairing trial) alone and at half duty (start_session: the
        bench's shape)."""
        # a recipe's bench is known: it does fixed work
        return jobfile.Validation(**self._head(commit, content), runs=VALIDATION_RUNS,
                                  shape_trial=shape_trial and not self.config.recipe)

    def checks_trial(self, commit: str, content: str) -> jobfile.ChecksTrial:
        """Run the checks on the built session head as they are, then with the tree read-only (start_session
        chooses which commands see their tree read-only)."""
        return jobfile.ChecksTrial(**self._head(commit, content))

    def head_check(self, commit: str, content: str, platform: Platform) -> jobfile.HeadCheck:
        """Build the unchanged session head on another platform and run its checks there (start_session)."""
        return jobfile.HeadCheck(**self._head(commit, content, platform))

    def profile(self, profile_id: str, base: str, base_tree: str, candidate_tree: str, data: str,
                frequency_hz: int = 999, functions_only: bool = False) -> jobfile.Profile:
        """Build a tree (the session head's, or a candidate's) and run its benchmark once under perf, `frequency_hz`
        samples a second of CPU time, its raw perf.data written to `data` on this machine (a worker keeps its
        own)."""
        return jobfile.Profile(**self._common(base, None), profile_id=profile_id, baseline_tree=base_tree,
                               candidate_tree=candidate_tree, data=data, frequency_hz=frequency_hz,
                               functions_only=functions_only)

    def holdout(self, base: str, base_tree: str, candidate_tree: str, command: list[str], pairs: int,
                timeout_s: float, seed: int) -> jobfile.Holdout:
        """The hidden holdout's A/B: `pairs` interleaved pairs of `command` in both built trees, each pair's
        order drawn from `seed` (recorded, so the verdict can be replayed). The command and the folders of
        the paths it names are readable inside the confinement."""
        common = self._common(base, None)
        named = [Path(a) for a in command if a.startswith("/")]
        common["sandbox"]["readable"] = [str(p) for p in named] + [str(p.parent) for p in named]
        return jobfile.Holdout(**common, command=command, pairs=pairs, timeout_s=timeout_s, seed=seed,
                               baseline_tree=base_tree, candidate_tree=candidate_tree)

    @staticmethod
    def counters(commands: Sequence[tuple[list[str], str, float, bool]]) -> jobfile.Counters:
        """Commands of analyze_bounds run under the machine's turn, each (argv, cwd, timeout_s, interrupt: SIGINT
        first at the timeout). No session is needed: the machine is what they measure."""
        return jobfile.Counters(commands=[{"argv": list(argv), "cwd": cwd, "timeout_s": timeout_s,
                                           "interrupt": interrupt} for argv, cwd, timeout_s, interrupt in commands])
