"""The experiment manager: turns a candidate into a job, follows it, judges it, commits winners.

It owns the ledger (every state change is a record appended before it is visible) and the
guard rails: protected paths, duplicates, the statistics behind a verdict, and what may be committed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoresearch_mcp import limits, progress, recipes
from autoresearch_mcp.core import decide, gitops
from autoresearch_mcp.core.config import Platform, SessionConfig, state_dir
from autoresearch_mcp.core.jobs import JobMaker
from autoresearch_mcp.core.ledger import ExperimentState, Ledger, LedgerView, apply
from autoresearch_mcp.core.port import Event, Executor, Interrupted, Job, JobSpec, Released, ResultEvent
from autoresearch_mcp.core.records import (
    Analysis,
    CommitRecord,
    Comparison,
    ContinueRecord,
    HoldoutRecord,
    LaunchRecord,
    Outcome,
    PlatformRecord,
    ProfileRecord,
    Record,
    ResultRecord,
    StatusRecord,
    WorkersRecord,
)
from autoresearch_mcp.core.worktrees import Worktrees
from autoresearch_mcp.errors import InputError, RefusedError, StateError
from autoresearch_mcp.experiments import branch, holdout
from autoresearch_mcp.experiments import focus as focus_
from autoresearch_mcp.experiments import platforms as platforms_
from autoresearch_mcp.measure import figures, metrics, stats
from autoresearch_mcp.models import (
    FINAL_STATUSES,
    CancelResult,
    ChecksResult,
    CommitResult,
    ComparisonResult,
    ExperimentSummary,
    FetchResult,
    HoldoutSummary,
    LaunchResult,
    ListExperimentsResult,
    MetricSummary,
)

log = logging.getLogger(__name__)

# A candidate may be measured again when the earlier attempt produced no measurement, or one that
# asked for more: more pairs, a quieter worker, or a clean build to confirm an incremental one.
_RETRYABLE = frozenset({"failed", "cancelled", "lost"})
_REMEASURE = frozenset({"inconclusive", "noisy"})
_DECIDED = frozenset({"improved", "regressed", "no_change"})
MAX_TAIL_LINES = 400
MAX_WAIT_S = 600.0
_STOP_POLL_S = 0.5  # how soon a waiting fetch sees that its call was given up


class ExperimentManager:
    def __init__(self, repo: gitops.Repo, config: SessionConfig, ledger: Ledger, executor: Executor,
                 env: dict[str, str] | None = None, worktrees: Worktrees | None = None) -> None:
        self.repo = repo
        self.env = dict(env or {})  # added to build, bench and checks (the recipe's model)
        self.worktrees = worktrees  # where the holdout builds and runs (this machine)
        self.config = config
        self.ledger = ledger
        self.executor = executor
        self.root = Path(repo.working_dir)
        self.logs = state_dir(self.root) / "logs"
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # notified on every ledger record
        self._commit_lock = threading.Lock()
        # held from moving the session branch to recording it, so a check never sees the move half done
        self._branch_lock = threading.Lock()
        self._pairs_done: dict[str, int] = {}
        self._closed = False  # set by close(): waiting fetches end
        self.view: LedgerView = ledger.view()
        self.platforms = config.all_platforms  # the host first; the others check its winners

    # --- bookkeeping ---------------------------------------------------------------------------

    def _append(self, record: Record) -> None:
        with self._lock:
            self.ledger.append(record)  # folded into self.view, the ledger's own
            self._changed.notify_all()

    def record_profile(self, record: ProfileRecord) -> None:
        """A profile ran (profile_hotspots): its cloud cost counts in the session's."""
        self._append(record)

    def _profiles(self) -> list[ProfileRecord]:
        return [p for p in self.view.profiles if p.session_id == self.config.session_id]

    def _wait(self, experiment_id: str, done: Callable[[ExperimentState], bool], timeout: float) -> None:
        """Block until `done(experiment)` holds or `timeout` seconds pass (records wake the waiters)."""
        with self._changed:
            self._changed.wait_for(lambda: done(self.view.experiments[experiment_id]), timeout)

    def _wait_reporting(self, exp: ExperimentState, timeout: float) -> None:
        """Wait up to `timeout` seconds for a status change of `exp` (or of one of its platforms), telling
        `progress` each status and each pair as it comes; end at once when the call is given up (its client
        went away) or the manager closes."""
        experiment_id = exp.experiment_id
        before = _progress(exp)
        total = _planned_pairs(exp)
        deadline = time.monotonic() + timeout
        told = (exp.status, -1)
        with self._changed:
            while True:
                now = self.view.experiments[experiment_id]
                pairs = self._pairs_done.get(experiment_id, 0) if now.result is None else figures.pair_count(
                    now.outcome)
                if (now.status, pairs) != told:
                    told = (now.status, pairs)
                    progress.report(f"experiment {experiment_id}: {now.status}"
                                    + (f", {pairs} of up to {total} pairs" if now.status == "running" else ""),
                                    pairs if now.status == "running" else None, total)
                left = deadline - time.monotonic()
                if _progress(now) != before or left <= 0 or self._closed or progress.stopped():
                    return
                self._changed.wait(min(left, _STOP_POLL_S))  # a sample or a record wakes it; a stop within this

    def _mine(self) -> list[ExperimentState]:
        sid = self.config.session_id
        return [e for e in self.view.experiments.values() if e.launch.session_id == sid]

    def _get(self, experiment_id: str) -> ExperimentState:
        exp = self.view.experiments.get(experiment_id)
        if exp is None or exp.launch.session_id != self.config.session_id:
            known = ", ".join(e.experiment_id for e in self._mine()[-10:]) or "none yet"
            raise InputError(f"no experiment {limits.shown(experiment_id)} in this session (recent: {known})")
        return exp

    def session_head(self) -> str:
        return gitops.branch_commit(self.repo, self.config.branch)

    def check_branch(self) -> None:
        """Stop (StateError) unless the session branch is where the ledger says commit_winner left it; a
        commit_winner commit a crash left unrecorded is recorded now (experiments/branch.py)."""
        with self._branch_lock:
            self._check_branch_locked()

    def _check_branch_locked(self) -> None:
        reconciled = branch.check(self.repo, self.config, self.view, self._append)
        if reconciled:
            log.warning("recorded commit_winner commit(s) %s, left unrecorded by a crash", ", ".join(reconciled))

    def _after_job(self, base_commit: str, variant: str | None = None) -> str | None:
        """What a job may have changed behind the server's back: the session branch, or the tracked files
        of the baseline build it measured against (whose build is then discarded). None: nothing."""
        try:
            self.check_branch()
        except StateError as exc:
            return str(exc)
        return self._baseline_drift(base_commit, variant)

    def _baseline_drift(self, base_commit: str, variant: str | None = None) -> str | None:
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
        interrupted = [e for e in self._mine() if e.status not in FINAL_STATUSES]
        rounds = [(e, name, p) for e in self._mine() for name, p in e.platforms.items()
                  if p.status not in FINAL_STATUSES]
        if not interrupted and not rounds:
            return
        self.executor.recover([Interrupted(e.experiment_id, e.worker, dict(e.runtime)) for e in interrupted]
                              + [Interrupted(platforms_.platform_job(e.experiment_id, name, p), p.worker,
                                             dict(p.runtime)) for e, name, p in rounds])
        for e in interrupted:
            self._append(StatusRecord(experiment_id=e.experiment_id, status="lost",
                                      detail="the server stopped while this experiment ran; launch it again"))
        for e, name, _ in rounds:
            self._append(PlatformRecord(experiment_id=e.experiment_id, platform=name, status="lost",
                                        detail="the server stopped while this platform ran"))

    def close(self) -> None:
        """The server is stopping: waiting fetches end now, and the executor cancels what runs."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self.executor.close()

    def release_workers(self, mode: str) -> Released:
        """Stop or down the executor's machines, and record it (the Stop hook reminds of workers used since)."""
        released = self.executor.release(mode)
        self._append(WorkersRecord(session_id=self.config.session_id, mode=mode, released=released.names))
        return released

    # --- launch --------------------------------------------------------------------------------

    def launch(
        self, title: str, hypothesis: str, sources: list[str], source: str, commit: str | None,
        patch: str | None, repeats: int | str | None, restore_worktree: bool, clean_build: bool = False,
        experiment_id: str | None = None, focus: list[str] | None = None,
    ) -> LaunchResult:
        self.check_branch()
        unconfinable = self.executor.confinement_problem(self.config.sandbox)
        if unconfinable:
            raise StateError(unconfinable)
        reapplies = None
        focus = focus_.names(focus)
        if focus:
            recipes.check_focus(recipes.get(self.config.recipe) if self.config.recipe else None, focus)
        if source == "experiment":
            if commit or patch:
                raise InputError("source='experiment' takes experiment_id, neither commit nor patch; drop them")
            if not experiment_id:
                raise InputError("source='experiment' needs experiment_id (the experiment to measure further)")
            earlier = self._get(experiment_id)
            if focus and focus != list(earlier.launch.focus):
                raise InputError(f"experiment {experiment_id} is judged on focus {earlier.launch.focus or 'none'}; "
                                 "measuring it further keeps it: drop focus, or launch the change afresh")
            if self._measures_head(earlier):
                if self._unchecked_platforms(earlier):
                    return self._recheck(earlier)
                return self._continue(earlier, repeats)
            if earlier.launch.source == "session":
                return self.launch(title or earlier.title, hypothesis, sources, "session", None, None, repeats,
                                   False)
            reapplies = earlier
            title, hypothesis = title.strip() or earlier.title, hypothesis.strip() or earlier.launch.hypothesis
            sources = sources or list(earlier.launch.sources)
            focus = list(earlier.launch.focus)
        elif experiment_id:
            raise InputError("experiment_id goes with source='experiment'; drop it or change source")
        if source == "session":
            return self._launch_session(title, hypothesis, repeats, focus)
        if not title.strip():
            raise InputError(f"title is missing: a launch with source={source!r} needs a short name of the idea "
                             "(only source='experiment' takes the earlier experiment's title)")
        title = one_line(title, "title")
        if restore_worktree and source != "worktree":
            raise InputError(f"restore_worktree=true only applies to source='worktree' (the work tree is not "
                             f"involved with source={source!r}); drop it")
        repeats = self._repeats(repeats)
        exp_id = uuid.uuid4().hex[:10]
        with self._lock:
            head = self.session_head()
            base_tree = gitops.tree_of(self.repo, head)
            if reapplies is not None:
                tree = self._reapplied_tree(reapplies, head)
                parent_note = f"source: experiment {reapplies.experiment_id}"
            else:
                tree, parent_note = self._candidate_tree(source, commit, patch, head)
            if tree == base_tree:
                raise RefusedError(
                    "the candidate is identical to the session head: there is nothing to measure. "
                    "Edit the code first (or pass source='commit' / 'patch')")
            candidate = gitops.commit_tree(self.repo, tree, head, f"autoresearch candidate {exp_id}: {title}"
                                             f"\n\n{parent_note}")
            changed = gitops.changed_paths(self.repo, head, candidate)
            self._refuse_protected(changed)
            nested = gitops.new_gitlinks(self.repo, head, tree) if source == "worktree" else []
            if nested:
                raise RefusedError(
                    f"{', '.join(nested[:5])} is a nested git repository (it has its own .git): a snapshot would "
                    "record only a pointer to its commit, not its files. Commit its files to this repository, "
                    "ignore it (.gitignore), or move it out of the work tree, then launch again")
            incremental = self.config.incremental and not clean_build
            for other in self._mine():
                if self._measured(other, head, tree, incremental):
                    raise RefusedError(_duplicate(other))
            if focus:
                focus_.check(gitops.diff_hunks(self.repo, head, candidate), focus)
            gitops.update_ref(self.repo, gitops.EXP_REF + exp_id, candidate)
            saved = gitops.reset_saving(self.repo, head, f"autoresearch: before experiment {exp_id}: {title}") \
                if restore_worktree else None
            restored = saved is not None
            design = self._design(repeats)
            spec = self.spec(focus)
            launch = LaunchRecord(
                experiment_id=exp_id, session_id=self.config.session_id, title=title.strip(),
                hypothesis=hypothesis.strip(), sources=sources, source=source, base_commit=head,
                candidate_commit=candidate, candidate_tree=tree, changed_files=changed, repeats=repeats,
                design=design.record(), metric=self.config.metric, direction=self.config.direction,
                executor=self.executor.name, incremental=incremental, objectives=spec.objective_names,
                guards=spec.guards, reapplies=reapplies.experiment_id if reapplies else None, focus=focus,
                judging=dataclasses.asdict(spec),
            )
            self._append(launch)
        job = Job(exp_id, head, candidate, self.logs / f"{exp_id}.log",
                  spec=self._spec(design, launch, base_tree, tree, incremental, self.platforms[0]))
        self.executor.submit(job, self._on_event)
        note = f" (experiment {reapplies.experiment_id}'s change re-applied on the new head)" if reapplies else ""
        return LaunchResult(
            experiment_id=exp_id, status="queued", base_commit=head, candidate_commit=candidate,
            changed_files=changed, repeats=repeats, worktree_restored=restored,
            reapplies=reapplies.experiment_id if reapplies else None,
            message=(f"queued on the {self.executor.name} executor{note}; poll fetch_sky_logs('{exp_id}') and "
                     "prepare the next idea meanwhile" + (f" (work tree reset to the session head; what it held, "
                                                          f"index and untracked files included, is saved as stash "
                                                          f"{saved[:12]}: `git stash apply --index {saved[:12]}` "
                                                          "brings it back)" if saved else "")),
        )

    def _spec(self, design: stats.Design, launch: LaunchRecord, base_tree: str, tree: str, incremental: bool,
              platform: Platform, stops: list[int] | None = None) -> JobSpec:
        """The runner job of one experiment on one platform (the host's first)."""
        spec = metrics.spec_of(launch)
        return JobMaker(self.repo, self.config, self.env).experiment(
            dataclasses.asdict(spec), design.job(), stops or design.stops, base_tree, tree, incremental, platform,
            spec.focus)

    def _measures_head(self, exp: ExperimentState) -> bool:
        """Whether `exp` still measures against the session head: more pairs for it pool with its own. The
        session's measured total measures the head itself (against the session's start)."""
        head = self.session_head()
        if exp.launch.source == "session":
            return exp.launch.candidate_commit == head
        return exp.launch.base_commit == head

    def _launch_session(self, title: str, hypothesis: str, repeats: int | str | None,
                        focus: list[str]) -> LaunchResult:
        """The session's head against its start, end to end, on every objective: the measured total of what
        was committed (never committable itself)."""
        if focus:
            raise InputError("source='session' measures the whole session end to end, on its objectives; drop focus")
        repeats = self._repeats(repeats)
        start, head = self.config.start_commit, self.session_head()
        if start == head:
            raise RefusedError("nothing was committed in this session yet: the session head is its start")
        exp_id = uuid.uuid4().hex[:10]
        with self._lock:
            tree = gitops.tree_of(self.repo, head)
            for other in self._mine():
                if other.launch.source == "session" and self._measured(other, start, tree, False):
                    raise RefusedError(_duplicate(other))
            design = self._design(repeats, session=True)
            spec = self.spec([], session=True)
            launch = LaunchRecord(
                experiment_id=exp_id, session_id=self.config.session_id,
                title=one_line(title or "session total", "title"),
                hypothesis=hypothesis.strip() or "every commit of the session together, end to end",
                sources=[], source="session", base_commit=start, candidate_commit=head, candidate_tree=tree,
                changed_files=gitops.changed_paths(self.repo, start, head), repeats=repeats, design=design.record(),
                metric=self.config.metric, direction=self.config.direction, executor=self.executor.name,
                objectives=spec.objective_names, guards=spec.guards, judging=dataclasses.asdict(spec),
            )
            self._append(launch)
        job = Job(exp_id, start, head, self.logs / f"{exp_id}.log",
                  spec=self._spec(design, launch, gitops.tree_of(self.repo, start), tree, False, self.platforms[0]))
        self.executor.submit(job, self._on_event)
        return LaunchResult(
            experiment_id=exp_id, status="queued", base_commit=start, candidate_commit=head,
            changed_files=list(launch.changed_files), repeats=repeats,
            message=(f"queued: the session head {head[:12]} against its start {start[:12]}, end to end; "
                     f"list_experiments shows it as the session's measured total. Poll fetch_sky_logs('{exp_id}')"))

    def _continue(self, exp: ExperimentState, repeats: int | str | None) -> LaunchResult:
        """More pairs for an undecided experiment on the same head: a new round of the same design,
        its pairs pooled with the earlier ones, so the one calibrated alpha covers every round."""
        exp_id = exp.experiment_id
        with self._lock:
            if exp.status not in FINAL_STATUSES:
                raise RefusedError(f"experiment {exp_id} is still {exp.status}; wait for its verdict")
            why = _not_continuable(exp)
            if why:
                raise RefusedError(f"experiment {exp_id} cannot be measured further: {why}")
            design = stats.load_design(exp.launch.design)
            if not isinstance(design, stats.Design):
                raise RefusedError(
                    f"experiment {exp_id} was measured with an earlier design, whose pairs cannot be pooled "
                    "with the current one; launch it afresh: source='commit', "
                    f"commit='{exp.launch.candidate_commit}'")
            prior = figures.measured_samples(exp)
            done = len({int(s["pair"]) for s in prior})
            repeats = "auto" if repeats is None else self._repeats(repeats)
            try:
                stops = design.round_stops(done, repeats)
            except InputError as exc:
                raise RefusedError(f"experiment {exp_id}: {exc}. Treat it as no gain within the budget, or make "
                                   "the benchmark steadier and measure a new idea") from None
            self._append(ContinueRecord(experiment_id=exp_id, prior_pairs=done, stops=stops, repeats=repeats))
            self._pairs_done[exp_id] = done
        base_commit, candidate = exp.launch.base_commit, exp.launch.candidate_commit
        spec = self._spec(design, exp.launch, gitops.tree_of(self.repo, base_commit), exp.launch.candidate_tree,
                          exp.launch.incremental, self.platforms[0], stops)
        spec["prior_samples"] = prior
        self.executor.submit(Job(exp_id, base_commit, candidate, self.logs / f"{exp_id}.log", spec=spec),
                             self._on_event)
        return LaunchResult(
            experiment_id=exp_id, status="queued", base_commit=exp.launch.base_commit,
            candidate_commit=exp.launch.candidate_commit, changed_files=list(exp.launch.changed_files),
            repeats=repeats, prior_pairs=done,
            message=(f"experiment {exp_id} continues: its {done} pairs are pooled with up to {stops[-1] - done} more "
                     f"under the same design; poll fetch_sky_logs('{exp_id}')"),
        )

    def _reapplied_tree(self, exp: ExperimentState, head: str) -> str:
        """An earlier experiment's change (its candidate against its own base) applied onto `head`."""
        diff = gitops.diff(self.repo, exp.launch.base_commit, exp.launch.candidate_commit)
        try:
            return gitops.patch_tree(self.repo, head, diff)
        except RefusedError as exc:
            raise RefusedError(
                f"experiment {exp.experiment_id}'s change no longer applies on the session head {head[:12]} (the head "
                f"moved since it was measured on {exp.launch.base_commit[:12]}): {exc}. Redo the change on the "
                "current head and launch it as a new experiment") from None

    @staticmethod
    def _measured(other: ExperimentState, head: str, tree: str, incremental: bool) -> bool:
        """Whether `other` already measures this candidate on this head, so a new launch would only
        spend a fresh alpha on it (more pairs continue `other` instead)."""
        if other.launch.candidate_tree != tree or other.launch.base_commit != head:
            return False
        if other.status in _RETRYABLE and other.measured is None:
            return False  # nothing was measured: launching it again spends nothing
        if other.verdict in _REMEASURE and not isinstance(stats.load_design(other.launch.design), stats.Design):
            return False  # measured with an earlier design: its pairs cannot be pooled
        # a clean build may confirm a result that was measured on an incremental one
        return not other.launch.incremental or incremental

    def _refuse_protected(self, changed: list[str]) -> None:
        hit = gitops.protected_changes(changed, self.config.protected)
        if hit:
            shown = hit[:10] + ([f"... {len(hit) - 10} more"] if len(hit) > 10 else [])
            raise RefusedError(
                f"the candidate changes protected files {shown}: the benchmark, the checks, the session folder "
                f"{gitops.SESSION_DIR}/ and .gitattributes/.gitmodules are taken from the baseline so a candidate "
                "cannot change how it is measured or recorded. Revert those files (git checkout -- <file>) and "
                "launch again")

    def _repeats(self, repeats: int | str | None) -> int | str:
        value = self.config.default_repeats if repeats is None else repeats
        if value == "auto":
            return "auto"
        try:
            n = int(value)
        except (TypeError, ValueError):
            raise InputError(f"repeats must be a number of pairs or 'auto', not {value!r}") from None
        if not 1 <= n <= self.config.max_pairs:
            raise InputError(f"repeats must be between 1 and max_pairs={self.config.max_pairs} (or 'auto'), not {n}")
        return n

    def spec(self, focus: list[str], session: bool = False) -> decide.Spec:
        """What a new launch is judged on: the session's metrics, guards and focus settings; the session's total
        (`session`) also proves each objective within its tolerance."""
        c = self.config
        return decide.Spec(c.metric, c.direction, c.min_effect, c.objective_metrics(),
                           {name: g.model_dump() for name, g in c.guards.items()}, focus, c.focus_direction,
                           c.focus_min_effect, dict(c.focus_tolerance_pct), c.focus_default_tolerance_pct,
                           harness_share=dict(c.harness_share), default_harness_share=c.default_harness_share,
                           processes_per_sample=c.processes_per_sample,
                           guard_ceiling_pct=c.focus_guard_ceiling_pct, adaptive_equivalence=True,
                           prove_tolerance=session, shown_directions=dict(c.metric_directions))

    def _design(self, repeats: int | str, session: bool = False) -> stats.Design:
        """An experiment's design; the session's total gets the largest budget (it proves the objectives'
        tolerances end to end, which at a shared machine's noise takes hundreds of pairs)."""
        c = self.config
        budget = max(c.max_pairs, stats.SESSION_PAIRS) if session else c.max_pairs
        try:
            return stats.make_design(repeats, alpha=c.alpha, min_effect=c.min_effect, noise_limit=c.noise_limit,
                                     max_pairs=budget, warmup=c.warmup)
        except InputError as exc:
            raise InputError(f"repeats={repeats!r}: {exc}") from None

    def _candidate_tree(self, source: str, commit: str | None, patch: str | None, head: str) -> tuple[str, str]:
        if source != "patch" and patch:
            raise InputError(f"patch is only read with source='patch', not source={source!r}: pass one of them")
        if source != "commit" and commit:
            raise InputError(f"commit is only read with source='commit', not source={source!r}: pass one of them")
        if source == "worktree":
            if commit or patch:
                raise InputError("source='worktree' takes neither commit nor patch; drop them or change source")
            branch = gitops.current_branch(self.repo)
            if branch != self.config.branch:
                raise StateError(
                    f"the work tree is on {branch or 'a detached HEAD'}, not the session branch "
                    f"{self.config.branch}; check it out (git checkout {self.config.branch}) or launch "
                    "with source='commit'")
            return gitops.snapshot_worktree(self.repo, head), "source: working tree snapshot"
        if source == "commit":
            if not commit:
                raise InputError("source='commit' needs commit (a sha, branch or other commit-ish)")
            sha = gitops.resolve_commit(self.repo, commit)
            return gitops.tree_of(self.repo, sha), f"source: commit {sha}"
        if source == "patch":
            if not patch:
                raise InputError("source='patch' needs patch (a unified diff against the session head)")
            return gitops.patch_tree(self.repo, head, patch), "source: patch"
        raise InputError(f"source must be 'worktree', 'commit' or 'patch', not {source!r}")

    # --- events from the executor ----------------------------------------------------------------

    def _on_event(self, exp_id: str, event: Event) -> None:
        kind = event["event"]
        try:
            if event["event"] == "status":
                self._append(StatusRecord(experiment_id=exp_id, status=event["status"], worker=event.get("worker"),
                                          runtime=event.get("runtime") or {}))
            elif event["event"] == "sample":
                with self._lock:
                    if event["role"] == "candidate":
                        self._pairs_done[exp_id] = self._pairs_done.get(exp_id, 0) + 1
                        self._changed.notify_all()  # a waiting fetch tells its client the pair
            elif event["event"] == "cancelled":
                self._append(StatusRecord(experiment_id=exp_id, status="cancelled"))
            elif event["event"] == "lost":
                self._append(StatusRecord(experiment_id=exp_id, status="lost", detail=event["detail"]))
            elif event["event"] == "result":
                self._record_result(exp_id, event)
        except Exception:  # an event must never kill the executor's thread
            log.exception("could not record event %s of %s", kind, exp_id)

    def _record_result(self, exp_id: str, event: ResultEvent) -> None:
        exp = self.view.experiments[exp_id]
        started: list[tuple[Platform, str]] = []
        try:
            outcome = dict(event["outcome"])
            tampered = self._after_job(exp.launch.base_commit)
            if tampered:
                outcome.update(status="failed", phase="server", error=tampered)
            if exp.continued is not None:
                outcome = figures.pooled(exp, outcome)
            analysis = (figures.analyze(outcome, exp.launch, figures.round_end(exp), figures.round_start(exp))
                        if not tampered else Analysis())
            # A host winner goes to the other platforms; they are queued before the result is visible, so
            # nobody ever sees a winner that is not (yet) being checked there.
            elsewhere = (len(self.platforms) > 1 and outcome.get("status") == "done"
                         and analysis.verdict == "improved" and not exp.launch.incremental)
            queued = self._queue_platforms(exp, self.platforms[1:]) if elsewhere else []
            self._append(ResultRecord(experiment_id=exp_id, status=outcome.get("status", "failed"),
                                      worker=event.get("worker"), cost_usd=event.get("cost_usd"),
                                      outcome=Outcome.model_validate(outcome), analysis=analysis))
            started = queued
        except Exception as exc:  # a result that cannot be recorded ends the experiment, never leaves it hanging
            log.exception("could not record the result of %s", exp_id)
            self._fail(exp_id, f"the result could not be recorded ({type(exc).__name__}: {str(exc)[:300]}); "
                               "the raw output is in the log")
        self._start_platforms(exp, started)
        head = self.session_head()
        with self._lock:
            still_used = any(e.launch.base_commit == exp.launch.base_commit
                             and e.status not in FINAL_STATUSES for e in self._mine())
        if exp.launch.base_commit != head and not still_used:
            self.executor.retire_base(exp.launch.base_commit)

    def _fail(self, exp_id: str, error: str) -> None:
        """End an experiment as `failed` with `error`; in memory at least, if even that cannot be written."""
        record = ResultRecord(experiment_id=exp_id, status="failed", analysis=Analysis(), outcome=Outcome(
            experiment_id=exp_id, status="failed", phase="server", error=error))
        try:
            self._append(record)
        except Exception:
            log.exception("could not write the failure of %s to the ledger", exp_id)
            with self._lock:
                apply(self.view, record)

    # --- the other platforms ---------------------------------------------------------------------

    def _queue_platforms(self, exp: ExperimentState, targets: list[Platform]
                         ) -> list[tuple[Platform, str]]:
        """Record a host winner as queued on `targets`, each under a job id of its own (a run checked
        again is a new job: the old one's cleanup can never touch it)."""
        queued = []
        for platform in targets:
            attempt = (exp.platforms[platform.name].attempt if platform.name in exp.platforms else 0) + 1
            job_id = platforms_.job_id(exp.experiment_id, platform.name, attempt)
            self._append(PlatformRecord(experiment_id=exp.experiment_id, platform=platform.name, status="queued",
                                        attempt=attempt, job_id=job_id, passed=None, summary=None, outcome=None,
                                        analysis=None, detail=None))
            queued.append((platform, job_id))
        return queued

    def _start_platforms(self, exp: ExperimentState, queued: list[tuple[Platform, str]]) -> None:
        """Send a host winner to the other platforms: build and checks there, and a confirmation A/B
        against the same base where the platform is measured. Only winners: it is what commit_winner
        needs, and emulated builds are slow. (Incremental winners are confirmed on a clean build
        first, and that confirmation goes to the platforms.)"""
        if not queued:
            return
        launch = exp.launch
        recorded = stats.load_design(launch.design)
        design = recorded if isinstance(recorded, stats.Design) else self._design("auto")
        base_tree = gitops.tree_of(self.repo, launch.base_commit)
        for platform, job_id in queued:
            job = Job(job_id, launch.base_commit, launch.candidate_commit, self.logs / f"{job_id}.log",
                      spec=self._spec(design, launch, base_tree, launch.candidate_tree, False, platform))
            sink = functools.partial(self._on_platform_event, exp.experiment_id, platform)
            self.executor.submit(job, sink)

    def _on_platform_event(self, exp_id: str, platform: Platform, _job_id: str,
                           event: Event) -> None:
        kind = event["event"]
        here = {"experiment_id": exp_id, "platform": platform.name}
        try:
            if event["event"] == "status":
                self._append(PlatformRecord(**here, status=event["status"], worker=event.get("worker"),
                                            runtime=event.get("runtime") or {}))
            elif event["event"] == "cancelled":
                self._append(PlatformRecord(**here, status=kind, detail=None))
            elif event["event"] == "lost":
                self._append(PlatformRecord(**here, status=kind, detail=event["detail"]))
            elif event["event"] == "result":
                outcome = dict(event["outcome"])
                exp = self.view.experiments[exp_id]
                analysis = Analysis()
                tampered = self._after_job(exp.launch.base_commit, platform.name)
                if tampered:  # a run without a verdict of its own: it must run again
                    outcome.update(status="failed", phase="server", error=tampered)
                elif platform.measure:
                    analysis = figures.analyze(outcome, exp.launch)
                    analysis.primary = analysis.metric(exp.launch.metric)
                passed, summary = platforms_.judge(platform, outcome, analysis.verdict,
                                                   analysis.primary.delta_pct if analysis.primary else None)
                self._append(PlatformRecord(**here, status=outcome.get("status", "failed"), worker=event.get("worker"),
                                            cost_usd=event.get("cost_usd"), outcome=Outcome.model_validate(outcome),
                                            analysis=analysis, passed=passed, summary=summary))
        except Exception:  # an event must never kill the executor's thread
            log.exception("could not record event %s of %s on %s", kind, exp_id, platform.name)

    def _unchecked_platforms(self, exp: ExperimentState) -> list[Platform]:
        """The platforms where a host winner's run ended without a verdict of its own (cancelled, lost,
        or a worker or cloud error)."""
        if not (exp.status == "done" and exp.verdict == "improved") or exp.commit:
            return []
        return [p for p in self.platforms[1:] if p.name in exp.platforms
                and exp.platforms[p.name].status in FINAL_STATUSES and exp.platforms[p.name].passed is None]

    def _recheck(self, exp: ExperimentState) -> LaunchResult:
        """Run a host winner's unfinished platforms again; the host's measurement stands (no new alpha)."""
        with self._lock:
            running = _platforms_running(exp)
            if running:
                raise RefusedError(f"experiment {exp.experiment_id} is still being checked on {', '.join(running)}; "
                                   "wait for it")
            again = self._unchecked_platforms(exp)
            queued = self._queue_platforms(exp, again)
        self._start_platforms(exp, queued)
        names = ", ".join(p.name for p in again)
        return LaunchResult(
            experiment_id=exp.experiment_id, status=exp.status, base_commit=exp.launch.base_commit,
            candidate_commit=exp.launch.candidate_commit, changed_files=list(exp.launch.changed_files),
            repeats=exp.launch.repeats,
            message=(f"experiment {exp.experiment_id}'s host result stands; it is checked again on {names}. Poll "
                     f"fetch_sky_logs('{exp.experiment_id}')"))

    def _platform_note(self, exp: ExperimentState) -> str | None:
        """Why a host winner cannot be committed yet because of another platform, or None."""
        return platforms_.refusal(exp.experiment_id, self.platforms[1:], exp.platforms)

    # --- reading ---------------------------------------------------------------------------------

    def fetch(self, experiment_id: str, tail_lines: int, wait_s: float = 0.0, samples: bool = False) -> FetchResult:
        """The experiment as it stands; with `wait_s`, first wait up to that long for its status to change
        (telling `progress` each pair meanwhile). Raw samples only with `samples`."""
        if not 0 <= tail_lines <= MAX_TAIL_LINES:
            raise InputError(f"tail_lines must be between 0 and {MAX_TAIL_LINES}, not {tail_lines}")
        if not 0 <= wait_s <= MAX_WAIT_S:
            raise InputError(f"wait_s must be between 0 and {MAX_WAIT_S:g} seconds, not {wait_s:g}")
        exp = self._get(experiment_id)
        if wait_s and (exp.status not in FINAL_STATUSES or _platforms_running(exp)):
            self._wait_reporting(exp, wait_s)
            exp = self._get(experiment_id)
        log_path = self.logs / f"{experiment_id}.log"
        outcome = exp.outcome
        design = stats.load_design(exp.launch.design)
        checks = ChecksResult.model_validate(exp.checks.model_dump(exclude_unset=True)) if exp.checks else None
        judged = {exp.launch.metric, *exp.launch.objectives, *exp.launch.guards}
        noise_note = exp.analysis.noise_note
        return FetchResult(
            experiment_id=experiment_id, title=exp.title, status=exp.status,
            verdict=exp.verdict, worker=exp.worker, base_commit=exp.launch.base_commit,
            candidate_commit=exp.launch.candidate_commit, log_tail=_tail(log_path, tail_lines),
            log_path=str(log_path),
            metrics={k: _shown(v, k in judged, samples, noise_note) for k, v in exp.metrics.items()},
            won=list(exp.analysis.won), blocking=list(exp.analysis.blocking),
            checks=checks, confidence_level=1 - design.alpha,
            pairs_done=self._pairs_done.get(experiment_id, 0) if exp.result is None
            else figures.pair_count(outcome),
            stop_reason=outcome.stop_reason, durations_s=outcome.durations,
            build=outcome.build, host=outcome.host, noise_cv=exp.analysis.noise_cv,
            noise_note=noise_note, focus=list(exp.launch.focus), claims=_claims(exp),
            layout_pct=(exp.analysis.model_extra or {}).get("layout_pct"),
            error=outcome.error or exp.status_detail, cost_usd=figures.experiment_cost(exp),
            warnings=self._drift_warnings(exp) + figures.unconfined_warning([exp]) + _disagreement(exp),
            next_step=self._next_step(exp),
            platforms=[platforms_.result_of(p, exp.platforms.get(p.name), exp.launch.incremental)
                       for p in self.platforms[1:]],
        )

    def _drift_warnings(self, exp: ExperimentState) -> list[str]:
        primary = exp.metric(self.config.metric)
        reference = figures.validation_runs(self.view.sessions, self.config.session_id, self.config.metric,
                                            exp.launch.base_commit)
        warning = figures.drift_warning(reference, list(primary.baseline.samples) if primary else [],
                                        self.config.drift_limit)
        return [warning] if warning else []

    def _next_step(self, exp: ExperimentState) -> str | None:
        verdict = exp.verdict
        if exp.status not in FINAL_STATUSES:
            return "still running: poll again later, and prepare the next idea meanwhile"
        if exp.commit:
            return f"committed as {exp.commit.commit[:12]}"
        if exp.status == "checks_failed":
            return "the checks failed: the change is not correct; read the log tail, fix, launch again"
        if verdict == "improved" and exp.status == "done" and not exp.launch.incremental:
            note = self._platform_note(exp)
            if note:
                return note
        if verdict == "improved":
            return f"call commit_winner('{exp.experiment_id}', title) to keep it"
        if verdict in _REMEASURE:
            why = _not_continuable(exp)
            # the noise itself is said once, in noise_note
            noise = f"{verdict} (see noise_note)" if exp.analysis.noise_note else "not decided yet"
            if why:
                return f"{noise}; {why}"
            further = (f"launch_experiment(source='experiment', experiment_id='{exp.experiment_id}') pools more pairs "
                       "with these under one design")
            if verdict == "noisy":
                return (f"{noise}. More pairs at this noise are unlikely to decide: make the machine or the benchmark "
                        f"steadier, then {further}")
            need = exp.analysis.pairs_needed
            n = exp.metric(self.config.metric).n_pairs
            more = f"; about {need - n} more pairs would decide with 80% power" if need else ""
            return f"not decided yet: {further}{more}"
        if verdict == "invalid":
            return "a run lacked the primary metric: read the log and fix the benchmark or the crash"
        return None

    def list(self, status: str | None) -> ListExperimentsResult:
        items = []
        kept = discarded = running = 0
        totals: dict[str, float] = {}
        mine = sorted(self._mine(), key=lambda e: float(e.launch.ts))
        for exp in mine:
            outcome = exp.outcome
            for phase, seconds in outcome.durations.items():
                totals[phase] = round(totals.get(phase, 0.0) + float(seconds), 3)
            for build in outcome.build.values():
                for key, count in (build.get("cache") or {}).items():
                    totals[f"cache_{key}"] = totals.get(f"cache_{key}", 0) + count
            if exp.commit:
                kept += 1
            elif exp.status in FINAL_STATUSES and not _platforms_running(exp):
                discarded += 1
            else:
                running += 1  # a host winner still being checked on other platforms is still running
            if status is None or exp.status == status:
                items.append(self._summary(exp))
        best = figures.best([e for e in mine if not e.launch.focus], self.config.metric, self.config.direction)
        totals_measured = [e for e in mine if e.launch.source == "session" and e.result is not None]
        chained = figures.chained_pct(mine, self.config.metric)
        return ListExperimentsResult(experiments=items, best=best and self._summary(best), kept=kept,
                                     session_total=self._summary(totals_measured[-1]) if totals_measured else None,
                                     session_claim=self.session_claim(),
                                     estimated_total_pct=chained,
                                     discarded=discarded, running=running,
                                     cost_usd=round(figures.session_cost(mine, profiles=self._profiles()), 4),
                                     totals=totals,
                                     warnings=list(self.view.warnings) + figures.unconfined_warning(mine))

    def _summary(self, exp: ExperimentState) -> ExperimentSummary:
        primary = exp.metric(self.config.metric)
        return ExperimentSummary(
            experiment_id=exp.experiment_id, title=exp.title, status=exp.status,
            verdict=exp.verdict, delta_pct=primary.delta_pct,
            ci_low_pct=primary.ci_low_pct, ci_high_pct=primary.ci_high_pct,
            ci_level=(primary.model_extra or {}).get("ci_level"), n_pairs=primary.n_pairs,
            sources=list(exp.launch.sources),
            kept=exp.commit is not None, commit=exp.commit.commit if exp.commit else None,
            cost_usd=figures.experiment_cost(exp), focus=list(exp.launch.focus),
            focus_delta_pct=exp.metric(_lead_metric(exp)).delta_pct if exp.launch.focus else None,
            source=exp.launch.source, claims=_claims(exp),
        )

    def session_claim(self) -> str:
        """What the session's latest measured total showed of each objective's tolerance, and at which head."""
        totals = [e for e in self._mine() if e.launch.source == "session" and e.result is not None]
        if not totals:
            return ("session total not yet measured: launch_experiment(source='session') proves the objectives' "
                    "tolerances end to end")
        latest = totals[-1]
        shown = "; ".join(_claims(latest)) or f"session total {latest.verdict or latest.status}"
        head = latest.launch.candidate_commit
        return shown + ("" if head == self.session_head() else f" (measured at {head[:12]}, before later commits)")

    # --- control ---------------------------------------------------------------------------------

    def cancel(self, experiment_id: str) -> CancelResult:
        exp = self._get(experiment_id)
        checking = _platforms_running(exp)
        for name in checking:
            if not self.executor.cancel(platforms_.platform_job(experiment_id, name, exp.platforms[name])):
                self._append(PlatformRecord(experiment_id=experiment_id, platform=name, status="cancelled"))
        if checking:
            self._wait(experiment_id, lambda e: not _platforms_running(e), timeout=15.0)
        if exp.status in FINAL_STATUSES:
            return CancelResult(experiment_id=experiment_id, status=exp.status, message=(
                f"already {exp.status}; its runs on {', '.join(checking)} were cancelled" if checking
                else f"already {exp.status}; nothing to cancel"))
        if not self.executor.cancel(experiment_id):
            self._append(StatusRecord(experiment_id=experiment_id, status="cancelled"))
        else:
            self._wait(experiment_id, lambda e: e.status in FINAL_STATUSES, timeout=15.0)
        exp = self._get(experiment_id)
        return CancelResult(experiment_id=experiment_id, status=exp.status,
                            message="cancelled: every process it started was killed; finished builds stay cached "
                                    "for reuse, unfinished ones are discarded"
                            if exp.status == "cancelled" else f"finished as {exp.status} before the cancel")

    def commit_winner(self, experiment_id: str, title: str | None) -> CommitResult:
        with self._commit_lock:
            self.check_branch()
            exp = self._get(experiment_id)
            verdict = exp.verdict
            if exp.commit:
                raise RefusedError(f"experiment {experiment_id} is already committed as {exp.commit.commit}")
            if exp.launch.source == "session":
                raise RefusedError(f"experiment {experiment_id} measures the session's commits together (the head "
                                   "against the session's start): it is the measured total, not a change to commit")
            if exp.status not in FINAL_STATUSES:
                raise RefusedError(f"experiment {experiment_id} is still {exp.status}; wait for its verdict")
            if exp.status == "checks_failed":
                raise RefusedError(f"experiment {experiment_id}'s checks did not pass; a change that is not "
                                   "correct is never committed. Fix it and launch again")
            blocked = self._blocked_reason(exp)
            if verdict != "improved" and blocked:
                raise RefusedError(f"experiment {experiment_id} is {verdict!r}: {blocked}")
            if verdict != "improved":
                why = exp.metric(_lead_metric(exp)).model_extra or {}
                raise RefusedError(
                    f"experiment {experiment_id} is {exp.status} with verdict {verdict!r}, not 'improved': only a "
                    "significant improvement beyond the minimum effect is committed"
                    + (f" ({why['note']})" if why.get("note") else "")
                    + (f" (measure it further: launch_experiment(source='experiment', experiment_id='{experiment_id}'))"
                       if verdict in _REMEASURE and not _not_continuable(exp) else ""))
            if not (exp.checks and exp.checks.passed):
                raise RefusedError(f"experiment {experiment_id}'s checks did not pass; a change that is not "
                                   "correct is never committed. Fix it and launch again")
            if exp.launch.incremental:
                raise RefusedError(
                    f"experiment {experiment_id} was measured on an incremental build, where a stale object could "
                    "fake a gain; confirm it on a clean, cache-backed build first: launch_experiment(source='commit', "
                    f"commit='{exp.launch.candidate_commit}', clean_build=true), then commit that experiment")
            blocked = self._platform_note(exp)
            if blocked:
                raise RefusedError(blocked)
            head = self.session_head()
            if exp.launch.base_commit != head:
                raise RefusedError(
                    f"experiment {experiment_id} was measured against {exp.launch.base_commit[:12]}, but the "
                    f"session head is now {head[:12]}: its gain may not hold on top of the new head. Measure it "
                    f"again on the new head (launch_experiment(source='experiment', experiment_id='{experiment_id}') "
                    "re-applies its change there) and commit that")
            title = one_line(title, "title") if title is not None else exp.title
            hidden = self._holdout(exp)
            drift = self._baseline_drift(exp.launch.base_commit)  # after the measurement and the holdout
            if drift:
                self._fail(experiment_id, drift)
                raise StateError(drift)
            tree = exp.launch.candidate_tree
            # again at commit time: the rules may have changed since the launch (they never loosen here)
            self._refuse_protected(gitops.changed_paths(self.repo, head, exp.launch.candidate_commit))
            message = self._message(exp, title, hidden)
            new = gitops.commit_tree(self.repo, tree, head, message)
            with self._branch_lock:
                self._check_branch_locked()  # the holdout ran jobs too
                updated = self._advance(head, new)
                self._append(CommitRecord(experiment_id=experiment_id, commit=new, parent=head,
                                          branch=self.config.branch, title=title))
            return CommitResult(commit=new, branch=self.config.branch, message=message, worktree_updated=updated,
                                holdout=_holdout_summary(hidden))

    def _advance(self, old: str, new: str) -> bool:
        """Move the session branch from old to new; update the work tree if it is on that branch."""
        on_branch = gitops.current_branch(self.repo) == self.config.branch
        if on_branch:
            # git replaces ignored files without asking; the user's files are never ours to replace
            in_the_way = gitops.untracked_in_the_way(self.repo, old, new)
            if in_the_way:
                shown = ", ".join(in_the_way[:10]) + (f" and {len(in_the_way) - 10} more" if len(in_the_way) > 10
                                                      else "")
                raise RefusedError(
                    f"the winner adds {shown}, which exist in the work tree untracked or ignored: committing would "
                    "overwrite them. Move them away (or rename them), then call commit_winner again")
            try:
                gitops.fast_forward(self.repo, new)
            except gitops.GitError as exc:
                raise StateError(
                    "the work tree has changes that the winner would overwrite; commit, stash or launch them "
                    f"(restore_worktree=true) first. git said: {(exc.stderr or '').strip()[:400]}") from None
            return True
        # compare-and-swap: refuse if someone moved the branch meanwhile
        gitops.update_ref(self.repo, f"refs/heads/{self.config.branch}", new, old)
        return False

    @staticmethod
    def _blocked_reason(exp: ExperimentState) -> str | None:
        """Which objective won and which objective or guard refused it, with the figures."""
        blocking = exp.analysis.blocking
        judged = {*exp.launch.objectives, *exp.launch.guards}
        if not blocking or len(judged) < 2:
            return None  # one judged metric: its verdict says it all
        won = exp.analysis.won
        parts = []
        for name in blocking:
            m = exp.metric(name)
            claim = (m.model_extra or {}).get("claim")
            what = (f"{m.role} {name} {m.judgement}: {_figure(m)}"
                    + (f", tolerance {m.tolerance_pct:g}%" if m.tolerance_pct is not None else "")
                    + (f" ({claim})" if claim else ""))
            if m.judgement == "undecided":
                what += (" (its interval reaches beyond the tolerance: launch again with more pairs"
                         + (f", about {m.pairs_needed}" if m.pairs_needed else "") + ")")
            parts.append(what)
        lead = (f"objective {', '.join(f'{n} improved ({_figure(exp.metric(n))})' for n in won)}, but "
                if won else "")
        return lead + "; ".join(parts) + ". A winner may regress no objective and no guard beyond its tolerance"

    def _holdout(self, exp: ExperimentState) -> holdout.HoldoutOutcome | None:
        """Run the hidden holdout's A/B and refuse the winner if it regressed; None without a holdout."""
        c = self.config
        if c.holdout is None:
            return None
        if self.worktrees is None:
            raise StateError("the holdout needs local worktrees; restart the session with start_session")
        launch = exp.launch
        directions: dict[str, str] = {name: g.direction for name, g in c.guards.items()}
        # the holdout only looks for a regression, which its fixed pairs can show from the design's first look
        design = stats.make_design("auto", alpha=c.alpha, min_effect=c.min_effect,
                                   noise_limit=c.noise_limit, max_pairs=c.max_pairs, warmup=0)
        outcome = holdout.run(
            c.holdout, JobMaker(self.repo, c, self.env), self.worktrees, launch.base_commit, launch.candidate_commit,
            (gitops.tree_of(self.repo, launch.base_commit), launch.candidate_tree), directions, design)
        self._append(HoldoutRecord(experiment_id=exp.experiment_id, verdict=outcome.verdict, pairs=outcome.pairs,
                                   metrics=outcome.metrics, seed=outcome.seed, samples=outcome.samples))
        if outcome.regressed:
            shown = "; ".join(f"{n} {_figure(outcome.metrics[n])}" for n in outcome.regressed)
            raise RefusedError(
                f"experiment {exp.experiment_id} improved the benchmark, but the hidden holdout regressed beyond "
                f"{c.holdout.tolerance_pct:g}% ({shown}, {outcome.pairs} pairs): the gain does not carry over, "
                "so it is not committed. Look for a change that helps both")
        return outcome

    def _message(self, exp: ExperimentState, title: str, hidden: holdout.HoldoutOutcome | None = None) -> str:
        c = self.config
        launch = exp.launch
        design = stats.load_design(launch.design)
        outcome = exp.outcome
        lines = [title.strip(), ""]
        if launch.hypothesis:
            lines += [_quoted("Hypothesis: " + launch.hypothesis), ""]
        if launch.sources:
            lines += ["Sources:"] + [f"- {_quoted(' '.join(str(s).split()))}" for s in launch.sources] + [""]
        lead = _lead_metric(exp)
        m = exp.metric(lead)
        better = (launch.judging or {}).get("focus_direction", c.direction) if launch.focus else c.direction
        level = round(100 * float((m.model_extra or {}).get("ci_level") or (1 - design.alpha)))
        lines.append(
            f"Result: {lead} {m.baseline.mean:.6g} -> {m.candidate.mean:.6g} (means of this experiment's own runs; "
            f"the session's baseline is start_session's) "
            f"({m.delta_pct:+.2f}%, {level}% CI [{m.ci_low_pct:+.2f}%, {m.ci_high_pct:+.2f}%], "
            + (f"p={m.p_value:.2g}, " if m.p_value is not None else "")
            + f"{m.n_pairs} interleaved pairs; {better} is better)")
        extra = m.model_extra or {}
        if extra.get("mean_pct") is not None:
            lines.append(f"  average run {extra['mean_pct']:+.2f}% [{extra['mean_low_pct']:+.2f}%, "
                         f"{extra['mean_high_pct']:+.2f}%]; worst 5% of runs {extra.get('tail_pct') or 0:+.2f}%")
        if launch.focus:
            layout = (exp.analysis.model_extra or {}).get("layout_pct")
            lines.append(f"Focus: {', '.join(launch.focus)} (the op level; end to end below)"
                         + (f"; untouched controls moved at most {layout:.2f}%" if layout is not None else ""))
        claims = _claims(exp)
        if launch.focus:
            lines.append("Claims: " + "; ".join([*claims, self.session_claim()]))
        won = exp.analysis.won
        if won and not launch.focus:
            objectives = exp.launch.objectives or [c.metric]
            lines.append(f"Won: {', '.join(won)} (objectives: {', '.join(objectives)})")
        for name, other in sorted(exp.metrics.items()):
            if name != lead and other.delta_pct is not None:
                margin = (other.model_extra or {}).get("margin_pct") or other.tolerance_pct
                role = (f" ({other.role}, {other.judgement}"
                        + (f" within {round(margin, 1):g}%" if margin is not None else "")
                        + ")") if other.role else ""
                lines.append(f"  {'end to end' if launch.focus and other.role == 'guard' else 'also'} {name}: "
                             f"{_figure(other)}{role}")
        ran = bool(outcome.checks and outcome.checks.ran)
        took = outcome.checks.duration_s if outcome.checks else None
        lines.append("Checks: " + ("passed (autoresearch.checks.sh" + (f", {took:.1f} s)" if took else ")")
                                   if ran else "none configured (no autoresearch.checks.sh)"))
        if hidden is not None:
            lines.append(f"Holdout: {hidden.verdict} over {hidden.pairs} pairs ("
                         + "; ".join(f"{n} {_figure(m)}" for n, m in sorted(hidden.metrics.items())) + ")")
        host = outcome.host
        if host:
            lines.append(f"Measured on: {exp.worker or 'local'} ({host.get('cpu_model') or '?'}, "
                         f"{host.get('cpus')} CPUs)")
        platform_results: dict[str, str] = {}
        if len(self.platforms) > 1:
            first = self.platforms[0]
            platform_results[first.name] = (f"{exp.verdict} {m.delta_pct:+.2f}%, checks "
                                            + ("passed" if ran else "none"))
            for p in self.platforms[1:]:
                platform_results[p.name] = str(exp.platforms[p.name].summary if p.name in exp.platforms else None)
            labels = {p.name: p.label for p in self.platforms}
            lines += ["Platforms:"] + [f"- {labels[n]}: {text.splitlines()[0] if text else ''}"
                                       for n, text in platform_results.items()]
        lines.append(f"Files: {', '.join(launch.changed_files)}")
        result: dict[str, Any] = {"metric": lead, "direction": better, "delta_pct": m.delta_pct,
                  "ci_low_pct": m.ci_low_pct, "ci_high_pct": m.ci_high_pct, "confidence": 1 - design.alpha,
                  "p_value": m.p_value, "n_pairs": m.n_pairs, "baseline_mean": m.baseline.mean,
                  "candidate_mean": m.candidate.mean, "verdict": exp.verdict, "won": won,
                  "base_commit": launch.base_commit}
        if launch.focus:
            result["claims"] = [*claims, self.session_claim()]
            result["focus"] = list(launch.focus)
            result["end_to_end"] = {name: {"delta_pct": o.delta_pct, "ci_low_pct": o.ci_low_pct,
                                           "ci_high_pct": o.ci_high_pct, "judgement": o.judgement}
                                    for name, o in sorted(exp.metrics.items()) if o.role == "guard"}
        if platform_results:
            result["platforms"] = platform_results
        lines += ["", f"{branch.TRAILER}: {exp.experiment_id}",
                  "Autoresearch-Result: " + json.dumps(result, separators=(",", ":"))]
        return "\n".join(lines) + "\n"


