"""The derived figures (measure/figures.py): each computed in one place from the stored records, and
the same on the server as on the worker's runner for the same samples."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autoresearch_mcp.errors import StateError
from autoresearch_mcp.measure import figures, metrics, stats
from autoresearch_mcp.store.ledger import ExperimentState, Ledger, PlatformState
from autoresearch_mcp.store.records import (
    Analysis,
    ContinueRecord,
    LaunchRecord,
    Outcome,
    ProfileRecord,
    ResultRecord,
    SessionRecord,
)
from autoresearch_mcp.worker import decide, outcomes, runner

V0 = Path(__file__).parent / "data" / "ledger_v0" / "ledger.jsonl"
DESIGN = stats.make_design("auto")


def launch(design: dict[str, Any] | None = None) -> LaunchRecord:
    return LaunchRecord(experiment_id="e", session_id="s", title="x", metric="t", direction="lower",
                        design=DESIGN.record() if design is None else design, base_commit="b" * 40)


def experiment(delta: float | None, verdict: str = "improved", status: str = "done", cost: float | None = None,
               platforms: dict[str, PlatformState] | None = None) -> ExperimentState:
    analysis = Analysis.model_validate({"verdict": verdict, "metrics": {} if delta is None else {
        "t": {"delta_pct": delta}}})
    return ExperimentState("e", launch(), status=status, platforms=platforms or {},
                           result=ResultRecord(experiment_id="e", status=status, cost_usd=cost, analysis=analysis))


def samples(base: list[float], cand: list[float], metric: str = "t", seed: int = 0) -> list[runner.Sample]:
    """Samples as the runner writes them, each pair's order a coin."""
    coin = random.Random(seed)
    out = []
    for pair, (b, c) in enumerate(zip(base, cand, strict=True)):
        second = coin.random() < 0.5
        out += [runner.Sample(pair, "baseline", int(not second), 0, 0.1, False, {metric: b}),
                runner.Sample(pair, "candidate", int(second), 0, 0.1, False, {metric: c})]
    return out


# --- the baseline ----------------------------------------------------------------------------------

SESSIONS = [
    SessionRecord(session_id="s", head="h1", baseline={"t": [10.0, 12.0]}),
    SessionRecord(session_id="other", head="h1", baseline={"t": [1.0, 1.0]}),
    SessionRecord(session_id="s", head="h2", baseline={"t": [20.0, 22.0]}),
    SessionRecord(session_id="s", head="h2", baseline={"mem": [5.0]}),
]


def test_the_baseline_is_the_newest_validation_of_the_session_that_measured_the_metric() -> None:
    assert figures.baseline_mean(SESSIONS, "s", "t") == 21.0
    assert figures.baseline_mean(SESSIONS, "s", "mem") == 5.0
    assert figures.baseline_mean(SESSIONS, "s", "missing") is None
    assert figures.baseline_mean([], "s", "t") is None


def test_the_baseline_at_a_head_or_the_oldest_one() -> None:
    assert figures.baseline_mean(SESSIONS, "s", "t", head="h1") == 11.0
    assert figures.baseline_mean(SESSIONS, "s", "t", oldest=True) == 11.0
    assert figures.baseline_mean(SESSIONS, "s", "t", head="h3") is None


# --- cost ------------------------------------------------------------------------------------------


def test_an_experiments_cost_adds_its_platforms_runs_and_is_none_when_nothing_was_charged() -> None:
    exp = experiment(-5.0, cost=0.25, platforms={"arm": PlatformState(cost_usd=0.5), "emu": PlatformState()})
    assert figures.experiment_cost(exp) == 0.75
    assert figures.experiment_cost(exp, platforms=False) == 0.25
    assert figures.experiment_cost(experiment(-5.0)) is None
    only_platform = experiment(-5.0, platforms={"arm": PlatformState(cost_usd=0.5)})
    assert figures.experiment_cost(only_platform) == 0.5 and figures.experiment_cost(only_platform,
                                                                                   platforms=False) is None
    continued = experiment(-5.0, cost=0.25)
    continued.rounds = [ResultRecord(experiment_id="e", status="done", cost_usd=0.5)]
    assert figures.experiment_cost(continued) == 0.75  # the earlier round ran (and was charged) too
    assert figures.session_cost([exp, experiment(None, cost=0.1), only_platform]) == pytest.approx(1.35)
    assert figures.session_cost([]) == 0.0


