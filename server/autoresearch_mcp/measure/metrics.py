"""From a runner outcome (raw samples) to per-metric comparisons and the experiment's verdict.

Everything here is recomputed from the stored samples, so a report can redo it at any time.

Several metrics can be judged at once. Objectives (default: the primary metric) are what a winner
may improve; guards are metrics it must not regress beyond their tolerance. Each metric is judged
with its own paired interval (`stats.paired`), in its own direction:
- an objective `improved` or `regressed` by its verdict against the minimum effect;
- a guard `regressed` when its verdict, against its tolerance, is a regression; `held` when the
  worst end of its interval stays within the tolerance; `undecided` otherwise (more pairs needed).
The experiment is `improved` when at least one objective improved, none regressed and every guard
held; `regressed` when an objective or a guard regressed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from autoresearch_mcp.core import runner
from autoresearch_mcp.core.records import LaunchRecord
from autoresearch_mcp.errors import StateError
from autoresearch_mcp.measure import stats


@dataclass(frozen=True)
class Judging:
    """Which metrics decide a verdict, and how: recorded with each launch so a verdict can be redone."""

    metric: str
    direction: str
    objectives: list[str] = field(default_factory=list)
    guards: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {direction, tolerance_pct}

    @property
    def objective_names(self) -> list[str]:
        return list(self.objectives) or [self.metric]

    def required(self) -> list[str]:
        """Every metric a verdict needs, the primary first."""
        return list(dict.fromkeys([self.metric, *self.objective_names, *self.guards]))

    def direction_of(self, name: str) -> str:
        guard = self.guards.get(name)
        return str(guard["direction"]) if guard else self.direction

    @classmethod
    def from_launch(cls, launch: LaunchRecord) -> Judging:
        # never a default direction: judging "higher is better" by accident would flip a verdict
        if not launch.metric or not launch.carries("direction"):
            raise StateError(f"the launch record of experiment {launch.experiment_id} names no metric or no "
                             "direction, so its samples cannot be judged; the ledger was not written by this "
                             "server (or was edited)")
        return cls(launch.metric, launch.direction, list(launch.objectives), dict(launch.guards))


def pairs(outcome: dict[str, Any], metric: str) -> tuple[list[float], list[float]]:
    """Baseline and candidate values of `metric` in the complete pairs, in pair order."""
    by_pair: dict[int, dict[str, float]] = {}
    for s in outcome.get("samples", []):
        if metric in s.get("metrics", {}):
            by_pair.setdefault(int(s["pair"]), {})[s["role"]] = float(s["metrics"][metric])
    complete = [p for _, p in sorted(by_pair.items()) if "baseline" in p and "candidate" in p]
    return [p["baseline"] for p in complete], [p["candidate"] for p in complete]


def screen(outcome: dict[str, Any]) -> list[tuple[str, str]]:
    """Drop every sample value the runner's value rule refuses, and say which (metric, why): the same
    rule as the runner's, applied again here before any arithmetic, since what arrives is not trusted."""
    refused: list[tuple[str, str]] = []
    for s in [*outcome.get("warmup", []), *outcome.get("samples", [])]:
        values = s.get("metrics") if isinstance(s, dict) else None
        if not isinstance(values, dict):
            continue
        for name, value in list(values.items()):
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            why = runner.check_value(float(value)) if number else "is not a number"
            if why:
                del values[name]
                refused.append((name, f"{s.get('role')} run {s.get('pair')}: {name}={repr(value)[:40]} {why}"))
    return refused


def _guard_judgement(cmp: stats.Comparison, direction: str, tolerance_pct: float) -> str:
    if cmp.verdict == "regressed":
        return "regressed"
    if cmp.ci_low_pct is None or cmp.ci_high_pct is None:
        return "undecided"
    worst = cmp.ci_low_pct if direction == "higher" else -cmp.ci_high_pct
    return "held" if worst > -tolerance_pct else "undecided"


def _objective_judgement(cmp: stats.Comparison) -> str:
    return cmp.verdict if cmp.verdict in ("improved", "regressed") else "held"


def analyze(outcome: dict[str, Any], judging: Judging, design: stats.Design) -> dict[str, Any]:
    """Comparisons of every metric, each judged metric's judgement, the verdict and the noise the
    primary metric's pairs show.

    A run that is not `done`/`checks_failed` has no verdict; a sample without a judged metric (or
    with an unparsable one) makes the whole experiment `invalid`, never a 0. Noise is a
    diagnostic taken from the pair differences, and `noisy` is the primary comparison's verdict when
    the budget could not decide at that noise (`noise_note` says why).
    """
    status = outcome.get("status")
    refused = screen(outcome)
    if any(name in judging.required() for name, _ in refused) and status in ("done", "checks_failed"):
        outcome["stop_reason"] = "invalid"
        outcome["error"] = "; ".join(why for _, why in refused[:5])
    names = sorted({n for s in outcome.get("samples", []) for n in s.get("metrics", {})})
    objectives = judging.objective_names
    comparisons: dict[str, Any] = {}
    notes: dict[str, str | None] = {}
    for name in names:
        base, cand = pairs(outcome, name)
        direction = judging.direction_of(name)
        guard = judging.guards.get(name)
        tolerance = float(guard["tolerance_pct"]) if guard else None
        # a guard's verdict is against its tolerance, not the minimum effect of the objectives
        own = dataclasses.replace(design, min_effect=tolerance / 100.0) if tolerance is not None else design
        cmp = stats.paired(base, cand, direction, own)
        notes[name] = cmp.note
        role = "guard" if guard else "objective" if name in objectives else None
        judgement = (_guard_judgement(cmp, direction, tolerance) if tolerance is not None
                     else _objective_judgement(cmp) if role == "objective" else None)
        comparisons[name] = {
            "baseline": stats.summarize(base), "candidate": stats.summarize(cand),
            "delta_pct": cmp.delta_pct, "ci_low_pct": cmp.ci_low_pct, "ci_high_pct": cmp.ci_high_pct,
            "p_value": cmp.p_value, "n_pairs": cmp.n_pairs, "verdict": cmp.verdict,
            "pairs_needed": cmp.pairs_needed, "noise_pct": cmp.noise_pct, "resolvable_pct": cmp.resolvable_pct,
            "direction": direction, "role": role, "tolerance_pct": tolerance, "judgement": judgement,
            "log_se": cmp.log_se,
        }
    primary = comparisons.get(judging.metric)
    noise = primary.get("noise_pct") if primary else None
    judged = {n: comparisons[n] for n in judging.required() if n in comparisons}
    won = [n for n in objectives if judged.get(n, {}).get("judgement") == "improved"]
    blocking = [n for n, c in judged.items() if c["judgement"] in ("regressed", "undecided")]
    pairs_needed = primary.get("pairs_needed") if primary else None
    verdict: str | None
    if status not in ("done", "checks_failed"):
        verdict = None
    elif outcome.get("stop_reason") == "invalid" or primary is None or len(judged) < len(judging.required()):
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
    elif len(objectives) == 1:
        verdict = judged[objectives[0]]["verdict"]
    else:
        verdicts = {judged[n]["verdict"] for n in objectives}
        verdict = "no_change" if verdicts == {"no_change"} else "inconclusive"
    note = notes.get(judging.metric) if verdict == "noisy" else None
    return {"metrics": comparisons, "verdict": verdict, "noise_cv": None if noise is None else noise / 100,
            "noise_note": note, "problems": [why for _, why in refused[:20]], "pairs_needed": pairs_needed,
            "won": won, "blocking": blocking}
