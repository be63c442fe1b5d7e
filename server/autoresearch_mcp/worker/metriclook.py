"""One metric's figures over its pairs (MetricLook), as the decision rule (decide.py) reads them: the printed
resolution, the quantiles, the complete pairs, the plan's looks and boundaries, the estimate with its intervals,
the average run and the worst runs.

Standard library only, like decide.py and the runner beside it (the same bytes run here and on cloud workers).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from statistics import NormalDist
from typing import Any

_NORMAL = NormalDist()

# --- printed resolution ----------------------------------------------------------------------------


def printed_step(text: str) -> float | None:
    """The step of the last digit as printed: '100.00' -> 0.01, '48' -> 1, '1.5e3' -> 100; None if not a number."""
    raw = text.strip().lower().lstrip("+-")
    mantissa, _, exponent = raw.partition("e")
    digits = mantissa.replace(".", "", 1)
    if not digits.isdigit():
        return None
    try:
        power = int(exponent) if exponent else 0
    except ValueError:
        return None
    decimals = len(mantissa.partition(".")[2])
    return float(10.0 ** (power - decimals))


def float_step(value: float) -> float:
    """The step of the last digit of `value`'s shortest repr: for samples stored before steps were recorded."""
    text = repr(float(value)).lower()
    mantissa, _, exponent = text.partition("e")
    decimals = len(mantissa.partition(".")[2].rstrip("0"))
    return float(10.0 ** (int(exponent or 0) - decimals))


# --- quantiles (no scipy on a worker) --------------------------------------------------------------


def z_quantile(p: float) -> float:
    """The standard normal quantile of 1 - p (one-sided upper tail p)."""
    return _NORMAL.inv_cdf(1.0 - p)