_TRAILER_LIKE = re.compile(r"^(\s*)(autoresearch-[\w-]*\s*:)", re.IGNORECASE | re.MULTILINE)
MAX_TITLE = 200


def one_line(text: str, what: str) -> str:
    """A title: one line of printable text (a newline could forge a commit's trailers)."""
    text = text.strip()
    if not text:
        raise InputError(f"{what} is empty; give a short name")
    if any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in text):
        raise InputError(f"{what} must be one line without control characters (newlines, tabs, escapes); "
                         "put details in the hypothesis")
    if len(text) > MAX_TITLE:
        raise InputError(f"{what} is {len(text)} characters; keep it to {MAX_TITLE} (details go in the hypothesis)")
    return text


def _quoted(text: str) -> str:
    """Free text for a commit message: a line that looks like one of the server's trailers is quoted, so
    only the server writes Autoresearch-* trailers."""
    return _TRAILER_LIKE.sub(r"\1> \2", text)


def _claims(exp: ExperimentState) -> list[str]:
    """What an experiment showed, each claim at its level (measure/metrics.py `analyze`)."""
    return [str(c) for c in (exp.analysis.model_extra or {}).get("claims") or []]


def _lead_metric(exp: ExperimentState) -> str:
    """The metric an experiment is decided on: its (first) focus metric, else the primary metric."""
    focus = sorted(name for name, m in exp.metrics.items() if m.role == "focus")
    return focus[0] if focus else exp.launch.metric


