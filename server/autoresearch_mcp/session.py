"""`start_session`: bind a repository, plan and apply the start (create or resume its branch, save the config,
write the scripts or a recipe's commit), with the benchmark validated (validation.py) before anything is
kept; and the checks a resumed session is held to."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp import limits, recipes, resources, safefs, validation
from autoresearch_mcp.errors import InputError, RefusedError, StateError
from autoresearch_mcp.executors.jobs import JobMaker
from autoresearch_mcp.executors.port import Executor
from autoresearch_mcp.experiments import branch
from autoresearch_mcp.experiments import platforms as platforms_
from autoresearch_mcp.experiments.manager import ExperimentManager
from autoresearch_mcp.git import gitops
from autoresearch_mcp.measure import figures
from autoresearch_mcp.models import Direction, ExecutorName, StartSessionResult
from autoresearch_mcp.recipes import model_file
from autoresearch_mcp.settings import Settings
from autoresearch_mcp.store.config import (
    BENCH_SCRIPT,
    CHECKS_SCRIPT,
    KEPT_ON_RESUME,
    STATE_DIR,
    Platform,
    SessionConfig,
    SkyConfig,
    config_path,
    gate_changes,
    load_config,
    resolve,
    save_config,
    seed_settings,
    state_dir,
)
from autoresearch_mcp.store.ledger import Ledger, LedgerView
from autoresearch_mcp.store.records import SessionRecord
from autoresearch_mcp.worker import decide, sandbox

log = logging.getLogger(__name__)

TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SPREAD_WARN_PCT = 5.0


def _copy_templates(root: Path, names: list[str], created: list[str]) -> None:
    """Create the missing scripts from templates, recording each in `created` as soon as it exists."""
    for name in names:
        target = root / name
        if os.path.lexists(target):  # a dangling link counts: a copy would be written through it
            raise StateError(f"{target} exists in the work tree but not in the session head; commit or remove it")
        data = resources.template(name + ".template").read_bytes()
        with safefs.open_write(root, target, "wb") as fh:
            created.append(name)
            fh.write(data)
        target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _validate_args(repo: gitops.Repo, metric: str, tag: str | None) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-/:]*", metric or "") or len(metric) > 200:
        raise InputError(f"metric {limits.shown(metric)} is not a METRIC name (letters, digits, _ . - / :)")
    tag = tag or dt.date.today().strftime("%Y%m%d")
    if not TAG_RE.fullmatch(tag):
        raise InputError(f"tag {limits.shown(tag)} must be 1-64 letters, digits, '.', '_' or '-'")
    if not gitops.valid_ref(repo, f"refs/heads/autoresearch/{tag}"):
        raise InputError(f"tag {tag!r} is not a valid git branch name (git check-ref-format refuses "
                         f"autoresearch/{tag}: no '..', no trailing '.' or '.lock'); pick another tag") from None
    return tag


def _platforms(given: list[Any] | None, executor: ExecutorName | None,
               previous: SessionConfig | None) -> list[Platform]:
    """The platforms the session will use (given ones replace the config's), checked to run here."""
    chosen = (resolve(given, executor) if given is not None
              else list(previous.platforms) if previous else [])
    if given is None and chosen and executor is not None and chosen[0].executor != executor:
        raise InputError(f"executor={executor!r} but the session's first platform ({chosen[0].name}) runs on "
                         f"{chosen[0].executor!r}; pass platforms too, or leave executor out")
    base = previous.sky if previous else SkyConfig()
    for p in chosen:
        try:
            SkyConfig.model_validate({**base.model_dump(), **p.sky})
        except ValueError as exc:
            raise InputError(f"platform {p.name}: its `sky` settings are not valid ({exc})") from None
    platforms_.check_all(chosen)
    return chosen


def _checked_out_elsewhere(repo: gitops.Repo, branch: str) -> str | None:
    """The path of another worktree that has `branch` checked out, if any."""
    here = Path(repo.working_dir).resolve()
    return next((str(w.path) for w in gitops.worktrees(repo)
                 if w.branch == f"refs/heads/{branch}" and w.path.resolve() != here), None)


@dataclass
class Plan:
    """What start_session will do, decided before anything is changed."""

    repo: gitops.Repo
    config: SessionConfig
    resumed: bool
    head: str  # the commit the session branch points at (or will)
    missing: list[str]  # benchmark/checks scripts the head lacks (created from templates)
    recipe_files: list[str] = field(default_factory=list)  # written by the recipe commit that `head` is
    suggested: recipes.Recipe | None = None  # a recipe for this known project, proposed instead of templates
    uncommitted: list[str] = field(default_factory=list)  # the scripts changed in the work tree, nothing else
    previous_id: str | None = None  # the session the config held before a new one (its settings are kept)
    set_up: bool = True  # the branch takes set-up commits (the session has launched nothing): start_session sets it


def plan_session(
    repo_path: str, metric: str, direction: Direction, executor: ExecutorName | None, tag: str | None,
    platforms: list[Any] | None = None, recipe: recipes.Recipe | None = None, model: str | None = None,
) -> Plan:
    """Check everything start_session needs and decide what it will do, changing nothing (except adding
    the session folder to .git/info/exclude). A resumed session keeps its executor and platforms unless
    given."""
    repo = gitops.open_repo(repo_path)
    tag = _validate_args(repo, metric, tag)
    root = Path(repo.working_dir)
    gitops.ensure_excluded(repo)
    head = gitops.head_commit(repo)
    if gitops.tracked(repo, head, STATE_DIR) or (os.path.lexists(root / STATE_DIR) and not (root / STATE_DIR).is_dir()):
        raise StateError(
            f"{root / STATE_DIR} is tracked by git or is not a folder, but it is the session's private folder "
            f"(config, ledger, logs). Untrack it (git rm -r --cached {STATE_DIR} and commit) or move it away, "
            "then start the session again")
    uncommitted = _uncommitted_scripts(repo)
    recipe = recipe or recipes.installed(root)
    if not uncommitted or recipe is not None:
        gitops.refuse_if_dirty(repo, "starting a session")
    if recipe is not None:
        _check_recipe(recipe, root, metric)
    branch = f"autoresearch/{tag}"
    previous = load_config(root)
    chosen = _platforms(platforms, executor, previous)
    if platforms is not None and executor is None:
        executor = chosen[0].executor
    exists = gitops.branch_exists(repo, branch)
    if exists:
        if previous is None or previous.tag != tag:
            raise StateError(
                f"branch {branch} already exists but is not this repository's current session; "
                "pick another tag, or delete the branch if it is stale"
            )
        if previous.metric != metric or previous.direction != direction:
            raise StateError(
                f"session {tag} measures {previous.metric} ({previous.direction} is better); "
                f"resume it with those, or start a new tag for {limits.shown(metric)} ({direction})"
            )
        elsewhere = _checked_out_elsewhere(repo, branch)
        if elsewhere:
            raise StateError(f"branch {branch} is checked out in another worktree ({elsewhere}); switch that "
                             f"worktree to another branch (git -C {elsewhere} checkout --detach) and start again")
        head = gitops.branch_commit(repo, branch)
        if gitops.tracked(repo, head, STATE_DIR):
            raise StateError(f"branch {branch} tracks {STATE_DIR}/, the session's private folder; remove it from "
                             "the branch (git rm -r --cached) before resuming")
        config = previous.model_copy(update={"executor": executor or previous.executor, "repo": str(root),
                                             "platforms": chosen})
    else:
        kept = previous.model_dump(include=KEPT_ON_RESUME) if previous else seed_settings(root)
        kept["platforms"] = chosen
        config = SessionConfig(
            session_id=uuid.uuid4().hex[:12], tag=tag, branch=branch, repo=str(root), metric=metric,
            direction=direction, executor=executor or "local", start_commit=head,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **kept,
        )
    if config.platforms and config.platforms[0].sky:
        config = config.model_copy(update={"sky": config.sky_for(config.platforms[0])})
    if model:
        key = "model_url" if model.startswith(("http://", "https://", "hf:")) else "model"
        config = config.model_copy(update={key: model})
    written: list[str] = []
    if recipe is not None:
        config = _apply_recipe(config, recipe)
        if not exists and "pairing" not in (previous.model_fields_set if previous else set(kept)):
            config = config.model_copy(update={"pairing": recipe.pairing})  # a config that names one keeps it
        head, written = _recipe_commit(repo, head, recipe)
        if not exists:
            config = config.model_copy(update={"start_commit": head})
    missing = [n for n in (BENCH_SCRIPT, CHECKS_SCRIPT) if not gitops.tracked(repo, head, n) and n not in uncommitted]
    suggested = recipes.detect(root) if len(missing) == 2 and recipe is None else None
    return Plan(repo, config, exists, head, [] if suggested else missing, written, suggested, uncommitted,
                None if exists or previous is None else previous.session_id)


def _uncommitted_scripts(repo: gitops.Repo) -> list[str]:
    """The session's scripts changed (or new) in the work tree, when nothing else is: start_session then says how
    to commit them, or carries them onto a new session's branch for its set-up commit."""
    dirty = gitops.dirty_files(repo)
    scripts = [n for n in (BENCH_SCRIPT, CHECKS_SCRIPT) if n in dirty]
    return scripts if scripts and not set(dirty) - set(scripts) else []


def _uncommitted_refusal(plan: Plan) -> str:
    """Why a resumed session does not start with its scripts changed in the work tree, and what to do: commit them
    as a set-up commit while the session has launched nothing (filling in the templates first), else start a new
    session for them."""
    repo, config, scripts = plan.repo, plan.config, plan.uncommitted
    shown, verb = " and ".join(scripts), "are" if len(scripts) > 1 else "is"
    if not plan.set_up:
        return (f"{shown} {verb} changed in the work tree, but session {config.tag} has launched experiments, so its "
                "benchmark and checks stay as its experiments were measured with. To measure with the changed "
                "scripts, call start_session with a new tag: its branch starts from the current HEAD with these "
                f"changes, which you then commit there as its set-up. Or drop them (git checkout -- {shown})")
    root = Path(repo.working_dir)
    templates = [n for n in scripts if not gitops.tracked(repo, plan.head, n)
                 and (root / n).read_bytes() == resources.template(n + ".template").read_bytes()]
    fill = (f"fill in {' and '.join(templates)} (still the template{'s' if len(templates) > 1 else ''}: "
            f"{BENCH_SCRIPT} build builds, {BENCH_SCRIPT} bench prints METRIC <name>=<number>, {CHECKS_SCRIPT} "
            "exits 0 when the program is correct), then " if templates else "")
    here = gitops.current_branch(repo)
    switch = "" if here == config.branch else f"check out {config.branch} (git checkout {config.branch}), then "
    return (f"{shown} {verb} not committed yet: {switch}{fill}commit {'them' if len(scripts) > 1 else 'it'} on the "
            f"session branch (git add {' '.join(scripts)} && git commit -m 'autoresearch: benchmark and checks'), "
            f"then call start_session again with tag={config.tag!r}: it validates them as the session's benchmark "
            "(until the session launches its first experiment, its branch takes such a commit)")


def _check_recipe(recipe: recipes.Recipe, root: Path, metric: str) -> None:
    """Refuse before anything is created: an unknown metric, or scripts of the user's in the way."""
    if metric not in recipe.objectives:
        raise InputError(f"the {recipe.name} recipe prints {', '.join(recipe.objectives)}; "
                         f"pick one of them as metric, not {limits.shown(metric)}")
    clash = recipes.conflicts(recipe, root)
    if clash:
        raise RefusedError(f"{', '.join(clash)} already exist with other content; the {recipe.name} recipe "
                           "would replace them. Remove them (git rm) and commit, or start without recipe")


def _apply_recipe(config: SessionConfig, recipe: recipes.Recipe) -> SessionConfig:
    protected = list(dict.fromkeys([*config.protected, *recipe.protected]))
    return config.model_copy(update={
        "recipe": recipe.name, "protected": protected,
        "objectives": config.objectives or list(recipe.objectives),
        "focus_tolerance_pct": {**recipe.focus_tolerance_pct, **config.focus_tolerance_pct},
        "harness_share": {**recipe.harness_share, **config.harness_share},
        "env": {**recipe.settings, **config.env}})  # the person's values win


def _recipe_commit(repo: gitops.Repo, head: str, recipe: recipes.Recipe) -> tuple[str, list[str]]:
    """A commit of `head` plus the recipe's files (no ref, no work tree touched), or `head` itself
    when it already holds them unchanged; and the files the commit adds."""
    missing = [f for f in recipe.files if not gitops.tracked(repo, head, f)]
    if not missing:
        return head, []
    tree = gitops.tree_with(repo, head, [
        gitops.IndexEntry("100755" if f.endswith(".sh") else "100644", gitops.hash_file(repo, recipe.source(f)), f)
        for f in missing])
    commit = gitops.commit_tree(repo, tree, head, f"autoresearch: {recipe.name} recipe (benchmark and checks)\n\n"
                                  f"{recipe.summary}.\n")
    return commit, missing


def apply_plan(plan: Plan) -> list[str]:
    """Check out the session branch (creating it), save the config, create missing scripts; on any
    failure, undo all of it, so a failed start leaves no branch, no config and no files behind."""
    repo, config, root = plan.repo, plan.config, Path(plan.repo.working_dir)
    before = gitops.current_branch(repo)
    before_sha = gitops.head_commit(repo)
    path = config_path(root)
    old_config = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    created: list[str] = []
    moved: str | None = None
    try:
        if plan.resumed:
            gitops.checkout(repo, config.branch)
            if plan.recipe_files:
                moved = gitops.branch_commit(repo, config.branch)
                gitops.fast_forward(repo, plan.head)
        else:
            gitops.checkout_new_branch(repo, config.branch, plan.head)
        save_config(root, config)
        _copy_templates(root, plan.missing, created)
        if plan.set_up:
            branch.open_set_up(repo, config, plan.head)
        return created
    except BaseException:
        for name in created:
            (root / name).unlink(missing_ok=True)
        with contextlib.suppress(gitops.GitError):
            if not plan.resumed:
                branch.close_set_up(repo, config)
            if moved is not None:
                gitops.reset_hard(repo, moved)
            gitops.checkout(repo, before or before_sha)
            if not plan.resumed:
                gitops.delete_branch(repo, config.branch)
        with contextlib.suppress(OSError, StateError):
            if old_config is None:
                path.unlink(missing_ok=True)
            else:
                safefs.write_bytes(root, path, old_config)
        raise


def compiler_cache() -> str | None:
    for tool in ("ccache", "sccache"):
        if shutil.which(tool):
            return tool
    return None


def script_env(config: SessionConfig, settings: Settings) -> dict[str, str]:
    """Extra environment for build, bench and checks: the benchmark's settings, and the model a recipe
    runs when one is set."""
    path = model_file.resolve(config.model, config.model_url, settings, Path(config.repo))
    return {**config.env, **({model_file.ENV: str(path)} if path is not None else {})}


def shown_settings(config: SessionConfig, shape: str | None = None, pairing: str | None = None) -> dict[str, str]:
    """What every run of the session is measured with, as start_session shows it and the ledger keeps it: the
    threads, the read-only runs, how each side is measured, what the bench turned out to be (`shape`) and how
    its pairs share the machine (`pairing`: why, where start_session chose it)."""
    read_only = config.read_only_runs
    out = {"threads": str(config.threads) if config.threads else "all CPUs",
           "read_only_runs": "not chosen yet" if read_only is None else ", ".join(read_only) or "none",
           "measure": validation.side_measure(config)}
    if shape:
        out["bench"] = shape
    if pairing or config.pairing:
        out["pairing"] = pairing or str(config.pairing)
        if config.pairing == decide.TURNS and config.turn_clock == "wall":
            out["pairing"] += (f"; its runs keep {validation.PARALLEL_CPUS:g} CPUs or more busy, so a time or rate is "
                               "judged over the wall time of each run's own turns, not its CPU time (turn_clock "
                               "'wall'; 'cpu' in the config judges CPU time)")
    return {**out, **config.env}


def _with_chosen(config: SessionConfig, validated: validation.Validation, head: str,
                 set_up: bool) -> tuple[SessionConfig, dict[str, Any]]:
    """The session's config with what start_session chose on its runs (every later run of the session uses them),
    and those choices as the ledger records them."""
    in_turns = (validated.pairing or config.pairing) == decide.TURNS
    picked: dict[str, Any] = {"threads": validated.threads, "read_only_runs": validated.read_only,
                              "pairing": validated.pairing, "turn_clock": validated.turn_clock if in_turns else None,
                              "metric_kinds": validated.metric_kinds or None,
                              "measured_share": validated.measured_share or None}
    own = {k: v for k, v in picked.items() if v is not None}
    # until its first launch, the session starts where its benchmark was last set up and validated
    start = {"start_commit": head} if set_up else {}
    return config.model_copy(update={**own, **start}), own


def _install_guard(repo: gitops.Repo) -> list[str]:
    """The reference-transaction hook installed in the repository; a warning where it cannot be."""
    unguarded = gitops.install_ref_guard(repo, resources.git_hook(gitops.REF_GUARD).read_bytes())
    if not unguarded:
        return []
    return [f"the reference-transaction hook that refuses moves of autoresearch/* branches outside commit_winner is "
            f"not installed: {unguarded}. The server still holds the branch to its ledger after every job and before "
            "every commit"]


def start_session(
    repo_path: str, metric: str, direction: Direction, executor: ExecutorName | None, tag: str | None,
    settings: Settings, executor_for: Callable[[gitops.Repo, SessionConfig], Executor],
    platforms: list[Any] | None = None, recipe: str | None = None, model: str | None = None,
    ledger: Ledger | None = None,
) -> tuple[StartSessionResult, gitops.Repo, SessionConfig, Ledger]:
    """Open the session and validate its benchmark with the session's executor (`executor_for` makes it for
    the planned session: the one it then keeps), so the baseline is measured where experiments run.
    `ledger`: the bound session's, used again when it is this repository's (one object per ledger file)."""
    chosen = recipes.get(recipe) if recipe else None
    plan = plan_session(repo_path, metric, direction, executor, tag, platforms, chosen, model)
    repo, config, resumed, head = plan.repo, plan.config, plan.resumed, plan.head
    root = Path(repo.working_dir)
    path = state_dir(root) / "ledger.jsonl"
    ledger = ledger if ledger is not None and ledger.path == path else Ledger(path)
    view, append = ledger.folding()
    plan.set_up = not branch.launched(view, config.session_id)  # nothing measured yet: its bench may still change
    if plan.uncommitted and resumed:
        raise StateError(_uncommitted_refusal(plan))
    changes: list[str] = []
    if resumed:  # before its head is validated and recorded as the session's (set-up commits: to validate now)
        branch.check(repo, config, view, append, validating=plan.set_up)
        recorded = recorded_gate(view, config.session_id)
        changes = gate_changes(config, recorded) if recorded is not None else []
    config = plan.config = _for_this_bench(plan, view)
    common: dict[str, Any] = dict(
        session_id=config.session_id, branch=config.branch, repo=str(root), metric=config.metric,
        direction=config.direction, executor=config.executor, resumed=resumed, head_commit=head,
        templates_created=plan.recipe_files or plan.missing, compiler_cache=compiler_cache(),
        recipe=config.recipe, objectives=config.objective_metrics(), guards=sorted(config.guards),
        pairing=config.pairing,
    )
    not_ready = (_recipe_suggested(plan, common) or _templates_created(plan, common, metric)
                 or _scripts_carried(plan, common))
    if not_ready is None:
        env = script_env(config, settings)  # only now: resolving the model may fetch it
        not_ready = _model_missing(plan, common, env)
    if not_ready is not None:
        return not_ready, repo, config, ledger
    # validate first: a benchmark that cannot be trusted leaves no branch and no config behind
    runs_on = executor_for(repo, config)
    if config.sandbox != sandbox.OFF:
        unconfinable = runs_on.confinement_problem(config.sandbox)
        if unconfinable:
            raise StateError(unconfinable)
    maker = JobMaker(repo, config, env)  # the session's jobs while it validates (its manager then has its own)
    validated = validation.validate_benchmark(maker, head, runs_on)
    worker = validated.worker
    config, own = _with_chosen(config, validated, head, plan.set_up)
    plan.config = config
    if validated.pairing is not None:
        common["pairing"] = validated.pairing
    runs, build_s, warnings = validated.runs, validated.build_s, validated.warnings
    platform_lines = validation.validate_platforms(maker.with_config(config), head, runs_on)
    apply_plan(plan)
    baseline = validation.baseline_summary(runs)
    primary = [r.parsed[config.metric] for r in runs]
    spread = validation.spread_pct(primary)
    warnings += _measurement_warnings(config, spread, changes)
    warnings += _install_guard(repo)
    append(SessionRecord(
        session_id=config.session_id, tag=config.tag, branch=config.branch, head=head, metric=config.metric,
        direction=config.direction, resumed=resumed, baseline={n: s.samples for n, s in baseline.items()},
        build_duration_s=round(build_s, 3), gate=config.gate(), chosen=own,
        settings=shown_settings(config, validated.shape, validated.pairing_note)))
    result = StartSessionResult(
        **common, baseline=baseline, raw_metric_lines=[ln for r in runs for ln in r.raw_metric_lines],
        runs=runs, build_duration_s=round(build_s, 3), spread_pct=spread, warnings=warnings,
        platforms=platform_lines, worker=worker,
        settings=shown_settings(config, validated.shape, validated.pairing_note),
        threads_tried=validated.tried,
        next_steps=[
            "Compare raw_metric_lines with baseline: is the parsed value the number you meant?",
            *([_set_up_step(config)] if plan.set_up else []),
            "Research before editing: search_arxiv, survey_forks, diff_backends, analyze_bounds.",
            "Then edit and launch_experiment(title, hypothesis, sources).",
        ],
    )
    return result, repo, config, ledger


def _set_up_step(config: SessionConfig) -> str:
    """How the benchmark of a session that has launched nothing is changed (acting on a warning)."""
    return (f"Act on every warning before the first launch: to change {BENCH_SCRIPT} or {CHECKS_SCRIPT}, edit them, "
            f"commit them alone on {config.branch} (git add {BENCH_SCRIPT} {CHECKS_SCRIPT} && git commit -m "
            f"'autoresearch: benchmark and checks') and call start_session again with tag={config.tag!r}: it "
            "validates them as the session's benchmark. After the first launch_experiment the benchmark stays as it "
            "is; a changed one then needs a new session (start_session with a new tag).")


# Settings start_session chooses from what the bench is (its shape, its metrics, what it writes): chosen again for
# another bench, unless a person set them to something else.
BENCH_CHOSEN = ("pairing", "turn_clock", "read_only_runs")


def _for_this_bench(plan: Plan, view: LedgerView) -> SessionConfig:
    """The plan's config, with the settings start_session chose for another bench unset, so they are chosen again
    for this one: a session's whose scripts changed since its last validation (a set-up commit), or a new session's
    whose scripts are not those the session before it chose them for. A value a person changed since is kept."""
    config = plan.config
    session = config.session_id if plan.resumed else plan.previous_id
    last = next((r for r in reversed(view.sessions) if r.session_id == session), None)
    if last is None or not last.chosen:
        return config
    if last.head is not None and all(gitops.file_at(plan.repo, last.head, n) == gitops.file_at(plan.repo, plan.head, n)
                                     for n in (BENCH_SCRIPT, CHECKS_SCRIPT)):
        return config  # the same bench
    again = {k: None for k in BENCH_CHOSEN if k in last.chosen and getattr(config, k) == last.chosen[k]}
    return config.model_copy(update=again) if again else config


def _unvalidated(common: dict[str, Any], warnings: list[str], next_steps: list[str],
                 **fields: Any) -> StartSessionResult:
    """start_session's answer when the benchmark was not validated: no baseline yet, and what to do first."""
    return StartSessionResult(**common, baseline={}, raw_metric_lines=[], runs=[], build_duration_s=0.0,
                              warnings=warnings, next_steps=next_steps, **fields)


def _recipe_suggested(plan: Plan, common: dict[str, Any]) -> StartSessionResult | None:
    """The answer for a repository without a benchmark that a ready recipe fits (None: no recipe fits)."""
    known, config = plan.suggested, plan.config
    if known is None:
        return None
    apply_plan(plan)
    return _unvalidated(
        common, recipe_suggested=known.name,
        warnings=[f"no {BENCH_SCRIPT} yet, and this looks like {known.name}: a ready recipe exists "
                  f"({known.summary})"],
        next_steps=[
            f"Call start_session again with recipe={known.name!r}, metric={known.metric!r}, "
            f"direction={known.direction!r}, tag={config.tag!r}"
            + (" and model=<path or URL of a GGUF file>" if known.needs_model else "")
            + f": it commits {', '.join(known.files)} on {config.branch} and validates them.",
            f"Or run `autoresearch-mcp recipe {known.name} {config.repo}` to read the scripts first.",
        ])


def _templates_created(plan: Plan, common: dict[str, Any], metric: str) -> StartSessionResult | None:
    """The answer when the benchmark's scripts were missing and are now templates to fill in (None: they exist)."""
    if not plan.missing:
        return None
    created, config = apply_plan(plan), plan.config
    return _unvalidated(
        common,
        warnings=[f"{', '.join(created)} did not exist and were created from templates; "
                  "the benchmark has not been validated yet"],
        next_steps=[
            f"Fill in {BENCH_SCRIPT} (build and bench subcommands; bench prints METRIC {metric}=<number>)"
            f" and {CHECKS_SCRIPT} (exit 0 when the program is correct).",
            f"Commit both on branch {config.branch}: git add {BENCH_SCRIPT} {CHECKS_SCRIPT} && "
            "git commit -m 'autoresearch: benchmark and checks'.",
            f"Call start_session again with tag={config.tag!r} to validate the benchmark.",
        ])


def _scripts_carried(plan: Plan, common: dict[str, Any]) -> StartSessionResult | None:
    """The answer for a new session whose scripts were changed in the work tree: its branch is made with the changes
    in it, to commit as its set-up (None: nothing to carry)."""
    if not plan.uncommitted:
        return None
    apply_plan(plan)
    config, shown = plan.config, " ".join(plan.uncommitted)
    return _unvalidated(
        common,
        warnings=[f"{', '.join(plan.uncommitted)} changed in the work tree: the changes are on the new branch "
                  f"{config.branch}, not committed; the benchmark has not been validated yet"],
        next_steps=[
            f"Commit them on branch {config.branch}: git add {shown} && git commit -m "
            "'autoresearch: benchmark and checks'.",
            f"Call start_session again with tag={config.tag!r} to validate the benchmark.",
        ])


def _model_missing(plan: Plan, common: dict[str, Any], env: dict[str, str]) -> StartSessionResult | None:
    """The answer when the session's recipe runs a model and none is set (None: it has one, or needs none)."""
    config = plan.config
    if config.recipe is None or not recipes.get(config.recipe).needs_model or model_file.ENV in env:
        return None
    apply_plan(plan)
    return _unvalidated(
        common,
        warnings=[f"the {config.recipe} recipe runs a model, and none is set; the benchmark has not been "
                  "validated yet"],
        next_steps=[
            f"Call start_session again with tag={config.tag!r} and model=<path of a GGUF file, an http(s) URL "
            "or hf:owner/name/file.gguf> (or set AUTORESEARCH_MODEL, or `model` / `model_url` in "
            f"{config_path(Path(config.repo))}).",
        ])


def _measurement_warnings(config: SessionConfig, spread: float | None, changes: list[str]) -> list[str]:
    """What may make the session's measurements untrustworthy or slow: a spread between the validation runs, no
    confinement, no compiler cache, and verdict settings changed since the session recorded them."""
    warnings = []
    if spread is not None and spread > SPREAD_WARN_PCT:
        warnings.append(
            f"{config.metric} varied by {spread:.1f}% between the two validation runs (over "
            f"{SPREAD_WARN_PCT:g}%): make the benchmark steadier (longer runs, fixed threads, a quiet "
            "machine" + (", or pairs in turns for a new session: config \"pairing\": \"turns\", with the bench "
                         "printing a time or rate of fixed work named as one (t_ms, items_per_s) or its CPU-time "
                         "form (METRIC <name>.cpu=...)"
                         if config.pairing != "turns" else "") + ") or expect many pairs per experiment")
    warnings += validation.confinement_warnings(config.sandbox)
    if compiler_cache() is None:
        warnings.append("no compiler cache found: install ccache (apt-get install ccache) so candidate builds "
                        "in fresh worktrees reuse objects")
    if changes:
        warnings.append(f"the settings that decide a verdict changed in {config_path(Path(config.repo))} since this "
                        f"session last recorded them ({'; '.join(changes)}); they are now recorded in the ledger, and "
                        "experiments launched from now on are judged with them (earlier ones keep the settings they "
                        "were launched with)")
    return warnings


# --- what a session is held to: the settings it recorded and its branch ------------------------------------


def recorded_gate(view: LedgerView, session_id: str) -> dict[str, Any] | None:
    """The settings that decide a verdict as the session's latest start recorded them (None: none yet, or
    a ledger of an earlier version)."""
    return next((s.gate for s in reversed(view.sessions) if s.session_id == session_id and s.gate is not None),
                None)


def check_resume(repo: gitops.Repo, config: SessionConfig, ledger: Ledger) -> None:
    """Refuse to resume (at the server's start) a session whose config changed behind the server's back in
    what decides a verdict, or whose branch is not where its ledger says; a commit_winner commit a crash
    left unrecorded is recorded (experiments/branch.py)."""
    root = Path(repo.working_dir)
    view, append = ledger.folding()
    recorded = recorded_gate(view, config.session_id)
    changes = gate_changes(config, recorded) if recorded is not None else []
    if changes:
        raise StateError(
            f"{config_path(root)} was changed after start_session recorded the settings that decide a verdict "
            f"({'; '.join(changes)}), and a session is never judged with settings changed behind the server's back. "
            f"If you made the change, apply it: call start_session with tag={config.tag!r}, which validates the "
            "benchmark again and records the new settings in the ledger. If you did not, put the recorded values "
            "back in the config first")
    branch.check(repo, config, view, append)


def baseline_mean(ledger: Ledger, session_id: str, metric: str) -> float | None:
    """Mean of `metric` over the newest validation of the session (for drift and analyze_bounds)."""
    return figures.baseline_mean(ledger.view().sessions, session_id, metric)


@dataclass
class Session:
    """A bound repository: its config, ledger and experiment manager."""

    repo: gitops.Repo
    config: SessionConfig
    ledger: Ledger
    manager: ExperimentManager

    @property
    def root(self) -> Path:
        return Path(self.repo.working_dir)

    def baseline_mean(self, metric: str) -> float | None:
        return baseline_mean(self.ledger, self.config.session_id, metric)
