"""Pairs to a decision: how many pairs in all would decide a metric, or show a guard within its margin, at the spread
measured so far (the figure an `undecided`, `noisy` or `inconclusive` answer gives). The server's alone: the worker
decides at the looks it is given."""

from __future__ import annotations

import math

from autoresearch_mcp.worker.decide import POWER_Z, MetricLook, MetricRule, Plan, z_quantile


def pairs_needed(look: MetricLook, rule: MetricRule, plan: Plan) -> int | None:
    """Pairs in all that would decide with 80% power at this spread: the observed change when it is beyond
    the minimum effect, else the distance to `no_change`; the next look at or beyond, when there is one."""
    if look.spread is None or look.estimate is None:
        return None
    margin = rule.min_effect
    effect = abs(look.estimate)
    target = effect if effect >= margin else max(margin - effect, margin / 4)
    k = plan.last_look(plan.budget)
    z = z_quantile(plan.levels[k if k is not None else -1]) + POWER_Z
    needed = max(look.n + 1, plan.min_pairs_improved, math.ceil((z * look.spread / target) ** 2))
    return next((m for m in plan.looks if m >= needed), needed)


def pairs_to_hold(look: MetricLook, margin: float, plan: Plan) -> int | None:
    """Pairs in all that would show a guard within `margin` with 80% power at this spread: at its estimate, or,
    where that is worse than a quarter of the margin short of it, at that (as `pairs_needed` plans)."""
    if look.spread is None or look.estimate is None:
        return None
    z = z_quantile(plan.guard_level) + POWER_Z
    room = max(margin + min(look.estimate, 0.0), margin / 4)
    return max(look.n + 1, math.ceil((z * look.spread / room) ** 2))
