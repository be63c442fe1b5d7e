"""The decision rules of designs recorded before the randomized rule (worker/decide.py): the balanced-block
Wilcoxon design (`bounds` calibrated by simulation) and the earlier t-test design, kept so that experiments
measured with them are still read and recomputed as they were judged. Nothing new is judged with them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
from scipy import stats as sps

from autoresearch_mcp.errors import InputError
from autoresearch_mcp.measure.summary import Comparison, pct, summarize
from autoresearch_mcp.worker import decide, outcomes

POWER = 0.8


@cache
def _normal_quantiles(levels: tuple[float, ...]) -> list[float]:
    return [float(sps.norm.isf(a)) for a in levels]


FUTILITY_Z = 1.96  # a 95% range of the change, for the "the budget cannot decide" test


def log_ratios(pairs: list[tuple[float, float]], direction: str) -> list[float] | None:
    """Per pair (baseline, candidate): log(candidate / baseline), + meaning better; None when a value
    cannot be compared as a ratio (zero, negative or not finite): the experiment is then invalid."""
    sign = 1.0 if direction == "higher" else -1.0
    out = []
    for base, cand in pairs:
        if not (0 < base < math.inf and 0 < cand < math.inf):
            return None
        ratio = math.log(cand / base)
        if not math.isfinite(ratio):
            return None
        out.append(sign * ratio)
    return out


def resolution_floor(pairs: list[tuple[float, float]]) -> float:
    """Log-ratio error the printed resolution alone can cause: values known to +/- r/2 each."""
    values = [v for pair in pairs for v in pair]
    if not values:
        return 0.0
    step = min(decide.float_step(v) for v in values)
    return step / min(values)


@dataclass
class Look:
    """The analysis of the pairs at one look (log-ratio units, + is better)."""

    n: int
    verdict: str  # improved / regressed / no_change / noisy / inconclusive
    estimate: float
    low: float
    high: float
    spread: float  # per-pair spread of d as the statistic sees it (its standard error * sqrt(n))
    reach: float  # half-width the whole budget would reach at this spread


def look_at(d: list[float], k: int, design: dict[str, Any], floor: float = 0.0) -> Look:
    """Judge the first looks[k] pairs at look k of the design.

    improved / regressed / no_change as `classify` says on the look's interval widened by the
    resolution floor; otherwise `noisy` when the budget could not decide at this spread (at the last
    look: the interval is still wider than the minimum effect; before it: even the budget's interval
    would hold the likely range of the change), else `inconclusive`.
    """
    n = design["looks"][k]
    ordered = sorted(d[:n])
    # pairwise sums of a sorted list come in n sorted runs, which sorted() merges quickly; halved below
    sums = sorted(x + y for i, x in enumerate(ordered) for y in ordered[i:])
    signs = design.get("sign_bounds") or []  # none in a design recorded before the sign test joined
    total, w, s = len(sums), design["bounds"][k], signs[k] if k < len(signs) else n + 1
    lows, highs = [], []
    if w <= total:
        lows.append(sums[total - w] / 2)
        highs.append(sums[w - 1] / 2)
    if s <= n:
        lows.append(ordered[n - s])
        highs.append(ordered[s - 1])
    low, high = max(lows), min(highs)
    if low > high:  # the two intervals disagree (no shift fits both): take their hull, never a decision both lack
        low, high = min(lows), max(highs)
    estimate = min(max((sums[(total - 1) // 2] + sums[total // 2]) / 4, low), high)
    low, high = low - floor, high + floor
    min_effect = design["min_effect_log"]
    verdict = classify(low, high, estimate, min_effect)
    se = (high - low) / 2 / design["z"][k]
    last = design["looks"][-1]
    reach = design["z"][-1] * se * math.sqrt(n / last)
    if verdict == "inconclusive" and reach >= min_effect:
        likely = abs(estimate) + FUTILITY_Z * se
        if n >= last or likely < reach:
            verdict = "noisy"
    return Look(n, verdict, estimate, low, high, se * math.sqrt(n), reach)


def classify(ci_low: float, ci_high: float, estimate: float, min_effect: float) -> str:
    """Verdict of a log-ratio CI oriented so that + is better, against a minimum effect (log units).

    improved / regressed: the CI excludes 0 and the estimate is at least the minimum effect;
    no_change: the whole CI lies within +/- the minimum effect; inconclusive otherwise.
    """
    if -min_effect < ci_low and ci_high < min_effect:
        return "no_change"
    if ci_low > 0 and estimate >= min_effect:
        return "improved"
    if ci_high < 0 and estimate <= -min_effect:
        return "regressed"
    return "inconclusive"



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


def paired(base: list[float], cand: list[float], direction: str, design: Design) -> Comparison:
    """Compare paired samples (base[i] and cand[i] come from the same pair) at the last look reached."""
    pairs = [(float(b), float(c)) for b, c in zip(base, cand, strict=False)]
    d = log_ratios(pairs, direction)
    if d is None:
        return Comparison(len(pairs), None, None, None, None, "invalid")
    sign = 1.0 if direction == "higher" else -1.0
    k = design.look_for(len(d))
    if k is None:
        estimate = float(np.median(d)) if d else None
        return Comparison(len(d), pct(None if estimate is None else sign * estimate), None, None, None,
                          "inconclusive", pairs_needed=design.looks[0])
    n = design.looks[k]
    look = look_at(d, k, design.job(), resolution_floor(pairs[:n]))
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


def _pairs_needed(look: Look, design: Design) -> int:
    """Pairs that would decide with 80% power at this spread: the observed change if it is beyond the
    minimum effect, else the distance to `no_change`; a planned look when the budget allows."""
    margin = math.log1p(design.min_effect)
    effect = abs(look.estimate)
    target = effect if effect >= margin else max(margin - effect, margin / 4)
    z = design.z[-1] + float(sps.norm.ppf(POWER))
    needed = max(look.n + 1, math.ceil((z * look.spread / target) ** 2))
    return next((n for n in design.looks if n >= needed), needed)


def _noisy_note(look: Look, design: Design, sign: float) -> str:
    """How noisy, and why the budget cannot decide (figures as the metric's own % change)."""
    spread = look.spread * 100
    budget = design.budget
    if look.n >= budget:
        low, high = sorted((pct(sign * look.low), pct(sign * look.high)))
        why = (f"after the whole budget of {budget} pairs the interval [{low:+.2f}%, {high:+.2f}%] is still wider "
               f"than the minimum effect of ±{design.min_effect * 100:g}%")
    else:
        se = look.spread / math.sqrt(look.n)
        low, high = sorted((pct(sign * (look.estimate - FUTILITY_Z * se)),
                            pct(sign * (look.estimate + FUTILITY_Z * se))))
        why = (f"at that noise {budget} pairs resolve only changes beyond ±{look.reach * 100:.1f}%, and this change "
               f"is likely (80%) within [{low:+.2f}%, {high:+.2f}%]")
    return (f"the paired log-ratios spread by about {spread:.1f}% (about {per_run_noise(spread):.1f}% per run): "
            + why)


def log_standard_error(comparison: dict[str, Any], design: Design) -> tuple[float, int] | None:
    """(standard error, degrees of freedom) of a comparison, recovered from its interval and its design."""
    n = int(comparison.get("n_pairs") or 0)
    lows, highs = comparison.get("ci_low_pct"), comparison.get("ci_high_pct")
    low = math.log1p(lows / 100.0) if lows is not None and lows > -100 else None
    high = math.log1p(highs / 100.0) if highs is not None and highs > -100 else None
    k = design.look_for(n)
    if n < 2 or low is None or high is None or k is None:
        return None
    crit = float(sps.t.ppf(1 - design.legacy_alphas[k] / 2, n - 1)) if design.statistic == "t" else design.z[k]
    return (high - low) / 2 / crit, n - 1


def _pairs(outcome: outcomes.Experiment, metric: str) -> tuple[list[float], list[float]]:
    by_pair: dict[int, dict[str, float]] = {}
    for s in outcome.samples:
        if metric in s.metrics:
            by_pair.setdefault(int(s.pair), {})[s.role] = float(s.metrics[metric])
    complete = [p for _, p in sorted(by_pair.items()) if "baseline" in p and "candidate" in p]
    return [p["baseline"] for p in complete], [p["candidate"] for p in complete]


def _guard_judgement(cmp: Comparison, direction: str, tolerance_pct: float) -> str:
    if cmp.verdict == "regressed":
        return "regressed"
    if cmp.ci_low_pct is None or cmp.ci_high_pct is None:
        return "undecided"
    worst = cmp.ci_low_pct if direction == "higher" else -cmp.ci_high_pct
    return "held" if worst > -tolerance_pct else "undecided"


def _objective_judgement(cmp: Comparison) -> str:
    return cmp.verdict if cmp.verdict in ("improved", "regressed") else "held"


def analyze(outcome: outcomes.Experiment, metric: str, direction: str, objective_names: list[str],
            guards: dict[str, dict[str, Any]], design: Design, refused: list[tuple[str, str]]) -> dict[str, Any]:
    """The analysis of an experiment measured with an earlier design, as it was judged then (`refused`: the
    values the value rule dropped, by metric)."""
    status = outcome.status
    required = list(dict.fromkeys([metric, *objective_names, *guards]))
    if any(name in required for name, _ in refused) and status in ("done", "checks_failed"):
        outcome.stop_reason = "invalid"
        outcome.error = "; ".join(why for _, why in refused[:5])
    names = sorted({n for s in outcome.samples for n in s.metrics})
    comparisons: dict[str, Any] = {}
    notes: dict[str, str | None] = {}
    for name in names:
        base, cand = _pairs(outcome, name)
        guard = guards.get(name)
        own_direction = str(guard["direction"]) if guard else direction
        tolerance = float(guard["tolerance_pct"]) if guard else None
        # a guard's verdict is against its tolerance, not the minimum effect of the objectives
        own = dataclasses.replace(design, min_effect=tolerance / 100.0) if tolerance is not None else design
        cmp = paired(base, cand, own_direction, own)
        notes[name] = cmp.note
        role = "guard" if guard else "objective" if name in objective_names else None
        judgement = (_guard_judgement(cmp, own_direction, tolerance) if tolerance is not None
                     else _objective_judgement(cmp) if role == "objective" else None)
        comparisons[name] = {
            "baseline": summarize(base), "candidate": summarize(cand),
            "delta_pct": cmp.delta_pct, "ci_low_pct": cmp.ci_low_pct, "ci_high_pct": cmp.ci_high_pct,
            "p_value": cmp.p_value, "n_pairs": cmp.n_pairs, "verdict": cmp.verdict,
            "pairs_needed": cmp.pairs_needed, "noise_pct": cmp.noise_pct, "resolvable_pct": cmp.resolvable_pct,
            "direction": own_direction, "role": role, "tolerance_pct": tolerance, "judgement": judgement,
            "log_se": cmp.log_se,
        }
    primary = comparisons.get(metric)
    noise = primary.get("noise_pct") if primary else None
    judged = {n: comparisons[n] for n in required if n in comparisons}
    won = [n for n in objective_names if judged.get(n, {}).get("judgement") == "improved"]
    blocking = [n for n, c in judged.items() if c["judgement"] in ("regressed", "undecided")]
    pairs_needed = primary.get("pairs_needed") if primary else None
    verdict: str | None
    if status not in ("done", "checks_failed"):
        verdict = None
    elif outcome.stop_reason == "invalid" or primary is None or len(judged) < len(required):
        verdict = "invalid"
    elif primary["verdict"] == "noisy":
        verdict = "noisy"
    elif any(judged[n]["judgement"] == "regressed" for n in blocking):
        verdict = "regressed"
    elif won and blocking:
        verdict = "inconclusive"  # an objective won, but a guard is not yet shown to have held
        pairs_needed = max((judged[n]["pairs_needed"] or 0 for n in blocking), default=0) or None
    elif won:
        verdict = "improved"
    elif len(objective_names) == 1:
        verdict = judged[objective_names[0]]["verdict"]
    else:
        verdicts = {judged[n]["verdict"] for n in objective_names}
        verdict = "no_change" if verdicts == {"no_change"} else "inconclusive"
    note = notes.get(metric) if verdict == "noisy" else None
    return {"metrics": comparisons, "verdict": verdict, "noise_cv": None if noise is None else noise / 100,
            "noise_note": note, "problems": [why for _, why in refused[:20]], "pairs_needed": pairs_needed,
            "won": won, "blocking": blocking}
