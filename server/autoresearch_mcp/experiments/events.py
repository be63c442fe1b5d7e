"""What the executor reports about an experiment's jobs, recorded: statuses, pairs as they come, the result
and its verdict; a host winner sent on to the session's other platforms, and their events."""

from __future__ import annotations

import dataclasses
import functools
import logging

from autoresearch_mcp.executors.port import Event, EventSink, Job, ResultEvent
from autoresearch_mcp.experiments import designs
from autoresearch_mcp.experiments import platforms as platforms_
from autoresearch_mcp.experiments.manager import ExperimentManager
from autoresearch_mcp.git import gitops
from autoresearch_mcp.measure import figures, stats
from autoresearch_mcp.models import FINAL_STATUSES
from autoresearch_mcp.store.config import Platform
from autoresearch_mcp.store.ledger import ExperimentState, apply
from autoresearch_mcp.store.records import Analysis, Outcome, PlatformRecord, ResultRecord, StatusRecord
from autoresearch_mcp.worker import outcomes

log = logging.getLogger(__name__)


def sink(manager: ExperimentManager) -> EventSink:
    """Where the executor sends the events of an experiment's own job."""
    return functools.partial(on_event, manager)


def on_event(manager: ExperimentManager, exp_id: str, event: Event) -> None:
    kind = event["event"]
    try:
        if event["event"] == "status":
            manager.append(StatusRecord(experiment_id=exp_id, status=event["status"], worker=event.get("worker"),
                                        runtime=event.get("runtime") or {}))
        elif event["event"] == "sample":
            with manager.lock:
                if event["role"] == "candidate":
                    manager.pairs_done[exp_id] = manager.pairs_done.get(exp_id, 0) + 1
                    manager.changed.notify_all()  # a waiting fetch tells its client the pair
        elif event["event"] == "cancelled":
            manager.append(StatusRecord(experiment_id=exp_id, status="cancelled"))
        elif event["event"] == "lost":
            manager.append(StatusRecord(experiment_id=exp_id, status="lost", detail=event["detail"]))
        elif event["event"] == "result":
            record_result(manager, exp_id, event)
    except Exception:  # an event must never kill the executor's thread
        log.exception("could not record event %s of %s", kind, exp_id)


def record_result(manager: ExperimentManager, exp_id: str, event: ResultEvent) -> None:
    exp = manager.view.experiments[exp_id]
    started: list[tuple[Platform, str]] = []
    try:
        outcome = outcomes.ended(event, outcomes.Experiment)
        tampered = manager.after_job(exp.launch.base_commit)
        if tampered:
            outcome = dataclasses.replace(outcome, status="failed", phase="server", error=tampered)
        if exp.continued is not None:
            outcome = figures.pooled(exp, outcome)
        analysis = (figures.analyze(outcome, exp.launch, figures.round_end(exp), figures.round_start(exp))
                    if not tampered else Analysis())
        # A host winner goes to the other platforms; they are queued before the result is visible, so
        # nobody ever sees a winner that is not (yet) being checked there.
        elsewhere = (len(manager.platforms) > 1 and outcome.status == "done"
                     and analysis.verdict == "improved" and not exp.launch.incremental)
        queued = queue_platforms(manager, exp, manager.platforms[1:]) if elsewhere else []
        manager.append(ResultRecord(experiment_id=exp_id, status=outcome.status, worker=event.get("worker"),
                                    cost_usd=event.get("cost_usd"), outcome=Outcome.model_validate(outcome.to_dict()),
                                    analysis=analysis))
        started = queued
    except Exception as exc:  # a result that cannot be recorded ends the experiment, never leaves it hanging
        log.exception("could not record the result of %s", exp_id)
        fail(manager, exp_id, f"the result could not be recorded ({type(exc).__name__}: {str(exc)[:300]}); "
                              "the raw output is in the log")
    start_platforms(manager, exp, started)
    head = manager.session_head()
    with manager.lock:
        still_used = any(e.launch.base_commit == exp.launch.base_commit
                         and e.status not in FINAL_STATUSES for e in manager.mine())
    if exp.launch.base_commit != head and not still_used:
        manager.executor.retire_base(exp.launch.base_commit)


