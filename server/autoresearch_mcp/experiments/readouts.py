"""The experiments as the tools show them: one experiment (fetch_sky_logs) with its log tail and next step, and
the same in a few lines; the session's list (list_experiments) and the claim of its measured total; and the
figures they read in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from autoresearch_mcp.errors import InputError
from autoresearch_mcp.experiments import designs
from autoresearch_mcp.experiments import platforms as platforms_
from autoresearch_mcp.experiments.manager import ExperimentManager, platforms_running
from autoresearch_mcp.measure import figures, stats
from autoresearch_mcp.models import (
    FINAL_STATUSES,
    ChecksResult,
    ComparisonResult,
    ExperimentSummary,
    FetchResult,
    ListExperimentsResult,
    MetricSummary,
)
from autoresearch_mcp.store.ledger import ExperimentState
from autoresearch_mcp.store.records import Comparison
from autoresearch_mcp.worker.decide import HARNESS_PREFIX, SETTLED, WORK

MAX_TAIL_LINES = 400
MAX_WAIT_S = 600.0


def fetch(manager: ExperimentManager, experiment_id: str, tail_lines: int, wait_s: float = 0.0,
          samples: bool = False) -> FetchResult:
    """The experiment as it stands; with `wait_s`, first wait up to that long for its status to change
    (telling `progress` each pair meanwhile). Raw samples, and the harness's own measures in full, only with
    `samples`: the answer is read at every poll, and its size should not grow with the pairs or the metrics."""
    if not 0 <= tail_lines <= MAX_TAIL_LINES:
        raise InputError(f"tail_lines must be between 0 and {MAX_TAIL_LINES}, not {tail_lines}")
    if not 0 <= wait_s <= MAX_WAIT_S:
        raise InputError(f"wait_s must be between 0 and {MAX_WAIT_S:g} seconds, not {wait_s:g}")
    exp = manager.get(experiment_id)
    if wait_s and (exp.status not in FINAL_STATUSES or platforms_running(exp)):
        manager.wait_reporting(exp, wait_s)
        exp = manager.get(experiment_id)
    log_path = manager.logs / f"{experiment_id}.log"
    outcome = exp.outcome
    design = stats.load_design(exp.launch.design)
    ran = exp.outcome.checks
    checks = ChecksResult.model_validate(ran.model_dump(exclude_unset=True)) if ran else None
    judged = {exp.launch.metric, *exp.launch.objectives, *exp.launch.guards}
    noise_note = exp.analysis.noise_note
    shown = {k: _shown(v, k in judged, samples, noise_note) for k, v in exp.metrics.items()}
    # the harness's outside time of every run, which nobody judges: one line, unless everything is asked for or
    # it blocks the experiment (pairs in turns whose own wall time grew)
    outside = [] if samples else [k for k, m in shown.items() if k.startswith(HARNESS_PREFIX) and m.role is None
                                  and k not in exp.analysis.blocking]
    return FetchResult(
        experiment_id=experiment_id, title=exp.title, status=exp.status,
        verdict=exp.verdict, worker=exp.worker, base_commit=exp.launch.base_commit,
        candidate_commit=exp.launch.candidate_commit, log_tail=_tail(log_path, tail_lines),
        log_path=str(log_path),
        metrics={k: m for k, m in shown.items() if k not in outside},
        harness="; ".join(f"{k} {figure(shown[k])}" for k in outside) + "; in full with samples=true"
        if outside else None,
        won=list(exp.analysis.won), blocking=list(exp.analysis.blocking),
        checks=checks, confidence_level=1 - design.alpha,
        pairs_done=manager.pairs_done.get(experiment_id, 0) if exp.result is None
        else figures.pair_count(outcome),
        stop_reason=outcome.stop_reason, durations_s=outcome.durations,
        build=outcome.build, host=outcome.host, noise_cv=_significant(exp.analysis.noise_cv, 4),
        noise_note=noise_note, focus=list(exp.launch.focus), claims=claims(exp),
        layout_pct=exp.analysis.layout_pct,
        error=outcome.error or exp.status_detail, cost_usd=figures.experiment_cost(exp),
        warnings=_drift_warnings(manager, exp) + figures.unconfined_warning([exp]) + _disagreement(exp),
        next_step=_next_step(manager, exp),
        platforms=[platforms_.result_of(p, exp.platforms.get(p.name), exp.launch.incremental)
                   for p in manager.platforms[1:]],
    )


def _drift_warnings(manager: ExperimentManager, exp: ExperimentState) -> list[str]:
    primary = exp.metric(manager.config.metric)
    reference = figures.validation_runs(manager.view.sessions, manager.config.session_id, manager.config.metric,
                                        exp.launch.base_commit)
    warning = figures.drift_warning(reference, list(primary.baseline.samples) if primary else [],
                                    manager.config.drift_limit)
    return [warning] if warning else []


def _next_step(manager: ExperimentManager, exp: ExperimentState) -> str | None:
    verdict = exp.verdict
    if exp.status not in FINAL_STATUSES:
        return "still running: poll again later, and prepare the next idea meanwhile"
    if exp.commit:
        return f"committed as {exp.commit.commit[:12]}"
    kept = next((o for o in manager.mine() if o.commit and exp.experiment_id in o.launch.combines), None)
    if kept is not None and kept.commit is not None:
        return (f"kept together with others in experiment {kept.experiment_id}'s commit {kept.commit.commit[:12]}, "
                "its evidence in that commit's message")
    if exp.status == "checks_failed":
        return "the checks failed: the change is not correct; read the log tail, fix, launch again"
    if verdict == "improved" and exp.status == "done" and not exp.launch.incremental:
        note = manager.platform_note(exp)
        if note:
            return note
    if verdict == "improved":
        return f"call commit_winner('{exp.experiment_id}', title) to keep it"
    if verdict in designs.REMEASURE:
        why = designs.not_continuable(exp)
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
        n = exp.metric(manager.config.metric).n_pairs
        more = f"; about {need - n} more pairs would decide with 80% power" if need else ""
        return f"not decided yet: {further}{more}"
    if verdict == "invalid":
        settled = next((p for p in exp.analysis.problems if p.startswith(SETTLED)), None)
        if settled is not None:
            return (f"{settled}: do not measure it further. A forged figure is refused; a real change to a bench "
                    f"that runs for a fixed time shows once the bench prints METRIC {WORK}=<the work it did>")
        return "a run lacked the primary metric: read the log and fix the benchmark or the crash"
    return None


def list_experiments(manager: ExperimentManager, status: str | None) -> ListExperimentsResult:
    """The session's experiments at a glance (those with `status`, or all), with its best, totals and cost."""
    items = []
    kept = discarded = running = 0
    totals: dict[str, float] = {}
    mine = sorted(manager.mine(), key=lambda e: float(e.launch.ts))
    for exp in mine:
        outcome = exp.outcome
        for phase, seconds in outcome.durations.items():
            totals[phase] = round(totals.get(phase, 0.0) + float(seconds), 3)
        for build in outcome.build.values():
            for key, count in (build.get("cache") or {}).items():
                totals[f"cache_{key}"] = totals.get(f"cache_{key}", 0) + count
        if exp.commit:
            kept += 1
        elif exp.status in FINAL_STATUSES and not platforms_running(exp):
            discarded += 1
        else:
            running += 1  # a host winner still being checked on other platforms is still running
        if status is None or exp.status == status:
            items.append(_summary(manager, exp))
    best = figures.best([e for e in mine if not e.launch.focus], manager.config.metric, manager.config.direction)
    totals_measured = [e for e in mine if e.launch.source == "session" and e.result is not None]
    chained = figures.chained_pct(mine, manager.config.metric)
    return ListExperimentsResult(experiments=items, best=best and _summary(manager, best), kept=kept,
                                 session_total=_summary(manager, totals_measured[-1]) if totals_measured else None,
                                 session_claim=session_claim(manager),
                                 estimated_total_pct=chained,
                                 discarded=discarded, running=running,
                                 cost_usd=round(figures.session_cost(mine, profiles=manager.profiles()), 4),
                                 totals=totals,
                                 warnings=list(manager.view.warnings) + figures.unconfined_warning(mine))


