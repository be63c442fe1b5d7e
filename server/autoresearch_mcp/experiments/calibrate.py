"""Calibrate the sequential boundaries of the Wilcoxon signed-rank design by simulation.

    python -m autoresearch_mcp.experiments.calibrate [--simulations 400000]

writes `design_constants.json` beside this file; `stats.make_design` reads it. What is simulated:
under "no change" the paired log-ratios are symmetric about 0, and then the whole sequence of
signed-rank statistics W+ (one per look) has the same joint distribution whatever the noise (normal,
heavy-tailed, bimodal: the signs are fair coins independent of the ranks). So one simulation with
normal draws calibrates the design for every continuous symmetric noise, and ties or zeros can only
lower W+ (a Walsh average of exactly 0 is not counted as positive), which makes it conservative.

The boundary at look k is the smallest count w_k with P(W+ >= w_k) <= a * (n_k / budget) ** RHO
under the exact null distribution of W+ for n_k pairs; `a` is the largest value whose simulated
chance of crossing any look's boundary is at most TARGET (one side). A look whose boundary exceeds
n(n+1)/2 cannot be crossed by any data, so it is dropped: the first look is the first n at which the
distribution-free test can reach its level. RHO > 0 spends less early (where few pairs decide
little) and more at the budget, which is where power is won.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

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


def simulate_wplus(looks: list[int], simulations: int, seed: int, chunk: int = 5000) -> np.ndarray:
    """W+ at each look for `simulations` null sequences: W+_n = #{i <= j <= n: d_i + d_j > 0}."""
    rng = np.random.default_rng(seed)
    out = np.empty((simulations, len(looks)), dtype=np.int32)
    for start in range(0, simulations, chunk):
        d = rng.standard_normal((min(chunk, simulations - start), looks[-1])).astype(np.float32)
        w = np.zeros(d.shape[0], dtype=np.int64)
        at = 0
        for n in range(1, looks[-1] + 1):
            w += ((d[:, :n] + d[:, n - 1 : n]) > 0).sum(axis=1)
            if n == looks[at]:
                out[start : start + d.shape[0], at] = w
                at += 1
    return out


def calibrate(budget: int, simulations: int, seed: int) -> dict[str, Any]:
    looks = SCHEDULES[budget]
    wplus = simulate_wplus(looks, simulations, seed)

    def bounds_for(a: float) -> np.ndarray:
        return np.array([bound(n, a * (n / budget) ** RHO) for n in looks])

    low, high = 1e-6, ALPHA / 2
    for _ in range(40):  # bisection on a log scale; the crossing rate is monotone in a
        mid = math.sqrt(low * high)
        if (wplus >= bounds_for(mid)).any(axis=1).mean() <= TARGET:
            low = mid
        else:
            high = mid
    bounds = bounds_for(low)
    crossed = float((wplus >= bounds).any(axis=1).mean())
    reachable = [k for k, n in enumerate(looks) if bounds[k] <= n * (n + 1) // 2]
    return {
        "looks": [looks[k] for k in reachable],
        "bounds": [int(bounds[k]) for k in reachable],
        "levels": [float(null_survival(looks[k])[bounds[k]]) for k in reachable],
        "false_improved": round(crossed, 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=400_000)
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    designs = {str(b): calibrate(b, args.simulations, args.seed + b) for b in SCHEDULES}
    head = {"generated_by": "python -m autoresearch_mcp.experiments.calibrate", "alpha": ALPHA,
            "target_one_sided": TARGET, "rho": RHO, "simulations": args.simulations, "seed": args.seed}
    lines = [f' "{k}": {json.dumps(v)},' for k, v in head.items()]
    lines += [' "designs": {'] + [f'  "{b}": {json.dumps(d)},' for b, d in designs.items()]
    lines[-1] = lines[-1].rstrip(",")
    CONSTANTS.write_text("{\n" + "\n".join(lines) + "\n }\n}\n")  # one line per design: readable diffs
    for budget, d in designs.items():
        print(f"budget {budget}: looks {d['looks']}, simulated false `improved` {d['false_improved']:.3%}")


if __name__ == "__main__":
    main()
