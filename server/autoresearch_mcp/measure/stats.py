"""Statistics of paired A/B benchmark runs.

Method: each pair gives d = log(candidate / baseline) (negated when lower is better, so + is
better). Pairs run in balanced blocks (AB BA or BA AB), so a first/second-run effect cancels in
every complete block, and the data are only analyzed at complete blocks. The relative change is
exp(HL) - 1, HL the Hodges-Lehmann estimate (median of the Walsh averages). Two distribution-free
tests decide together, each with its interval: the Wilcoxon signed-rank test (the Walsh interval;
efficient on normal noise, robust to outlier runs) and the sign test (the interval between order
statistics of d; it wins on a bimodal machine); the reported interval is their intersection. It is
widened by the error the metric's printed resolution alone can cause, so exact ties never give a
zero-width interval.

Sequential design: looks at planned pair counts (first at 14 pairs: the first n at which a
distribution-free test can reach that look's level); the boundaries of both tests were calibrated
together by simulation (calibrate.py, constants in design_constants.json) so that the chance of a
false `improved` over all looks, including re-measuring rounds up to the budget, is under alpha/2.
The runner applies the same rule (runner.look_at) while it adds pairs; the server recomputes it
from the stored samples. `noisy` is a diagnostic: the pairs' spread is such that the budget could
not decide this change.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any, overload

import numpy as np
from scipy import stats as sps

from autoresearch_mcp.core import runner
from autoresearch_mcp.core.config import DEFAULT_ALPHA, DEFAULT_MAX_PAIRS, DEFAULT_MIN_EFFECT, DEFAULT_NOISE_LIMIT
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.measure.calibrate import CONSTANTS

POWER = 0.8  # the power `pairs_needed` plans for


@cache
def _constants() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CONSTANTS.read_text())
    return data


@cache
def _normal_quantiles(levels: tuple[float, ...]) -> list[float]:
    return [float(sps.norm.isf(a)) for a in levels]


@dataclass(frozen=True)
class Design:
    """The calibrated looks of one experiment (all rounds), and what the first round analyzes."""

    looks: list[int]
    bounds: list[int]  # W+ boundary per look
    levels: list[float]  # nominal one-sided level per look (exact null of W+)
    stops: list[int]  # the looks the first round analyzes (the last ends it)
    min_effect: float
    noise_limit: float
    alpha: float
    warmup: int = 1
    statistic: str = "wilcoxon"  # "t": a design recorded before the Wilcoxon design (read-only)
    legacy_alphas: list[float] = field(default_factory=list)
    sign_bounds: list[int] = field(default_factory=list)  # sign-count boundary per look
    sign_levels: list[float] = field(default_factory=list)

    @property
    def sequential(self) -> bool:
        return len(self.stops) > 1

    @property
    def budget(self) -> int:
        return self.looks[-1]

    @property
    def z(self) -> list[float]:
        """Normal quantile of each look's level: interval half-width / standard error."""
        return _normal_quantiles(tuple(self.levels))

    def job(self) -> dict[str, Any]:
        return {
            "looks": self.looks,
            "bounds": self.bounds,
            "sign_bounds": self.sign_bounds,
            "z": self.z,
            "stops": self.stops,
            "min_effect_log": math.log1p(self.min_effect),
            "noise_limit": self.noise_limit,
            "warmup": self.warmup,
        }

    def look_for(self, n_pairs: int) -> int | None:
        """Index of the last look n_pairs reach (None before the first look)."""
        reached = [k for k, n in enumerate(self.looks) if n <= n_pairs]
        return reached[-1] if reached else None

    def round_stops(self, done: int, repeats: int | str) -> list[int]:
        """Where a round that starts after `done` pairs looks: every later look ('auto'), or only the
        first look at or beyond `repeats` more pairs. Fewer pairs than the first look run as whole
        blocks and cannot decide (no distribution-free test can at that level): they only measure."""
        later = [n for n in self.looks if n > done]
        if not later:
            raise InputError(f"this experiment already used its whole budget of {self.budget} pairs")
        if repeats == "auto":
            return later
        want = done + int(repeats)
        if want > self.budget:
            raise InputError(f"{done} + {int(repeats)} pairs is beyond the design's budget of {self.budget} "
                             f"pairs; ask for at most {self.budget - done}, or 'auto'")
        if want < self.looks[0]:
            return [want + want % 2]
        return [next(n for n in later if n >= want)]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Design:
        if "bounds" not in data:  # recorded by the earlier t-test design: kept readable for reports
            alphas = [float(a) for a in data["alphas"]]
            looks = [int(n) for n in data["looks"]]
            return cls(looks, [], [a / 2 for a in alphas], looks if data.get("sequential") else looks[-1:],
                       float(data["min_effect"]), float(data["noise_limit"]), float(data["alpha"]),
                       int(data.get("warmup", 1)), "t", alphas)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


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
    calibrated = sorted(int(b) for b in constants["designs"])
    if not math.isclose(alpha, constants["alpha"]) or str(max_pairs) not in constants["designs"]:
        raise InputError(
            f"no calibrated design for alpha={alpha:g} and max_pairs={max_pairs}: the calibrated ones are alpha="
            f"{constants['alpha']:g} with max_pairs in {calibrated}. Set those in .autoresearch/config.json, or add "
            "a schedule to calibrate.py and run `python -m autoresearch_mcp.measure.calibrate`")
    data = constants["designs"][str(max_pairs)]
    design = Design(list(data["looks"]), list(data["bounds"]), list(data["levels"]), [], min_effect, noise_limit,
                    alpha, warmup, sign_bounds=list(data["sign_bounds"]), sign_levels=list(data["sign_levels"]))
    return dataclasses.replace(design, stops=design.round_stops(0, repeats))


