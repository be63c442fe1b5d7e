"""The decision rule on small fixed inputs (worker/decide.py through measure/stats.py): each pair's order a
coin of its own, exact sign-flip tests whose looks add up to alpha/2, the average run and the worst runs
beside the typical one, futility and equivalence, the printed resolution, and a focus judged against the
untouched controls."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from scipy import stats as sps

from autoresearch_mcp.errors import InputError
from autoresearch_mcp.measure import calibrate, metrics, stats
from autoresearch_mcp.worker import decide, outcomes

DESIGN = stats.make_design("auto")
PLAN = DESIGN.plan()
SPEC = decide.Spec("score", "higher", 0.01)


def run_pairs(values: list[tuple[float, float]], seed: int = 1, text: str = "{:.2f}") -> list[dict[str, Any]]:
    """Samples as the runner records them: (baseline, candidate) of each pair, the order a coin per pair."""
    rng = random.Random(seed)
    samples = []
    for i, (base, cand) in enumerate(values):
        second = rng.random() < 0.5
        for role, value in (("baseline", base), ("candidate", cand)):
            printed = text.format(value)
            position = int(second) if role == "candidate" else int(not second)
            samples.append({"pair": i, "role": role, "position": position, "metrics": {"score": float(printed)},
                            "steps": {"score": decide.printed_step(printed)}})
    return samples


def first_decision(values: list[tuple[float, float]], spec: decide.Spec = SPEC, **kw: Any) -> decide.Decision:
    """Judge after every pair, as the runner does with repeats='auto', until the verdict is final."""
    samples = run_pairs(values, **kw)
    for n in range(1, len(values) + 1):
        decision = decide.judge(samples[: 2 * n], spec, PLAN, n=n, final_n=DESIGN.budget)
        if decision.final:
            return decision
    return decision


def noisy(n: int, effect: float, sd: float, seed: int = 3, base: float = 100.0) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    return [(base * math.exp(rng.gauss(0, sd)), base * math.exp(effect + rng.gauss(0, sd))) for _ in range(n)]


# --- printed resolution ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "step"), [("100.00", 0.01), ("48", 1.0), ("1.5e3", 100.0), ("7.25e-05", 1e-7),
                                            ("-3.0", 0.1), ("102.07", 0.01)])
def test_the_resolution_is_read_from_the_printed_text(text: str, step: float) -> None:
    assert decide.printed_step(text) == pytest.approx(step)


def test_a_round_printed_no_op_ends_no_change_within_ten_pairs() -> None:
    decision = first_decision([(100.0, 100.0)] * 40)
    assert decision.verdict == "no_change" and decision.n <= 10
    # read from the float, 100.00 would have a step of 1 and a floor of 1%: it could never end
    assert decision.metrics["score"].look.floor == pytest.approx(0.0001)


def test_an_integer_metric_near_48_still_sees_two_percent_either_way() -> None:
    for effect, verdict in ((0.02, "improved"), (-0.02, "regressed")):
        values = [(round(48 * math.exp(x)), round(48 * math.exp(effect + y))) for x, y in
                  ((random.Random(i).gauss(0, 0.01), random.Random(1000 + i).gauss(0, 0.01)) for i in range(100))]
        assert first_decision(values, text="{:.0f}").verdict == verdict


# --- early decisions -------------------------------------------------------------------------------


def test_deterministic_changes_decide_where_the_exact_test_first_can() -> None:
    small = first_decision([(100.0, 100.5)] * 40)
    assert small.verdict == "no_change" and small.n <= 10
    worse = first_decision([(100.0, 49.0)] * 40)
    assert worse.verdict == "regressed" and worse.n == DESIGN.looks[0] == 10
    better = first_decision([(100.0, 151.0)] * 40)
    assert better.verdict == "improved" and better.n == DESIGN.min_pairs_improved == 30


def test_a_fixed_count_that_cannot_decide_is_refused_with_the_count_that_can() -> None:
    with pytest.raises(InputError, match="at least 30"):
        stats.make_design(8)
    assert stats.make_design(30).stops == [30]
    assert stats.make_design(33).stops == [40]  # the next look


# --- the randomization ------------------------------------------------------------------------------


def test_under_no_change_the_contrasts_keep_their_sizes_whatever_the_coins() -> None:
    # A periodic disturbance of 3.5 runs: the same runs, measured in every possible assignment of the trees to
    # the pairs' positions. Exactness rests on this: the magnitudes are fixed, only their signs are random.
    runs = [100 * math.exp(0.03 * math.sin(2 * math.pi * t / 3.5)) for t in range(40)]
    sizes = set()
    for seed in range(20):
        rng = random.Random(seed)
        seconds = [rng.random() < 0.5 for _ in range(20)]
        pairs = decide.Pairs([runs[2 * i + (0 if s else 1)] for i, s in enumerate(seconds)],
                             [runs[2 * i + (1 if s else 0)] for i, s in enumerate(seconds)], seconds, [1e-9] * 20)
        r = [math.log(c / b) for b, c in zip(pairs.base, pairs.cand, strict=True)]
        sizes.add(tuple(sorted(round(abs(x), 12) for x in r)))
    assert len(sizes) == 1


def test_every_design_spends_at_most_alpha_over_two_per_side_and_every_look_can_decide() -> None:
    for budget in calibrate.SCHEDULES:
        d = stats.make_design("auto", max_pairs=budget)
        assert math.fsum(d.levels) <= calibrate.ALPHA / 2
        for n, level, w in zip(d.looks, d.levels, d.rank_bounds, strict=True):
            assert level >= 2.0**-n and w <= n * (n + 1) // 2
        assert d.looks[-1] == d.limit == 2 * budget  # an undecided experiment can be continued to twice the budget


def test_an_order_effect_cancels_in_the_walsh_averages() -> None:
    # the second run of each pair 2% faster, 0.2% noise: a no-op and a +0.5% change both end no_change
    for effect in (0.0, 0.005):
        rng = random.Random(9)
        samples = []
        for i in range(60):
            second = rng.random() < 0.5
            first, later = 100 * math.exp(rng.gauss(0, 0.002)), 102 * math.exp(rng.gauss(0, 0.002))
            cand, base = (later, first) if second else (first, later)
            cand *= math.exp(effect)
            for role, value, pos in (("baseline", base, int(not second)), ("candidate", cand, int(second))):
                samples.append({"pair": i, "role": role, "position": pos, "metrics": {"score": value}})
        ends = next(d for d in (decide.judge(samples[: 2 * n], SPEC, PLAN, n=n) for n in range(1, 61)) if d.final)
        assert ends.verdict == "no_change" and ends.n <= 30
        assert abs(ends.metrics["score"].look.estimate or 1) < 0.006  # the 2% of the second run is not in it


def test_a_continuation_past_the_budget_judges_at_the_next_look() -> None:
    assert DESIGN.round_stops(100, "auto") == list(range(101, 121))
    assert DESIGN.round_stops(40, "auto")[-1] == 100
    with pytest.raises(InputError, match="every pair"):
        DESIGN.round_stops(200, "auto")


# --- the average and the worst runs -------------------------------------------------------------------


def test_a_candidate_with_a_slow_tail_of_its_own_is_never_improved() -> None:
    rng = random.Random(4)
    values = []
    for i in range(100):
        cand = 105 * math.exp(rng.gauss(0, 0.01)) * (0.7 if i % 5 == 2 else 1.0)  # 1 run in 5 is 30% slower
        values.append((100 * math.exp(rng.gauss(0, 0.01)), cand))
    samples = run_pairs(values)
    for n in range(1, 101):
        decision = decide.judge(samples[: 2 * n], SPEC, PLAN, n=n)
        assert decision.verdict != "improved"
    analysis = metrics.analyze(outcomes.read(outcomes.Experiment, {"samples": samples}), SPEC, DESIGN)
    score = analysis["metrics"]["score"]
    assert score["delta_pct"] > 3 and score["mean_pct"] < 0  # faster typical run, slower on average
    assert "candidate" in analysis["noise_note"]
    assert "slow tail" in analysis["noise_note"] or "two speeds" in analysis["noise_note"]


def test_faster_typical_run_but_slower_average_is_named_as_the_reason() -> None:
    rng = random.Random(5)
    values = [(100 * math.exp(rng.gauss(0, 0.005)),
               (105 if i % 20 != 7 else 1) * math.exp(rng.gauss(0, 0.005))) for i in range(60)]
    decision = decide.judge(run_pairs(values), SPEC, PLAN, n=60)
    judged = decision.metrics["score"]
    assert judged.look.low is not None and judged.look.low > 0  # the typical run improved
    assert decision.verdict != "improved" and judged.reason is not None and "average run" in judged.reason


# --- futility and noise -------------------------------------------------------------------------------


def test_a_no_op_at_two_percent_noise_ends_no_change_in_a_median_of_thirty_pairs_at_most() -> None:
    ends = [first_decision(noisy(100, 0.0, 0.02, seed=seed), seed=seed) for seed in range(25)]
    assert sum(d.verdict == "no_change" for d in ends) >= 23
    assert sorted(d.n for d in ends)[12] <= 30
    values = noisy(100, 0.0, 0.02, seed=0)[: ends[0].n]
    ran = outcomes.read(outcomes.Experiment, {"samples": run_pairs(values, seed=0)})
    score = metrics.analyze(ran, SPEC, DESIGN)["metrics"]["score"]
    assert score["verdict"] == "no_change" and score["ci_level"] == pytest.approx(0.8)
    assert 0 < score["equivalence_pct"] < 1


def test_a_budget_that_cannot_decide_at_this_noise_stops_noisy_early() -> None:
    decision = first_decision(noisy(100, 0.0, 0.3))
    assert decision.verdict == "noisy" and decision.n < 100


def test_a_clear_change_at_five_percent_noise_is_improved_and_its_p_value_agrees() -> None:
    values = noisy(100, math.log(1.10), 0.05)
    decision = first_decision(values)
    assert decision.verdict == "improved"
    ran = outcomes.read(outcomes.Experiment, {"samples": run_pairs(values[: decision.n])})
    analysis = metrics.analyze(ran, SPEC, DESIGN)
    score = analysis["metrics"]["score"]
    assert score["ci_low_pct"] > 0 and score["p_value"] < DESIGN.alpha and score["ci_level"] == 0.98


# --- focus ------------------------------------------------------------------------------------------


FOCUS = decide.Spec("tg", "higher", 0.01, focus=["RMS_NORM"], focus_min_effect=0.02,
                    objective_tolerance_pct={"tg": 3.0})


def focus_samples(focus: float, control: float, tg: float, n: int = 40, seed: int = 2) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        second = rng.random() < 0.5
        for role in ("baseline", "candidate"):
            cand = role == "candidate"
            values = {"tg": 50 * (tg if cand else 1) * math.exp(rng.gauss(0, 0.01)),
                      "focus.RMS_NORM": 10 * (focus if cand else 1) * math.exp(rng.gauss(0, 0.005)),
                      "control.ADD": 5 * (control if cand else 1) * math.exp(rng.gauss(0, 0.005))}
            samples.append({"pair": i, "role": role, "position": int(second) if cand else int(not second),
                            "metrics": values})
    return samples


def test_a_focus_win_is_judged_at_the_op_with_the_objectives_held_within_tolerance() -> None:
    decision = decide.judge(focus_samples(0.85, 1.0, 1.001), FOCUS, PLAN, n=30)
    assert decision.verdict == "improved" and decision.won == ["focus.RMS_NORM"]
    assert decision.metrics["tg"].rule.role == "guard" and decision.metrics["tg"].judgement == "held"
    assert decision.metrics["control.ADD"].rule.role == "control"


def test_a_focus_change_no_larger_than_what_the_untouched_controls_moved_is_not_a_win() -> None:
    decision = decide.judge(focus_samples(0.95, 0.95, 1.0), FOCUS, PLAN, n=30)
    assert decision.verdict != "improved"
    assert "controls" in (decision.metrics["focus.RMS_NORM"].reason or "")


def test_a_focus_win_that_costs_an_objective_beyond_its_tolerance_is_regressed() -> None:
    decision = decide.judge(focus_samples(0.80, 1.0, 0.90), FOCUS, PLAN, n=30)
    assert decision.verdict == "regressed" and "tg" in decision.blocking


def test_a_focus_run_without_its_focus_metric_is_invalid() -> None:
    samples = focus_samples(0.85, 1.0, 1.0, n=10)
    for s in samples:
        del s["metrics"]["focus.RMS_NORM"]
    assert decide.judge(samples, FOCUS, PLAN, n=10).verdict == "invalid"


# --- helpers without scipy (the runner on a worker) -----------------------------------------------------


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 30, 200])
@pytest.mark.parametrize("p", [0.1, 0.01, 0.001])
def test_student_t_quantiles_without_scipy(df: int, p: float) -> None:
    assert decide.t_quantile(p, df) == pytest.approx(float(sps.t.isf(p, df)), rel=1e-9)