def _t_central(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with df degrees of freedom, exactly (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, sin = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        term, total = math.cos(theta), math.cos(theta) if df > 1 else 0.0
        for k in range(3, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        return 2 / math.pi * (theta + sin * total)
    term = total = 1.0
    for k in range(2, df - 1, 2):
        term *= c2 * (k - 1) / k
        total += term
    return sin * total


@cache
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile of 1 - p (one-sided upper tail p), by bisection on the exact distribution."""
    if df <= 0:
        return math.inf
    target = 1 - 2 * p
    low, high = 0.0, max(1.0, z_quantile(p))
    while _t_central(high, df) < target:
        high *= 2
    for _ in range(80):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_central(mid, df) < target else (low, mid)
    return (low + high) / 2


# --- the pairs of one metric -----------------------------------------------------------------------


@dataclass
class Pairs:
    """One metric's complete pairs in pair order: values, whether the candidate ran second, printed steps."""

    base: list[float] = field(default_factory=list)
    cand: list[float] = field(default_factory=list)
    second: list[bool] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)  # the coarser printed step of each pair's two values

    def __len__(self) -> int:
        return len(self.base)


def pairs_of(samples: list[dict[str, Any]], metric: str) -> Pairs:
    """The complete pairs of `metric` in pair order, from samples as the runner records them
    (pair, role, position, metrics, steps)."""
    by_pair: dict[int, dict[str, dict[str, Any]]] = {}
    for s in samples:
        values = s.get("metrics") or {}
        if metric in values:
            by_pair.setdefault(int(s["pair"]), {})[str(s["role"])] = s
    out = Pairs()
    for _, sides in sorted(by_pair.items()):
        b, c = sides.get("baseline"), sides.get("candidate")
        if b is None or c is None:
            continue
        bv, cv = float(b["metrics"][metric]), float(c["metrics"][metric])
        out.base.append(bv)
        out.cand.append(cv)
        position = c.get("position")
        out.second.append(bool(position) if position is not None else int(c["pair"]) % 2 == 1)
        steps = []
        for side, value in ((b, bv), (c, cv)):
            step = (side.get("steps") or {}).get(metric)
            steps.append(float(step) if isinstance(step, (int, float)) and step > 0 else float_step(value))
        out.steps.append(max(steps))
    return out


# --- the plan: looks, levels and exact boundaries (computed by the server, applied here) ------------


@dataclass(frozen=True)
class Plan:
    """The sequential design of one experiment (measure/stats.py builds it from design_constants.json)."""

    budget: int  # the pairs of one experiment's first rounds; `limit` with continuations
    limit: int
    looks: list[int]  # the pair counts where improved / regressed can be decided
    levels: list[float]  # one-sided level of each look (each side), union of both tests
    rank_bounds: list[int]  # signed-rank boundary per look (W+ >= it rejects)
    sign_bounds: list[int]  # sign-count boundary per look
    eq_level: float  # one-sided level of the equivalence interval (no_change)
    eq_bounds: list[int]  # signed-rank boundary at eq_level, by n (index n)
    guard_level: float  # one-sided level of the non-inferiority bounds (guards, the average run)
    guard_bounds: list[int]  # signed-rank boundary at guard_level, by n
    eq_from: int = 6
    mean_level: float = 0.001  # one side of the average run's interval an improvement needs above 0
    warmup: int = 1  # pairs run (and not analyzed) before the first
    min_pairs_improved: int = 30
    tail_share: float = 0.05
    tail_tolerance: float = math.log1p(0.05)
    noisy_from: int = 20
    # A focus experiment's end-to-end guards also show, over every look where they may hold, that no slowdown of
    # the ceiling or more is left: per look, a level and the signed-rank bound at it (their levels add up to
    # guard_level: a union bound); 0 where a guard cannot hold (before min_pairs_improved). Empty: no ceiling.
    ceiling_levels: list[float] = field(default_factory=list)
    ceiling_bounds: list[int] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def look_index(self, n: int) -> int | None:
        return self.looks.index(n) if n in self.looks else None

    def last_look(self, n: int) -> int | None:
        """The index of the last look at or before n pairs."""
        reached = [k for k, m in enumerate(self.looks) if m <= n]
        return reached[-1] if reached else None


# --- one metric ------------------------------------------------------------------------------------


@dataclass
class MetricLook:
    """One metric at n pairs (log units oriented so that + is better, except `mean_*`: relative change)."""

    n: int
    estimate: float | None = None
    low: float | None = None  # decision interval at the last look reached (None before the first)
    high: float | None = None
    look: int | None = None  # the pair count of that look
    eq_low: float | None = None  # equivalence interval at n
    eq_high: float | None = None
    mean: float | None = None  # the average run's relative change (oriented)
    mean_low: float | None = None  # at the plan's mean level (one-sided each)
    mean_high: float | None = None
    fit: MeanFit | None = None  # the average run's fit, for its bounds at other levels
    tail: float | None = None  # worst runs: candidate minus baseline (log, oriented)
    spread: float | None = None  # per-pair spread of the contrasts as the statistic sees them (log)
    floor: float = 0.0  # the printed resolution, where ties show it is what limits the data
    guard_low: float | None = None  # non-inferiority bound of the typical run (guard level)
    ceiling_low: float | None = None  # at a look: the typical run's bound at the plan's ceiling level there
    ceiling_level: float = 0.0  # that level (0: none at this look)
    verdict: str = "undecided"
    invalid: bool = False


def _walsh(r: list[float]) -> list[float]:
    """The Walsh averages (r_i + r_j) / 2, i <= j, sorted."""
    out = [(x + y) / 2 for i, x in enumerate(r) for y in r[i:]]
    out.sort()
    return out


def _between(sorted_values: list[float], bound: int) -> tuple[float, float] | None:
    """[v[N - b], v[b - 1]]: the interval of a test whose statistic counts values above the shift, at boundary b."""
    total = len(sorted_values)
    if bound < 1 or bound > total:
        return None
    return sorted_values[total - bound], sorted_values[bound - 1]


@dataclass(frozen=True)
class MeanFit:
    """The order-adjusted mean of the linear differences relative to the baseline mean (oriented): least
    squares of d_i = (c_i - b_i) / mean(b) on [1, s_i], fitted once; its bounds at any level from its t."""

    change: float
    se: float
    df: int

    def bounds(self, level: float) -> tuple[float, float]:
        """The one-sided-`level` bounds (each side)."""
        half = t_quantile(level, self.df) * self.se
        return self.change - half, self.change + half


def mean_fit(base: list[float], cand: list[float], signs: list[int], sign: float) -> MeanFit | None:
    """The average run's fit (None below 3 pairs, or when every pair ran in the same order)."""
    n = len(base)
    scale = math.fsum(base) / n if n else 0.0
    if n < 3 or scale <= 0:
        return None
    d = [sign * (c - b) / scale for b, c in zip(base, cand, strict=True)]
    sbar = math.fsum(signs) / n
    var_s = 1.0 - sbar * sbar
    if var_s <= 1e-12:
        return None
    dbar = math.fsum(d) / n
    slope = (math.fsum(s * x for s, x in zip(signs, d, strict=True)) / n - sbar * dbar) / var_s
    intercept = dbar - slope * sbar
    rss = math.fsum((x - intercept - slope * s) ** 2 for s, x in zip(signs, d, strict=True))
    return MeanFit(intercept, math.sqrt(rss / (n - 2) / (n * var_s)), n - 2)


def _worst(values: list[float], share: float) -> float:
    k = max(1, math.ceil(share * len(values)))
    return math.fsum(sorted(values)[:k]) / k


def metric_look(p: Pairs, n: int, direction: str, plan: Plan, eq: bool = True) -> MetricLook:
    """The figures of one metric over its first n pairs; `eq` also computes the equivalence interval."""
    out = MetricLook(n)
    if n == 0:
        return out
    sign = 1.0 if direction == "higher" else -1.0
    base, cand = p.base[:n], p.cand[:n]
    if not all(0 < v < math.inf for v in (*base, *cand)):
        out.invalid = True
        return out
    r = [sign * math.log(c / b) for b, c in zip(base, cand, strict=True)]
    s = [1 if second else -1 for second in p.second[:n]]
    # Each pair's contrast r_i is s_i * (second run - first run): under "no change", a size fixed by the runs
    # with a coin's sign. A first/second-run effect adds +-e with the coins' signs: no bias (the coins average
    # it out), and the Walsh average of two pairs run in opposite orders cancels it exactly.
    walsh = _walsh(r)
    total = len(walsh)
    out.estimate = (walsh[(total - 1) // 2] + walsh[total // 2]) / 2
    ratios = sorted(r)
    # Printed resolution: where most pairs show the very same contrast, the data cannot resolve below the
    # step, so the intervals are at least a step wide around the estimate (100 vs 102 printed as integers).
    if Counter(r).most_common(1)[0][1] * 2 >= n:
        out.floor = max(step / min(b, c) for step, b, c in zip(p.steps[:n], base, cand, strict=True))

    def widened(bounds: tuple[float, float]) -> tuple[float, float]:
        est = out.estimate or 0.0
        return min(bounds[0], est - out.floor), max(bounds[1], est + out.floor)

    k = plan.last_look(n)
    if k is not None:
        m = plan.looks[k]
        if m == n:
            # the look's interval at the pairs it was taken at: the intersection of both tests
            rank = _between(walsh, plan.rank_bounds[k])
            sgn = _between(ratios, plan.sign_bounds[k])
            found = [x for x in (rank, sgn) if x is not None]
            if found:
                low, high = max(x[0] for x in found), min(x[1] for x in found)
                if low > high:  # no shift fits both: their hull, never a decision both lack
                    low, high = min(x[0] for x in found), max(x[1] for x in found)
                out.low, out.high = widened((low, high))
                out.look = m
            ceiling = _between(walsh, plan.ceiling_bounds[k]) if k < len(plan.ceiling_bounds) else None
            if ceiling is not None:
                out.ceiling_low, out.ceiling_level = widened(ceiling)[0], plan.ceiling_levels[k]
    if eq and n >= 2:
        bounds = _between(walsh, plan.eq_bounds[n] if n < len(plan.eq_bounds) else 0)
        if bounds is not None:
            # the spread of the contrasts as the statistic sees them (the resolution floor is not noise)
            out.spread = (bounds[1] - bounds[0]) / 2 * math.sqrt(n) / z_quantile(plan.eq_level)
            out.eq_low, out.eq_high = widened(bounds)
        guard = _between(walsh, plan.guard_bounds[n] if n < len(plan.guard_bounds) else 0)
        if guard is not None:
            out.guard_low = widened(guard)[0]
    out.fit = mean_fit(base, cand, s, sign)
    if out.fit is not None:
        out.mean = out.fit.change
        out.mean_low, out.mean_high = out.fit.bounds(plan.mean_level)
    oriented_b = [sign * math.log(v) for v in base]
    oriented_c = [sign * math.log(v) for v in cand]
    out.tail = _worst(oriented_c, plan.tail_share) - _worst(oriented_b, plan.tail_share)
    return out


def mean_bounds(look: MetricLook, level: float) -> tuple[float, float, float] | None:
    """The average run's change with its one-sided-`level` bounds, or None without a fit."""
    if look.fit is None:
        return None
    return (look.fit.change, *look.fit.bounds(level))
