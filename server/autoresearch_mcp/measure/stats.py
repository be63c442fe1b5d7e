"""Statistics of paired A/B benchmark runs: the design of an experiment and the figures of one metric.

The decision rule itself lives in worker/decide.py (standard library only), which the runner applies while
it adds pairs and the server applies again to the stored samples; this module builds the design it
applies (measure/calibrate.py tabulates the exact boundaries in design_constants.json) and adds what needs
scipy: exact p-values, summaries. Designs recorded before the randomized rule are read by measure/legacy.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from scipy import stats as sps

from autoresearch_mcp.errors import InputError
from autoresearch_mcp.measure import calibrate, legacy, power
from autoresearch_mcp.measure.summary import Comparison as Comparison  # the figures of one metric
from autoresearch_mcp.measure.summary import pct as pct
from autoresearch_mcp.store.config import DEFAULT_ALPHA, DEFAULT_MAX_PAIRS, DEFAULT_MIN_EFFECT, DEFAULT_NOISE_LIMIT
from autoresearch_mcp.worker import decide

POWER = 0.8  # the power `pairs_needed` plans for
SESSION_PAIRS = 200  # the first round of a session's total (source='session'): the largest design


@cache
def _constants() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(calibrate.CONSTANTS.read_text())
    return data


@cache
def _bounds_table(level: float, limit: int) -> tuple[int, ...]:
    """The signed-rank boundary at one-sided `level` for every pair count up to `limit` (tabulated in the
    constants for the designs' levels; computed for any other)."""
    for data in _constants()["designs"].values():
        for key, at in (("eq_bounds", "eq_level"), ("guard_bounds", "guard_level")):
            if math.isclose(data[at], level) and len(data[key]) > limit:
                return tuple(int(b) for b in data[key][: limit + 1])
    return tuple(calibrate.rank_bound(n, level) if n else 1 for n in range(limit + 1))


CEILING_AT_ROUND_ENDS = 0.8  # the share of the ceiling's level spent where a round ends (the budget, the limit)


@cache
def _ceiling_table(looks: tuple[int, ...], level: float, min_pairs: int, budget: int
                   ) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The ceiling's level at each look and its signed-rank boundary there (level 0, boundary 0 where a guard
    cannot hold: before `min_pairs`). The levels add up to `level` over every look where a guard may hold (a
    union bound): most of it where the first round and the last end (the budget and the limit, where a guard
    at a shared machine's noise can hold at all), the rest shared by the other looks."""
    holding = [n for n in looks if n >= min_pairs]
    ends = [n for n in holding if n in (budget, looks[-1])]
    others = [n for n in holding if n not in ends]
    at_end = level * (CEILING_AT_ROUND_ENDS if others else 1.0) / max(len(ends), 1)
    at_other = level * (1 - CEILING_AT_ROUND_ENDS) / len(others) if others else 0.0
    levels = tuple(0.0 if n < min_pairs else at_end if n in ends else at_other for n in looks)
    return levels, tuple(calibrate.rank_bound(n, lv) if lv > 0 else 0 for n, lv in zip(looks, levels, strict=True))


_PLAN_FIELDS = ("budget", "limit", "looks", "levels", "rank_bounds", "sign_bounds", "eq_level", "guard_level",
                "mean_level", "eq_from", "warmup", "min_pairs_improved", "tail_share", "tail_tolerance", "noisy_from")


@dataclass(frozen=True)
class Design:
    """The randomized sequential design of one experiment (every round), as its launch records it."""

    budget: int
    limit: int
    looks: list[int]
    levels: list[float]
    rank_bounds: list[int]
    sign_bounds: list[int]
    eq_level: float
    guard_level: float
    min_effect: float
    noise_limit: float
    alpha: float
    stops: list[int] = field(default_factory=list)  # where the first round judges; its last ends it
    warmup: int = 1
    eq_from: int = 6
    mean_level: float = calibrate.MEAN_LEVEL
    min_pairs_improved: int = calibrate.MIN_PAIRS_IMPROVED
    tail_share: float = 0.05
    tail_tolerance: float = math.log1p(0.05)
    noisy_from: int = 20
    rule: str = decide.RULE

    @property
    def statistic(self) -> str:
        return self.rule

    def plan(self) -> decide.Plan:
        """The plan the decision rule applies, with its per-pair-count boundary tables."""
        return decide.Plan.from_dict(self.job())

    def record(self) -> dict[str, Any]:
        """What a launch record keeps (the tables are recomputed from the levels)."""
        return {k: v for k, v in self.__dict__.items()}

    def job(self) -> dict[str, Any]:
        """What the runner applies: the plan with its tables."""
        data = {k: getattr(self, k) for k in _PLAN_FIELDS}
        data["eq_bounds"] = list(_bounds_table(self.eq_level, self.limit))
        data["guard_bounds"] = list(_bounds_table(self.guard_level, self.limit))
        levels, bounds = _ceiling_table(tuple(self.looks), self.guard_level, self.min_pairs_improved, self.budget)
        data["ceiling_levels"], data["ceiling_bounds"] = list(levels), list(bounds)
        data["noise_limit"] = self.noise_limit
        return data

    def look_for(self, n_pairs: int) -> int | None:
        """Index of the last look n_pairs reach (None before the first look)."""
        reached = [k for k, n in enumerate(self.looks) if n <= n_pairs]
        return reached[-1] if reached else None

    def z_at(self, n_pairs: int) -> float:
        """Half-width over standard error of the decision interval at the last look n_pairs reach."""
        k = self.look_for(n_pairs)
        return decide.z_quantile(self.levels[k if k is not None else 0])

    def round_end(self, done: int) -> int:
        """Where an 'auto' round that starts after `done` pairs ends: the budget, and beyond it (an experiment
        still undecided there) the next continuation look."""
        if done < self.budget:
            return self.budget
        later = [n for n in self.looks if n > done]
        if not later:
            raise InputError(f"this experiment already used every pair its design allows ({self.limit})")
        return later[0]

    def round_stops(self, done: int, repeats: int | str) -> list[int]:
        """The pair counts a round that starts after `done` pairs judges at: every one up to `round_end`
        ('auto': it stops as soon as the data allow), or only the first look at or beyond `repeats` more
        pairs. A fixed count that cannot reach an improvement is refused with the count that can."""
        if repeats == "auto":
            return list(range(done + 1, self.round_end(done) + 1))
        want = done + int(repeats)
        if want > self.limit:
            raise InputError(f"{done} + {int(repeats)} pairs is beyond the design's {self.limit} pairs; ask for at "
                             f"most {self.limit - done}, or 'auto'")
        if want < self.min_pairs_improved:
            raise InputError(
                f"{int(repeats)} pairs cannot decide: an improvement needs at least {self.min_pairs_improved} pairs "
                f"in all and a regression {self.looks[0]}; ask for at least {self.min_pairs_improved - done} pairs, "
                "or 'auto' (it stops as soon as the data allow)")
        return [next(n for n in self.looks if n >= want)]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Design:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


AnyDesign = Design | legacy.Design


def load_design(data: dict[str, Any]) -> AnyDesign:
    """A launch's recorded design: the randomized rule's, or one recorded before it (read-only)."""
    if data.get("rule") == decide.RULE:
        return Design.from_dict(data)
    return legacy.Design.from_dict(data)


def make_design(
    repeats: int | str,
    *,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = DEFAULT_MIN_EFFECT,
    noise_limit: float = DEFAULT_NOISE_LIMIT,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    warmup: int = 1,
) -> Design:
    constants = _constants()
    budgets = sorted(int(b) for b in constants["designs"])
    if not math.isclose(alpha, constants["alpha"]) or str(max_pairs) not in constants["designs"]:
        raise InputError(
            f"no design for alpha={alpha:g} and max_pairs={max_pairs}: the designs are for alpha="
            f"{constants['alpha']:g} with max_pairs in {budgets}. Set those in .autoresearch/config.json, or add "
            "a schedule to calibrate.py and run `python -m autoresearch_mcp.measure.calibrate`")
    data = constants["designs"][str(max_pairs)]
    design = Design(**{k: data[k] for k in ("budget", "limit", "looks", "levels", "rank_bounds", "sign_bounds",
                                            "eq_level", "guard_level", "mean_level", "min_pairs_improved")},
                    min_effect=min_effect, noise_limit=noise_limit, alpha=alpha, warmup=warmup)
    return Design.from_dict({**design.record(), "stops": design.round_stops(0, repeats)})


# --- one metric's figures --------------------------------------------------------------------------


def comparison(p: decide.Pairs, n: int, judgement: decide.Judgement | None, rule: decide.MetricRule,
               design: Design, plan: decide.Plan) -> Comparison:
    """One metric's figures in percent of its own value (a lower-is-better metric improves negatively)."""
    look = judgement.look if judgement is not None else decide.metric_look(p, n, rule.direction, plan)
    verdict = judgement.verdict if judgement is not None else decide.metric_verdict(look, rule, plan, p,
                                                                                    design.budget)[0]
    sign = 1.0 if rule.direction == "higher" else -1.0
    if look.invalid:
        return Comparison(n, None, None, None, None, "invalid")
    if look.estimate is None:
        return Comparison(n, None, None, None, None, "inconclusive", pairs_needed=plan.looks[0])
    if verdict == "no_change" or look.low is None:
        low, high, level = look.eq_low, look.eq_high, 1 - 2 * plan.eq_level
    else:
        low, high, level = look.low, look.high, 1 - design.alpha
    ci = sorted((sign * low, sign * high)) if low is not None and high is not None else [None, None]
    mean = [None if x is None else round(sign * x * 100, 4) for x in (look.mean, look.mean_low, look.mean_high)]
    if sign < 0:
        mean[1], mean[2] = mean[2], mean[1]
    reach = decide.reach(look.spread or 0.0, plan, design.budget)
    equivalence = (round(math.expm1(max(abs(look.eq_low), abs(look.eq_high))) * 100, 4)
                   if verdict == "no_change" and look.eq_low is not None and look.eq_high is not None else None)
    return Comparison(
        n, pct(sign * look.estimate), pct(ci[0]), pct(ci[1]), _p_value(p, n, rule.direction, design, plan), verdict,
        pairs_needed=power.pairs_needed(look, rule, plan) if verdict in ("undecided", "noisy") else None,
        noise_pct=None if look.spread is None else round(per_run_noise(look.spread) * 100, 4),
        resolvable_pct=round(reach * 100, 4) if look.spread is not None else None,
        note=(judgement.reason if judgement is not None else None) or (
            noisy_note(look, design, plan) if verdict == "noisy" else None),
        log_se=None if look.spread is None else look.spread / math.sqrt(look.n), ci_level=round(level, 4),
        mean_pct=mean[0], mean_low_pct=mean[1], mean_high_pct=mean[2],
        tail_pct=None if look.tail is None else pct(sign * look.tail), equivalence_pct=equivalence,
    )


def paired(base: list[float], cand: list[float], direction: str, design: AnyDesign,
           second: list[bool] | None = None) -> Comparison:
    """One metric's paired samples judged against the design's minimum effect at the last look they reach
    (the holdout's A/B; `second`: whether the candidate ran second in each pair)."""
    if isinstance(design, legacy.Design):
        return legacy.paired(base, cand, direction, design)
    n_all = min(len(base), len(cand))
    p = decide.Pairs(list(base[:n_all]), list(cand[:n_all]),
                     list(second[:n_all]) if second is not None else [i % 2 == 1 for i in range(n_all)],
                     [max(decide.float_step(b), decide.float_step(c)) for b, c in zip(base, cand, strict=False)])
    k = design.look_for(n_all)
    n = design.looks[k] if k is not None else n_all
    plan = design.plan()
    rule = decide.MetricRule("objective", direction, math.log1p(design.min_effect))
    look = decide.metric_look(p, n, direction, plan)
    verdict, why = decide.metric_verdict(look, rule, plan, p, n)
    cmp = comparison(p, n, decide.Judgement(look, rule, verdict, None, why), rule, design, plan)
    cmp.verdict = "inconclusive" if verdict == "undecided" else verdict
    return cmp


def _p_value(p: decide.Pairs, n: int, direction: str, design: Design, plan: decide.Plan) -> float | None:
    """Two-sided exact p of the signed-rank test of "no change", scaled by the look's share of
    alpha, so that it is under alpha about when the look's interval excludes 0. None before the first look."""
    k = plan.last_look(n)
    if k is None:
        return None
    sign = 1.0 if direction == "higher" else -1.0
    m = plan.looks[k]
    a = [sign * math.log(c / b) for b, c in zip(p.base[:m], p.cand[:m], strict=True)]
    if not any(a):
        return 1.0
    order = sorted(range(m), key=lambda i: abs(a[i]))
    ranks = [0.0] * m
    for rank, i in enumerate(order, start=1):
        ranks[i] = rank
    w_plus = int(sum(rk for rk, ai in zip(ranks, a, strict=True) if ai > 0))
    survival = calibrate.null_survival(m)
    total = m * (m + 1) // 2
    one_sided = min(survival[w_plus], survival[total - w_plus])
    return min(1.0, 2 * one_sided * (design.alpha / 2) / plan.levels[k])


def per_run_noise(spread: float) -> float:
    """The noise of one run from the spread of paired log-ratios: each difference holds two runs'."""
    return spread / math.sqrt(2)


def noisy_note(look: decide.MetricLook, design: Design, plan: decide.Plan) -> str:
    """How noisy, and why the budget cannot decide (figures as the metric's own % change)."""
    spread = (look.spread or 0.0) * 100
    reach = decide.reach(look.spread or 0.0, plan, design.budget)
    floor = f" (the printed resolution alone is {look.floor * 100:.2f}%)" if look.floor else ""
    return (f"the paired log-ratios spread by about {spread:.1f}% (about {per_run_noise(spread):.1f}% per run): "
            f"{design.budget} pairs resolve only changes beyond ±{reach * 100:.1f}%, and neither no change within "
            f"±{design.min_effect * 100:g}% nor a change that large is within reach{floor}")


def log_pct(pct_change: float | None) -> float | None:
    """A percent change as a log-ratio (the inverse of `pct`); None, or -100% or less, gives None."""
    return math.log1p(pct_change / 100.0) if pct_change is not None and pct_change > -100 else None


def log_standard_error(comparison: dict[str, Any], design: AnyDesign) -> tuple[float, int] | None:
    """(standard error of the log-ratio estimate, its degrees of freedom) of one recorded comparison: its
    `log_se` where it recorded one, else recovered from its interval and the design it was analyzed with."""
    n = int(comparison.get("n_pairs") or 0)
    if comparison.get("log_se") is not None and n >= 2:
        return float(comparison["log_se"]), n - 1
    if isinstance(design, legacy.Design):
        return legacy.log_standard_error(comparison, design)
    low, high = log_pct(comparison.get("ci_low_pct")), log_pct(comparison.get("ci_high_pct"))
    k = design.look_for(n)
    if n < 2 or low is None or high is None or k is None:
        return None
    level = comparison.get("ci_level")
    if level is not None and not math.isclose(float(level), 1 - design.alpha):  # an equivalence interval
        return (high - low) / 2 / decide.z_quantile((1 - float(level)) / 2), n - 1
    return (high - low) / 2 / design.z_at(n), n - 1


def combined_half_width(errors: list[tuple[float, int]], confidence: float) -> float | None:
    """Half-width of a `confidence` interval on a sum of independent estimates, each given as
    (standard error, degrees of freedom): sqrt(sum se^2) times the Student-t quantile at the
    Welch-Satterthwaite degrees of freedom. None for no estimates."""
    if not errors:
        return None
    variance = sum(se * se for se, _ in errors)
    if variance == 0:
        return 0.0
    df = variance**2 / sum(se**4 / d for se, d in errors if se > 0)
    return float(sps.t.ppf(1 - (1 - confidence) / 2, df)) * math.sqrt(variance)


STEADIER_CONFIDENCE = 0.95


def clearly_steadier(noise: float, runs: int, other: float, other_runs: int,
                     confidence: float = STEADIER_CONFIDENCE) -> bool:
    """Whether runs of per-run noise `noise` (a cv) are steadier than `other`'s beyond what their own noise explains:
    the one-sided F test of the variances at `confidence`. Two runs a side cannot show it short of a factor of
    about 13 in noise (the F quantile of 1 and 1 degrees of freedom is 161)."""
    if runs < 2 or other_runs < 2 or other <= 0:
        return False
    if noise <= 0:
        return True
    return bool((other / noise) ** 2 > sps.f.ppf(confidence, other_runs - 1, runs - 1))

