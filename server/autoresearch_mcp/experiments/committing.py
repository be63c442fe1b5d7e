"""commit_winner: what may be committed (a significant winner whose checks, holdout and platforms passed, on
the current head), and moving the session branch onto it."""

from __future__ import annotations

from autoresearch_mcp.errors import RefusedError, StateError
from autoresearch_mcp.experiments import designs, events, focus, holdout, launching, message, readouts
from autoresearch_mcp.experiments.manager import ExperimentManager
from autoresearch_mcp.git import gitops
from autoresearch_mcp.measure import stats
from autoresearch_mcp.models import FINAL_STATUSES, CommitResult, HoldoutSummary
from autoresearch_mcp.store.ledger import ExperimentState
from autoresearch_mcp.store.records import CommitRecord, HoldoutRecord


def commit_winner(manager: ExperimentManager, experiment_id: str, title: str | None) -> CommitResult:
    """Commit a proven winner onto the session branch, with its evidence in the message; refuse anything else."""
    with manager.commit_lock:
        manager.check_branch()
        exp = manager.get(experiment_id)
        head = manager.session_head()
        _refuse_uncommittable(manager, exp, head)
        evidence = _evidence(manager, exp, message.one_line(title, "title") if title is not None else exp.title)
        drift = manager.baseline_drift(exp.launch.base_commit)  # after the measurement and the holdout
        if drift:
            events.fail(manager, experiment_id, drift)
            raise StateError(drift)
        # again at commit time: the rules may have changed since the launch (they never loosen here)
        launching.refuse_protected(manager.config,
                                   gitops.changed_paths(manager.repo, head, exp.launch.candidate_commit))
        text = message.commit_message(evidence)
        new = gitops.commit_tree(manager.repo, exp.launch.candidate_tree, head, text)
        with manager.branch_lock:
            manager.check_branch_locked()  # the holdout ran jobs too
            updated = _advance(manager, head, new)
            manager.append(CommitRecord(experiment_id=experiment_id, commit=new, parent=head,
                                        branch=manager.config.branch, title=evidence.title))
        return CommitResult(commit=new, branch=manager.config.branch, message=text, worktree_updated=updated,
                            holdout=_holdout_summary(evidence.hidden), revisit=revisit(manager, exp))


def _evidence(manager: ExperimentManager, exp: ExperimentState, title: str) -> message.Evidence:
    """The evidence of a winner's commit, gathered once: a focus-only win's code seen running in the program (and
    each member's, for winners kept together on their own evidence), the hidden holdout (refused when it regressed),
    the session's measured total beside a focus win's claims, the members and the platforms."""
    launch = exp.launch
    members = tuple(manager.get(member_id) for member_id in launch.combines)
    seen = focus.seen_running(manager, exp) if focus.rests_on_focus(exp) else None
    for member in members if (launch.judging or {}).get("carried") else ():
        # each win its own evidence carries: on code the program runs
        seen = "; ".join(filter(None, [seen, f"{member.title}: {focus.seen_running(manager, member)}"]))
    hidden = _holdout(manager, exp)
    return message.Evidence(exp, title, manager.config.metric, manager.config.direction,
                            readouts.session_claim(manager) if launch.focus else None, members,
                            tuple(manager.platforms), hidden, seen)


REVISITED = frozenset({"no_change", "inconclusive"})


def revisit(manager: ExperimentManager, kept: ExperimentState) -> list[str]:
    """The discarded experiments (no_change or inconclusive, never committed) whose files the change just kept
    touched too: the head they were measured on is gone, and the code they act on moved, so each is offered again
    (pi-autoresearch's revisiting of discards), with the call that re-applies it."""
    touched = set(kept.launch.changed_files)
    out = []
    for tried in manager.mine():
        if tried.experiment_id == kept.experiment_id or tried.commit or tried.verdict not in REVISITED \
                or tried.launch.source == "session":
            continue
        shared = sorted(touched & set(tried.launch.changed_files))
        if shared:
            out.append(f"{tried.experiment_id} ({tried.title!r}, {tried.verdict}) changes {', '.join(shared[:3])} "
                       f"too: launch_experiment(source='experiment', experiment_id='{tried.experiment_id}') "
                       "measures it again on the new head")
    return out[:10]


