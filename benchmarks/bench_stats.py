"""Statistics by simulation: false winners, power, `noisy` share and pairs used, under noise models that
real machines show, for the current design and the earlier one, through the real decision code.

The current design runs exactly as the runner does: pairs in balanced AB/BA blocks
(`runner.candidate_first`), the runner's rule at each look (`runner.look_at` on `runner.log_ratios`
with the resolution floor), and the verdict the server records (`stats.paired`, recomputed for every
10th experiment; disagreements with the runner's stop are counted). Values are printed to 2 decimals
around 100, as a benchmark would.
The re-measure loop is the documented one: an experiment that stops `inconclusive` or `noisy` before
its budget is continued (`launch_experiment(source="experiment")`), its pairs pooled under one design.

The earlier design (kept here for comparison): pairs in independent random order, a paired t test with
Lan-DeMets (Pocock) alpha spending at 5, 8, 12, 16, 20, 25, 30, 40, 50 pairs, `noisy` when the
baseline's robust CV exceeds 10%; its loop relaunched an undecided candidate with the suggested
repeats (a fresh alpha each time, up to two relaunches).

    python benchmarks/bench_stats.py [--trials 1000] [--aa-trials 4000] [--models ln5,nn]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from scipy import stats as sps

from autoresearch_mcp.core import runner
from autoresearch_mcp.measure import stats


@dataclass(frozen=True)
class Noise:
    """One noise model: `speed(rng, position, state)` gives a run's speed factor (1 = nominal)."""

    name: str
    describe: str
    speed: Callable[[random.Random, int, list[float]], float]


def lognormal(sigma: float) -> Callable[[random.Random, int, list[float]], float]:
    return lambda rng, _pos, _state: math.exp(rng.gauss(0, sigma))


def neighbour(rng: random.Random, _pos: int, _state: list[float]) -> float:
    hit = 0.7 if rng.random() < 0.10 else 1.0  # 10% of runs share the machine with a noisy neighbour
    return hit * math.exp(rng.gauss(0, 0.05))


def bimodal(rng: random.Random, _pos: int, _state: list[float]) -> float:
    return (1.0 if rng.random() < 0.5 else 0.85) * math.exp(rng.gauss(0, 0.002))


def order_effect(rng: random.Random, pos: int, _state: list[float]) -> float:
    return (1.02 if pos == 1 else 1.0) * math.exp(rng.gauss(0, 0.002))  # the second run is 2% faster


def drift(rng: random.Random, _pos: int, state: list[float]) -> float:
    state[0] = max(-0.05, min(0.05, state[0] + rng.gauss(0, 0.003)))  # a slow random walk of the machine
    return math.exp(state[0] + rng.gauss(0, 0.02))


MODELS = [
    Noise("ln2", "lognormal 2%", lognormal(0.02)),
    Noise("ln5", "lognormal 5%", lognormal(0.05)),
    Noise("ln7", "lognormal 7%", lognormal(0.07)),
    Noise("nn", "5% + 10% of runs -30% (noisy neighbour)", neighbour),
    Noise("bimodal", "bimodal machine (1.0 or 0.85 speed)", bimodal),
    Noise("order", "second run 2% faster, 0.2% noise", order_effect),
    Noise("drift", "2% + slow drift (random walk, up to 5%)", drift),
]


def value(speed: float, effect: float, direction: str) -> float:
    """A printed metric value: throughput (higher) or time (lower) of a run at `speed`, the candidate
    being `effect` better."""
    perf = speed * (1 + effect)
    return round(100.0 * perf if direction == "higher" else 100.0 / perf, 2)


@dataclass
class Result:
    verdict: str
    pairs: int
    runner_agrees: bool = True


# --- the current design, through the runner's and the server's code ---------------------------------


def current(model: Noise, effect: float, direction: str, design: stats.Design, rng: random.Random,
            remeasure: bool, check_server: bool = True) -> Result:
    state = [0.0]
    flips: dict[int, bool] = {}
    base: list[float] = []
    cand: list[float] = []
    looks = {n: k for k, n in enumerate(design.looks)}
    job = design.job()
    stops = design.stops
    while True:
        verdict = "inconclusive"
        for i in range(len(base), stops[-1]):
            cand_first = runner.candidate_first(rng, i, flips)
            for pos in range(2):
                v = value(model.speed(rng, pos, state), effect if (pos == 0) == cand_first else 0.0, direction)
                (cand if (pos == 0) == cand_first else base).append(v)
            if i + 1 in stops:
                pairs = list(zip(base, cand, strict=True))
                d = runner.log_ratios(pairs, direction)
                assert d is not None
                verdict = runner.look_at(d, looks[i + 1], job, runner.resolution_floor(pairs)).verdict
                if verdict != "inconclusive":
                    break
        agrees = not check_server or stats.paired(base, cand, direction, design).verdict == verdict
        if remeasure and verdict in ("inconclusive", "noisy") and len(base) < design.budget:
            stops = design.round_stops(len(base), "auto")
            continue
        return Result(verdict, len(base), agrees)


# --- the earlier design ------------------------------------------------------------------------------

OLD_LOOKS = (5, 8, 12, 16, 20, 25, 30, 40, 50)
OLD_ALPHA, OLD_MIN_EFFECT, OLD_NOISE_LIMIT = 0.02, 0.01, 0.10


def old_alphas(looks: list[int]) -> list[float]:
    spent = [OLD_ALPHA * math.log1p((math.e - 1) * n / looks[-1]) for n in looks]
    return [b - a for a, b in zip([0.0, *spent[:-1]], spent, strict=True)]


OLD_AUTO = list(OLD_LOOKS)
OLD_AUTO_CRIT = [float(sps.t.ppf(1 - a / 2, n - 1)) for a, n in zip(old_alphas(OLD_AUTO), OLD_AUTO, strict=True)]