@dataclass
class Comparison:
    """The paired comparison of one metric (percent changes of the metric's own value)."""

    n_pairs: int
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    verdict: str
    pairs_needed: int | None = None
    noise_pct: float | None = None  # per-run noise, from the pairs' spread
    resolvable_pct: float | None = None  # the smallest change the budget resolves at that noise
    note: str | None = None  # why `noisy`
    log_se: float | None = None  # standard error of the log-ratio estimate: the interval's half-width / z of its look


def summarize(samples: list[float]) -> dict[str, Any]:
    arr = np.asarray(samples, dtype=float)
    if arr.size == 0:
        return {"n": 0, "mean": None, "median": None, "stddev": None, "cv": None, "samples": []}
    mean = float(arr.mean())
    sd = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return {
        "n": int(arr.size),
        "mean": mean,
        "median": float(np.median(arr)),
        "stddev": sd,
        "cv": sd / abs(mean) if mean else None,
        "samples": [float(x) for x in arr],
    }


def paired(base: list[float], cand: list[float], direction: str, design: Design) -> Comparison:
    """Compare paired samples (base[i] and cand[i] come from the same pair) at the last look reached."""
    pairs = [(float(b), float(c)) for b, c in zip(base, cand, strict=False)]
    d = runner.log_ratios(pairs, direction)
    if d is None:
        return Comparison(len(pairs), None, None, None, None, "invalid")
    sign = 1.0 if direction == "higher" else -1.0
    k = design.look_for(len(d))
    if k is None:
        estimate = float(np.median(d)) if d else None
        return Comparison(len(d), pct(None if estimate is None else sign * estimate), None, None, None,
                          "inconclusive", pairs_needed=design.looks[0])
    n = design.looks[k]
    look = runner.look_at(d, k, design.job(), runner.resolution_floor(pairs[:n]))
    low, high = sorted((sign * look.low, sign * look.high))
    return Comparison(
        n, pct(sign * look.estimate), pct(low), pct(high), _p_value(d[:n], design, k), look.verdict,
        pairs_needed=_pairs_needed(look, design) if look.verdict in ("inconclusive", "noisy") else None,
        noise_pct=round(per_run_noise(look.spread) * 100, 4), resolvable_pct=round(look.reach * 100, 4),
        note=_noisy_note(look, design, sign) if look.verdict == "noisy" else None,
        log_se=look.spread / math.sqrt(look.n),
    )


