"""Statistics by simulation, through the very functions the runner applies (core/decide.py `judge`, after
every pair, as with repeats='auto') and the verdict the server records (`metrics.analyze` on the stored
samples, for every 10th experiment; disagreements are counted).

Each experiment draws each pair's order with a coin, as the runner does; the noise models make the runs'
speeds (1 = nominal) in time order, whatever tree runs, and the candidate's effect multiplies its runs.
Values are printed with 2 decimals around 100 (the `round` models print integers around 48). An A/A
experiment that stops `inconclusive` or `noisy` is continued as the brief says (source='experiment'), its
pairs pooled, up to the design's limit: the false-winner rate is counted over that whole loop.

    python benchmarks/bench_stats.py [--trials 400] [--aa-trials 2000] [--models ln2,per3.5] [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoresearch_mcp.core import decide
from autoresearch_mcp.measure import metrics, stats

Speeds = Callable[[random.Random, int], list[float]]  # (rng, runs) -> a speed per run, in time order


@dataclass(frozen=True)
class Noise:
    name: str
    describe: str
    speeds: Speeds
    digits: int = 2
    scale: float = 100.0


def lognormal(sigma: float) -> Speeds:
    return lambda rng, runs: [math.exp(rng.gauss(0, sigma)) for _ in range(runs)]


def neighbour(rng: random.Random, runs: int) -> list[float]:
    return [(0.7 if rng.random() < 0.10 else 1.0) * math.exp(rng.gauss(0, 0.05)) for _ in range(runs)]


def bimodal(rng: random.Random, runs: int) -> list[float]:
    return [(1.0 if rng.random() < 0.5 else 0.85) * math.exp(rng.gauss(0, 0.002)) for _ in range(runs)]


def order_effect(rng: random.Random, runs: int) -> list[float]:
    return [(1.02 if t % 2 else 1.0) * math.exp(rng.gauss(0, 0.002)) for t in range(runs)]  # second run faster


def periodic(period: float, amplitude: float = 0.03) -> Speeds:
    def speeds(rng: random.Random, runs: int) -> list[float]:
        phase = rng.uniform(0, 2 * math.pi)
        return [math.exp(amplitude * math.sin(2 * math.pi * t / period + phase) + rng.gauss(0, 0.005))
                for t in range(runs)]
    return speeds


def ar1(rng: random.Random, runs: int) -> list[float]:
    x, out = rng.gauss(0, 0.03), []
    for _ in range(runs):
        x = 0.9 * x + rng.gauss(0, 0.03 * math.sqrt(1 - 0.81))
        out.append(math.exp(x))
    return out


def step(rng: random.Random, runs: int) -> list[float]:
    at = rng.randrange(runs)
    return [math.exp((0.1 if t > at else 0.0) + rng.gauss(0, 0.01)) for t in range(runs)]


def drift(rng: random.Random, runs: int) -> list[float]:
    walk, out = 0.0, []
    for _ in range(runs):
        walk = min(max(walk + rng.gauss(0, 0.004), -0.05), 0.05)
        out.append(math.exp(walk + rng.gauss(0, 0.02)))
    return out


def heavy(rng: random.Random, runs: int) -> list[float]:
    walk, out = 0.0, []
    for _ in range(runs):
        walk += rng.gauss(0, 0.002)
        t2 = rng.gauss(0, 1) / math.sqrt((rng.gauss(0, 1) ** 2 + rng.gauss(0, 1) ** 2) / 2)  # Student t, 2 df
        out.append(math.exp(walk + 0.01 * t2))
    return out


MODELS = {n.name: n for n in [
    Noise("ln0.5", "lognormal 0.5%", lognormal(0.005)),
    Noise("ln1", "lognormal 1%", lognormal(0.01)),
    Noise("ln2", "lognormal 2%", lognormal(0.02)),
    Noise("ln5", "lognormal 5%", lognormal(0.05)),
    Noise("ln7", "lognormal 7%", lognormal(0.07)),
    Noise("nn", "5% + 10% of runs 30% slower (noisy neighbour)", neighbour),
    Noise("bimodal", "bimodal machine (1.0 or 0.85 speed)", bimodal),
    Noise("order", "second run 2% faster, 0.2% noise", order_effect),
    *(Noise(f"per{p:g}", f"periodic, period {p:g} runs, 3% + 0.5% noise", periodic(p))
      for p in (2, 3, 3.5, 4, 5, 6, 8)),
    Noise("ar1", "AR(1) rho 0.9, 3%", ar1),
    Noise("step", "1% noise and a 10% step at a random run", step),
    Noise("drift", "2% + slow drift (random walk, up to 5%)", drift),
    Noise("heavy", "Student t (2 df) 1% + drift", heavy),
    Noise("round", "integers around 48, 1% noise", lognormal(0.01), digits=0, scale=48.0),
    Noise("exact", "deterministic, printed with 2 decimals", lognormal(0.0)),
]}
DESIGN = stats.make_design("auto")
PLAN = DESIGN.plan()


def experiment(noise: Noise, effect: float, seed: int, direction: str = "higher", tail: bool = False,
               check: bool = False) -> dict[str, Any]:
    """One experiment through the runner's rule, continued as the brief says until it ends or the design's
    limit. `tail`: 1 candidate run in 5 is 30% slower (its own slow path)."""
    rng = random.Random(seed)
    spec = decide.Spec("m", direction, DESIGN.min_effect)
    speeds = noise.speeds(rng, 2 * DESIGN.limit)
    samples: list[dict[str, Any]] = []
    n, end, rounds = 0, DESIGN.budget, 1
    while True:
        second = rng.random() < 0.5
        for position in (0, 1):
            role = "candidate" if (position == 1) == second else "baseline"
            speed = speeds[2 * n + position] * (math.exp(effect) if role == "candidate" else 1.0)
            if tail and role == "candidate" and rng.random() < 0.2:
                speed *= 0.7
            value = noise.scale * (speed if direction == "higher" else 1 / speed)
            printed = f"{value:.{noise.digits}f}"
            samples.append({"pair": n, "role": role, "position": position, "metrics": {"m": float(printed)},
                            "steps": {"m": decide.printed_step(printed)}})
        n += 1
        decision = decide.judge(samples, spec, PLAN, n=n, final_n=end)
        if decision.final and decision.verdict in ("improved", "regressed", "no_change"):
            break
        if decision.final or n == end:  # noisy or inconclusive: measure it further, pooled
            if n >= DESIGN.limit:
                break
            end, rounds = DESIGN.round_end(n), rounds + 1
    out = {"verdict": decision.verdict, "pairs": n, "rounds": rounds, "agree": True}
    if check:
        analysis = metrics.analyze({"status": "done", "samples": samples}, spec, DESIGN, end)
        out["agree"] = analysis["verdict"] == decision.verdict
    return out


def cell(args: tuple[str, float, int, int, str, bool]) -> dict[str, Any]:
    name, pct, trials, seed0, direction, tail = args
    noise = MODELS[name]
    results = [experiment(noise, math.log1p(pct / 100), seed0 + i, direction, tail, check=i % 10 == 0)
               for i in range(trials)]
    verdicts = [r["verdict"] for r in results]
    first = [r for r in results if r["rounds"] == 1]
    return {
        "model": name, "pct": pct, "trials": trials, "direction": direction, "tail": tail,
        "share": {v: verdicts.count(v) / trials for v in sorted(set(verdicts))},
        "first_round_improved": sum(r["verdict"] == "improved" for r in first) / trials,
        "median_pairs": statistics.median(r["pairs"] for r in results),
        "disagree": sum(not r["agree"] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400, help="experiments per cell with an effect")
    parser.add_argument("--aa-trials", type=int, default=2000, help="A/A experiments per model")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    names = args.models.split(",")
    cells: list[tuple[str, float, int, int, str, bool]] = []
    for i, name in enumerate(names):
        base = args.seed + 1_000_000 * i
        cells.append((name, 0.0, args.aa_trials, base, "higher", False))
        cells.append((name, 0.0, args.aa_trials // 2, base + 100_000, "lower", False))
        cells.append((name, 5.0, args.trials, base + 200_000, "higher", False))
        cells.append((name, 3.0, args.trials, base + 300_000, "higher", False))
        cells.append((name, 5.0, args.trials, base + 400_000, "higher", True))
    cells += [("exact", 0.5, 200, args.seed + 7, "higher", False), ("exact", -51.0, 50, args.seed + 8, "higher", False)]
    t0 = time.time()
    with multiprocessing.Pool(args.jobs) as pool:
        results = pool.map(cell, cells, chunksize=1)
    by = {(r["model"], r["pct"], r["direction"], r["tail"]): r for r in results}
    print(f"design: looks {DESIGN.looks}; improved from {DESIGN.min_pairs_improved} pairs; "
          f"union bound per side {math.fsum(DESIGN.levels):.3%}; {time.time() - t0:.0f} s\n")
    print("| noise (per run) | false `improved`, A/A (higher / lower) | A/A `no_change` | median pairs A/A | "
          "power +5% | median pairs +5% | power +3% | slow-tail candidate `improved` | runner vs server |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        aa, aal = by[(name, 0.0, "higher", False)], by[(name, 0.0, "lower", False)]
        p5, p3, tail = by[(name, 5.0, "higher", False)], by[(name, 3.0, "higher", False)], \
            by[(name, 5.0, "higher", True)]
        disagree = sum(r["disagree"] for r in (aa, aal, p5, p3, tail))
        share = {key: r["share"] for key, r in (("aa", aa), ("aal", aal), ("p5", p5), ("p3", p3), ("tail", tail))}
        print(f"| {MODELS[name].describe} | {share['aa'].get('improved', 0):.2%} / "
              f"{share['aal'].get('improved', 0):.2%} | {share['aa'].get('no_change', 0):.1%} | "
              f"{aa['median_pairs']:g} | {share['p5'].get('improved', 0):.1%} | {p5['median_pairs']:g} | "
              f"{share['p3'].get('improved', 0):.1%} | {share['tail'].get('improved', 0):.2%} | {disagree} differ |")
    for pct in (0.5, -51.0):
        r = by[("exact", pct, "higher", False)]
        print(f"\ndeterministic {pct:+g}%: {r['share']}, median pairs {r['median_pairs']:g}")


if __name__ == "__main__":
    main()
