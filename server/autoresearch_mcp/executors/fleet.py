"""The fleet: every executor of a session behind the one port, built in one place (`build`).

The host's executor runs the experiments (local, or a SkyPilot worker pool); each other platform gets its own (a local
platform shares this machine's worktrees and runs one job at a time; a sky platform gets a worker pool of its own,
with its own cluster names); and this machine's (`here`) runs what must run here, the holdout. A caller never asks
which kind of executor it holds: the fleet says where this machine's builds are and which executor is this machine's.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading

from autoresearch_mcp.executors.local import LocalExecutor
from autoresearch_mcp.executors.port import EventSink, Executor, Interrupted, Job, Released, ValidationRun
from autoresearch_mcp.git import gitops
from autoresearch_mcp.git.worktrees import Worktrees
from autoresearch_mcp.settings import Settings
from autoresearch_mcp.store.config import SessionConfig


def build(repo: gitops.Repo, config: SessionConfig, settings: Settings) -> Fleet:
    """The session's executors: the host's (the config's `executor`), one per other platform, and this machine's:
    the host's when it is local (the holdout then goes ahead of its queue), else one of its own in the same
    worktrees, so neither drops the other's builds."""
    worktrees = Worktrees(repo, settings.cache_dir, config.keep_builds)
    host = (_sky(repo, config, settings) if config.executor == "sky"
            else LocalExecutor(repo, worktrees, config.build_parallelism))
    extra: dict[str, Executor] = {}
    for p in config.all_platforms[1:]:
        if p.executor == "sky":
            pool_id = hashlib.sha1(f"{config.session_id}/{p.name}".encode()).hexdigest()[:12]
            extra[p.name] = _sky(repo, config.model_copy(update={"sky": config.sky_for(p), "session_id": pool_id}),
                                 settings)
        else:
            extra[p.name] = LocalExecutor(repo, worktrees, 1)
    here = LocalExecutor(repo, worktrees, 1) if config.executor == "sky" else host
    return Fleet(host, extra, here=here, worktrees=worktrees)


def _sky(repo: gitops.Repo, config: SessionConfig, settings: Settings) -> Executor:
    from autoresearch_mcp.executors import skypilot  # imports nothing of sky until used

    return skypilot.SkyExecutor(repo, config, settings)


class Fleet(Executor):
    """The host's executor plus one per extra platform, behind the one executor port, and this machine's
    (`here`, over this machine's builds, `worktrees`).

    A job whose spec names an extra platform goes to that platform's executor; everything else is the
    host's. Release and close reach every platform's machines; close reaches this machine's too.
    """

    def __init__(self, host: Executor, extra: dict[str, Executor], *, here: Executor, worktrees: Worktrees) -> None:
        self.host = host
        self.extra = extra
        self.here = here  # where the holdout builds and runs: the host's own executor when it is local
        self.worktrees = worktrees  # this machine's builds (the baseline a drift check looks at)
        self.name = host.name
        self._owner: dict[str, Executor] = {}
        self._lock = threading.Lock()

    def _all(self) -> list[Executor]:
        return [self.host, *(e for e in self.extra.values() if e is not self.host)]

    def _route(self, job: Job) -> Executor:
        executor = self.extra.get(job.spec.platform, self.host)
        with self._lock:
            self._owner[job.experiment_id] = executor
        return executor

    def submit(self, job: Job, sink: EventSink) -> None:
        self._route(job).submit(job, sink)

    def submit_first(self, job: Job, sink: EventSink) -> None:
        self._route(job).submit_first(job, sink)

    def validate(self, job: Job) -> ValidationRun:
        return self._route(job).validate(job)

    def confinement_problem(self, mode: str) -> str | None:
        """The first platform's executor that cannot confine jobs as the session asks says why."""
        return next((why for e in self._all() if (why := e.confinement_problem(mode)) is not None), None)

    def cancel(self, experiment_id: str) -> bool:
        with self._lock:
            executor = self._owner.get(experiment_id, self.host)
        return executor.cancel(experiment_id)

    def recover(self, interrupted: list[Interrupted]) -> None:
        for executor in self._all():
            executor.recover(interrupted)

    def release(self, mode: str) -> Released:
        done = Released()
        for executor in self._all():
            one = executor.release(mode)
            done.names += one.names
            done.notes += one.notes
            if one.cost_usd is not None:
                done.cost_usd = (done.cost_usd or 0.0) + one.cost_usd
        return done

    def retire_base(self, commit: str) -> None:
        for executor in self._all():
            executor.retire_base(commit)

    def close(self) -> None:
        for executor in [*self._all(), *([self.here] if self.here not in self._all() else [])]:
            with contextlib.suppress(Exception):
                executor.close()