def _refuse_uncommittable(manager: ExperimentManager, exp: ExperimentState, head: str) -> None:
    """Refuse (RefusedError, with the reason and what to do) anything but a significant winner whose checks
    and platforms passed, measured on a clean build against the session head `head`."""
    experiment_id = exp.experiment_id
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
    blocked = _blocked_reason(exp)
    if verdict != "improved" and blocked:
        raise RefusedError(f"experiment {experiment_id} is {verdict!r}: {blocked}")
    if verdict != "improved":
        note = exp.metric(readouts.lead_metric(exp)).note
        raise RefusedError(
            f"experiment {experiment_id} is {exp.status} with verdict {verdict!r}, not 'improved': only a "
            "significant improvement beyond the minimum effect is committed"
            + (f" ({note})" if note else "")
            + (f" (measure it further: launch_experiment(source='experiment', experiment_id='{experiment_id}'))"
               if verdict in designs.REMEASURE and not designs.not_continuable(exp) else ""))
    if not exp.checks_passed:
        raise RefusedError(f"experiment {experiment_id}'s checks did not pass; a change that is not "
                           "correct is never committed. Fix it and launch again")
    if exp.launch.incremental:
        raise RefusedError(
            f"experiment {experiment_id} was measured on an incremental build, where a stale object could "
            "fake a gain; confirm it on a clean, cache-backed build first: launch_experiment(source='commit', "
            f"commit='{exp.launch.candidate_commit}', clean_build=true), then commit that experiment")
    blocked = manager.platform_note(exp)
    if blocked:
        raise RefusedError(blocked)
    if exp.launch.base_commit != head:
        raise RefusedError(
            f"experiment {experiment_id} was measured against {exp.launch.base_commit[:12]}, but the "
            f"session head is now {head[:12]}: its gain may not hold on top of the new head. Measure it "
            f"again on the new head (launch_experiment(source='experiment', experiment_id='{experiment_id}') "
            "re-applies its change there) and commit that")


def _advance(manager: ExperimentManager, old: str, new: str) -> bool:
    """Move the session branch from old to new; update the work tree if it is on that branch."""
    on_branch = gitops.current_branch(manager.repo) == manager.config.branch
    if on_branch:
        # git replaces ignored files without asking; the user's files are never ours to replace
        in_the_way = gitops.untracked_in_the_way(manager.repo, old, new)
        if in_the_way:
            shown = ", ".join(in_the_way[:10]) + (f" and {len(in_the_way) - 10} more" if len(in_the_way) > 10
                                                  else "")
            raise RefusedError(
                f"the winner adds {shown}, which exist in the work tree untracked or ignored: committing would "
                "overwrite them. Move them away (or rename them), then call commit_winner again")
        try:
            gitops.fast_forward(manager.repo, new)
        except gitops.GitError as exc:
            raise StateError(
                "the work tree has changes that the winner would overwrite; commit, stash or launch them "
                f"(restore_worktree=true) first. git said: {(exc.stderr or '').strip()[:400]}") from None
        return True
    # compare-and-swap: refuse if someone moved the branch meanwhile
    gitops.update_ref(manager.repo, f"refs/heads/{manager.config.branch}", new, old)
    return False


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
        claim = m.claim
        if m.role is None:  # the harness's own measure, which vetoed the change (decide.waiting)
            parts.append(f"the runs' own wall time ({name}, taken by the harness) regressed: {readouts.figure(m)}, "
                         "time no CPU-time metric counts (a sleep, I/O, a lock)")
            continue
        what = (f"{m.role} {name} {m.judgement}: {readouts.figure(m)}"
                + (f", tolerance {m.tolerance_pct:g}%" if m.tolerance_pct is not None else "")
                + (f" ({claim})" if claim else ""))
        if m.judgement == "undecided":
            what += (" (its interval reaches beyond the tolerance: launch again with more pairs"
                     + (f", about {m.pairs_needed}" if m.pairs_needed else "") + ")")
        parts.append(what)
    lead = (f"objective {', '.join(f'{n} improved ({readouts.figure(exp.metric(n))})' for n in won)}, but "
            if won else "")
    return lead + "; ".join(parts) + ". A winner may regress no objective and no guard beyond its tolerance"


def _holdout(manager: ExperimentManager, exp: ExperimentState) -> holdout.HoldoutOutcome | None:
    """Run the hidden holdout's A/B and refuse the winner if it regressed; None without a holdout."""
    c = manager.config
    if c.holdout is None:
        return None
    if manager.here is None:
        raise StateError("the holdout needs this machine's executor; restart the session with start_session")
    launch = exp.launch
    directions: dict[str, str] = {name: g.direction for name, g in c.guards.items()}
    # the holdout only looks for a regression, which its fixed pairs can show from the design's first look
    design = stats.make_design("auto", alpha=c.alpha, min_effect=c.min_effect,
                               noise_limit=c.noise_limit, max_pairs=c.max_pairs, warmup=0)
    outcome = holdout.run(
        c.holdout, manager.jobs, manager.here, launch.base_commit,
        launch.candidate_commit, (gitops.tree_of(manager.repo, launch.base_commit), launch.candidate_tree), directions,
        design)
    manager.append(HoldoutRecord(experiment_id=exp.experiment_id, verdict=outcome.verdict, pairs=outcome.pairs,
                                 metrics=outcome.metrics, seed=outcome.seed, samples=outcome.samples))
    if outcome.regressed:
        shown = "; ".join(f"{n} {readouts.figure(outcome.metrics[n])}" for n in outcome.regressed)
        raise RefusedError(
            f"experiment {exp.experiment_id} improved the benchmark, but the hidden holdout regressed beyond "
            f"{c.holdout.tolerance_pct:g}% ({shown}, {outcome.pairs} pairs): the gain does not carry over, "
            "so it is not committed. Look for a change that helps both")
    return outcome


def _holdout_summary(hidden: holdout.HoldoutOutcome | None) -> HoldoutSummary | None:
    if hidden is None:
        return None
    return HoldoutSummary(verdict=hidden.verdict, pairs=hidden.pairs,
                          delta_pct={n: m["delta_pct"] for n, m in hidden.metrics.items()})
