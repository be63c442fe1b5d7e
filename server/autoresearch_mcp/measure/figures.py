"""Derived figures: every number the server, the executors and the report show that is computed from
the ledger's records, each in one place.

Like pyperf, the records keep the raw values (every sample, every validation run, every cost) and
every summary here is recomputed from them: the baseline mean, the per-run noise, the session's cost,
the best experiment, the pairs an experiment measured, and its comparisons and verdict (through the
same `metrics.analyze` the manager judges with). The runner on a worker (worker/runner.py, standard
library only) keeps its own look at the pairs; the two agree on the same samples (test_figures.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from autoresearch_mcp.measure import metrics, stats
from autoresearch_mcp.store.ledger import ExperimentState
from autoresearch_mcp.store.records import Analysis, LaunchRecord, Outcome, ProfileRecord, SessionRecord
from autoresearch_mcp.worker import decide, outcomes

# --- the baseline ----------------------------------------------------------------------------------


def baseline_mean(sessions: Iterable[SessionRecord], session_id: str, metric: str, *,
                  head: str | None = None, oldest: bool = False) -> float | None:
    """Mean of `metric` over one validation start_session recorded for the session: the newest (or
    with `oldest`, the oldest) of those at `head` (at any head if None) that measured the metric."""
    mine = [s for s in sessions if s.session_id == session_id and (head is None or s.head == head)]
    for rec in mine if oldest else reversed(mine):
        values = rec.baseline.get(metric)
        if values:
            return float(math.fsum(values) / len(values))
    return None


def validation_runs(sessions: Iterable[SessionRecord], session_id: str, metric: str, head: str) -> list[float]:
    """The values of `metric` of the newest validation start_session recorded for the session at `head`."""
    for rec in reversed([s for s in sessions if s.session_id == session_id and s.head == head]):
        values = rec.baseline.get(metric)
        if values:
            return [float(v) for v in values]
    return []


DRIFT_CONFIDENCE = 0.99


def baseline_drift(reference: list[float], runs: list[float],
                   confidence: float = DRIFT_CONFIDENCE) -> tuple[float, float, float] | None:
    """How far `runs` (an experiment's baseline) sit from `reference` (start_session's validation runs of the same
    tree), as a log-ratio with its `confidence` interval: the difference of the mean logs, its spread pooled
    from both sides (the same tree on the same machine), Student's t. None with fewer than 2 runs a side or a
    value that is not positive. Two reference runs carry little: the interval says how little."""
    if len(reference) < 2 or len(runs) < 2 or min(*reference, *runs) <= 0:
        return None
    a, b = [math.log(v) for v in reference], [math.log(v) for v in runs]
    ma, mb = math.fsum(a) / len(a), math.fsum(b) / len(b)
    df = len(a) + len(b) - 2
    pooled = (math.fsum((x - ma) ** 2 for x in a) + math.fsum((x - mb) ** 2 for x in b)) / df
    half = decide.t_quantile((1 - confidence) / 2, df) * math.sqrt(pooled * (1 / len(a) + 1 / len(b)))
    return mb - ma, mb - ma - half, mb - ma + half


def drift_warning(reference: list[float], runs: list[float], limit: float) -> str | None:
    """The warning for an experiment's baseline `runs` that moved from start_session's validation runs of the same
    tree by more than `limit` (a fraction) beyond what their noise explains: the drift's whole interval past the
    limit. None otherwise (at 15% noise per run, two validation runs leave an interval of about +-30%)."""
    drift = baseline_drift(reference, runs)
    if drift is None:
        return None
    change, low, high = drift
    bound = math.log1p(limit)
    if -bound <= high and low <= bound:
        return None  # a drift the noise of these runs explains
    return (f"baseline drift: the baseline measured {math.expm1(change) * 100:+.1f}% against start_session's "
            f"validation ({DRIFT_CONFIDENCE:.0%} interval {math.expm1(low) * 100:+.1f}% to "
            f"{math.expm1(high) * 100:+.1f}%; limit {limit * 100:g}%), beyond what the runs' noise explains: the "
            "machine or the benchmark changed; check both before trusting small effects")


# --- noise -----------------------------------------------------------------------------------------


def worker_noise(outcome: outcomes.Experiment) -> float | None:
    """Per-run noise of the primary metric (a fraction) as the runner saw it at its last look: what
    a worker is judged by (too noisy a machine is replaced). None before any look."""
    spread = (outcome.look or {}).get("spread")
    return None if spread is None else stats.per_run_noise(float(spread))


# --- cost ------------------------------------------------------------------------------------------


def experiment_cost(exp: ExperimentState, *, platforms: bool = True) -> float | None:
    """What an experiment's runs cost (every round of it, and with `platforms` its runs on the other
    platforms); None when none of them reported a cost (a local run)."""
    costs = [r.cost_usd for r in [*exp.rounds, *([exp.result] if exp.result else [])]]
    if platforms:
        costs += [p.cost_usd for p in exp.platforms.values()]
    known = [float(c) for c in costs if c is not None]
    return math.fsum(known) if known else None


def session_cost(experiments: Iterable[ExperimentState], *, platforms: bool = True,
                 profiles: Iterable[ProfileRecord] = ()) -> float:
    """The sum of the experiments' costs and of the profiles' (0.0 when none reported one)."""
    return math.fsum([*(experiment_cost(e, platforms=platforms) or 0.0 for e in experiments),
                      *(p.cost_usd or 0.0 for p in profiles)])


# --- the best experiment ---------------------------------------------------------------------------


def is_winner(exp: ExperimentState, verdict: str | None = None) -> bool:
    """Eligible for commit_winner and for "best": it improved (its recorded verdict, or `verdict`, one
    recomputed from its samples), its checks passed, and no other platform failed it (commit_winner
    also waits for those still running)."""
    return (exp.status == "done" and (verdict or exp.verdict) == "improved" and exp.launch.source != "session"
            and not any(p.passed is False for p in exp.platforms.values()))


def best(experiments: Iterable[ExperimentState], metric: str, direction: str) -> ExperimentState | None:
    """The winner with the largest change of `metric` in its better direction (the first on a tie)."""
    sign = 1.0 if direction == "higher" else -1.0
    winners = [e for e in experiments if is_winner(e) and e.metric(metric).delta_pct is not None]
    return max(winners, key=lambda e: sign * (e.metric(metric).delta_pct or 0.0), default=None)


def chained_log(changes_pct: Iterable[float | None]) -> float:
    """Kept commits' changes (% of the metric's own value, each measured against its own base) chained: their
    log-ratios added. The one rule of the session's estimated total (list_experiments and the report)."""
    return math.fsum(math.log1p(pct / 100) for pct in changes_pct if pct is not None and pct > -100)


