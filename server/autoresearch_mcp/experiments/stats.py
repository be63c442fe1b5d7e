"""Statistics of paired A/B benchmark runs.

Method: each pair gives d = log(candidate / baseline) (negated when lower is better, so + is
better); the relative change is exp(mean d) - 1 with a Student-t confidence interval on the mean of
d. Pairs are interleaved in random order on one worker, so drift and noisy neighbours cancel out of
d instead of biasing one side.

Sequential design (`repeats="auto"`): a group-sequential design with planned looks and
Lan-DeMets alpha spending of the Pocock type, alpha(t) = alpha * ln(1 + (e - 1) t), where t is the
fraction of the pair budget used. Each look spends its increment of alpha and its CI uses that
increment; by the union bound the chance that *any* look's CI misses the true change is at most
alpha, so stopping as soon as a verdict is clear keeps the reported CI valid (conservative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from scipy import stats as sps

from autoresearch_mcp.experiments.runner import classify, robust_cv

DEFAULT_ALPHA = 0.02
DEFAULT_MIN_EFFECT = 0.01
DEFAULT_NOISE_LIMIT = 0.10
DEFAULT_MAX_PAIRS = 50
AUTO_LOOKS = (5, 8, 12, 16, 20, 25, 30, 40, 50, 60, 80, 100)


@dataclass(frozen=True)
class Design:
    """What the runner needs to apply the stopping rule without scipy."""

    looks: list[int]
    alphas: list[float]
    crit: list[float]
    sequential: bool
    min_effect: float
    noise_limit: float
    alpha: float
    warmup: int = 1

    def job(self) -> dict[str, Any]:
        return {
            "looks": self.looks,
            "crit": self.crit,
            "sequential": self.sequential,
            "min_effect_log": math.log1p(self.min_effect),
            "noise_limit": self.noise_limit,
            "warmup": self.warmup,
        }

    def look_for(self, n_pairs: int) -> int:
        """Index of the planned look a run that stopped after n_pairs is analyzed at."""
        for k, n in enumerate(self.looks):
            if n_pairs <= n:
                return k
        return len(self.looks) - 1

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Design:
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
    if repeats == "auto":
        looks = [n for n in AUTO_LOOKS if n < max_pairs] + [max_pairs]
        spent = [alpha * math.log1p((math.e - 1) * n / max_pairs) for n in looks]
        alphas = [b - a for a, b in zip([0.0, *spent[:-1]], spent, strict=True)]
        sequential = True
    else:
        n = int(repeats)
        looks, alphas, sequential = [n], [alpha], False
    crit = [float(sps.t.ppf(1 - a / 2, n - 1)) for a, n in zip(alphas, looks, strict=True)]
    return Design(looks, alphas, crit, sequential, min_effect, noise_limit, alpha, warmup)


@dataclass
class Comparison:
    """The paired comparison of one metric."""

    n_pairs: int
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    verdict: str
    pairs_needed: int | None = None


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
    """Compare paired samples (base[i] and cand[i] come from the same pair)."""
    b = np.asarray(base, dtype=float)
    c = np.asarray(cand, dtype=float)
    n = int(min(b.size, c.size))
    if n < 2 or np.any(b[:n] <= 0) or np.any(c[:n] <= 0):
        return Comparison(n, None, None, None, None, "invalid" if n >= 2 else "inconclusive")
    raw = np.log(c[:n] / b[:n])  # the metric's own change, + means the value went up
    sign = 1.0 if direction == "higher" else -1.0
    k = design.look_for(n)
    a_k = design.alphas[k]
    mean = float(raw.mean())
    sd = float(raw.std(ddof=1))
    se = sd / math.sqrt(n)
    crit = float(sps.t.ppf(1 - a_k / 2, n - 1))
    lo, hi = mean - crit * se, mean + crit * se
    if se > 0:
        p = float(sps.ttest_1samp(raw, 0.0).pvalue)
        # Bonferroni-consistent with the look's share of alpha: p_adj < alpha iff the CI excludes 0.
        p = min(1.0, p * design.alpha / a_k)
    else:
        p = 0.0 if mean != 0 else 1.0
    better_lo, better_hi = sorted((sign * lo, sign * hi))
    verdict = classify(better_lo, better_hi, sign * mean, math.log1p(design.min_effect))
    needed = None
    if verdict == "inconclusive" and sd > 0:
        eff = abs(mean)
        margin = math.log1p(design.min_effect)
        target = eff if eff >= margin else max(margin - eff, margin / 4)
        z = float(sps.norm.ppf(1 - design.alpha / 2))
        needed = max(n + 1, math.ceil((z * sd / target) ** 2))
    return Comparison(
        n,
        pct(mean),
        pct(lo),
        pct(hi),
        p,
        verdict,
        needed,
    )


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
    """(standard error of the mean log-ratio, its degrees of freedom) of one `paired` comparison,
    recovered from its reported CI and the design it was analyzed with: `paired` used the t
    quantile of the alpha spent at the run's look, so a sequential run's (wider) interval gives back
    the same standard error as a fixed one. None if the comparison has no interval."""
    n = int(comparison.get("n_pairs") or 0)
    low, high = log_pct(comparison.get("ci_low_pct")), log_pct(comparison.get("ci_high_pct"))
    if n < 2 or low is None or high is None:
        return None
    alpha_k = design.alphas[design.look_for(n)]
    crit = float(sps.t.ppf(1 - alpha_k / 2, n - 1))
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


def baseline_noise(base: list[float]) -> float:
    """Robust coefficient of variation of the baseline runs (the worker's noise)."""
    return robust_cv([float(x) for x in base])
