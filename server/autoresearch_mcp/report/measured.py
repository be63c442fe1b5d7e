"""One experiment's figures as the report shows them, recomputed from the samples its result stores.

pyperf's rule: the ledger keeps every raw sample, and every figure is recomputed from them with the
function the manager judged with (`metrics.analyze`), never read back from the analysis frozen in the
result record. Where that cannot be done the figures say so instead of inventing: a result without
samples (a failed run, a ledger written by an early version) or measured with the earlier t-test
design (which this version no longer computes) is shown as the ledger recorded it, marked `recorded`;
an experiment without a result shows nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autoresearch_mcp.measure import figures, stats
from autoresearch_mcp.store.config import SessionConfig
from autoresearch_mcp.store.ledger import ExperimentState
from autoresearch_mcp.store.records import Analysis

# Where an experiment's figures come from.
SAMPLES, RECORDED, NONE = "samples", "recorded", "none"


@dataclass(frozen=True)
class Measured:
    """The per-metric comparisons, the verdict and the primary estimate's standard error of one experiment."""

    source: str  # SAMPLES, RECORDED or NONE
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> comparison (delta_pct, ci_*, ...)
    verdict: str | None = None
    error: tuple[float, int] | None = None  # (standard error of the primary log-ratio, degrees of freedom)
    why: str | None = None  # why the figures are not recomputed from samples

    def comparison(self, name: str) -> dict[str, Any]:
        """The comparison of one metric; empty if it was not measured."""
        return self.metrics.get(name) or {}


def measure(exp: ExperimentState, config: SessionConfig) -> Measured:
    """The experiment's figures: from its stored samples when it has them, else what the ledger recorded."""
    if exp.result is None:
        return Measured(NONE)
    # a launch of an early version may not name its metric or direction: the session's
    launch = exp.launch.model_copy(update={
        "metric": exp.launch.metric or config.metric,
        "direction": exp.launch.direction if exp.launch.carries("direction") else config.direction})
    design = _recorded_design(launch.design)
    if not exp.outcome.samples:
        why = "the result stores no samples"
    elif design is None:
        why = "the launch records no design"
    elif design.statistic == "t":
        why = "measured with the earlier t-test design, which this version does not recompute"
    else:
        try:
            analysis = figures.recomputed(exp, launch)
        except (KeyError, TypeError, ValueError) as exc:
            why = f"its samples could not be analyzed ({type(exc).__name__}: {str(exc)[:80]})"
        else:
            primary = analysis.metric(config.metric)
            se, n = (primary.log_se, primary.n_pairs) if primary else (None, 0)
            error = (float(se), n - 1) if se is not None and n >= 2 else None
            return Measured(SAMPLES, _dicts(analysis), analysis.verdict, error)
    recorded = _dicts(exp.analysis)
    if not recorded and exp.verdict is None:
        return Measured(NONE, why=why)
    error = stats.log_standard_error(recorded.get(config.metric) or {}, design or _earliest_design(exp, config))
    return Measured(RECORDED, recorded, exp.verdict, error, why)


def _dicts(analysis: Analysis) -> dict[str, dict[str, Any]]:
    return {name: comparison.model_dump() for name, comparison in analysis.metrics.items()}


def _recorded_design(recorded: dict[str, Any]) -> stats.AnyDesign | None:
    if not recorded:
        return None
    try:
        return stats.load_design(recorded)
    except (TypeError, KeyError, ValueError):
        return None


def _earliest_design(exp: ExperimentState, config: SessionConfig) -> stats.AnyDesign:
    """The design of a launch that recorded none: the earliest one, a fixed t test at the session's alpha."""
    return stats.load_design({"looks": [max(2, exp.metric(config.metric).n_pairs or 2)],
                                   "alphas": [config.alpha], "min_effect": config.min_effect,
                                   "noise_limit": config.noise_limit, "alpha": config.alpha})