def _platforms_running(exp: ExperimentState) -> list[str]:
    """The other platforms still checking `exp`."""
    return [name for name, p in exp.platforms.items() if p.status not in FINAL_STATUSES]


def _progress(exp: ExperimentState) -> tuple[str, ...]:
    """The statuses a waiting fetch watches: the experiment's and those of its other platforms."""
    return (exp.status, *(f"{name}={p.status}" for name, p in sorted(exp.platforms.items())))


def _duplicate(other: ExperimentState) -> str:
    """Why a new launch of the candidate `other` measures on the same head is refused, and what to do."""
    same = (f"this candidate is identical to experiment {other.experiment_id} ({other.title!r}, {other.status}"
            + (f", {other.verdict}" if other.verdict else "") + ") on the same head")
    why = _not_continuable(other)
    if not why and (other.verdict in _REMEASURE or other.status in _RETRYABLE):
        return (f"{same}: a new experiment would test it again with a fresh alpha. Measure it further instead: "
                f"launch_experiment(source='experiment', experiment_id='{other.experiment_id}') pools more pairs "
                "under its design")
    return f"{same}; read it with fetch_sky_logs instead" + (f" ({why})" if other.verdict in _REMEASURE else "")


def _not_continuable(exp: ExperimentState) -> str | None:
    """Why more pairs cannot be added to `exp` (None: they can)."""
    if exp.commit:
        return "it is committed"
    if exp.status in _RETRYABLE:
        return None  # the last round did not finish: measure it again, pooled with the rounds that did
    verdict = exp.verdict
    if exp.status == "checks_failed":
        return "its checks failed; fix the change and launch it as a new experiment"
    if verdict not in _REMEASURE:
        return (f"its verdict is {verdict!r}, already a decision" if verdict in _DECIDED
                else f"it ended {exp.status} with verdict {verdict!r}; fix the cause and launch a new experiment")
    n = exp.metric(exp.launch.metric).n_pairs
    design = stats.load_design(exp.launch.design)
    limit = design.limit if isinstance(design, stats.Design) else design.budget
    if n >= limit:
        return (f"it used every pair its design allows ({limit}); more would spend a fresh alpha. Treat it as "
                "no gain, or make the benchmark steadier")
    return None


