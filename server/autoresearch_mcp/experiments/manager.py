"""The experiment manager: the session's experiments as its ledger holds them, and what every step shares.

It owns the ledger (every state change is a record appended before it is visible), the locks, the lookups,
the waits for a change and the session branch's check; launching, executor events, committing and the
readouts each have a module of their own (launching.py, events.py, committing.py, readouts.py), each a set
of functions over the manager.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from autoresearch_mcp import limits, progress
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.executors.jobs import JobMaker
from autoresearch_mcp.executors.port import Executor, Interrupted, Released
from autoresearch_mcp.experiments import branch
from autoresearch_mcp.experiments import platforms as platforms_
from autoresearch_mcp.git import gitops
from autoresearch_mcp.git.worktrees import Worktrees
from autoresearch_mcp.measure import figures
from autoresearch_mcp.models import FINAL_STATUSES, CancelResult
from autoresearch_mcp.store.config import SessionConfig, state_dir
from autoresearch_mcp.store.ledger import ExperimentState, Ledger, LedgerView
from autoresearch_mcp.store.records import PlatformRecord, ProfileRecord, Record, StatusRecord, WorkersRecord

log = logging.getLogger(__name__)

_STOP_POLL_S = 0.5  # how soon a waiting fetch sees that its call was given up


class ExperimentManager:
    def __init__(self, repo: gitops.Repo, config: SessionConfig, ledger: Ledger, executor: Executor,
                 env: dict[str, str] | None = None, worktrees: Worktrees | None = None,
                 here: Executor | None = None) -> None:
        self.repo = repo
        self.env = dict(env or {})  # added to build, bench and checks (the recipe's model)
        self.worktrees = worktrees  # this machine's builds (the baseline a drift check looks at)
        self.here = here  # this machine's executor: where the holdout builds and runs
        self.config = config
        self.jobs = JobMaker(repo, config, self.env)  # the session's one builder of jobs
        self.ledger = ledger
        self.executor = executor
        self.root = Path(repo.working_dir)
        self.logs = state_dir(self.root) / "logs"
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified on every ledger record
        self.commit_lock = threading.Lock()
        # held from moving the session branch to recording it, so a check never sees the move half done
        self.branch_lock = threading.Lock()
        self.pairs_done: dict[str, int] = {}
        self._closed = False  # set by close(): waiting fetches end
        self.view: LedgerView = ledger.view()
        self.platforms = config.all_platforms  # the host first; the others check its winners

    # --- bookkeeping ---------------------------------------------------------------------------

    def append(self, record: Record) -> None:
        with self.lock:
            self.ledger.append(record)  # folded into self.view, the ledger's own
            self.changed.notify_all()

    def record_profile(self, record: ProfileRecord) -> None:
        """A profile ran (profile_hotspots): its cloud cost counts in the session's."""
        self.append(record)

    def profiles(self) -> list[ProfileRecord]:
        return [p for p in self.view.profiles if p.session_id == self.config.session_id]

    def wait(self, experiment_id: str, done: Callable[[ExperimentState], bool], timeout: float) -> None:
        """Block until `done(experiment)` holds or `timeout` seconds pass (records wake the waiters)."""
        with self.changed:
            self.changed.wait_for(lambda: done(self.view.experiments[experiment_id]), timeout)

    def wait_reporting(self, exp: ExperimentState, timeout: float) -> None:
        """Wait up to `timeout` seconds for a status change of `exp` (or of one of its platforms), telling
        `progress` each status and each pair as it comes; end at once when the call is given up (its client
        went away) or the manager closes."""
        experiment_id = exp.experiment_id
        before = _progress(exp)
        total = _planned_pairs(exp)
        deadline = time.monotonic() + timeout
        told = (exp.status, -1)
        with self.changed:
            while True:
                now = self.view.experiments[experiment_id]
                pairs = self.pairs_done.get(experiment_id, 0) if now.result is None else figures.pair_count(
                    now.outcome)
                if (now.status, pairs) != told:
                    told = (now.status, pairs)
                    progress.report(f"experiment {experiment_id}: {now.status}"
                                    + (f", {pairs} of up to {total} pairs" if now.status == "running" else ""),
                                    pairs if now.status == "running" else None, total)
                left = deadline - time.monotonic()
                if _progress(now) != before or left <= 0 or self._closed or progress.stopped():
                    return
                self.changed.wait(min(left, _STOP_POLL_S))  # a sample or a record wakes it; a stop within this

    def mine(self) -> list[ExperimentState]:
        sid = self.config.session_id
        return [e for e in self.view.experiments.values() if e.launch.session_id == sid]

    def get(self, experiment_id: str) -> ExperimentState:
        exp = self.view.experiments.get(experiment_id)
        if exp is None or exp.launch.session_id != self.config.session_id:
            known = ", ".join(e.experiment_id for e in self.mine()[-10:]) or "none yet"
            raise InputError(f"no experiment {limits.shown(experiment_id)} in this session (recent: {known})")
        return exp

    def session_head(self) -> str:
        return gitops.branch_commit(self.repo, self.config.branch)

    def check_branch(self) -> None:
        """Stop (StateError) unless the session branch is where the ledger says commit_winner left it; a
        commit_winner commit a crash left unrecorded is recorded now (experiments/branch.py)."""
        with self.branch_lock:
            self.check_branch_locked()

    def check_branch_locked(self) -> None:
        reconciled = branch.check(self.repo, self.config, self.view, self.append)
        if reconciled:
            log.warning("recorded commit_winner commit(s) %s, left unrecorded by a crash", ", ".join(reconciled))

    def first_launch(self) -> None:
        """Before the session's first experiment is recorded: its branch takes no more set-up commits, and one made
        before that (after the launch's first check) stops the launch (branch.check)."""
        if not branch.launched(self.view, self.config.session_id):
            branch.close_set_up(self.repo, self.config)
            self.check_branch()

    def after_job(self, base_commit: str, variant: str | None = None) -> str | None:
        """What a job may have changed behind the server's back: the session branch, or the tracked files
        of the baseline build it measured against (whose build is then discarded). None: nothing."""
        try:
            self.check_branch()
        except StateError as exc:
            return str(exc)
        return self.baseline_drift(base_commit, variant)

    def baseline_drift(self, base_commit: str, variant: str | None = None) -> str | None:
        """Why the built baseline of `base_commit` on this machine can no longer be trusted, or None."""
        if self.worktrees is None:
            return None
        tree = gitops.tree_of(self.repo, base_commit)
        path = self.worktrees.built(tree, variant)
        if path is None:
            return None
        changed = gitops.worktree_drift(path, tree)
        if not changed:
            return None
        self.worktrees.discard(path)
        shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
        return (f"the baseline build of {base_commit[:12]} in {path} no longer matches its commit ({shown}): "
                "something wrote into it, so timings measured against it cannot be trusted. The build is "
                "discarded (the next experiment builds it afresh); launch the experiment again")

    def recover(self) -> None:
        """After a restart: experiments the ledger shows unfinished are `lost`; clean up after them."""
        interrupted = [e for e in self.mine() if e.status not in FINAL_STATUSES]
        rounds = [(e, name, p) for e in self.mine() for name, p in e.platforms.items()
                  if p.status not in FINAL_STATUSES]
        if not interrupted and not rounds:
            return
        self.executor.recover([Interrupted(e.experiment_id, e.worker, dict(e.runtime)) for e in interrupted]
                              + [Interrupted(platforms_.platform_job(e.experiment_id, name, p), p.worker,
                                             dict(p.runtime)) for e, name, p in rounds])
        for e in interrupted:
            self.append(StatusRecord(experiment_id=e.experiment_id, status="lost",
                                     detail="the server stopped while this experiment ran; launch it again"))
        for e, name, _ in rounds:
            self.append(PlatformRecord(experiment_id=e.experiment_id, platform=name, status="lost",
                                       detail="the server stopped while this platform ran"))

    def close(self) -> None:
        """The server is stopping: waiting fetches end now, and the executor cancels what runs."""
        with self.changed:
            self._closed = True
            self.changed.notify_all()
        self.executor.close()  # a fleet closes this machine's executor with its own

    def release_workers(self, mode: str) -> Released:
        """Stop or down the executor's machines, and record it (the Stop hook reminds of workers used since)."""
        released = self.executor.release(mode)
        self.append(WorkersRecord(session_id=self.config.session_id, mode=mode, released=released.names))
        return released

    def platform_note(self, exp: ExperimentState) -> str | None:
        """Why a host winner cannot be committed yet because of another platform, or None."""
        return platforms_.refusal(exp.experiment_id, self.platforms[1:], exp.platforms)

    def cancel(self, experiment_id: str) -> CancelResult:
        exp = self.get(experiment_id)
        checking = platforms_running(exp)
        for name in checking:
            if not self.executor.cancel(platforms_.platform_job(experiment_id, name, exp.platforms[name])):
                self.append(PlatformRecord(experiment_id=experiment_id, platform=name, status="cancelled"))
        if checking:
            self.wait(experiment_id, lambda e: not platforms_running(e), timeout=15.0)
        if exp.status in FINAL_STATUSES:
            return CancelResult(experiment_id=experiment_id, status=exp.status, message=(
                f"already {exp.status}; its runs on {', '.join(checking)} were cancelled" if checking
                else f"already {exp.status}; nothing to cancel"))
        if not self.executor.cancel(experiment_id):
            self.append(StatusRecord(experiment_id=experiment_id, status="cancelled"))
        else:
            self.wait(experiment_id, lambda e: e.status in FINAL_STATUSES, timeout=15.0)
        exp = self.get(experiment_id)
        return CancelResult(experiment_id=experiment_id, status=exp.status,
                            message="cancelled: every process it started was killed; finished builds stay cached "
                                    "for reuse, unfinished ones are discarded"
                            if exp.status == "cancelled" else f"finished as {exp.status} before the cancel")


def platforms_running(exp: ExperimentState) -> list[str]:
    """The other platforms still checking `exp`."""
    return [name for name, p in exp.platforms.items() if p.status not in FINAL_STATUSES]


def _progress(exp: ExperimentState) -> tuple[str, ...]:
    """The statuses a waiting fetch watches: the experiment's and those of its other platforms."""
    return (exp.status, *(f"{name}={p.status}" for name, p in sorted(exp.platforms.items())))


def _planned_pairs(exp: ExperimentState) -> int | None:
    """The most pairs the experiment's current round may run (its design's last stop)."""
    stops = exp.continued.stops if exp.continued else exp.launch.design.get("stops")
    return int(stops[-1]) if stops else None
