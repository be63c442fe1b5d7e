"""The session for people: a progress chart, one self-contained HTML page and a TSV for notebooks.

`accounting` reads the session (ledger, config, git) into rows, the chain of kept commits and the
totals, each experiment's figures recomputed from its samples (`measured`); `chart`, `page` and
`text` render that one `SessionData`.
"""

from __future__ import annotations

from autoresearch_mcp import safefs
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.models import ReportResult
from autoresearch_mcp.report.accounting import (
    COLORS,
    DISCARDED,
    FAILED,
    KEPT,
    RUNNING,
    KeptCommit,
    Row,
    SessionData,
    load,
)
from autoresearch_mcp.report.chart import render_chart
from autoresearch_mcp.report.page import render_html
from autoresearch_mcp.report.text import TSV_COLUMNS, summarize, tsv_text
from autoresearch_mcp.store.config import state_dir

__all__ = [
    "COLORS", "DISCARDED", "FAILED", "KEPT", "RUNNING", "TSV_COLUMNS", "KeptCommit", "Row", "SessionData", "load",
    "render_chart", "render_html", "summarize", "tsv_text", "write_report",
]


def write_report(repo_path: str, secondary: list[str] | None = None) -> ReportResult:
    """Write `.autoresearch/report/{index.html, progress.png, results.tsv}` and summarize them."""
    data = load(repo_path)
    available = sorted({m for r in data.rows for m in r.metrics} - {data.config.metric})
    unknown = [m for m in secondary or [] if m not in available]
    if unknown:
        raise InputError(f"secondary metric(s) {unknown} were not measured in this session; "
                         f"measured besides {data.config.metric}: {available or 'none'}")
    out = state_dir(data.root) / "report"
    png = render_chart(data, secondary or [])
    chart_path, html_path, tsv_path = out / "progress.png", out / "index.html", out / "results.tsv"
    # never through a link: a planted .autoresearch/report -> elsewhere is refused, not followed
    safefs.write_bytes(data.root, chart_path, png)
    safefs.write_text(data.root, html_path, render_html(data, png))
    safefs.write_text(data.root, tsv_path, tsv_text(data))
    low, high = data.total_interval
    return ReportResult(
        summary=summarize(data), html_path=str(html_path), chart_path=str(chart_path), tsv_path=str(tsv_path),
        session_id=data.config.session_id, branch=data.config.branch, metric=data.config.metric,
        direction=data.config.direction, experiments=len(data.rows), kept=data.count(KEPT),
        discarded=data.count(DISCARDED), failed=data.count(FAILED), running=data.count(RUNNING),
        total_gain_pct=data.total_pct, total_gain_ci_low_pct=low, total_gain_ci_high_pct=high,
        total_gain_ci_level=data.total_level if low is not None else None,
        cost_usd=round(data.cost, 4), secondary_metrics_available=available, warnings=data.warnings,
    )
