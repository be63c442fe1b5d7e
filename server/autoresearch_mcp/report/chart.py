"""The progress chart: every experiment in launch order against the session start, as a PNG."""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from autoresearch_mcp.measure import stats
from autoresearch_mcp.report.accounting import BEST_COLOR, COLORS, DISCARDED, FAILED, KEPT, RUNNING, SessionData
from autoresearch_mcp.report.format import pct, short

MAX_LABELS = 15


def render_chart(data: SessionData, secondary: list[str]) -> bytes:
    """PNG of every experiment in launch order: the primary metric vs the session start, with CI
    whiskers and the running best; one panel per requested secondary metric below it."""
    panels = 1 + len(secondary)
    # matplotlib only where the chart is drawn: the SessionStart hook and summaries import the package too
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.8 + 2.6 * len(secondary)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False, height_ratios=[1.8] + [1.0] * len(secondary))
    ax = axes[0][0]
    c = data.config
    _primary_panel(ax, data)
    ax.set_title(f"{c.tag}: {c.metric} ({c.direction} is better) — {len(data.rows)} experiments, "
                 f"{data.count(KEPT)} kept, total {pct(data.total_pct)}", loc="left", fontsize=11)
    for panel, name in zip(axes[1:], secondary, strict=True):
        _secondary_panel(panel[0], data, name)
    axes[-1][0].set_xlabel("experiment (launch order)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _primary_panel(ax: Any, data: SessionData) -> None:
    xs = np.array([r.index for r in data.rows], dtype=float)
    shown: list[float] = [0.0]
    for outcome in (DISCARDED, RUNNING, KEPT):
        rows = [r for r in data.rows if r.outcome == outcome and r.level is not None]
        points = [(r.index, stats.pct(r.level), stats.pct(r.level_low), stats.pct(r.level_high)) for r in rows]
        shown += _points(ax, points, color=COLORS[outcome], markersize=8 if outcome == KEPT else 5,
                         alpha=1.0 if outcome == KEPT else 0.75, label=f"{outcome} ({data.count(outcome)})",
                         zorder=3 if outcome == KEPT else 2)
    failed = [r.index for r in data.rows if r.outcome == FAILED]
    if failed:  # no trustworthy value: marked along the bottom edge
        ax.scatter(failed, [0.03] * len(failed), marker="x", color=COLORS[FAILED], s=36,
                   transform=ax.get_xaxis_transform(), label=f"failed ({len(failed)})", zorder=3)
    if len(xs):
        best = _running_best(data)
        ax.step(np.concatenate([[0.0], xs]), [0.0, *best], where="post", color=BEST_COLOR, linewidth=2,
                label="running best (session head)", zorder=4)
        shown.extend(best)
        kept = [r for r in data.rows if r.outcome == KEPT and r.level is not None]
        for r in kept if len(kept) <= MAX_LABELS else []:
            ax.annotate(short(r.exp.title), (r.index, stats.pct(r.level) or 0.0), xytext=(4, 6),
                        textcoords="offset points", fontsize=7, color=BEST_COLOR, rotation=20)
        ax.set_xlim(0.0, xs[-1] + 1)
    ax.axhline(0.0, color="#444444", linewidth=0.8, linestyle="--")
    ax.set_ylim(*_limits(shown))
    ax.set_ylabel(f"{data.config.metric} vs start (%)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a session with no experiments yet has nothing to name
        ax.legend(loc="upper left", fontsize=8, framealpha=0.85)


def _secondary_panel(ax: Any, data: SessionData, name: str) -> None:
    shown = [0.0]
    for outcome in (DISCARDED, RUNNING, KEPT, FAILED):
        cmps = [(r.index, r.metrics.get(name) or {}) for r in data.rows if r.outcome == outcome]
        points = [(x, m.get("delta_pct"), m.get("ci_low_pct"), m.get("ci_high_pct")) for x, m in cmps]
        shown += _points(ax, points, color=COLORS[outcome], markersize=4, alpha=0.8)
    ax.axhline(0.0, color="#444444", linewidth=0.8, linestyle="--")
    ax.set_ylim(*_limits(shown))
    ax.set_ylabel(f"{name}\nvs its base (%)", fontsize=9)
    ax.grid(True, alpha=0.3)


Point = tuple[int, float | None, float | None, float | None]


def _points(ax: Any, points: list[Point], **style: Any) -> list[float]:
    """(x, value, CI low, CI high) as markers with whiskers; returns the values drawn."""
    points = [p for p in points if p[1] is not None]
    if not points:
        return []
    y = np.array([p[1] for p in points], dtype=float)
    low = np.array([v if p[2] is None else p[2] for p, v in zip(points, y, strict=True)], dtype=float)
    high = np.array([v if p[3] is None else p[3] for p, v in zip(points, y, strict=True)], dtype=float)
    ax.errorbar([p[0] for p in points], y, yerr=[np.maximum(y - low, 0), np.maximum(high - y, 0)], fmt="o",
                ecolor=style["color"], elinewidth=1.2, capsize=2, **style)
    return [float(v) for v in y]


def _running_best(data: SessionData) -> list[float]:
    """After each experiment: the gain of the session head right after the latest commit on the branch
    among the kept experiments launched so far."""
    out: list[float] = []
    current, latest = 0.0, -1
    for r in data.rows:
        if r.position is not None and r.head_level is not None and r.position > latest:
            current, latest = stats.pct(r.head_level), r.position
        out.append(current)
    return out


def _limits(values: Iterable[float]) -> tuple[float, float]:
    """Y limits from the point estimates (robust to a few wild ones); whiskers beyond are clipped."""
    arr = np.array([v for v in values if math.isfinite(v)], dtype=float)
    lo, hi = (np.percentile(arr, [1, 99]) if arr.size > 50 else (arr.min(), arr.max()))
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    pad = max((hi - lo) * 0.15, 1.0)
    return lo - pad, hi + pad
