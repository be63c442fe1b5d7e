"""From a runner outcome (raw samples) to per-metric comparisons and the experiment's verdict.

Everything here is recomputed from the stored samples, so a report can redo it at any time.
"""

from __future__ import annotations

from typing import Any

from autoresearch_mcp.experiments import runner, stats


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


def analyze(outcome: dict[str, Any], metric: str, direction: str, design: stats.Design) -> dict[str, Any]:
    """Comparisons of every metric, the verdict of the primary one, and the noise its pairs show.

    A run that is not `done`/`checks_failed` has no verdict; a sample without the primary metric
    (or with an unparsable one) makes the whole experiment `invalid`, never a 0. Noise is a
    diagnostic taken from the pair differences, and `noisy` is the primary comparison's verdict when
    the budget could not decide at that noise (`noise_note` says why).
    """
    status = outcome.get("status")
    refused = screen(outcome)
    if any(name == metric for name, _ in refused) and status in ("done", "checks_failed"):
        outcome["stop_reason"] = "invalid"
        outcome["error"] = "; ".join(why for _, why in refused[:5])
    names = sorted({n for s in outcome.get("samples", []) for n in s.get("metrics", {})})
    comparisons: dict[str, Any] = {}
    notes: dict[str, str | None] = {}
    for name in names:
        base, cand = pairs(outcome, name)
        cmp = stats.paired(base, cand, direction, design)
        notes[name] = cmp.note
        comparisons[name] = {
            "baseline": stats.summarize(base), "candidate": stats.summarize(cand),
            "delta_pct": cmp.delta_pct, "ci_low_pct": cmp.ci_low_pct, "ci_high_pct": cmp.ci_high_pct,
            "p_value": cmp.p_value, "n_pairs": cmp.n_pairs, "verdict": cmp.verdict,
            "pairs_needed": cmp.pairs_needed, "noise_pct": cmp.noise_pct, "resolvable_pct": cmp.resolvable_pct,
        }
    primary = comparisons.get(metric)
    noise = primary.get("noise_pct") if primary else None
    verdict: str | None
    if status not in ("done", "checks_failed"):
        verdict = None
    elif outcome.get("stop_reason") == "invalid" or primary is None:
        verdict = "invalid"
    else:
        verdict = primary["verdict"]
    note = notes.get(metric) if verdict == "noisy" else None
    return {"metrics": comparisons, "verdict": verdict, "noise_cv": None if noise is None else noise / 100,
            "noise_note": note, "problems": [why for _, why in refused[:20]],
            "pairs_needed": primary.get("pairs_needed") if primary else None}
