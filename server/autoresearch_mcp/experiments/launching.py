"""launch_experiment: a candidate (the work tree, a commit, a patch, an earlier experiment's change, or the
session's head) made into a commit and a runner job, refused when it measures nothing new; and more pairs, or
more platforms, for an experiment already measured on the current head."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field

from autoresearch_mcp import recipes
from autoresearch_mcp.errors import InputError, RefusedError, StateError
from autoresearch_mcp.executors.port import Job
from autoresearch_mcp.experiments import designs, events
from autoresearch_mcp.experiments import focus as focus_
from autoresearch_mcp.experiments.manager import ExperimentManager, platforms_running
from autoresearch_mcp.experiments.message import one_line
from autoresearch_mcp.git import gitops
from autoresearch_mcp.measure import figures, stats
from autoresearch_mcp.models import FINAL_STATUSES, LaunchResult
from autoresearch_mcp.store.config import Platform, SessionConfig
from autoresearch_mcp.store.ledger import ExperimentState
from autoresearch_mcp.store.records import ContinueRecord, LaunchRecord

MAX_TOGETHER_TITLE = 120


@dataclass(frozen=True)
class LaunchRequest:
    """One launch_experiment call, as the tool received it (docs: the tool's parameters in app.py)."""

    title: str
    hypothesis: str = ""
    sources: list[str] = field(default_factory=list)
    source: str = "worktree"  # worktree, commit, patch, experiment, experiments or session
    commit: str | None = None  # with source=commit
    patch: str | None = None  # with source=patch
    repeats: int | str | None = None  # pairs, "auto", or None: the config's default
    restore_worktree: bool = False
    clean_build: bool = False
    experiment_id: str | None = None  # with source=experiment
    focus: list[str] | None = None
    experiment_ids: list[str] | None = None  # with source=experiments: winners kept together


def launch(manager: ExperimentManager, request: LaunchRequest) -> LaunchResult:
    """Start one experiment (non-blocking): a new candidate, more pairs for an earlier one, its change
    re-applied on a moved head, or the session's measured total; refused when it measures nothing new."""
    manager.check_branch()
    unconfinable = manager.executor.confinement_problem(manager.config.sandbox)
    if unconfinable:
        raise StateError(unconfinable)
    focus = focus_.names(request.focus)
    if focus:
        recipes.check_focus(recipes.get(manager.config.recipe) if manager.config.recipe else None, focus)
    source, experiment_id = request.source, request.experiment_id
    if source == "experiment":
        if request.commit or request.patch:
            raise InputError("source='experiment' takes experiment_id, neither commit nor patch; drop them")
        if not experiment_id:
            raise InputError("source='experiment' needs experiment_id (the experiment to measure further)")
        earlier = manager.get(experiment_id)
        if focus and focus != list(earlier.launch.focus):
            raise InputError(f"experiment {experiment_id} is judged on focus {earlier.launch.focus or 'none'}; "
                             "measuring it further keeps it: drop focus, or launch the change afresh")
        if _measures_head(manager, earlier):
            if _unchecked_platforms(manager, earlier):
                return _recheck(manager, earlier)
            return _continue(manager, earlier, request.repeats)
        if earlier.launch.source == "session":
            return launch(manager, LaunchRequest(request.title or earlier.title, request.hypothesis, request.sources,
                                                 "session", repeats=request.repeats))
        return _launch_new(manager, dataclasses.replace(
            request, title=request.title.strip() or earlier.title,
            hypothesis=request.hypothesis.strip() or earlier.launch.hypothesis,
            sources=request.sources or list(earlier.launch.sources), focus=list(earlier.launch.focus)), earlier)
    if source == "experiments":
        return _launch_new(manager, dataclasses.replace(request, focus=focus), None,
                           _together(manager, request.experiment_ids or []))
    if request.experiment_ids and source in ("worktree", "commit", "patch"):  # their merge, written by hand
        return _launch_new(manager, dataclasses.replace(request, focus=focus), None,
                           _together(manager, request.experiment_ids, merged=True), merged=True)
    if request.experiment_ids:
        raise InputError("experiment_ids go with source='experiments' (winners combined on the head), or with "
                         "source='worktree', 'commit' or 'patch' (their merge, written by hand); drop them or change "
                         "source")
    if experiment_id:
        raise InputError("experiment_id goes with source='experiment'; drop it or change source")
    if source == "session":
        return _launch_session(manager, request.title, request.hypothesis, request.repeats, focus)
    return _launch_new(manager, dataclasses.replace(request, focus=focus), None)


def _together(manager: ExperimentManager, ids: list[str], merged: bool = False) -> list[ExperimentState]:
    """The winners a source='experiments' launch keeps together: two or more, each improved with its checks
    passed on its own base and not committed yet, in the order given; a merge written by hand may keep one (its
    change redone where the head moved under it)."""
    if len(ids) < (1 if merged else 2) or len(set(ids)) != len(ids):
        raise InputError("source='experiments' needs experiment_ids: two or more different experiments, each "
                         "improved on its own (one alone: source='experiment')")
    out = []
    for exp_id in ids:
        exp = manager.get(exp_id)
        if exp.commit:
            raise RefusedError(f"experiment {exp_id} is already committed as {exp.commit.commit[:12]}; leave it out")
        if exp.verdict != "improved" or not exp.checks_passed or exp.launch.source == "session":
            raise RefusedError(f"experiment {exp_id} is {exp.status} with verdict {exp.verdict!r}: only winners "
                               "(improved, checks passed) are kept together; leave it out")
        out.append(exp)
    return out


def _checked_title(request: LaunchRequest) -> str:
    """The launch's title on one line; refused where it is missing, or where the request asks for what its source
    cannot do."""
    source = request.source
    if not request.title.strip():
        raise InputError(f"title is missing: a launch with source={source!r} needs a short name of the idea "
                         "(only source='experiment' takes the earlier experiment's title)")
    if request.restore_worktree and source != "worktree":
        raise InputError(f"restore_worktree=true only applies to source='worktree' (the work tree is not "
                         f"involved with source={source!r}); drop it")
    return one_line(request.title, "title")


def _refuse_measured(manager: ExperimentManager, head: str, tree: str, incremental: bool) -> None:
    """Refused where an experiment of the session already measures this tree on this head."""
    for other in manager.mine():
        if _measured(other, head, tree, incremental):
            raise RefusedError(_duplicate(other))


def _launch_new(manager: ExperimentManager, request: LaunchRequest, reapplies: ExperimentState | None,
                together: list[ExperimentState] | None = None, merged: bool = False) -> LaunchResult:
    """A new candidate (or the change of `reapplies`, re-applied on the moved head; or the changes of several
    winners `together`, each replayed on the head in turn, those that conflict with one before them left out, or,
    `merged`, their merge as the request's source holds it) made into a commit on the session head, refused when
    it measures nothing new, recorded and submitted."""
    asked = request
    if together:
        request = _together_request(asked, together, merged)
    conflicts: list[str] = []
    source, commit, patch, focus = request.source, request.commit, request.patch, list(request.focus or [])
    hypothesis, sources = request.hypothesis, request.sources
    title = _checked_title(request)
    repeats = designs.checked_repeats(manager.config, request.repeats)
    exp_id = uuid.uuid4().hex[:10]
    with manager.lock:
        manager.first_launch()
        head = manager.session_head()
        base_tree = gitops.tree_of(manager.repo, head)
        if reapplies is not None:
            tree = _reapplied_tree(manager, reapplies, head)
            parent_note = f"source: experiment {reapplies.experiment_id}"
        elif together and not merged:
            tree, together, conflicts = _combined_tree(manager, together, head)
            parent_note = f"source: experiments {', '.join(e.experiment_id for e in together)}"
            if conflicts:  # named for the winners it keeps
                kept = _together_request(asked, together, merged)
                title, hypothesis, sources = one_line(kept.title, "title"), kept.hypothesis, kept.sources
        else:
            tree, parent_note = _candidate_tree(manager, source, commit, patch, head)
        if tree == base_tree:
            raise RefusedError(
                "the candidate is identical to the session head: there is nothing to measure. "
                "Edit the code first (or pass source='commit' / 'patch')")
        candidate = gitops.commit_tree(manager.repo, tree, head, f"autoresearch candidate {exp_id}: {title}"
                                       f"\n\n{parent_note}")
        changed = gitops.changed_paths(manager.repo, head, candidate)
        refuse_protected(manager.config, changed)
        if merged:
            _refuse_unmerged(manager, together or [], head, candidate)
        if source == "worktree":
            _refuse_nested(manager, head, tree)
        incremental = manager.config.incremental and not request.clean_build
        _refuse_measured(manager, head, tree, incremental)
        if focus:
            focus_.check(gitops.diff_hunks(manager.repo, head, candidate), focus)
        gitops.update_ref(manager.repo, gitops.EXP_REF + exp_id, candidate)
        saved = gitops.reset_saving(manager.repo, head, f"autoresearch: before experiment {exp_id}: {title}") \
            if request.restore_worktree else None
        restored = saved is not None
        design = designs.design(manager.config, repeats)
        # winners that each won on its focus alone carry their own evidence: the combination holds the objectives
        carried = bool(together) and not focus and all(focus_.rests_on_focus(e) for e in together or [])
        spec = designs.spec(manager.config, focus, carried=carried)
        record = LaunchRecord(
            experiment_id=exp_id, session_id=manager.config.session_id, title=title.strip(),
            hypothesis=hypothesis.strip(), sources=sources, source=source, base_commit=head,
            candidate_commit=candidate, candidate_tree=tree, changed_files=changed, repeats=repeats,
            design=design.record(), metric=manager.config.metric, direction=manager.config.direction,
            executor=manager.executor.name, incremental=incremental, objectives=spec.objective_names,
            guards=spec.guards, reapplies=reapplies.experiment_id if reapplies else None, focus=focus,
            judging=dataclasses.asdict(spec), combines=[e.experiment_id for e in together or []],
        )
        manager.append(record)
    job = Job(exp_id, head, candidate, manager.logs / f"{exp_id}.log",
              spec=designs.job(manager, design, record, base_tree, tree, incremental, manager.platforms[0]))
    manager.executor.submit(job, events.sink(manager))
    note = _source_note(reapplies, together, merged)
    return LaunchResult(
        experiment_id=exp_id, status="queued", base_commit=head, candidate_commit=candidate,
        changed_files=changed, repeats=repeats, worktree_restored=restored,
        reapplies=reapplies.experiment_id if reapplies else None, conflicts=conflicts,
        message=(f"queued on the {manager.executor.name} executor{note}; poll fetch_sky_logs('{exp_id}') and "
                 "prepare the next idea meanwhile" + (f" (work tree reset to the session head; what it held, "
                                                      f"index and untracked files included, is saved as stash "
                                                      f"{saved[:12]}: `git stash apply --index {saved[:12]}` "
                                                      "brings it back)" if saved else "")
                 + (". " + _keep_conflicting(together or [], conflicts, head, candidate) if conflicts else "")),
    )


def _together_request(request: LaunchRequest, together: list[ExperimentState], merged: bool) -> LaunchRequest:
    """The launch of several winners kept together: their titles and sources, one hypothesis, no focus of its own
    (each winner's focus was its own)."""
    how = ("merged by hand where they change the same lines" if merged
           else "their changes combined on the session head")
    return dataclasses.replace(
        request, title=request.title.strip() or " + ".join(e.title for e in together)[:MAX_TOGETHER_TITLE], focus=[],
        hypothesis=request.hypothesis.strip() or (f"Kept together: each improved on its own; {how}, measured once "
                                                  "against the session head"),
        sources=request.sources or list(dict.fromkeys(s for e in together for s in e.launch.sources)))


def _refuse_unmerged(manager: ExperimentManager, together: list[ExperimentState], head: str, candidate: str) -> None:
    """A merge written by hand keeps each winner it names: it changes lines that winner's own change (applied on
    the head alone) changes, and that change, replayed on the merge, changes nothing more (the merge holds it) or
    collides with what the merge made of those lines. A winner that no longer applies on the head alone is taken
    as redone in the merge."""
    tree = gitops.tree_of(manager.repo, candidate)
    merged = _regions(gitops.diff_hunks(manager.repo, head, candidate))
    missing = []
    for exp in together:
        try:
            alone = gitops.commit_tree(manager.repo, _reapplied_tree(manager, exp, head), head, "autoresearch: alone")
        except RefusedError:
            continue
        own = _regions(gitops.diff_hunks(manager.repo, head, alone))
        touched = any(a < d and c < b for path, spans in own.items() for a, b in spans
                      for c, d in merged.get(path, []))
        try:
            held = _reapplied_tree(manager, exp, candidate) == tree
        except RefusedError:
            held = True  # it collides with lines the merge changed
        if not (touched and held):
            missing.append(exp)
    if missing:
        shown = "; ".join(f"{e.experiment_id} ({e.title!r}, in {', '.join(e.launch.changed_files[:3])})"
                          for e in missing)
        raise RefusedError(f"the change does not hold {shown}: it leaves the lines "
                           f"{'their' if len(missing) > 1 else 'its'} change changes as the head has them. Apply it "
                           "too (`git diff <its base_commit> <its candidate_commit> | git apply --3way` marks the "
                           "lines another change took; keep both ideas there) and launch again, or leave it out of "
                           "experiment_ids")


def _regions(diff: str) -> dict[str, list[tuple[int, int]]]:
    """The lines of the old side each file's hunks change, as [first, end) spans, from a `git diff -U0`: an
    insertion after line n is the span of line n."""
    out: dict[str, list[tuple[int, int]]] = {}
    path, header = None, False
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            path, header = None, True
        elif header and (line.startswith("--- a/") or (line.startswith("+++ b/") and path is None)):
            path = line[6:]  # the old name, or the new one of an added file
        elif line.startswith("@@ ") and path is not None:
            header = False
            old = line.split()[1].lstrip("-").split(",")
            start, count = int(old[0]), int(old[1]) if len(old) > 1 else 1
            out.setdefault(path, []).append((start, start + max(count, 1)))
    return out


def _keep_conflicting(kept: list[ExperimentState], conflicts: list[str], head: str, candidate: str) -> str:
    """What to do with the winners a combination left out: they change the same lines as one kept."""
    ids = ", ".join(repr(e.experiment_id) for e in kept)
    return (f"Left out, changing the same lines as a winner kept: {'; '.join(conflicts)}. No winner is lost: keep "
            "each with the others by merging it by hand: bring this combination into the work tree (`git diff "
            f"{head[:12]} {candidate[:12]} | git apply`), apply the left-out change (`git diff <its base_commit> <its "
            "candidate_commit> | git apply --3way` marks the lines both change), resolve them keeping both ideas, and "
            f"launch_experiment(source='worktree', experiment_ids=[{ids}, <the left-out ones>], "
            "restore_worktree=true): measured once on the head, its commit carries each winner's evidence")


def _refuse_nested(manager: ExperimentManager, head: str, tree: str) -> None:
    """A snapshot of the work tree with a nested git repository in it records a pointer, not its files."""
    nested = gitops.new_gitlinks(manager.repo, head, tree)
    if nested:
        raise RefusedError(
            f"{', '.join(nested[:5])} is a nested git repository (it has its own .git): a snapshot would "
            "record only a pointer to its commit, not its files. Commit its files to this repository, "
            "ignore it (.gitignore), or move it out of the work tree, then launch again")


def _source_note(reapplies: ExperimentState | None, together: list[ExperimentState] | None, merged: bool) -> str:
    if reapplies is not None:
        return f" (experiment {reapplies.experiment_id}'s change re-applied on the new head)"
    if together:
        return (f" (the changes of {', '.join(e.experiment_id for e in together)} "
                f"{'merged by hand' if merged else 'combined on the head'}: commit_winner keeps them in one commit "
                "with each one's evidence)")
    return ""


def _measures_head(manager: ExperimentManager, exp: ExperimentState) -> bool:
    """Whether `exp` still measures against the session head: more pairs for it pool with its own. The
    session's measured total measures the head itself (against the session's start)."""
    head = manager.session_head()
    if exp.launch.source == "session":
        return exp.launch.candidate_commit == head
    return exp.launch.base_commit == head


def _launch_session(manager: ExperimentManager, title: str, hypothesis: str, repeats: int | str | None,
                    focus: list[str]) -> LaunchResult:
    """The session's head against its start, end to end, on every objective: the measured total of what
    was committed (never committable itself)."""
    if focus:
        raise InputError("source='session' measures the whole session end to end, on its objectives; drop focus")
    repeats = designs.checked_repeats(manager.config, repeats)
    start, head = manager.config.start_commit, manager.session_head()
    if start == head:
        raise RefusedError("nothing was committed in this session yet: the session head is its start")
    exp_id = uuid.uuid4().hex[:10]
    with manager.lock:
        tree = gitops.tree_of(manager.repo, head)
        for other in manager.mine():
            if other.launch.source == "session" and _measured(other, start, tree, False):
                raise RefusedError(_duplicate(other))
        design = designs.design(manager.config, repeats, session=True)
        spec = designs.spec(manager.config, [], session=True)
        launch = LaunchRecord(
            experiment_id=exp_id, session_id=manager.config.session_id,
            title=one_line(title or "session total", "title"),
            hypothesis=hypothesis.strip() or "every commit of the session together, end to end",
            sources=[], source="session", base_commit=start, candidate_commit=head, candidate_tree=tree,
            changed_files=gitops.changed_paths(manager.repo, start, head), repeats=repeats, design=design.record(),
            metric=manager.config.metric, direction=manager.config.direction, executor=manager.executor.name,
            objectives=spec.objective_names, guards=spec.guards, judging=dataclasses.asdict(spec),
        )
        manager.append(launch)
    job = Job(exp_id, start, head, manager.logs / f"{exp_id}.log",
              spec=designs.job(manager, design, launch, gitops.tree_of(manager.repo, start), tree, False,
                               manager.platforms[0]))
    manager.executor.submit(job, events.sink(manager))
    return LaunchResult(
        experiment_id=exp_id, status="queued", base_commit=start, candidate_commit=head,
        changed_files=list(launch.changed_files), repeats=repeats,
        message=(f"queued: the session head {head[:12]} against its start {start[:12]}, end to end; "
                 f"list_experiments shows it as the session's measured total. Poll fetch_sky_logs('{exp_id}')"))


def _continue(manager: ExperimentManager, exp: ExperimentState, repeats: int | str | None) -> LaunchResult:
    """More pairs for an undecided experiment on the same head: a new round of the same design,
    its pairs pooled with the earlier ones, so the one calibrated alpha covers every round."""
    exp_id = exp.experiment_id
    with manager.lock:
        if exp.status not in FINAL_STATUSES:
            raise RefusedError(f"experiment {exp_id} is still {exp.status}; wait for its verdict")
        why = designs.not_continuable(exp)
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
        repeats = "auto" if repeats is None else designs.checked_repeats(manager.config, repeats)
        try:
            stops = design.round_stops(done, repeats)
        except InputError as exc:
            raise RefusedError(f"experiment {exp_id}: {exc}. Treat it as no gain within the budget, or make "
                               "the benchmark steadier and measure a new idea") from None
        manager.append(ContinueRecord(experiment_id=exp_id, prior_pairs=done, stops=stops, repeats=repeats))
        manager.pairs_done[exp_id] = done
    base_commit, candidate = exp.launch.base_commit, exp.launch.candidate_commit
    spec = designs.job(manager, design, exp.launch, gitops.tree_of(manager.repo, base_commit),
                       exp.launch.candidate_tree, exp.launch.incremental, manager.platforms[0], stops, prior)
    manager.executor.submit(Job(exp_id, base_commit, candidate, manager.logs / f"{exp_id}.log", spec=spec),
                            events.sink(manager))
    return LaunchResult(
        experiment_id=exp_id, status="queued", base_commit=exp.launch.base_commit,
        candidate_commit=exp.launch.candidate_commit, changed_files=list(exp.launch.changed_files),
        repeats=repeats, prior_pairs=done,
        message=(f"experiment {exp_id} continues: its {done} pairs are pooled with up to {stops[-1] - done} more "
                 f"under the same design; poll fetch_sky_logs('{exp_id}')"),
    )


def _unchecked_platforms(manager: ExperimentManager, exp: ExperimentState) -> list[Platform]:
    """The platforms where a host winner's run ended without a verdict of its own (cancelled, lost,
    or a worker or cloud error)."""
    if not (exp.status == "done" and exp.verdict == "improved") or exp.commit:
        return []
    return [p for p in manager.platforms[1:] if p.name in exp.platforms
            and exp.platforms[p.name].status in FINAL_STATUSES and exp.platforms[p.name].passed is None]


def _recheck(manager: ExperimentManager, exp: ExperimentState) -> LaunchResult:
    """Run a host winner's unfinished platforms again; the host's measurement stands (no new alpha)."""
    with manager.lock:
        running = platforms_running(exp)
        if running:
            raise RefusedError(f"experiment {exp.experiment_id} is still being checked on {', '.join(running)}; "
                               "wait for it")
        again = _unchecked_platforms(manager, exp)
        queued = events.queue_platforms(manager, exp, again)
    events.start_platforms(manager, exp, queued)
    names = ", ".join(p.name for p in again)
    return LaunchResult(
        experiment_id=exp.experiment_id, status=exp.status, base_commit=exp.launch.base_commit,
        candidate_commit=exp.launch.candidate_commit, changed_files=list(exp.launch.changed_files),
        repeats=exp.launch.repeats,
        message=(f"experiment {exp.experiment_id}'s host result stands; it is checked again on {names}. Poll "
                 f"fetch_sky_logs('{exp.experiment_id}')"))


def _reapplied_tree(manager: ExperimentManager, exp: ExperimentState, head: str) -> str:
    """An earlier experiment's change (its candidate against its own base) applied onto `head`: as it is, or,
    where the head moved under its context, replayed with a three-way merge."""
    diff = gitops.diff(manager.repo, exp.launch.base_commit, exp.launch.candidate_commit)
    try:
        return gitops.patch_tree(manager.repo, head, diff)
    except RefusedError:
        pass
    try:
        return gitops.patch_tree(manager.repo, head, diff, three_way=True)
    except RefusedError as exc:
        keep = ("keep it by redoing it there by hand: `git diff {base} {cand} | git apply --3way` in the work tree "
                "marks the lines the head changed; resolve them keeping both ideas, then "
                "launch_experiment(source='worktree', experiment_ids=['{id}'], restore_worktree=true), measured once "
                "and committed with its own evidence" if exp.verdict == "improved" and exp.checks_passed
                else "redo the change on the current head and launch it as a new experiment")
        raise RefusedError(
            f"experiment {exp.experiment_id}'s change no longer applies on the session head {head[:12]}, not even "
            f"with a three-way merge (the head moved since it was measured on {exp.launch.base_commit[:12]}, and "
            f"changed the same lines): {exc}. "
            + keep.format(base=exp.launch.base_commit[:12], cand=exp.launch.candidate_commit[:12],
                          id=exp.experiment_id)) from None


def _combined_tree(manager: ExperimentManager, together: list[ExperimentState],
                   head: str) -> tuple[str, list[ExperimentState], list[str]]:
    """The changes of `together` replayed on `head` one after the other (each as _reapplied_tree does it: as it
    is, or with a three-way merge), as one tree; a change that does not apply on those before it is left out.
    The tree, the winners it keeps, and for each left out, which kept one changes the same lines. Refused when
    fewer than two are kept: that is no combination."""
    tip = head
    kept: list[ExperimentState] = []
    conflicts: list[str] = []
    for exp in together:
        try:
            tree = _reapplied_tree(manager, exp, tip)
        except RefusedError:
            conflicts.append(_conflict(manager, exp, kept, head))
            continue
        tip = gitops.commit_tree(manager.repo, tree, tip, f"autoresearch: {exp.experiment_id} kept together")
        kept.append(exp)
    if len(kept) < 2:
        alone = (f"only {kept[0].experiment_id} ({kept[0].title!r}) applies with the others: commit it alone, "
                 "or " if kept else "")
        raise RefusedError(
            f"these winners cannot be combined on the head {head[:12]}: {'; '.join(conflicts)}. {alone.capitalize()}"
            "keep them together with a merge written by hand: apply each one's change to the work tree (`git diff "
            "<its base_commit> <its candidate_commit> | git apply --3way` marks the lines both change), resolve "
            "them keeping both ideas, and launch_experiment(source='worktree', experiment_ids=[...the same ids], "
            "restore_worktree=true): measured once on the head, its commit carries each winner's evidence")
    return gitops.tree_of(manager.repo, tip), kept, conflicts


def _conflict(manager: ExperimentManager, exp: ExperimentState, kept: list[ExperimentState], head: str) -> str:
    """Why `exp`'s change does not apply on the combination of `kept`: the kept winners whose change alone it
    collides with, and the files both change (or that it no longer applies on the head at all)."""
    name = f"{exp.experiment_id} ({exp.title!r})"
    try:
        _reapplied_tree(manager, exp, head)
    except RefusedError:
        return f"{name} no longer applies on the head (the head changed the lines it changes)"
    clashes = []
    for other in kept:
        alone = gitops.commit_tree(manager.repo, _reapplied_tree(manager, other, head), head, "autoresearch: pair")
        try:
            _reapplied_tree(manager, exp, alone)
        except RefusedError:
            shared = sorted(set(exp.launch.changed_files) & set(other.launch.changed_files))
            clashes.append(f"{other.experiment_id} ({other.title!r})" + (f" in {', '.join(shared[:3])}"
                                                                           if shared else ""))
    return (f"{name} changes the same lines as {' and '.join(clashes)}" if clashes
            else f"{name} changes the same lines as the others together")


def _measured(other: ExperimentState, head: str, tree: str, incremental: bool) -> bool:
    """Whether `other` already measures this candidate on this head, so a new launch would only
    spend a fresh alpha on it (more pairs continue `other` instead)."""
    if other.launch.candidate_tree != tree or other.launch.base_commit != head:
        return False
    if other.status in designs.RETRYABLE and other.measured is None:
        return False  # nothing was measured: launching it again spends nothing
    if other.verdict in designs.REMEASURE and not isinstance(stats.load_design(other.launch.design), stats.Design):
        return False  # measured with an earlier design: its pairs cannot be pooled
    # a clean build may confirm a result that was measured on an incremental one
    return not other.launch.incremental or incremental


def refuse_protected(config: SessionConfig, changed: list[str]) -> None:
    """Refuse a candidate that changes what the session protects (at launch, and again at commit)."""
    hit = gitops.protected_changes(changed, config.protected)
    if hit:
        shown = hit[:10] + ([f"... {len(hit) - 10} more"] if len(hit) > 10 else [])
        raise RefusedError(
            f"the candidate changes protected files {shown}: the benchmark, the checks, the session folder "
            f"{gitops.SESSION_DIR}/ and .gitattributes/.gitmodules are taken from the baseline so a candidate "
            "cannot change how it is measured or recorded. Revert those files (git checkout -- <file>) and "
            "launch again")


def _candidate_tree(manager: ExperimentManager, source: str, commit: str | None, patch: str | None,
                    head: str) -> tuple[str, str]:
    if source != "patch" and patch:
        raise InputError(f"patch is only read with source='patch', not source={source!r}: pass one of them")
    if source != "commit" and commit:
        raise InputError(f"commit is only read with source='commit', not source={source!r}: pass one of them")
    if source == "worktree":
        if commit or patch:
            raise InputError("source='worktree' takes neither commit nor patch; drop them or change source")
        branch = gitops.current_branch(manager.repo)
        if branch != manager.config.branch:
            raise StateError(
                f"the work tree is on {branch or 'a detached HEAD'}, not the session branch "
                f"{manager.config.branch}; check it out (git checkout {manager.config.branch}) or launch "
                "with source='commit'")
        return gitops.snapshot_worktree(manager.repo, head), "source: working tree snapshot"
    if source == "commit":
        if not commit:
            raise InputError("source='commit' needs commit (a sha, branch or other commit-ish)")
        sha = gitops.resolve_commit(manager.repo, commit)
        return gitops.tree_of(manager.repo, sha), f"source: commit {sha}"
    if source == "patch":
        if not patch:
            raise InputError("source='patch' needs patch (a unified diff against the session head)")
        return gitops.patch_tree(manager.repo, head, patch), "source: patch"
    raise InputError(f"source must be 'worktree', 'commit' or 'patch', not {source!r}")


def _duplicate(other: ExperimentState) -> str:
    """Why a new launch of the candidate `other` measures on the same head is refused, and what to do."""
    same = (f"this candidate is identical to experiment {other.experiment_id} ({other.title!r}, {other.status}"
            + (f", {other.verdict}" if other.verdict else "") + ") on the same head")
    why = designs.not_continuable(other)
    if not why and (other.verdict in designs.REMEASURE or other.status in designs.RETRYABLE):
        return (f"{same}: a new experiment would test it again with a fresh alpha. Measure it further instead: "
                f"launch_experiment(source='experiment', experiment_id='{other.experiment_id}') pools more pairs "
                "under its design")
    return f"{same}; read it with fetch_sky_logs instead" + (f" ({why})" if other.verdict in designs.REMEASURE else "")
