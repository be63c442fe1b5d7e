"""The decision rules on small fixed inputs: balanced order, the robust statistic and its floor, the
calibrated boundaries, noise as a diagnostic, pairs_needed, and re-measuring rounds of one design."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats as sps

from autoresearch_mcp.core import runner
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.measure import calibrate, stats

DESIGN = stats.make_design("auto")


def shifted(base: list[float], log_shift: float, jitter: list[float] | None = None) -> list[float]:
    return [round(b * math.exp(log_shift + (jitter[i] if jitter else 0.0)), 2) for i, b in enumerate(base)]


# --- the failing inputs of the issue -----------------------------------------------------------------


def test_five_pairs_with_the_candidate_always_second_decide_nothing() -> None:
    base = [99.96, 99.93, 99.99, 100.18, 100.17]
    cand = [102.07, 102.21, 101.83, 102.0, 102.13]
    cmp = stats.paired(base, cand, "higher", DESIGN)
    assert cmp.verdict == "inconclusive" and cmp.ci_low_pct is None and cmp.p_value is None
    assert cmp.pairs_needed == DESIGN.looks[0] == 14


def test_exact_ties_get_an_interval_as_wide_as_the_printed_resolution() -> None:
    cmp = stats.paired([100.0] * 14, [102.0] * 14, "higher", DESIGN)
    # integers printed: each value is known to +/-0.5, so the log-ratio to about +/-1%
    assert cmp.verdict == "improved" and cmp.delta_pct == pytest.approx(2.0)
    assert cmp.ci_low_pct == pytest.approx(0.985, abs=0.01) and cmp.ci_high_pct == pytest.approx(3.025, abs=0.01)
    assert cmp.p_value is not None and cmp.p_value > 0


def test_the_first_look_is_where_a_distribution_free_test_can_reach_its_level() -> None:
    for budget, schedule in calibrate.SCHEDULES.items():
        d = stats.make_design("auto", max_pairs=budget)
        for n, w, level in zip(d.looks, d.bounds, d.levels, strict=True):
            assert w <= n * (n + 1) // 2 and level >= 2.0**-n  # some data can cross each boundary
        # the schedule's earlier looks were dropped: their smallest p-value, 2^-n, was above their level
        assert [n for n in schedule if n < d.looks[0]] == [n for n in schedule if n not in d.looks]
        assert all(2.0**-n > d.levels[0] for n in schedule if n < d.looks[0])


def test_an_order_effect_cancels_in_balanced_blocks() -> None:
    # second run of each pair 2% faster, 0.2% noise: in each block the candidate runs second once
    rng = random.Random(5)
    flips: dict[int, bool] = {}
    base, cand = [], []
    for i in range(40):
        first = runner.candidate_first(rng, i, flips)
        noise = [math.exp(rng.gauss(0, 0.002)) for _ in range(2)]
        b, c = 100 * noise[0] * (1.02 if first else 1.0), 100 * noise[1] * (1.0 if first else 1.02)
        base.append(round(b, 2))
        cand.append(round(c, 2))
    cmp = stats.paired(base, cand, "higher", DESIGN)
    assert cmp.verdict != "improved" and abs(cmp.delta_pct or 0) < 0.5


def test_every_complete_block_runs_each_side_first_once() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        flips: dict[int, bool] = {}
        order = [runner.candidate_first(rng, i, flips) for i in range(20)]
        assert all(order[i] != order[i + 1] for i in range(0, 20, 2))
    starts = {runner.candidate_first(random.Random(seed), 0, {}) for seed in range(20)}
    assert starts == {True, False}  # which side opens a block is still a coin flip


def test_outlier_runs_do_not_hide_a_real_gain() -> None:
    rng = np.random.default_rng(11)
    base = [round(float(x), 2) for x in 100 * np.exp(rng.normal(0, 0.01, 40))]
    cand = shifted(base, math.log(1.05), list(rng.normal(0, 0.01, 40)))
    for i in (3, 11, 25, 30):  # 10% of the candidate's runs hit by a noisy neighbour
        cand[i] = round(cand[i] * 0.7, 2)
    cmp = stats.paired(base, cand, "higher", DESIGN)
    d = np.log(np.array(cand) / np.array(base))
    t_low = d.mean() - sps.t.ppf(0.99, 39) * d.std(ddof=1) / math.sqrt(40)
    assert t_low < 0  # a mean-based interval would include no change
    assert cmp.verdict == "improved" and 4.0 < (cmp.delta_pct or 0) < 6.0


def test_noise_comes_from_the_pair_differences_and_sees_a_bimodal_machine() -> None:
    rng = random.Random(2)
    speeds = [1.0 if rng.random() < 0.5 else 0.85 for _ in range(80)]
    base, cand = [100 * s for s in speeds[:40]], [100 * s for s in speeds[40:]]
    assert runner.value_resolution(base[0]) >= 0.01
    cmp = stats.paired(base, cand, "higher", DESIGN)
    assert cmp.noise_pct is not None and cmp.noise_pct > 1.0
    # drift that pairing cancels is not noise: both sides move together
    drift = [100 * math.exp(0.002 * i) for i in range(40)]
    steady = stats.paired([round(x, 2) for x in drift], [round(x * 1.001, 2) for x in drift], "higher", DESIGN)
    assert steady.noise_pct is not None and steady.noise_pct < 0.1 and steady.verdict == "no_change"


@pytest.mark.parametrize("bad", [0.0, -3.0, math.nan, math.inf])
def test_a_value_that_cannot_be_a_ratio_makes_the_comparison_invalid(bad: float) -> None:
    base = [100.0] * 14
    cand = [101.0] * 13 + [bad]
    assert runner.log_ratios(list(zip(base, cand, strict=True)), "higher") is None
    assert stats.paired(base, cand, "higher", DESIGN).verdict == "invalid"


# --- the calibrated boundary ------------------------------------------------------------------------


def test_the_stored_boundaries_keep_false_improved_under_one_percent_on_a_fresh_simulation() -> None:
    looks = DESIGN.looks
    wplus, signs = calibrate.simulate(looks, 20_000, seed=99)
    crossed = ((wplus >= np.array(DESIGN.bounds)) | (signs >= np.array(DESIGN.sign_bounds))).any(axis=1).mean()
    assert crossed <= 0.0100  # one side; the stored figure came from 400,000 simulations
    assert [float(calibrate.null_survival(n)[w]) for n, w in zip(looks, DESIGN.bounds, strict=True)] == DESIGN.levels
    assert [float(sps.binom.sf(b - 1, n, 0.5)) for n, b in zip(looks, DESIGN.sign_bounds, strict=True)] == \
        DESIGN.sign_levels


def test_the_interval_excludes_zero_exactly_when_a_count_reaches_its_boundary() -> None:
    rng = np.random.default_rng(4)
    k = DESIGN.looks.index(26)
    for _ in range(50):
        d = list(rng.normal(0.02, 0.03, 26))
        look = runner.look_at(d, k, DESIGN.job())
        wplus = sum(d[i] + d[j] > 0 for i in range(26) for j in range(i, 26))
        positive = sum(x > 0 for x in d)
        assert (look.low > 0) == (wplus >= DESIGN.bounds[k] or positive >= DESIGN.sign_bounds[k])


def test_a_bimodal_machine_is_decided_by_the_clean_pairs() -> None:
    # each run at full speed or 15% slower: half the pairs mix the two and their ranks drown the rest,
    # but the sign count sees the clean half's +5% plainly
    rng = random.Random(21)
    base, cand = [], []
    for _ in range(60):
        b, c = (100.0 if rng.random() < 0.5 else 85.0), (100.0 if rng.random() < 0.5 else 85.0)
        base.append(round(b * math.exp(rng.gauss(0, 0.002)), 2))
        cand.append(round(c * 1.05 * math.exp(rng.gauss(0, 0.002)), 2))
    d = runner.log_ratios(list(zip(base, cand, strict=True)), "higher") or []
    k = DESIGN.looks.index(60)
    wplus = sum(d[i] + d[j] > 0 for i in range(60) for j in range(i, 60))
    assert wplus < DESIGN.bounds[k]  # the signed-rank count alone would not decide
    cmp = stats.paired(base, cand, "higher", DESIGN)
    assert cmp.verdict == "improved" and 4.0 < (cmp.delta_pct or 0) < 6.0


def test_runner_and_server_reach_the_same_verdict_at_every_look() -> None:
    rng = np.random.default_rng(8)
    for effect, sigma in ((0.0, 0.002), (0.03, 0.03), (0.0, 0.08), (-0.05, 0.02)):
        base = [round(float(x), 2) for x in 100 * np.exp(rng.normal(0, sigma, 100))]
        cand = shifted(base, effect, list(rng.normal(0, sigma, 100)))
        for k, n in enumerate(DESIGN.looks):
            pairs = list(zip(base[:n], cand[:n], strict=True))
            d = runner.log_ratios(pairs, "lower")
            assert d is not None
            look = runner.look_at(d, k, DESIGN.job(), runner.resolution_floor(pairs))
            assert stats.paired(base[:n], cand[:n], "lower", DESIGN).verdict == look.verdict


# --- noisy, inconclusive and pairs_needed -----------------------------------------------------------


def test_noisy_only_when_the_budget_cannot_decide_at_that_noise() -> None:
    rng = np.random.default_rng(6)
    base = [round(float(x), 2) for x in 100 * np.exp(rng.normal(0, 0.08, 100))]
    cand = shifted(base, 0.0, list(rng.normal(0, 0.08, 100)))
    noisy = stats.paired(base, cand, "higher", DESIGN)
    assert noisy.verdict == "noisy" and noisy.resolvable_pct is not None and noisy.resolvable_pct > 1.0
    assert noisy.note is not None and "per run" in noisy.note and "budget" in noisy.note
    # quiet pairs whose change sits at the minimum effect: undecided, but not for noise
    quiet = [round(float(x), 2) for x in 100 * np.exp(rng.normal(0, 0.002, 14))]
    edge = shifted(quiet, math.log(1.0095), list(rng.normal(0, 0.001, 14)))
    cmp = stats.paired(quiet, edge, "higher", DESIGN)
    assert cmp.verdict == "inconclusive" and cmp.note is None


def test_pairs_needed_plans_for_eighty_percent_power() -> None:
    rng = np.random.default_rng(12)
    base = [round(float(x), 2) for x in 100 * np.exp(rng.normal(0, 0.03, 14))]
    cand = shifted(base, math.log(1.02), list(rng.normal(0, 0.03, 14)))
    cmp = stats.paired(base, cand, "higher", DESIGN)
    assert cmp.verdict == "inconclusive" and cmp.pairs_needed is not None and cmp.noise_pct is not None
    pairs = list(zip(base, cand, strict=True))
    look = runner.look_at(runner.log_ratios(pairs, "higher") or [], 0, DESIGN.job(), runner.resolution_floor(pairs))
    without_power = (DESIGN.z[-1] * look.spread / abs(look.estimate)) ** 2
    with_power = ((DESIGN.z[-1] + sps.norm.ppf(0.8)) * look.spread / abs(look.estimate)) ** 2
    assert cmp.pairs_needed >= with_power > 1.4 * without_power
    assert cmp.pairs_needed in DESIGN.looks or cmp.pairs_needed > DESIGN.budget


# --- rounds of one design ---------------------------------------------------------------------------


def test_rounds_of_one_design_look_only_at_its_calibrated_looks() -> None:
    fixed = stats.make_design(25)
    assert fixed.stops == [26] and not fixed.sequential  # the first look at or after 25 pairs
    assert stats.make_design(3).stops == [4]  # whole blocks; nothing can be decided there
    assert fixed.round_stops(26, "auto") == [n for n in fixed.looks if n > 26]
    assert fixed.round_stops(26, 10) == [40]
    with pytest.raises(InputError, match="beyond the design's budget"):
        fixed.round_stops(90, 20)
    with pytest.raises(InputError, match="whole budget"):
        fixed.round_stops(100, "auto")
    with pytest.raises(InputError, match="no calibrated design"):
        stats.make_design("auto", max_pairs=75)


def test_a_design_recorded_by_the_earlier_t_test_is_still_read() -> None:
    legacy = stats.Design.from_dict({"looks": [5, 8], "alphas": [0.004, 0.003], "crit": [5.6, 4.4],
                                     "sequential": True, "min_effect": 0.01, "noise_limit": 0.1, "alpha": 0.02})
    assert legacy.statistic == "t" and legacy.stops == [5, 8]
    error = stats.log_standard_error({"n_pairs": 5, "ci_low_pct": 4.0, "ci_high_pct": 16.0}, legacy)
    assert error is not None and error[0] == pytest.approx(
        (math.log(1.16) - math.log(1.04)) / 2 / sps.t.ppf(1 - 0.002, 4))


@pytest.mark.parametrize(("value", "step"), [(102.07, 0.01), (102.0, 1.0), (1e-05, 1e-05), (1500.0, 1.0),
                                             (1.5e20, 1e19), (0.125, 0.001), (3.5e-07, 1e-08)])
def test_the_printed_resolution_of_a_value(value: float, step: float) -> None:
    assert runner.value_resolution(value) == pytest.approx(step)