def chained_pct(experiments: Iterable[ExperimentState], metric: str) -> float | None:
    """The kept commits' estimates of `metric` chained (`chained_log`), % of its own value: what the session's
    measured total (a source='session' experiment) is compared with. None before any commit."""
    changes = [e.metric(metric).delta_pct for e in experiments if e.commit]
    if not any(pct is not None for pct in changes):
        return None
    return round(math.expm1(chained_log(changes)) * 100, 4)


# --- pairs -----------------------------------------------------------------------------------------


def pair_count(outcome: Outcome) -> int:
    """How many pairs an outcome's samples started (a pair counts once either side ran)."""
    return len({s.pair for s in outcome.samples})


def measured_samples(exp: ExperimentState) -> list[dict[str, Any]]:
    """The samples of the complete pairs the latest measured round holds, in order from the first: what a
    continuation pools with its own pairs (the design's looks count pairs from the experiment's start)."""
    measured = exp.measured
    samples = measured.outcome.typed(measured.status).samples if measured else []
    roles: dict[int, set[str]] = {}
    for sample in samples:
        roles.setdefault(sample.pair, set()).add(sample.role)
    done = 0
    while roles.get(done) == {"baseline", "candidate"}:
        done += 1
    return [sample.to_dict() for sample in samples if 0 <= sample.pair < done]