def _summary(manager: ExperimentManager, exp: ExperimentState) -> ExperimentSummary:
    primary = exp.metric(manager.config.metric)
    return ExperimentSummary(
        experiment_id=exp.experiment_id, title=exp.title, status=exp.status,
        verdict=exp.verdict, delta_pct=primary.delta_pct,
        ci_low_pct=primary.ci_low_pct, ci_high_pct=primary.ci_high_pct,
        ci_level=primary.ci_level, n_pairs=primary.n_pairs,
        sources=list(exp.launch.sources),
        kept=exp.commit is not None, commit=exp.commit.commit if exp.commit else None,
        cost_usd=figures.experiment_cost(exp), focus=list(exp.launch.focus),
        focus_delta_pct=exp.metric(lead_metric(exp)).delta_pct if exp.launch.focus else None,
        source=exp.launch.source, claims=claims(exp),
    )


def session_claim(manager: ExperimentManager) -> str:
    """What the session's latest measured total showed of each objective's tolerance, and at which head."""
    totals = [e for e in manager.mine() if e.launch.source == "session" and e.result is not None]
    if not totals:
        return ("session total not yet measured: launch_experiment(source='session') proves the objectives' "
                "tolerances end to end")
    latest = totals[-1]
    shown = "; ".join(claims(latest)) or f"session total {latest.verdict or latest.status}"
    head = latest.launch.candidate_commit
    return shown + ("" if head == manager.session_head() else f" (measured at {head[:12]}, before later commits)")


def claims(exp: ExperimentState) -> list[str]:
    """What an experiment showed, each claim at its level (measure/metrics.py `analyze`)."""
    return list(exp.analysis.claims)