# --- the best experiment ---------------------------------------------------------------------------


def test_the_sessions_cost_counts_its_profiles_read_back_from_the_ledger(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / ".autoresearch" / "ledger.jsonl")
    (tmp_path / ".autoresearch").mkdir()
    ledger.append(ProfileRecord(session_id="s", profile_id="p1", build="baseline", commit="c", worker="ar-1",
                                cost_usd=0.25))
    ledger.append(ProfileRecord(session_id="s", profile_id="p2", build="baseline", commit="c"))  # a local one
    profiles = ledger.view().profiles
    assert [p.profile_id for p in profiles] == ["p1", "p2"]
    assert figures.session_cost([experiment(1.0, cost=0.5)], profiles=profiles) == pytest.approx(0.75)
    assert figures.session_cost([], profiles=profiles[1:]) == 0.0


def test_the_best_is_the_winner_with_the_largest_change_in_the_better_direction() -> None:
    small, large, failed_elsewhere = experiment(-2.0), experiment(-9.0), experiment(-20.0, platforms={
        "arm": PlatformState(passed=False)})
    not_done = experiment(-30.0, status="checks_failed")
    regressed = experiment(+40.0, verdict="regressed")
    assert figures.best([small, large, failed_elsewhere, not_done, regressed], "t", "lower") is large
    assert figures.best([small, large], "t", "higher") is small
    assert figures.best([regressed, not_done], "t", "lower") is None
    tie = experiment(-9.0)
    assert figures.best([large, tie], "t", "lower") is large  # the first of equals


# --- noise -----------------------------------------------------------------------------------------


def test_a_workers_noise_is_the_per_run_noise_at_the_runners_last_look() -> None:
    assert figures.worker_noise(outcomes.Experiment(look={"spread": 0.02})) == pytest.approx(0.02 / 2**0.5)
    assert figures.worker_noise(outcomes.Experiment(look=None)) is None
    assert figures.worker_noise(outcomes.Experiment(look={})) is None


# --- pairs -----------------------------------------------------------------------------------------


def _round(n: int, worker: str = "w1") -> ResultRecord:
    outcome = {"samples": [dataclasses.asdict(s) for s in samples([100.0 + i for i in range(n)],
                                                                  [90.0 + i for i in range(n)])],
               "host": {"hostname": worker}}
    return ResultRecord(experiment_id="e", status="done", worker=worker, outcome=Outcome.model_validate(outcome))


def test_a_continuation_pools_the_complete_pairs_of_the_last_measured_round() -> None:
    exp = ExperimentState("e", launch(), status="done", result=_round(5))
    assert exp.result is not None
    exp.result.outcome.samples.pop()  # the last pair's candidate run never ended
    pooled_before = figures.measured_samples(exp)
    assert sorted({s["pair"] for s in pooled_before}) == [0, 1, 2, 3]  # complete pairs only
    exp.rounds, exp.result, exp.continued = [exp.result], None, ContinueRecord(experiment_id="e", prior_pairs=4)
    new = outcomes.Experiment(samples=[dataclasses.replace(s, pair=4) for s in samples([200.0], [180.0])])
    pooled = figures.pooled(exp, new)  # the runner numbers the new round's pairs after the prior ones
    assert [s.pair for s in pooled.samples] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert pooled.rounds == [{"pairs": 4, "worker": "w1", "host": {"hostname": "w1"}}]
    assert figures.pair_count(Outcome.model_validate(pooled.to_dict())) == 5 and figures.pair_count(Outcome()) == 0


def test_a_round_that_measured_nothing_leaves_no_pairs_to_pool() -> None:
    exp = ExperimentState("e", launch(), status="failed", result=ResultRecord(experiment_id="e", status="failed"))
    assert figures.measured_samples(exp) == []
    assert figures.pooled(exp, outcomes.Experiment()) == outcomes.Experiment()