def pooled(exp: ExperimentState, outcome: outcomes.Experiment) -> outcomes.Experiment:
    """A continuation round's outcome with the earlier rounds' pairs in front (one design, one analysis)."""
    prior_pairs = exp.continued.prior_pairs if exp.continued else 0
    measured = exp.measured
    earlier = measured.outcome.typed(measured.status) if measured else outcomes.Experiment()
    kept = [s for s in earlier.samples if 0 <= s.pair < prior_pairs]
    rounds = [*earlier.rounds, {"pairs": prior_pairs, "worker": measured.worker if measured else None,
                                "host": earlier.host or None}] if prior_pairs else []
    return dataclasses.replace(outcome, samples=kept + outcome.samples, rounds=rounds)


# --- comparisons and verdicts ----------------------------------------------------------------------


def analyze(outcome: outcomes.Experiment, launch: LaunchRecord, final_n: int | None = None,
            start_n: int = 0) -> Analysis:
    """The comparisons of every metric and the verdict of a runner's outcome (as it wrote it; its
    refused values are dropped from it), judged as its launch recorded (metric, direction, objectives,
    guards, focus, design): what the manager stores with a result. `final_n`: where its round ended;
    `start_n`: where it started (the pairs of the rounds before)."""
    design = stats.load_design(launch.design)
    return Analysis.model_validate(metrics.analyze(outcome, metrics.spec_of(launch), design, final_n, start_n))


def round_end(exp: ExperimentState) -> int | None:
    """The last pair count of the experiment's latest round (None: as its design's first round)."""
    stops = exp.continued.stops if exp.continued else exp.launch.design.get("stops")
    return int(stops[-1]) if stops else None


def round_start(exp: ExperimentState) -> int:
    """The pairs the rounds before the experiment's latest one measured (0 in its first round)."""
    return exp.continued.prior_pairs if exp.continued else 0


def recomputed(exp: ExperimentState, launch: LaunchRecord | None = None) -> Analysis:
    """The experiment's analysis recomputed from its stored samples, judged as its launch (or
    `launch`) says (the stored analysis is what was judged then); empty until it has a result. One
    measured with the earlier t-test design keeps the analysis it was judged with."""
    launch = launch or exp.launch
    if exp.result is None:
        return Analysis()
    if "bounds" not in launch.design and launch.design.get("rule") != decide.RULE:
        # the earlier t-test design: today's test would judge it otherwise
        return exp.result.analysis
    # analyze drops refused values from what it is given: a copy, the record stays as read
    return analyze(exp.result.outcome.typed(exp.result.status), launch, round_end(exp), round_start(exp))


# --- confinement -----------------------------------------------------------------------------------

UNCONFINED_NOTE = ("ran unconfined (\"sandbox\": \"off\" in .autoresearch/config.json): its build, bench and "
                   "checks could write anywhere you can, read other processes and outlive the run, so nothing "
                   "protected its result from the candidate")
SHARED_NOTE = ("ran with the network open (\"sandbox\": {\"share\": [\"network\"]}): a candidate could reach "
               "the machine's local services and leave one slow for the baseline")


def unconfined(exps: Iterable[ExperimentState]) -> list[str]:
    """The experiments whose commands ran with confinement off (their runner's outcome says so)."""
    return [e.experiment_id for e in exps if e.outcome.sandbox == "off"]


def unconfined_warning(exps: Iterable[ExperimentState]) -> list[str]:
    """The warnings every listing of these experiments carries when any of them ran unconfined or with
    the network shared."""
    mine = list(exps)
    off = unconfined(mine)
    shared = [e.experiment_id for e in mine if "network shared" in (e.outcome.sandbox or "")]
    out = []
    if off:
        out.append(f"sandbox off: {len(off)} of {len(mine)} experiments {UNCONFINED_NOTE} "
                   f"({', '.join(off[:10])}{', ...' if len(off) > 10 else ''})")
    if shared:
        out.append(f"sandbox shares the network: {len(shared)} of {len(mine)} experiments {SHARED_NOTE} "
                   f"({', '.join(shared[:10])}{', ...' if len(shared) > 10 else ''})")
    return out