def lead_metric(exp: ExperimentState) -> str:
    """The metric an experiment is decided on: its (first) focus metric, else the primary metric."""
    focus = sorted(name for name, m in exp.metrics.items() if m.role == "focus")
    return focus[0] if focus else exp.launch.metric


def _shown(m: Comparison, judged: bool, samples: bool, noise_note: str | None) -> ComparisonResult:
    """One metric as fetch shows it: each side's figures rounded (its mean and median to 6 significant
    digits), raw samples only when asked for; a metric nobody judges (not an objective, guard, focus or
    control) without a verdict or a direction, whatever an older record says, and its change and noise
    without the figures a verdict weighs unless everything is asked for; its note left out when the
    experiment's noise_note already says it."""
    shown = ComparisonResult.model_validate(m.model_dump(exclude_unset=True))
    update: dict[str, Any] = {"baseline": _side(shown.baseline, samples), "candidate": _side(shown.candidate, samples),
                              "p_value": _significant(shown.p_value, 4)}
    if shown.role is None and not judged:
        update.update(verdict=None, direction=None, judgement=None, pairs_needed=None)
        if not samples:
            update.update(mean_pct=None, mean_low_pct=None, mean_high_pct=None, tail_pct=None, resolvable_pct=None)
    if shown.note and noise_note and shown.note in noise_note:
        update["note"] = None
    return shown.model_copy(update=update)


def _side(summary: MetricSummary, samples: bool) -> MetricSummary:
    return summary.model_copy(update={
        "mean": _significant(summary.mean, 6), "median": _significant(summary.median, 6),
        "stddev": _significant(summary.stddev, 4), "cv": _significant(summary.cv, 4),
        "samples": summary.samples if samples else []})


def _significant(x: float | None, digits: int) -> float | None:
    """`x` to `digits` significant digits: what a reader compares, without a float's trailing noise."""
    return None if x is None else float(f"{x:.{digits}g}")


def in_short(result: FetchResult) -> str:
    """get_experiment's answer in a few lines, for a client that shows its text: the change and verdict of each
    metric, what blocks it, the gist of each note, the next step. Every field is in the structured content (all
    that Claude Code shows the model), so the answer does not carry the fields twice."""
    r = result
    done = f", {r.verdict}" if r.verdict else ""
    lines = [f"experiment {r.experiment_id} ({r.title}): {r.status}{done}, {r.pairs_done} pairs"]
    for name, m in r.metrics.items():
        judged = m.role is not None or m.verdict is not None
        said = f"{m.judgement or m.verdict or 'undecided'} ({m.role or 'judged'})" if judged else "not judged"
        lines.append(f"{name}: {figure(m)}, {said}" + (f"; {_gist(m.note)}" if m.note and judged else ""))
    if r.checks:
        lines.append("checks " + ("passed" if r.checks.passed else "failed" if r.checks.ran else "not run"))
    notes = [("noise", r.noise_note), *(("claim", c) for c in r.claims), *(("warning", w) for w in r.warnings)]
    for label, text in (("blocking", ", ".join(r.blocking)), ("error", r.error),
                        *((label, _gist(note)) for label, note in notes), ("next step", r.next_step)):
        if text:
            lines.append(f"{label}: {text}")
    lines.append("(every field, the log tail too, is in the structured content; raw samples with samples=true)")
    return "\n".join(lines)


def _gist(note: str | None, limit: int = 100) -> str:
    """A note's beginning: the whole is in the structured content."""
    text = note or ""
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def figure(m: Comparison | ComparisonResult | dict[str, Any]) -> str:
    """`+1.23% [+0.50%, +2.00%]`, or `no interval` when a metric has none (a holdout's is a dict)."""
    c = m if isinstance(m, Comparison | ComparisonResult) else Comparison.model_validate(m)
    if c.delta_pct is None or c.ci_low_pct is None or c.ci_high_pct is None:
        return "no interval"
    return (f"{c.delta_pct:+.2f}% [{c.ci_low_pct:+.2f}%, {c.ci_high_pct:+.2f}%]"
            + (f" ({c.ci_level:.0%} CI)" if c.ci_level else ""))


TAIL_BYTES = 32 * 1024
LINE_CHARS = 100  # a tail's characters per line asked for: a bench's table rows or progress bars can be long


def _tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log, at most LINE_CHARS characters a line in all (one 10 MB line is not a
    tail, and the answer's size should follow what was asked for, not how the bench prints)."""
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
    tail = "\n".join(text.splitlines()[-lines:])
    if len(tail) > lines * LINE_CHARS:
        return "[... earlier output cut]" + tail[-lines * LINE_CHARS:]
    return ("[... earlier output cut]\n" if size > TAIL_BYTES else "") + tail


def _disagreement(exp: ExperimentState) -> list[str]:
    """A focus and the end-to-end objectives that tell different stories (decide.focus_disagreement)."""
    said = exp.analysis.disagreement
    return [said] if said else []