def _holdout_summary(hidden: holdout.HoldoutOutcome | None) -> HoldoutSummary | None:
    if hidden is None:
        return None
    return HoldoutSummary(verdict=hidden.verdict, pairs=hidden.pairs,
                          delta_pct={n: m["delta_pct"] for n, m in hidden.metrics.items()})


def _planned_pairs(exp: ExperimentState) -> int | None:
    """The most pairs the experiment's current round may run (its design's last stop)."""
    stops = exp.continued.stops if exp.continued else exp.launch.design.get("stops")
    return int(stops[-1]) if stops else None


def _shown(m: Comparison, judged: bool, samples: bool, noise_note: str | None) -> ComparisonResult:
    """One metric as fetch shows it: raw samples only when asked for; a metric nobody judges (not an
    objective, guard, focus or control) without a verdict or a direction, whatever an older record says;
    its note left out when the experiment's noise_note already says it."""
    shown = ComparisonResult.model_validate(m.model_dump(exclude_unset=True))
    update: dict[str, Any] = {}
    if not samples:
        update.update(baseline=_without_samples(shown.baseline), candidate=_without_samples(shown.candidate))
    if shown.role is None and not judged:
        update.update(verdict=None, direction=None, judgement=None, pairs_needed=None)
    if shown.note and noise_note and shown.note in noise_note:
        update["note"] = None
    return shown.model_copy(update=update) if update else shown


