"""From a runner outcome (raw samples) to per-metric comparisons and the experiment's verdict.

Everything here is recomputed from the stored samples, so a report can redo it at any time, and with the
runner's own rule (worker/decide.py `judge`), so the server always reaches what the runner decided.

Several metrics can be judged at once. Objectives (default: the primary metric) are what a winner may
improve; guards are metrics it must not regress beyond their tolerance. With a focus (what the change acts
on), the focus metrics the benchmark prints (`focus.*`) are what must improve, beyond what the untouched
controls (`control.*`) moved, and every objective becomes a guard with its own tolerance.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from autoresearch_mcp.errors import StateError
from autoresearch_mcp.measure import legacy, power, stats, summary
from autoresearch_mcp.store.records import LaunchRecord
from autoresearch_mcp.worker import decide, metricparse, outcomes

MEASURED = "measured"  # the look of a metric that is measured but not judged (it gets no verdict)


def spec_of(launch: LaunchRecord) -> decide.Spec:
    """What a launch is judged on, as it recorded it; older launches recorded the fields one by one."""
    # never a default direction: judging "higher is better" by accident would flip a verdict
    if not launch.metric or not launch.carries("direction"):
        raise StateError(f"the launch record of experiment {launch.experiment_id} names no metric or no "
                         "direction, so its samples cannot be judged; the ledger was not written by this "
                         "server (or was edited)")
    if launch.judging:
        return decide.Spec.from_dict(launch.judging)
    min_effect = float(launch.design.get("min_effect", 0.01))
    return decide.Spec(launch.metric, launch.direction, min_effect, list(launch.objectives), dict(launch.guards))


def screen(outcome: outcomes.Experiment) -> list[tuple[str, str]]:
    """Drop every sample value the runner's value rule refuses, and say which (metric, why): the same
    rule as the runner's, applied again here before any arithmetic, since what arrives is not trusted."""
    refused: list[tuple[str, str]] = []
    for s in [*outcome.warmup, *outcome.samples]:
        for name, value in list(s.metrics.items()):
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            why = metricparse.check_value(float(value)) if number else "is not a number"
            if why:
                del s.metrics[name]
                refused.append((name, f"{s.role} run {s.pair}: {name}={repr(value)[:40]} {why}"))
    return refused


