"""The sequential designs: where an experiment may decide and with which exact boundaries.

`python -m autoresearch_mcp.measure.calibrate` writes `design_constants.json` beside this file;
`stats.make_design` reads it, and the runner applies it (worker/decide.py).

Each design is a list of looks (pair counts at which `improved` or `regressed` may be decided) up to its
budget, then the looks of rounds that continue an undecided experiment up to twice the budget. Each side
(a false `improved`, a false `regressed`) gets a total level SIDE, under alpha/2; the looks' levels add up
to it (RESERVE of it kept for the continuation looks), and each look's level is shared by the two tests
that decide together (the signed-rank test gets RANK_SHARE, the sign test the rest; all of it to the
signed-rank test where the sign test could not reach its share at that look). Since the tests are exact
sign-flip tests under the randomization of each pair's order, the chance of a false decision over all
looks is at most the sum of the levels, whatever the noise and however the looks correlate: a union bound,
so no simulation is needed to set the boundaries. The first look gets just what makes its signed-rank test
able to decide at all (its smallest p-value is 2^-n); the rest is spent in proportion to (n / budget)^RHO,
RHO < 1 spending more early, where a clear change should end.

The equivalence bounds (no_change, a futility stop at EQ_LEVEL per side, which spends no alpha) and the
non-inferiority bounds (guards and the average run, GUARD_LEVEL) are tabulated for every pair count.
"""

from __future__ import annotations

import argparse
import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

CONSTANTS = Path(__file__).with_name("design_constants.json")
ALPHA = 0.02  # two-sided; each side (false `improved`, false `regressed`) gets at most half
SIDE = 0.009  # the sum of the looks' levels per side: under alpha/2, with room for what a benchmark shows
RESERVE = 0.1  # share of SIDE kept for rounds that continue an experiment beyond its budget
RHO = 0.8
RANK_SHARE = 0.75
EQ_LEVEL = 0.10  # one side of the equivalence interval: no_change is "within +-min effect at 80%"
GUARD_LEVEL = 0.025  # one side of a guard's non-inferiority bound (the usual 97.5% of a non-inferiority test)
MEAN_LEVEL = 0.001  # one side of the average run's interval, which an improvement needs above 0
MIN_PAIRS_IMPROVED = 30  # a slow path taken by 1 run in 5 shows in 30 runs with 99.9% probability
EARLY = [10, 14, 20, 30, 40]
SCHEDULES = {
    50: [*EARLY, 50],
    100: [*EARLY, 50, 60, 70, 80, 90, 100],
    200: [*EARLY, 50, 60, 70, 80, 90, 100, 120, 140, 160, 180, 200],
}
EXTENSIONS = 5  # continuation looks, evenly spaced up to twice the budget


@cache
def null_survival(n: int) -> tuple[float, ...]:
    """P(W+ >= w) for w = 0 .. n(n+1)/2 under the null, exactly (W+ = sum of the ranks with a + sign)."""
    total = n * (n + 1) // 2
    pmf = np.zeros(total + 1)
    pmf[0] = 1.0
    for rank in range(1, n + 1):
        shifted = np.zeros_like(pmf)
        shifted[rank:] = pmf[: total + 1 - rank]
        pmf = (pmf + shifted) / 2
    return tuple(float(x) for x in np.cumsum(pmf[::-1])[::-1])


def rank_bound(n: int, level: float) -> int:
    """Smallest w with P(W+ >= w) <= level; n(n+1)/2 + 1 when no w is small enough (the look cannot decide)."""
    survival = null_survival(n)
    return next((w for w, p in enumerate(survival) if p <= level), n * (n + 1) // 2 + 1)


def sign_bound(n: int, level: float) -> int:
    """Smallest s with P(S >= s) <= level for S ~ Binomial(n, 1/2); n + 1 when none is small enough."""
    survival = sps.binom.sf(np.arange(n + 1) - 1, n, 0.5)
    ok = np.nonzero(survival <= level)[0]
    return int(ok[0]) if ok.size else n + 1


def _schedule(budget: int) -> tuple[list[int], list[float]]:
    """The looks and their levels (one side, both tests; they add up to SIDE). The first look gets just what
    its signed-rank test needs to decide at all; the rest of the budget's share is spent in proportion to
    (n / budget)^RHO, and a look whose share could not reach its smallest p-value (2^-n) passes it on."""
    planned = SCHEDULES[budget]
    first = planned[0]
    looks, levels = [first], [2.0 ** -first * 1.02]
    rest = SIDE * (1 - RESERVE) - levels[0]
    start = (first / budget) ** RHO
    carried = 0.0
    for n in planned[1:]:
        share = rest * ((n / budget) ** RHO - start) / (1 - start) - (math.fsum(levels[1:]) + carried)
        if share < 2.0 ** -n * 1.02 and n != budget:
            continue  # passed on: this look could not decide anything with its share
        looks.append(n)
        levels.append(share)
    step = budget // EXTENSIONS
    looks += [budget + step * (i + 1) for i in range(EXTENSIONS)]
    levels += [SIDE * RESERVE / EXTENSIONS] * EXTENSIONS
    return looks, levels


def design(budget: int) -> dict[str, Any]:
    looks, levels = _schedule(budget)
    rank, sign = [], []
    for n, level in zip(looks, levels, strict=True):
        s = sign_bound(n, level * (1 - RANK_SHARE))
        if s > n:  # the sign test cannot decide here at its share: the signed-rank test gets the whole level
            rank.append(rank_bound(n, level))
        else:
            rank.append(rank_bound(n, level * RANK_SHARE))
        sign.append(s)
    limit = looks[-1]
    return {
        "budget": budget, "limit": limit, "looks": looks, "levels": levels, "rank_bounds": rank,
        "sign_bounds": sign, "eq_level": EQ_LEVEL, "guard_level": GUARD_LEVEL, "mean_level": MEAN_LEVEL,
        "eq_bounds": [rank_bound(n, EQ_LEVEL) if n else 1 for n in range(limit + 1)],
        "guard_bounds": [rank_bound(n, GUARD_LEVEL) if n else 1 for n in range(limit + 1)],
        "min_pairs_improved": MIN_PAIRS_IMPROVED,
        "union_bound": round(math.fsum(levels), 6),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    designs = {str(b): design(b) for b in SCHEDULES}
    head = {"generated_by": "python -m autoresearch_mcp.measure.calibrate", "rule": "randomized", "alpha": ALPHA,
            "side": SIDE, "reserve": RESERVE, "rho": RHO, "rank_share": RANK_SHARE}
    lines = [f' "{k}": {json.dumps(v)},' for k, v in head.items()]
    lines += [' "designs": {'] + [f'  "{b}": {json.dumps(d)},' for b, d in designs.items()]
    lines[-1] = lines[-1].rstrip(",")
    CONSTANTS.write_text("{\n" + "\n".join(lines) + "\n }\n}\n")  # one line per design: readable diffs
    for budget, d in designs.items():
        first = next(n for n, w in zip(d["looks"], d["rank_bounds"], strict=True) if w <= n * (n + 1) // 2)
        print(f"budget {budget}: looks {d['looks']}, first decision at {first} pairs, "
              f"false decisions per side at most {d['union_bound']:.4%}")


if __name__ == "__main__":
    main()
