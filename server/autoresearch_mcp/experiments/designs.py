"""What an experiment is judged on and measured with: its judging spec, its design and its runner job; and
whether an experiment may be measured further (more pairs pooled under its design)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from autoresearch_mcp.errors import InputError
from autoresearch_mcp.experiments.manager import ExperimentManager
from autoresearch_mcp.measure import metrics, stats
from autoresearch_mcp.store.config import Platform, SessionConfig
from autoresearch_mcp.store.ledger import ExperimentState
from autoresearch_mcp.store.records import LaunchRecord
from autoresearch_mcp.worker import decide, jobfile

# A candidate may be measured again when the earlier attempt produced no measurement, or one that
# asked for more: more pairs, a quieter worker, or a clean build to confirm an incremental one.
RETRYABLE = frozenset({"failed", "cancelled", "lost"})
REMEASURE = frozenset({"inconclusive", "noisy"})
_DECIDED = frozenset({"improved", "regressed", "no_change"})


def spec(config: SessionConfig, focus: list[str], session: bool = False, carried: bool = False) -> decide.Spec:
    """What a new launch is judged on: the session's metrics, guards and focus settings; the session's total
    (`session`) also proves each objective within its tolerance; winners kept together that each won on its focus
    (`carried`) hold every objective within its tolerance, as each did."""
    c = config
    return decide.Spec(c.metric, c.direction, c.min_effect, c.objective_metrics(),
                       {name: g.model_dump() for name, g in c.guards.items()}, focus, c.focus_direction,
                       c.focus_min_effect, dict(c.focus_tolerance_pct), c.focus_default_tolerance_pct,
                       harness_share=dict(c.harness_share), default_harness_share=c.default_harness_share,
                       processes_per_sample=c.processes_per_sample, pairing=c.pairing or decide.SEQUENTIAL,
                       guard_ceiling_pct=c.focus_guard_ceiling_pct, adaptive_equivalence=True,
                       prove_tolerance=session, shown_directions=dict(c.metric_directions),
                       threads=c.threads if c.threads is not None else 0, turn_clock=c.turn_clock or "cpu",
                       carried=carried, kinds=dict(c.metric_kinds), measured_share=dict(c.measured_share))


def design(config: SessionConfig, repeats: int | str, session: bool = False) -> stats.Design:
    """An experiment's design; the session's total gets the largest budget (it proves the objectives'
    tolerances end to end, which at a shared machine's noise takes hundreds of pairs)."""
    c = config
    budget = max(c.max_pairs, stats.SESSION_PAIRS) if session else c.max_pairs
    try:
        return stats.make_design(repeats, alpha=c.alpha, min_effect=c.min_effect, noise_limit=c.noise_limit,
                                 max_pairs=budget, warmup=c.warmup)
    except InputError as exc:
        raise InputError(f"repeats={repeats!r}: {exc}") from None


def checked_repeats(config: SessionConfig, repeats: int | str | None) -> int | str:
    """`repeats` as given (the config's default when None), checked: a number of pairs within max_pairs, or auto."""
    value = config.default_repeats if repeats is None else repeats
    if value == "auto":
        return "auto"
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise InputError(f"repeats must be a number of pairs or 'auto', not {value!r}") from None
    if not 1 <= n <= config.max_pairs:
        raise InputError(f"repeats must be between 1 and max_pairs={config.max_pairs} (or 'auto'), not {n}")
    return n


def job(manager: ExperimentManager, design: stats.Design, launch: LaunchRecord, base_tree: str, tree: str,
        incremental: bool, platform: Platform, stops: list[int] | None = None,
        prior_samples: Sequence[dict[str, Any]] = ()) -> jobfile.Experiment:
    """The runner job of one experiment on one platform (the host's first); a continuation's earlier pairs
    (`prior_samples`) are pooled with its own."""
    spec = metrics.spec_of(launch)
    return manager.jobs.experiment(
        dataclasses.asdict(spec), design.job(), stops or design.stops, base_tree, tree, incremental, platform,
        spec.focus, prior_samples=prior_samples)


def not_continuable(exp: ExperimentState) -> str | None:
    """Why more pairs cannot be added to `exp` (None: they can)."""
    if exp.commit:
        return "it is committed"
    if exp.status in RETRYABLE:
        return None  # the last round did not finish: measure it again, pooled with the rounds that did
    verdict = exp.verdict
    if exp.status == "checks_failed":
        return "its checks failed; fix the change and launch it as a new experiment"
    if verdict not in REMEASURE:
        return (f"its verdict is {verdict!r}, already a decision" if verdict in _DECIDED
                else f"it ended {exp.status} with verdict {verdict!r}; fix the cause and launch a new experiment")
    n = exp.metric(exp.launch.metric).n_pairs
    design = stats.load_design(exp.launch.design)
    limit = design.limit if isinstance(design, stats.Design) else design.budget
    if n >= limit:
        return (f"it used every pair its design allows ({limit}); more would spend a fresh alpha. Treat it as "
                "no gain, or make the benchmark steadier")
    return None