# --- comparisons and verdicts ----------------------------------------------------------------------


def test_every_stored_verdict_of_a_real_session_is_recomputed_from_its_samples() -> None:
    view = Ledger(V0).view()
    judged = [e for e in view.experiments.values() if e.result is not None]
    assert len(judged) == 3  # the fourth was cancelled before it had a result
    for exp in judged:
        assert exp.result is not None
        again = figures.recomputed(exp).model_dump()
        for comparison in again["metrics"].values():
            comparison["log_se"] = None  # a figure this ledger's analyses predate
        assert again == exp.result.analysis.model_dump(), exp.title
    pooled = next(e for e in judged if e.continued is not None)
    assert pooled.rounds[0].analysis.metrics["t"].n_pairs == 2
    assert pooled.metric("t").n_pairs == 20  # the first round's 2 pairs, then 14+ more up to the look at 20


def test_a_verdict_of_the_earlier_t_test_design_is_kept_as_it_was_judged() -> None:
    old = {"looks": [10], "alphas": [0.02], "min_effect": 0.01, "noise_limit": 0.1, "alpha": 0.02}
    stored = Analysis.model_validate({"verdict": "improved", "metrics": {"t": {"delta_pct": -3.0}}})
    exp = ExperimentState("e", launch(old), status="done",
                          result=ResultRecord(experiment_id="e", status="done", analysis=stored))
    assert figures.recomputed(exp) == stored
    assert figures.recomputed(ExperimentState("e", launch())) == Analysis()


def test_a_launch_without_a_direction_is_never_judged_with_a_default_one() -> None:
    stored = Ledger(V0).view()
    exp = next(e for e in stored.experiments.values() if e.result is not None)
    unnamed = LaunchRecord.model_validate({k: v for k, v in exp.launch.model_dump().items() if k != "direction"})
    assert unnamed.direction == "higher"  # the model's default, which must not be taken for the session's
    with pytest.raises(StateError, match="names no metric or no direction"):
        figures.recomputed(exp, unnamed)
    with pytest.raises(StateError, match="names no metric or no direction"):
        figures.recomputed(exp, exp.launch.model_copy(update={"metric": ""}))


@pytest.mark.parametrize("seed", range(6))
def test_the_server_and_the_runner_agree_on_the_same_samples(seed: int) -> None:
    """The runner judges on the worker (standard library, after every pair); the server judges again from
    the stored samples: the same pairs, verdict, interval and noise."""
    rng = np.random.default_rng(seed)
    effect, sigma = [(0.0, 0.002), (-0.03, 0.03), (0.0, 0.08), (0.05, 0.02), (-0.01, 0.004), (0.02, 0.01)][seed]
    base = [round(float(x), 3) for x in 100 * np.exp(rng.normal(0, sigma, 100))]
    cand = [round(b * float(np.exp(effect + rng.normal(0, sigma))), 3) for b in base]
    ran = samples(base, cand, seed=seed)
    spec = metrics.spec_of(launch())
    plan = DESIGN.plan()
    for n in range(1, 101):
        decision = decide.judge([dataclasses.asdict(s) for s in ran[: 2 * n]], spec, plan, n=n)
        if decision.final:
            break
    stored = ran[: 2 * n]
    random.Random(seed).shuffle(stored)  # the order the runner wrote them in does not matter
    look = decision.metrics["t"].look
    outcome = outcomes.Experiment(samples=stored, look={"pairs": n, "verdict": decision.verdict, "spread": look.spread})
    analysis = figures.analyze(outcome, launch(), DESIGN.budget)
    primary = analysis.metrics["t"]
    assert analysis.verdict == decision.verdict and primary.n_pairs == n
    if look.look == n and look.low is not None and look.high is not None and decision.verdict != "no_change":
        assert primary.ci_low_pct == stats.pct(-look.high) and primary.ci_high_pct == stats.pct(-look.low)
    noise = figures.worker_noise(outcome)
    assert noise is not None and primary.noise_pct == round(noise * 100, 4)
