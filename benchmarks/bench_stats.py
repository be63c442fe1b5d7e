"""Statistics by simulation: false winners and power of the paired sequential method vs a naive rule.

Noise model per run: lognormal per-run noise (cv 2%), slow drift of the machine (random walk,
up to a few %), and occasional noisy-neighbour slowdowns (5% of runs, 5-30% slower). Pairs are
interleaved in random order, as the runner does. The naive rule: 5 runs of A then 5 of B, compare
means, trust it if the stddev is under 2% of the mean.

    python benchmarks/bench_stats.py [--trials 2000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from autoresearch_mcp.experiments import stats
from autoresearch_mcp.experiments.runner import classify, robust_cv


class Machine:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.level = 0.0

    def run(self, true_value: float) -> float:
        self.level += self.rng.normal(0, 0.003)  # slow drift
        self.level = max(-0.05, min(0.05, self.level))
        value = true_value * math.exp(self.level + self.rng.normal(0, 0.02))
        if self.rng.random() < 0.05:  # noisy neighbour
            value *= 1 - self.rng.uniform(0.05, 0.30)
        return value


def ours(rng: np.random.Generator, effect: float, design: stats.Design) -> tuple[str, int]:
    m = Machine(rng)
    base: list[float] = []
    cand: list[float] = []
    looks = {n: k for k, n in enumerate(design.looks)}
    for i in range(design.looks[-1]):
        order = [("b", 1.0), ("c", 1.0 + effect)]
        if rng.random() < 0.5:
            order.reverse()
        for role, value in order:
            (base if role == "b" else cand).append(m.run(100.0 * value))
        n = i + 1
        if n in looks:
            if robust_cv(base) > design.noise_limit:
                return "noisy", n
            d = np.log(np.array(cand) / np.array(base))
            half = design.crit[looks[n]] * d.std(ddof=1) / math.sqrt(n)
            verdict = classify(d.mean() - half, d.mean() + half, d.mean(), math.log1p(design.min_effect))
            if verdict != "inconclusive":
                return verdict, n
    return stats.paired(base, cand, "higher", design).verdict, design.looks[-1]


def naive(rng: np.random.Generator, effect: float) -> tuple[str, int]:
    m = Machine(rng)
    a = np.array([m.run(100.0) for _ in range(5)])
    b = np.array([m.run(100.0 * (1 + effect)) for _ in range(5)])
    trusted = a.std(ddof=1) < 0.02 * a.mean() and b.std(ddof=1) < 0.02 * b.mean()
    if not trusted:
        return "inconclusive", 5
    return ("improved" if b.mean() > a.mean() * 1.01 else
            "regressed" if b.mean() < a.mean() * 0.99 else "no_change"), 5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--max-pairs", type=int, default=stats.DEFAULT_MAX_PAIRS)
    args = parser.parse_args()
    design = stats.make_design("auto", max_pairs=args.max_pairs)
    fixed = stats.make_design(design.looks[-1])
    print(f"design: looks {design.looks}, alpha {design.alpha}, min effect {design.min_effect:.0%}, "
          f"fixed design = {fixed.looks[0]} pairs")
    print(f"{'true effect':>12} {'method':>8} {'improved':>9} {'regressed':>10} {'mean pairs':>11}")
    for effect in (0.0, -0.02, 0.03, 0.05):
        for name in ("ours", "naive"):
            rng = np.random.default_rng(1234)
            verdicts = []
            pairs = []
            for _ in range(args.trials):
                v, n = ours(rng, effect, design) if name == "ours" else naive(rng, effect)
                verdicts.append(v)
                pairs.append(n)
            imp = verdicts.count("improved") / args.trials
            reg = verdicts.count("regressed") / args.trials
            print(f"{effect:>+12.0%} {name:>8} {imp:>9.1%} {reg:>10.1%} {np.mean(pairs):>11.1f}")


if __name__ == "__main__":
    main()
