"""Statistics by simulation, through the very functions the runner applies (worker/decide.py `judge`, after
every pair, as with repeats='auto') and the verdict the server records (`metrics.analyze` on the stored
samples, for every 10th experiment; disagreements are counted).

Each experiment draws each pair's order with a coin, as the runner does; the noise models make the runs'
speeds (1 = nominal) in time order, whatever tree runs, and the candidate's effect multiplies its runs.
Values are printed with 2 decimals around 100 (the `round` models print integers around 48). An A/A
experiment that stops `inconclusive` or `noisy` is continued as the brief says (source='experiment'), its
pairs pooled, up to the design's limit: the false-winner rate is counted over that whole loop.

    python benchmarks/bench_stats.py [--trials 400] [--aa-trials 2000] [--models ln2,per3.5] [--jobs 2]
    python benchmarks/bench_stats.py --shared [--rule after|before|both] [--trials 100] [--models g15,burst]

`--shared` runs focus experiments as the llama.cpp recipe judges them (a focus metric, a control, tg_tps and
pp_tps as end-to-end guards) at a shared machine's noise: candidates with an op win and no end-to-end change,
one that slows the program end to end by 2% or 5%, and a no-op; `--rule before` judges them by the earlier
rule (the end-to-end guards at their tolerances, no_change at the minimum effect only).
"""

from __future__ import annotations

import argparse
import inspect
import math
import multiprocessing
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoresearch_mcp.measure import metrics, stats
from autoresearch_mcp.worker import decide, outcomes

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
        analysis = metrics.analyze(outcomes.read(outcomes.Experiment, {"samples": samples}), spec, DESIGN, end)
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


# --- a shared machine: focus experiments with end-to-end guards ---------------------------------------

JUDGE_PARAMS = inspect.signature(decide.judge).parameters  # the rule before issue 30 takes no start_n


def shared_spec(after: bool) -> decide.Spec:
    """The llama.cpp recipe's judging: the focus (time, lower is better), a control, and tg_tps / pp_tps as
    end-to-end objectives with the recipe's tolerances (2% and 1.5%)."""
    extra: dict[str, Any] = ({"guard_ceiling_pct": 5.0, "adaptive_equivalence": True}
                             if after and "guard_ceiling_pct" in decide.Spec.__dataclass_fields__ else {})
    return decide.Spec("tg_tps", "higher", 0.01, ["tg_tps", "pp_tps"], {}, ["RMS_NORM"], "lower", 0.02,
                       {"tg_tps": 2.0, "pp_tps": 1.5}, 2.0, **extra)


def gaussian_runs(spread: float) -> Speeds:
    """Per-run noise such that a pair's log-ratio spreads by `spread`."""
    return lognormal(spread / math.sqrt(2))


def heavy_runs(spread: float) -> Speeds:
    """Student t (3 df) per run, scaled so that a pair's log-ratio spreads by `spread` (its sd)."""
    scale = spread / math.sqrt(2) / math.sqrt(3.0)  # t(3) has variance 3

    def speeds(rng: random.Random, runs: int) -> list[float]:
        out = []
        for _ in range(runs):
            chi = sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3
            out.append(math.exp(scale * rng.gauss(0, 1) / math.sqrt(chi)))
        return out
    return speeds


def bursty(rng: random.Random, runs: int) -> list[float]:
    """A bursty neighbour: 2% noise, and about 30% of runs 8-25% slower, in bursts of 2-4 runs."""
    out: list[float] = []
    while len(out) < runs:
        if rng.random() < 1 / 7:
            out += [math.exp(rng.gauss(0, 0.02)) / (1 + rng.uniform(0.08, 0.25)) for _ in range(rng.randint(2, 4))]
        else:
            out.append(math.exp(rng.gauss(0, 0.02)))
    return out[:runs]


SHARED = {
    "g10": ("per-pair spread 10%, Gaussian", gaussian_runs(0.10)),
    "g15": ("per-pair spread 15%, Gaussian", gaussian_runs(0.15)),
    "g25": ("per-pair spread 25%, Gaussian", gaussian_runs(0.25)),
    "t15": ("per-pair spread 15%, Student t 3 df", heavy_runs(0.15)),
    "burst": ("bursty neighbour (30% of runs 8-25% slower, bursts of 2-4)", bursty),
}
METRICS = ("focus.RMS_NORM", "control.ROPE", "tg_tps", "pp_tps")
# (focus, tg_tps, pp_tps change) of each candidate, in % of the metric's own value (time for the focus)
CANDIDATES = {
    "no-op": (0.0, 0.0, 0.0),
    "op -7%, e2e 0%": (-7.0, 0.0, 0.0),
    "op -10%, e2e 0%": (-10.0, 0.0, 0.0),
    "op -15%, e2e 0%": (-15.0, 0.0, 0.0),
    "op -10%, e2e -2%": (-10.0, -2.0, -2.0),
    "op -10%, e2e -5%": (-10.0, -5.0, -5.0),
    "op -10%, tg_tps -5%, pp_tps 0%": (-10.0, -5.0, 0.0),
}


