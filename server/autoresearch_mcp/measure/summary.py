"""One metric's paired comparison as the server reports it, and the summary of one side's samples: the
shapes the current rule (measure/stats.py) and the earlier ones (measure/legacy.py) both fill."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, overload

import numpy as np


@dataclass
class Comparison:
    """The paired comparison of one metric (percent changes of the metric's own value)."""

    n_pairs: int
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    verdict: str
    pairs_needed: int | None = None
    noise_pct: float | None = None  # per-run noise, from the pairs' spread
    resolvable_pct: float | None = None  # the smallest change the budget resolves at that noise
    note: str | None = None  # why `noisy`, or why a metric whose typical run improved is not `improved`
    log_se: float | None = None  # standard error of the log-ratio estimate
    ci_level: float | None = None  # the confidence of [ci_low_pct, ci_high_pct]
    mean_pct: float | None = None  # the average run's change, with its interval (mean level)
    mean_low_pct: float | None = None
    mean_high_pct: float | None = None
    tail_pct: float | None = None  # the worst runs' change
    equivalence_pct: float | None = None  # no_change: no change beyond +-this


def summarize(samples: list[float]) -> dict[str, Any]:
    arr = np.asarray(samples, dtype=float)
    if arr.size == 0:
        return {"n": 0, "mean": None, "median": None, "stddev": None, "cv": None, "samples": []}
    mean = float(arr.mean())
    sd = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return {
        "n": int(arr.size),
        "mean": mean,
        "median": float(np.median(arr)),
        "stddev": sd,
        "cv": sd / abs(mean) if mean else None,
        "samples": [float(x) for x in arr],
    }


@overload
def pct(log_ratio: float) -> float: ...
@overload
def pct(log_ratio: None) -> None: ...
def pct(log_ratio: float | None) -> float | None:
    """A log-ratio as a percent change (rounded to 4 decimals); None stays None."""
    return None if log_ratio is None else round(math.expm1(log_ratio) * 100.0, 4)