def analyze(outcome: outcomes.Experiment, spec: decide.Spec, design: stats.AnyDesign,
            final_n: int | None = None, start_n: int = 0) -> dict[str, Any]:
    """Comparisons of every metric, each judged metric's judgement, the verdict and the noise the lead metric's
    pairs show. A run that is not `done`/`checks_failed` has no verdict; a sample without a judged metric (or with
    an unusable value, dropped from `outcome`, which then says why) makes the experiment `invalid`, never a 0.
    `final_n`: the last pair count of the round of `outcome` (where `noisy` is judged); `start_n`: its start."""
    status = outcome.status
    refused = screen(outcome)
    if isinstance(design, legacy.Design):
        return legacy.analyze(outcome, spec.metric, spec.direction, spec.objective_names, spec.guards, design,
                              refused)
    judged_names = set(spec.required())
    if any(name in judged_names or name.startswith(decide.FOCUS_PREFIX) for name, _ in refused) and status in (
            "done", "checks_failed"):
        outcome.stop_reason = "invalid"
        outcome.error = "; ".join(why for _, why in refused[:5])
    samples = [s.to_dict() for s in outcome.samples]
    plan = design.plan()
    decision = decide.judge(samples, spec, plan, final_n=final_n or design.budget, start_n=start_n)
    names = sorted({n for s in samples for n in s.get("metrics", {})})
    comparisons: dict[str, Any] = {}
    for name in names:
        p = decide.pairs_of(samples, name)
        judgement = decision.metrics.get(name)
        n = min(decision.n, len(p))
        if judgement is not None:
            rule = judgement.rule
            cmp = stats.comparison(p, n, judgement, rule, design, plan)
        else:
            # measured, not judged: no direction is invented for it (its figures are the metric's own relative
            # change whichever way is better), no verdict, and its interval is the design's decision level
            rule = decide.MetricRule("", "higher", math.log1p(spec.min_effect))
            look = decide.metric_look(p, n, rule.direction, plan)
            cmp = stats.comparison(p, n, decide.Judgement(look, rule, MEASURED, None), rule, design, plan)
        comparisons[name] = {
            "baseline": summary.summarize(p.base), "candidate": summary.summarize(p.cand),
            "delta_pct": cmp.delta_pct, "ci_low_pct": cmp.ci_low_pct, "ci_high_pct": cmp.ci_high_pct,
            "ci_level": cmp.ci_level, "p_value": cmp.p_value, "n_pairs": cmp.n_pairs,
            "verdict": None if judgement is None else "inconclusive" if cmp.verdict == "undecided" else cmp.verdict,
            "pairs_needed": cmp.pairs_needed, "noise_pct": cmp.noise_pct, "resolvable_pct": cmp.resolvable_pct,
            "direction": rule.direction if judgement is not None else spec.shown_directions.get(name),
            "role": rule.role or None,
            "tolerance_pct": None if rule.tolerance is None else round(math.expm1(rule.tolerance) * 100, 4),
            "judgement": judgement.judgement if judgement is not None else None, "log_se": cmp.log_se,
            "mean_pct": cmp.mean_pct, "mean_low_pct": cmp.mean_low_pct, "mean_high_pct": cmp.mean_high_pct,
            "tail_pct": cmp.tail_pct, "equivalence_pct": cmp.equivalence_pct, "note": cmp.note,
            "measure": measure_of(name, spec),
            **claim_fields(name, judgement, plan),
        }
    lead_name = next((n for n, j in decision.metrics.items() if j.rule.role == "focus"), spec.metric)
    lead = comparisons.get(lead_name)
    verdict: str | None
    if status not in ("done", "checks_failed") or (status == "checks_failed" and not samples):
        verdict = None  # not measured: its checks failed before any pair ran
    elif outcome.stop_reason == "invalid" or decision.verdict == "invalid" or lead is None:
        verdict = "invalid"
    else:
        verdict = decision.verdict
    noise = lead.get("noise_pct") if lead else None
    notes = [n for n in (lead.get("note") if lead and verdict in ("noisy", "inconclusive") else None,
                         shape_note(samples, lead_name, spec)) if n]
    pairs_needed = lead.get("pairs_needed") if lead else None
    # what would show each claim not shown yet: a blocking guard's margin, a session total's tolerance
    to_hold = {name: power.pairs_to_hold(j.look, j.claim.margin, plan) or 0 for name, j in decision.metrics.items()
               if j.claim is not None and j.claim.judgement == "undecided"}
    if verdict == "inconclusive" and decision.won and decision.blocking:
        pairs_needed = max((to_hold.get(n) or comparisons[n]["pairs_needed"] or 0 for n in decision.blocking
                            if n in comparisons), default=0) or pairs_needed
    elif verdict == "inconclusive" and spec.prove_tolerance and to_hold:
        pairs_needed = max(max(to_hold.values()), pairs_needed or 0) or pairs_needed
    problems = [why for _, why in refused[:20]] + decision.problems
    claims = [c["claim"] for c in comparisons.values() if c.get("claim")]
    if lead is not None and lead_name.startswith(decide.FOCUS_PREFIX) and lead.get("delta_pct") is not None:
        claims.insert(0, lead_claim(lead_name, lead))
    return {"metrics": comparisons, "verdict": verdict, "noise_cv": None if noise is None else noise / 100,
            "claims": claims,
            "noise_note": "; ".join(notes) or None, "problems": problems, "pairs_needed": pairs_needed,
            "won": decision.won, "blocking": decision.blocking, "disagreement": decision.disagreement,
            "layout_pct": None if decision.layout is None or not math.isfinite(decision.layout)
            else round(math.expm1(decision.layout) * 100, 4)}


def lead_claim(name: str, cmp: dict[str, Any]) -> str:
    """`focus.RMS_NORM -10.1% [98% CI -14.8%, -7.5%]`: what a focus experiment showed where the change acts."""
    level = cmp.get("ci_level")
    shown = f"{round(level * 100):g}% CI " if level else ""
    if cmp.get("ci_low_pct") is None or cmp.get("ci_high_pct") is None:
        return f"{name} {cmp['delta_pct']:+.1f}% (no interval)"
    return f"{name} {cmp['delta_pct']:+.1f}% [{shown}{cmp['ci_low_pct']:+.1f}%, {cmp['ci_high_pct']:+.1f}%]"