def shared_experiment(model: str, candidate: str, seed: int, after: bool) -> dict[str, Any]:
    """One focus experiment on a shared machine, judged after every pair as the runner does and continued as the
    brief says (more pairs, pooled) until it decides or the design's limit. Every metric of a run draws its own
    noise from the model (the neighbour's bursts hit the whole run)."""
    rng = random.Random(seed)
    spec = shared_spec(after)
    op, tg, pp = CANDIDATES[candidate]
    noise = SHARED[model][1]
    speeds = {m: noise(rng, 2 * DESIGN.limit) for m in METRICS}
    if model == "burst":  # one neighbour: its bursts slow every metric of the run alike
        shared_speeds = speeds["tg_tps"]
        speeds = {m: shared_speeds for m in METRICS}
    effect = {"focus.RMS_NORM": 1 / (1 + op / 100), "control.ROPE": 1.0, "tg_tps": 1 + tg / 100,
              "pp_tps": 1 + pp / 100}  # speed factors: a faster op takes less time
    samples: list[dict[str, Any]] = []
    n, start, end, rounds = 0, 0, DESIGN.budget, 1
    while True:
        second = rng.random() < 0.5
        for position in (0, 1):
            role = "candidate" if (position == 1) == second else "baseline"
            values, steps = {}, {}
            for m in METRICS:
                speed = speeds[m][2 * n + position] * (effect[m] if role == "candidate" else 1.0)
                value = 100.0 / speed if m.startswith(("focus.", "control.")) else 100.0 * speed
                printed = f"{value:.2f}"
                values[m], steps[m] = float(printed), decide.printed_step(printed)
            samples.append({"pair": n, "role": role, "position": position, "metrics": values, "steps": steps})
        n += 1
        more = {"start_n": start} if "start_n" in JUDGE_PARAMS else {}
        decision = decide.judge(samples, spec, PLAN, n=n, final_n=end, **more)
        if decision.final and decision.verdict in ("improved", "regressed", "no_change"):
            break
        if decision.final or n == end:  # noisy or inconclusive: measure it further, pooled
            if n >= DESIGN.limit:
                break
            start, end, rounds = n, DESIGN.round_end(n), rounds + 1
    return {"verdict": decision.verdict, "pairs": n, "rounds": rounds,
            "first_round": decision.verdict if rounds == 1 else None}


def shared_cell(args: tuple[str, str, int, int, bool]) -> dict[str, Any]:
    model, candidate, trials, seed0, after = args
    results = [shared_experiment(model, candidate, seed0 + i, after) for i in range(trials)]
    verdicts = [r["verdict"] for r in results]
    return {"model": model, "candidate": candidate, "after": after, "trials": trials,
            "share": {v: verdicts.count(v) / trials for v in sorted(set(verdicts))},
            "median_pairs": statistics.median(r["pairs"] for r in results),
            "median_rounds": statistics.median(r["rounds"] for r in results),
            "improved_by_100": sum(r["verdict"] == "improved" and r["pairs"] <= 100 for r in results) / trials}


def shared_main(args: argparse.Namespace) -> None:
    models = args.models.split(",") if args.models != ",".join(MODELS) else list(SHARED)
    candidates = args.candidates.split(";") if args.candidates else list(CANDIDATES)
    cells = [(m, c, args.trials, args.seed + 1000 * i + 100_000 * j, after)
             for i, m in enumerate(models) for j, c in enumerate(candidates) for after in args.rules]
    t0 = time.time()
    print(f"shared machine: {args.trials} focus experiments per cell (rows as they finish)\n")
    print("| noise | candidate | rule | improved (committable) | improved within 100 pairs | no_change | regressed | "
          "inconclusive / noisy at the limit | median pairs | median rounds |")
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    with multiprocessing.Pool(args.jobs) as pool:
        for r in pool.imap_unordered(shared_cell, cells):
            share = r["share"]
            print(f"| {SHARED[r['model']][0]} | {r['candidate']} | {'after' if r['after'] else 'before'} | "
                  f"{share.get('improved', 0):.1%} | {r['improved_by_100']:.1%} | {share.get('no_change', 0):.1%} | "
                  f"{share.get('regressed', 0):.1%} | "
                  f"{share.get('inconclusive', 0):.1%} / {share.get('noisy', 0):.1%} | {r['median_pairs']:g} | "
                  f"{r['median_rounds']:g} |", flush=True)
    print(f"\n{time.time() - t0:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400, help="experiments per cell with an effect")
    parser.add_argument("--aa-trials", type=int, default=2000, help="A/A experiments per model")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--shared", action="store_true",
                        help="focus experiments on a shared machine (per-pair spread 10-25%%, a bursty neighbour)")
    parser.add_argument("--candidates", default="", help="--shared: the candidates to run, separated by ';'")
    parser.add_argument("--rule", choices=("after", "before", "both"), default="after",
                        help="--shared: judge by the rule of issue 30, the one before it, or both")
    args = parser.parse_args()
    if args.shared:
        args.rules = {"after": [True], "before": [False], "both": [False, True]}[args.rule]
        shared_main(args)
        return
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
