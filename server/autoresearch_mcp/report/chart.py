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


# Discarded experiments by verdict: a regression must not look like noise, nor noise like "no change".
VERDICT_COLORS = {"regressed": "#e66101", "noisy": "#8073ac", "inconclusive": "#b8a8d6"}


def render_chart(data: SessionData, secondary: list[str]) -> bytes:
    """PNG of every experiment in launch order: the primary metric vs the session start, with CI
    whiskers and the running best; one panel per requested secondary metric below it."""
    buf = io.BytesIO()
    chart_figure(data, secondary).savefig(buf, format="png")
    return buf.getvalue()


def chart_figure(data: SessionData, secondary: list[str]) -> Any:
    """The chart as a matplotlib Figure (drawn, so its texts have their extents)."""
    panels = 1 + len(secondary)
    # matplotlib only where the chart is drawn: the SessionStart hook and summaries import the package too
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

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
    axes[-1][0].xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # experiments are whole
    fig.canvas.draw()
    return fig


def _primary_panel(ax: Any, data: SessionData) -> None:
    xs = np.array([r.index for r in data.rows], dtype=float)
    shown: list[float] = [0.0]
    for outcome, verdict, color, name in _classes(data):
        rows = [r for r in data.rows if r.outcome == outcome and r.level is not None
                and (outcome != DISCARDED or _verdict_class(r.verdict) == verdict)]
        points = [(r.index, stats.pct(r.level), stats.pct(r.level_low), stats.pct(r.level_high)) for r in rows]
        shown += _points(ax, points, color=color, markersize=8 if outcome == KEPT else 5,
                         alpha=0.75 if color in (COLORS[DISCARDED], COLORS[RUNNING]) else 1.0,
                         label=f"{name} ({len(rows)})",
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
        lo, hi = _limits(shown)
        for r in kept if len(kept) <= MAX_LABELS else []:
            y = stats.pct(r.level) or 0.0
            # below its point when the point is in the top third, so a label never leaves the panel
            above = y < hi - (hi - lo) / 3
            ax.annotate(short(r.exp.title), (r.index, y), xytext=(5, 6 if above else -8),
                        textcoords="offset points", fontsize=7, color=BEST_COLOR,
                        va="bottom" if above else "top", ha="left" if r.index < xs[-1] else "right",
                        annotation_clip=True, clip_on=True)
        ax.set_xlim(0.5, xs[-1] + 0.5)
    ax.axhline(0.0, color="#444444", linewidth=0.8, linestyle="--")
    ax.set_ylim(*_limits(shown))
    ax.set_ylabel(f"{data.config.metric} vs start (%)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a session with no experiments yet has nothing to name
        ax.legend(loc="best", fontsize=8, framealpha=0.85)


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
    return [float(v) for v in (*y, *low, *high)]  # whiskers too: the axis holds every one of them


def _verdict_class(verdict: str | None) -> str | None:
    return verdict if verdict in VERDICT_COLORS else None


def _classes(data: SessionData) -> list[tuple[str, str | None, str, str]]:
    """(outcome, verdict class, color, legend name) of each kind of point in the primary panel; discarded
    experiments by verdict (regressed, noisy, inconclusive, the rest as no change)."""
    out: list[tuple[str, str | None, str, str]] = []
    discarded = {_verdict_class(r.verdict) for r in data.rows if r.outcome == DISCARDED}
    for verdict in (None, *VERDICT_COLORS):
        if verdict in discarded:
            color = COLORS[DISCARDED] if verdict is None else VERDICT_COLORS[verdict]
            out.append((DISCARDED, verdict, color, "discarded" if verdict is None else f"discarded: {verdict}"))
    return [*out, (RUNNING, None, COLORS[RUNNING], RUNNING), (KEPT, None, COLORS[KEPT], KEPT)]


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
    """Y limits from the values drawn, whiskers included (a few wild ones cut when there are many)."""
    arr = np.array([v for v in values if math.isfinite(v)], dtype=float)
    lo, hi = (np.percentile(arr, [1, 99]) if arr.size > 50 else (arr.min(), arr.max()))
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    pad = max((hi - lo) * 0.15, 1.0)
    return lo - pad, hi + pad