def claim_fields(name: str, judgement: decide.Judgement | None, plan: decide.Plan) -> dict[str, Any]:
    """A guard's (or a session total objective's) claim as numbers and one line: the worst change its one-sided
    bounds leave (`bound_pct`, + is better), what it was judged against (`margin_pct`), at `claim_level`."""
    claim = judgement.claim if judgement is not None else None
    if claim is None or judgement is None:
        return {}
    rule = judgement.rule
    bound = None if claim.bound is None else round(math.expm1(claim.bound) * 100, 4)
    margin = round(math.expm1(claim.margin) * 100, 4)
    level = f"{(1 - claim.level) * 100:g}%"
    worst = f"no worse than {bound:+.1f}%" if bound is not None else "no bound yet"
    look = judgement.look
    if rule.role != "guard":  # the session's total: the objective's real tolerance
        tol = f"{margin:g}%"
        if claim.judgement == "held":
            text = f"session: {name} within {tol} ({level}) at {claim.n} pairs"
        elif claim.judgement == "regressed":
            text = f"session: {name} regressed beyond {tol} at {claim.n} pairs"
        else:
            more = power.pairs_to_hold(look, claim.margin, plan)
            text = (f"session: {name} not yet shown within {tol} at {claim.n} pairs ({worst}, {level})"
                    + (f"; about {more} pairs in all would show it" if more else ""))
    elif claim.judgement == "held":
        scope = "this experiment" if rule.ceiling is not None else f"within {margin:g}%"
        text = f"{name} {worst} ({level}, {scope})"
    elif claim.judgement == "regressed":
        tolerance = math.expm1(rule.tolerance or 0) * 100
        if look.estimate is not None and look.low is not None and look.high is not None:
            # what was shown: an interval wholly on the slower side, with the estimate past the tolerance (the
            # interval itself need not lie past it)
            text = (f"{name} regressed: slower by {-math.expm1(look.high) * 100:.2f}% to "
                    f"{-math.expm1(look.low) * 100:.2f}% (its ci_low_pct..ci_high_pct), "
                    f"estimate {math.expm1(look.estimate) * 100:+.1f}% "
                    f"past its tolerance of {tolerance:g}%")
        else:
            text = f"{name} regressed (a value that is not a positive number)"
    else:
        more = power.pairs_to_hold(look, claim.margin, plan)
        text = (f"{name} not shown within {margin:.1f}% ({worst}, {level})"
                + (f"; about {more} pairs in all would show it" if more else ""))
    return {"bound_pct": bound, "margin_pct": margin, "claim_level": round(1 - claim.level, 4), "claim": text}


def shape_note(samples: list[dict[str, Any]], metric: str, spec: decide.Spec) -> str | None:
    """Names a candidate (or a machine) whose runs are tail-heavy or bimodal, which a median alone would hide."""
    p = decide.pairs_of(samples, metric)
    if len(p) < 8:
        return None
    direction = spec.focus_direction if metric.startswith(decide.FOCUS_PREFIX) else spec.direction
    sign = 1.0 if direction == "higher" else -1.0
    notes = []
    for side, values in (("candidate", p.cand), ("baseline", p.base)):
        logs = np.sort(sign * np.log(np.asarray(values, dtype=float)))
        k = max(1, math.ceil(0.1 * logs.size))
        worst = float(np.median(logs) - logs[:k].mean())  # how far its worst 10% fall below its typical run
        spread = float(np.subtract(*np.percentile(logs, [75, 25]))) or 1e-12
        gaps = np.diff(logs)
        cut = int(np.argmax(gaps))
        share = (cut + 1) / logs.size
        if gaps[cut] > 4 * spread and 0.15 <= share <= 0.85:
            notes.append(f"the {side}'s runs fall at two speeds {math.expm1(float(gaps[cut])) * 100:.0f}% apart "
                         f"({share:.0%} at the slower)")
        elif worst > max(6 * spread, 0.02):
            notes.append(f"the {side} has a slow tail: its worst 10% of runs are {math.expm1(worst) * 100:.0f}% "
                         "slower than its typical run")
    return "; ".join(notes) or None


def measure_of(name: str, spec: decide.Spec) -> str:
    """How a metric of the samples was measured, as a result says it."""
    k = max(1, int(spec.processes_per_sample))
    per = f", median of {k} processes a sample" if k > 1 else ", one process a sample"
    if name.startswith(decide.HARNESS_PREFIX) and name.endswith(decide.PER_OP):
        return (measure_of(name[:-len(decide.PER_OP)], spec).split(",", 1)[0]
                + f" per unit of the work the run printed (METRIC {decide.WORK}), taken by the harness from outside"
                + per)
    if spec.pairing == decide.TURNS:
        turns = (f", the pair's two runs at once in turns of about {decide.TURN_MS} ms (each stopped while the other "
                 "runs)")
        if name.endswith(decide.WALL_SUFFIX):
            return ("wall clock as the bench printed it, not judged: it counts the other side's turns" + turns
                    + per)
        if name == decide.HARNESS_WALL:
            return ("wall time of the whole bench run's own turns (the other side's left out), taken by the harness "
                    "from outside" + turns + per)
        if spec.turn_clock == "wall" and name in spec.required() and spec.timed(name):
            return ("its figure over the wall time of its own turns, as the harness took them (the runs keep several "
                    "CPUs busy: turn_clock 'wall')" + turns + per)
        if name in spec.required() or name.startswith((decide.FOCUS_PREFIX, decide.CONTROL_PREFIX)):
            return (f"CPU time (the bench's {name + decide.CPU_SUFFIX}, where it printed one; else, for a time or a "
                    "rate, its figure over the wall time of its own turns, as the harness took them)" + turns + per)
    if name == decide.HARNESS_CPU:
        return "CPU time (user + system) of the whole bench run's processes, taken by the harness from outside" + per
    if name == decide.HARNESS_WALL:
        return "wall time of the whole bench run, taken by the harness from outside" + per
    return "as the bench printed it" + per