def robust_cv(samples: list[float]) -> float:
    med = statistics.median(samples)
    return 1.4826 * statistics.median(abs(x - med) for x in samples) / abs(med)


def old_once(model: Noise, effect: float, direction: str, rng: random.Random, repeats: int | None
             ) -> tuple[str, int, int | None]:
    """One launch of the earlier design: (verdict, pairs, pairs_needed)."""
    looks, crit = (OLD_AUTO, OLD_AUTO_CRIT) if repeats is None else (
        [repeats], [float(sps.t.ppf(1 - OLD_ALPHA / 2, repeats - 1))])
    state = [0.0]
    base: list[float] = []
    cand: list[float] = []
    sign = 1.0 if direction == "higher" else -1.0
    margin = math.log1p(OLD_MIN_EFFECT)
    for i in range(looks[-1]):
        cand_first = rng.random() < 0.5
        for pos in range(2):
            v = value(model.speed(rng, pos, state), effect if (pos == 0) == cand_first else 0.0, direction)
            (cand if (pos == 0) == cand_first else base).append(v)
        if i + 1 not in looks:
            continue
        k = looks.index(i + 1)
        if robust_cv(base) > OLD_NOISE_LIMIT:
            return "noisy", i + 1, None
        d = [sign * math.log(c / b) for b, c in zip(base, cand, strict=True)]
        mean, sd = statistics.fmean(d), statistics.stdev(d)
        half = crit[k] * sd / math.sqrt(len(d))
        verdict = runner.classify(mean - half, mean + half, mean, margin)
        if verdict != "inconclusive" or i + 1 == looks[-1]:
            needed = None
            if verdict == "inconclusive" and sd > 0:
                eff = abs(mean)
                target = eff if eff >= margin else max(margin - eff, margin / 4)
                needed = max(len(d) + 1, math.ceil((sps.norm.ppf(1 - OLD_ALPHA / 2) * sd / target) ** 2))
            return verdict, len(d), needed
    raise AssertionError("unreachable")


def old(model: Noise, effect: float, direction: str, rng: random.Random, remeasure: bool) -> Result:
    verdict, pairs, needed = old_once(model, effect, direction, rng, None)
    total = pairs
    relaunches = 0
    while remeasure and relaunches < 2 and verdict in ("inconclusive", "noisy"):
        repeats = None if verdict == "noisy" else min(200, needed or 50)
        verdict, pairs, needed = old_once(model, effect, direction, rng, repeats)
        total += pairs
        relaunches += 1
    return Result(verdict, total)


# --- the table ---------------------------------------------------------------------------------------


def share(results: list[Result], verdict: str) -> float:
    return sum(r.verdict == verdict for r in results) / len(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000, help="experiments per cell with an effect")
    parser.add_argument("--aa-trials", type=int, default=4000, help="experiments per A/A cell (false winners)")
    parser.add_argument("--models", default=",".join(m.name for m in MODELS))
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    design = stats.make_design("auto")
    wanted = args.models.split(",")
    print(f"current design: looks {design.looks}, budget {design.budget} pairs, alpha {design.alpha} "
          f"({design.alpha / 2:.0%} per side), minimum effect {design.min_effect:.0%}")
    print(f"earlier design: looks {list(OLD_LOOKS)}, t test, Pocock spending, noise gate {OLD_NOISE_LIMIT:.0%}")
    print(f"{args.aa_trials} A/A experiments and {args.trials} per effect, in each cell\n")
    header = (f"{'noise':<42} {'dir':<6} {'design':<8} {'false imp':>9} {'loop':>6} {'pow +3%':>8} "
              f"{'pow +5%':>8} {'noisy +5%':>9} {'noisy A/A':>9} {'pairs +5%':>9} {'pairs A/A':>9}")
    print(header)
    print("-" * len(header))
    started = time.monotonic()
    disagreements = 0
    for model in (m for m in MODELS if m.name in wanted):
        for direction in ("higher", "lower"):
            for name, run in (("current", current), ("earlier", old)):
                rng = random.Random(f"{args.seed}-{model.name}-{direction}-{name}")

                def cell(effect: float, trials: int, remeasure: bool = False, run: Callable[..., Result] = run,
                         rng: random.Random = rng, model: Noise = model, direction: str = direction) -> list[Result]:
                    if run is current:  # the server's verdict is recomputed for every 10th experiment
                        return [current(model, effect, direction, design, rng, remeasure, t % 10 == 0)
                                for t in range(trials)]
                    return [old(model, effect, direction, rng, remeasure) for _ in range(trials)]

                aa = cell(0.0, args.aa_trials)
                loop = cell(0.0, args.aa_trials, remeasure=True)
                p3 = cell(0.03, args.trials)
                p5 = cell(0.05, args.trials)
                disagreements += sum(not r.runner_agrees for r in aa + loop + p3 + p5)
                print(f"{model.describe:<42} {direction:<6} {name:<8} {share(aa, 'improved'):>9.2%} "
                      f"{share(loop, 'improved'):>6.2%} {share(p3, 'improved'):>8.1%} {share(p5, 'improved'):>8.1%} "
                      f"{share(p5, 'noisy'):>9.1%} {share(aa, 'noisy'):>9.1%} "
                      f"{statistics.median(r.pairs for r in p5):>9.0f} {statistics.median(r.pairs for r in aa):>9.0f}",
                      flush=True)
    print("\nfalse imp: A/A experiments called `improved`; loop: the same through the re-measure loop; pow: "
          "`improved` at a true +3% / +5%; pairs: median pairs per experiment.")
    print(f"runner stop vs server verdict disagreements: {disagreements}; {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