def per_run_noise(spread: float) -> float:
    """The noise of one run from the spread of paired log-ratios: each difference holds two runs'."""
    return spread / math.sqrt(2)


def _p_value(d: list[float], design: Design, k: int) -> float:
    """Two-sided Wilcoxon signed-rank p (scipy), scaled by the look's share of alpha, so that it is
    under alpha about when this look's interval excludes 0."""
    if not any(d):
        return 1.0
    p = float(sps.wilcoxon(d, zero_method="zsplit").pvalue)
    return min(1.0, p * (design.alpha / 2) / design.levels[k])


def _pairs_needed(look: runner.Look, design: Design) -> int:
    """Pairs that would decide with 80% power at this spread: the observed change if it is beyond the
    minimum effect, else the distance to `no_change`; a planned look when the budget allows."""
    margin = math.log1p(design.min_effect)
    effect = abs(look.estimate)
    target = effect if effect >= margin else max(margin - effect, margin / 4)
    z = design.z[-1] + float(sps.norm.ppf(POWER))
    needed = max(look.n + 1, math.ceil((z * look.spread / target) ** 2))
    return next((n for n in design.looks if n >= needed), needed)


def _noisy_note(look: runner.Look, design: Design, sign: float) -> str:
    """How noisy, and why the budget cannot decide (figures as the metric's own % change)."""
    spread = look.spread * 100
    budget = design.budget
    if look.n >= budget:
        low, high = sorted((pct(sign * look.low), pct(sign * look.high)))
        why = (f"after the whole budget of {budget} pairs the interval [{low:+.2f}%, {high:+.2f}%] is still wider "
               f"than the minimum effect of ±{design.min_effect * 100:g}%")
    else:
        se = look.spread / math.sqrt(look.n)
        low, high = sorted((pct(sign * (look.estimate - runner.FUTILITY_Z * se)),
                            pct(sign * (look.estimate + runner.FUTILITY_Z * se))))
        why = (f"at that noise {budget} pairs resolve only changes beyond ±{look.reach * 100:.1f}%, and this change "
               f"is likely (80%) within [{low:+.2f}%, {high:+.2f}%]")
    return (f"the paired log-ratios spread by about {spread:.1f}% (about {per_run_noise(spread):.1f}% per run): "
            + why)


@overload
def pct(log_ratio: float) -> float: ...
@overload
def pct(log_ratio: None) -> None: ...
def pct(log_ratio: float | None) -> float | None:
    """A log-ratio as a percent change (rounded to 4 decimals); None stays None."""
    return None if log_ratio is None else round(math.expm1(log_ratio) * 100.0, 4)


def log_pct(pct_change: float | None) -> float | None:
    """A percent change as a log-ratio (the inverse of `pct`); None, or -100% or less, gives None."""
    return math.log1p(pct_change / 100.0) if pct_change is not None and pct_change > -100 else None


def log_standard_error(comparison: dict[str, Any], design: Design) -> tuple[float, int] | None:
    """(standard error of the log-ratio estimate, its degrees of freedom) of one `paired` comparison,
    recovered from its reported CI and the design it was analyzed with: the interval's half-width
    over the quantile of the level of the look it was taken at, so an early look's (wider) interval
    gives back the same standard error as a late one. None if the comparison has no interval."""
    n = int(comparison.get("n_pairs") or 0)
    low, high = log_pct(comparison.get("ci_low_pct")), log_pct(comparison.get("ci_high_pct"))
    k = design.look_for(n)
    if n < 2 or low is None or high is None or k is None:
        return None
    crit = float(sps.t.ppf(1 - design.legacy_alphas[k] / 2, n - 1)) if design.statistic == "t" else design.z[k]
    return (high - low) / 2 / crit, n - 1


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