def _without_samples(summary: MetricSummary) -> MetricSummary:
    return summary.model_copy(update={"samples": []}) if summary.samples else summary


def _figure(m: Comparison | dict[str, Any]) -> str:
    """`+1.23% [+0.50%, +2.00%]`, or `no interval` when a metric has none (a holdout's is a dict)."""
    c = m if isinstance(m, Comparison) else Comparison.model_validate(m)
    if c.delta_pct is None or c.ci_low_pct is None or c.ci_high_pct is None:
        return "no interval"
    level = (c.model_extra or {}).get("ci_level")
    return (f"{c.delta_pct:+.2f}% [{c.ci_low_pct:+.2f}%, {c.ci_high_pct:+.2f}%]"
            + (f" ({float(level):.0%} CI)" if level else ""))


TAIL_BYTES = 32 * 1024


def _tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log, at most TAIL_BYTES of them (one 10 MB line is not a tail)."""
    if lines == 0:
        return ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # a planted link is not read through
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - TAIL_BYTES))
        text = fh.read().decode("utf-8", errors="replace")
    cut = "[... earlier output cut]\n" if size > TAIL_BYTES else ""
    return cut + "\n".join(text.splitlines()[-lines:])


def _disagreement(exp: ExperimentState) -> list[str]:
    """A focus and the end-to-end objectives that tell different stories (decide.focus_disagreement)."""
    said = (exp.analysis.model_extra or {}).get("disagreement")
    return [said] if isinstance(said, str) and said else []