def fail(manager: ExperimentManager, exp_id: str, error: str) -> None:
    """End an experiment as `failed` with `error`; in memory at least, if even that cannot be written."""
    record = ResultRecord(experiment_id=exp_id, status="failed", analysis=Analysis(), outcome=Outcome(
        experiment_id=exp_id, status="failed", phase="server", error=error))
    try:
        manager.append(record)
    except Exception:
        log.exception("could not write the failure of %s to the ledger", exp_id)
        with manager.lock:
            apply(manager.view, record)


def queue_platforms(manager: ExperimentManager, exp: ExperimentState, targets: list[Platform]
                    ) -> list[tuple[Platform, str]]:
    """Record a host winner as queued on `targets`, each under a job id of its own (a run checked
    again is a new job: the old one's cleanup can never touch it)."""
    queued = []
    for platform in targets:
        attempt = (exp.platforms[platform.name].attempt if platform.name in exp.platforms else 0) + 1
        job_id = platforms_.job_id(exp.experiment_id, platform.name, attempt)
        manager.append(PlatformRecord(experiment_id=exp.experiment_id, platform=platform.name, status="queued",
                                      attempt=attempt, job_id=job_id, passed=None, summary=None, outcome=None,
                                      analysis=None, detail=None))
        queued.append((platform, job_id))
    return queued


def start_platforms(manager: ExperimentManager, exp: ExperimentState, queued: list[tuple[Platform, str]]) -> None:
    """Send a host winner to the other platforms: build and checks there, and a confirmation A/B
    against the same base where the platform is measured. Only winners: it is what commit_winner
    needs, and emulated builds are slow. (Incremental winners are confirmed on a clean build
    first, and that confirmation goes to the platforms.)"""
    if not queued:
        return
    launch = exp.launch
    recorded = stats.load_design(launch.design)
    design = recorded if isinstance(recorded, stats.Design) else designs.design(manager.config, "auto")
    base_tree = gitops.tree_of(manager.repo, launch.base_commit)
    for platform, job_id in queued:
        job = Job(job_id, launch.base_commit, launch.candidate_commit, manager.logs / f"{job_id}.log",
                  spec=designs.job(manager, design, launch, base_tree, launch.candidate_tree, False, platform))
        manager.executor.submit(job, functools.partial(on_platform_event, manager, exp.experiment_id, platform))


def on_platform_event(manager: ExperimentManager, exp_id: str, platform: Platform, _job_id: str,
                      event: Event) -> None:
    kind = event["event"]
    here = {"experiment_id": exp_id, "platform": platform.name}
    try:
        if event["event"] == "status":
            manager.append(PlatformRecord(**here, status=event["status"], worker=event.get("worker"),
                                          runtime=event.get("runtime") or {}))
        elif event["event"] == "cancelled":
            manager.append(PlatformRecord(**here, status=kind, detail=None))
        elif event["event"] == "lost":
            manager.append(PlatformRecord(**here, status=kind, detail=event["detail"]))
        elif event["event"] == "result":
            outcome = outcomes.ended(event, outcomes.Experiment)
            exp = manager.view.experiments[exp_id]
            analysis = Analysis()
            tampered = manager.after_job(exp.launch.base_commit, platform.name)
            if tampered:  # a run without a verdict of its own: it must run again
                outcome = dataclasses.replace(outcome, status="failed", phase="server", error=tampered)
            elif platform.measure:
                analysis = figures.analyze(outcome, exp.launch)
                analysis.primary = analysis.metric(exp.launch.metric)
            passed, summary = platforms_.judge(platform, outcome, analysis.verdict,
                                               analysis.primary.delta_pct if analysis.primary else None)
            manager.append(PlatformRecord(**here, status=outcome.status, worker=event.get("worker"),
                                          cost_usd=event.get("cost_usd"),
                                          outcome=Outcome.model_validate(outcome.to_dict()), analysis=analysis,
                                          passed=passed, summary=summary))
    except Exception:  # an event must never kill the executor's thread
        log.exception("could not record event %s of %s on %s", kind, exp_id, platform.name)
