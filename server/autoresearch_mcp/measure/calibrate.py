"""Calibrate the sequential boundaries of the signed-rank and sign design by simulation.

    python -m autoresearch_mcp.measure.calibrate [--simulations 400000]

writes `design_constants.json` beside this file; `stats.make_design` reads it. Two statistics
decide together: the Wilcoxon signed-rank count W+ (efficient on normal noise and robust to outlier
runs) and the sign count S (the number of positive pairs; it wins on a bimodal machine, where half
the pairs mix two speeds and their ranks drown the clean half). A look rejects "no improvement" when
either crosses its boundary, so the reported interval is the intersection of the Hodges-Lehmann
(Walsh) interval and the median (order statistic) interval.

What is simulated: under "no change" the paired log-ratios are symmetric about 0, and then the whole
sequence of (W+, S) over the looks has the same joint distribution whatever the noise (normal,
heavy-tailed, bimodal: the signs are fair coins independent of the ranks). So one simulation with
normal draws calibrates the design for every continuous symmetric noise, and ties or zeros can only
lower W+ and S (a Walsh average or a pair of exactly 0 is not counted as positive): conservative.

At look k each statistic gets the smallest boundary whose exact null tail is at most
a * (n_k / budget) ** RHO / 2; `a` is the largest value whose simulated chance of crossing any
look's boundary (either statistic) is at most TARGET (one side). A boundary beyond the statistic's
maximum cannot be crossed by any data; a look where the signed-rank boundary cannot be is dropped, so
the first look is the first n at which a distribution-free test can reach its level. RHO > 0 spends less early
(where few pairs decide little) and more at the budget, which is where power is won.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

CONSTANTS = Path(__file__).with_name("design_constants.json")
ALPHA = 0.02  # two-sided; each side (false `improved`, false `regressed`) gets half
TARGET = 0.0085  # one side, under alpha/2: room for the simulation's own error and for what a benchmark shows
RHO = 0.7
SCHEDULES = {
    50: [10, 14, 20, 26, 32, 40, 50],
    100: [10, 14, 20, 26, 32, 40, 50, 60, 70, 80, 90, 100],
    200: [10, 14, 20, 26, 32, 40, 50, 60, 70, 80, 90, 100, 120, 140, 160, 180, 200],
}


def null_survival(n: int) -> np.ndarray:
    """P(W+ >= w) for w = 0 .. n(n+1)/2 under the null, exactly (W+ = sum of the ranks with a + sign)."""
    total = n * (n + 1) // 2
    pmf = np.zeros(total + 1)
    pmf[0] = 1.0
    for rank in range(1, n + 1):
        shifted = np.zeros_like(pmf)
        shifted[rank:] = pmf[: total + 1 - rank]
        pmf = (pmf + shifted) / 2
    survival: np.ndarray = np.cumsum(pmf[::-1])[::-1]
    return survival


def bound(n: int, level: float) -> int:
    """Smallest w with P(W+ >= w) <= level; n(n+1)/2 + 1 when no w is small enough."""
    ok = np.nonzero(null_survival(n) <= level)[0]
    return int(ok[0]) if ok.size else n * (n + 1) // 2 + 1


def sign_bound(n: int, level: float) -> int:
    """Smallest s with P(S >= s) <= level for S ~ Binomial(n, 1/2); n + 1 when none is small enough."""
    survival = sps.binom.sf(np.arange(n + 1) - 1, n, 0.5)
    ok = np.nonzero(survival <= level)[0]
    return int(ok[0]) if ok.size else n + 1


def simulate(looks: list[int], simulations: int, seed: int, chunk: int = 5000) -> tuple[np.ndarray, np.ndarray]:
    """(W+, S) at each look for `simulations` null sequences: W+_n = #{i <= j <= n: d_i + d_j > 0},
    S_n = #{i <= n: d_i > 0}."""
    rng = np.random.default_rng(seed)
    wplus = np.empty((simulations, len(looks)), dtype=np.int32)
    signs = np.empty((simulations, len(looks)), dtype=np.int32)
    for start in range(0, simulations, chunk):
        d = rng.standard_normal((min(chunk, simulations - start), looks[-1])).astype(np.float32)
        w = np.zeros(d.shape[0], dtype=np.int64)
        at = 0
        for n in range(1, looks[-1] + 1):
            w += ((d[:, :n] + d[:, n - 1 : n]) > 0).sum(axis=1)
            if n == looks[at]:
                wplus[start : start + d.shape[0], at] = w
                signs[start : start + d.shape[0], at] = (d[:, :n] > 0).sum(axis=1)
                at += 1
    return wplus, signs


def calibrate(budget: int, simulations: int, seed: int) -> dict[str, Any]:
    looks = SCHEDULES[budget]
    wplus, signs = simulate(looks, simulations, seed)

    def bounds_for(a: float) -> tuple[np.ndarray, np.ndarray]:
        levels = [a * (n / budget) ** RHO / 2 for n in looks]
        return (np.array([bound(n, x) for n, x in zip(looks, levels, strict=True)]),
                np.array([sign_bound(n, x) for n, x in zip(looks, levels, strict=True)]))

    def crossing(a: float) -> float:
        w, s = bounds_for(a)
        return float(((wplus >= w) | (signs >= s)).any(axis=1).mean())

    low, high = 1e-6, ALPHA / 2
    for _ in range(40):  # bisection on a log scale; the crossing rate is monotone in a
        mid = math.sqrt(low * high)
        low, high = (mid, high) if crossing(mid) <= TARGET else (low, mid)
    w, s = bounds_for(low)
    keep = [k for k, n in enumerate(looks) if w[k] <= n * (n + 1) // 2]
    return {
        "looks": [looks[k] for k in keep],
        "bounds": [int(w[k]) for k in keep],
        "levels": [float(null_survival(looks[k])[w[k]]) for k in keep],
        "sign_bounds": [int(s[k]) for k in keep],
        "sign_levels": [float(sps.binom.sf(s[k] - 1, looks[k], 0.5)) for k in keep],
        "false_improved": round(crossing(low), 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=400_000)
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    designs = {str(b): calibrate(b, args.simulations, args.seed + b) for b in SCHEDULES}
    head = {"generated_by": "python -m autoresearch_mcp.measure.calibrate", "alpha": ALPHA,
            "target_one_sided": TARGET, "rho": RHO, "simulations": args.simulations, "seed": args.seed}
    lines = [f' "{k}": {json.dumps(v)},' for k, v in head.items()]
    lines += [' "designs": {'] + [f'  "{b}": {json.dumps(d)},' for b, d in designs.items()]
    lines[-1] = lines[-1].rstrip(",")
    CONSTANTS.write_text("{\n" + "\n".join(lines) + "\n }\n}\n")  # one line per design: readable diffs
    for budget, d in designs.items():
        print(f"budget {budget}: looks {d['looks']}, simulated false `improved` {d['false_improved']:.3%}")


if __name__ == "__main__":
    main()
