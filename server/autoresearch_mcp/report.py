"""The session for people: a progress chart, one self-contained HTML page and a TSV for notebooks.

Everything is recomputed from `.autoresearch/ledger.jsonl`, the session config and git, so a report
can be written at any time, with or without a running server, and written again after more work.

Gains vs the session start are chained in log space: each experiment was measured against its own
base commit (the session head when it was launched), and each kept experiment moved the head by its
measured log-ratio. The total gain's interval adds the kept experiments' interval half-widths in
quadrature (independent errors), an approximation that the page says it is.
"""

from __future__ import annotations

import base64
import bisect
import csv
import datetime as dt
import html
import io
import logging
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from autoresearch_mcp.errors import AutoresearchError, InputError, StateError
from autoresearch_mcp.experiments import snapshot
from autoresearch_mcp.experiments.ledger import ExperimentState, Ledger, LedgerView
from autoresearch_mcp.finalize import finalize as make_branches
from autoresearch_mcp.models import FINAL_STATUSES, ReportResult
from autoresearch_mcp.session import SessionConfig, load_config, state_dir

log = logging.getLogger(__name__)

# Outcome classes of an experiment, and their colors in the chart and on the page.
KEPT, DISCARDED, FAILED, RUNNING = "kept", "discarded", "failed", "running"
COLORS = {KEPT: "#1a9850", DISCARDED: "#9e9e9e", FAILED: "#d73027", RUNNING: "#4575b4"}
BEST_COLOR = "#006837"
_FAILED_STATUSES = frozenset({"failed", "checks_failed", "cancelled", "lost"})
_FAILED_VERDICTS = frozenset({"invalid", "noisy"})
MAX_LABELS = 15


@dataclass
class Row:
    """One experiment as the report shows it."""

    index: int
    exp: ExperimentState
    outcome: str
    metrics: dict[str, dict[str, Any]]
    verdict: str | None
    base_level: float  # log-ratio of the experiment's base commit vs the session start
    level: float | None = None  # log-ratio of the candidate vs the session start
    level_low: float | None = None
    level_high: float | None = None

    @property
    def launch(self) -> dict[str, Any]:
        return self.exp.launch

    def primary(self, metric: str) -> dict[str, Any]:
        return self.metrics.get(metric) or {}

    def checks(self) -> str:
        checks = ((self.exp.result or {}).get("outcome") or {}).get("checks") or {}
        if not checks.get("ran"):
            return "not run"
        took = f" ({checks['duration_s']:.1f} s)" if checks.get("duration_s") is not None else ""
        return ("passed" if checks.get("passed") else "failed") + took


@dataclass
class KeptCommit:
    sha: str
    message: str
    stat: str
    experiment_id: str | None


@dataclass
class SessionData:
    root: Path
    config: SessionConfig
    rows: list[Row]
    baseline: float | None
    total_log: float
    total_half_width: float | None
    confidence: float
    commits: list[KeptCommit] = field(default_factory=list)
    machines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.rows if r.outcome == outcome)

    @property
    def cost(self) -> float:
        return sum(float((r.exp.result or {}).get("cost_usd") or 0.0) for r in self.rows)


def write_report(repo_path: str, secondary: list[str] | None = None) -> ReportResult:
    """Write `.autoresearch/report/{index.html, progress.png, results.tsv}` and summarize them."""
    data = load(repo_path)
    available = sorted({m for r in data.rows for m in r.metrics} - {data.config.metric})
    unknown = [m for m in secondary or [] if m not in available]
    if unknown:
        raise InputError(f"secondary metric(s) {unknown} were not measured in this session; "
                         f"measured besides {data.config.metric}: {available or 'none'}")
    out = state_dir(data.root) / "report"
    out.mkdir(parents=True, exist_ok=True)
    png = render_chart(data, secondary or [])
    chart_path, html_path, tsv_path = out / "progress.png", out / "index.html", out / "results.tsv"
    chart_path.write_bytes(png)
    html_path.write_text(render_html(data, png), encoding="utf-8")
    write_tsv(data, tsv_path)
    summary = summarize(data)
    low, high = _total_interval(data)
    return ReportResult(
        summary=summary, html_path=str(html_path), chart_path=str(chart_path), tsv_path=str(tsv_path),
        session_id=data.config.session_id, branch=data.config.branch, metric=data.config.metric,
        direction=data.config.direction, experiments=len(data.rows), kept=data.count(KEPT),
        discarded=data.count(DISCARDED), failed=data.count(FAILED), running=data.count(RUNNING),
        total_gain_pct=_pct(data.total_log), total_gain_ci_low_pct=low, total_gain_ci_high_pct=high,
        cost_usd=round(data.cost, 4), secondary_metrics_available=available, warnings=data.warnings,
    )


# --- reading the session ---------------------------------------------------------------------------


def load(repo_path: str) -> SessionData:
    root = Path(snapshot.open_repo(repo_path).working_dir)
    if not (root / ".autoresearch").is_dir():
        raise StateError(f"{root} has no .autoresearch/ directory: no session ran there. Pass the repository "
                         "where start_session ran (or run start_session first)")
    config = load_config(root)
    if config is None:
        raise StateError(f"{root}/.autoresearch/config.json is missing: the session was never started there; "
                         "run start_session first")
    view = Ledger(state_dir(root) / "ledger.jsonl").view()
    data = _fold(root, config, view)
    data.commits, note = _kept_commits(root, config, data.rows)
    if note:
        data.warnings.append(note)
    return data


def _fold(root: Path, config: SessionConfig, view: LedgerView) -> SessionData:
    mine = sorted((e for e in view.experiments.values() if e.launch.get("session_id") == config.session_id),
                  key=lambda e: float(e.launch.get("ts", 0)))
    metric = config.metric
    # The chain of the session head: commit -> log-ratio vs the start, in the order commits were made.
    level_of: dict[str, float] = {config.start_commit: 0.0}
    timeline: list[tuple[float, float]] = []
    variance = 0.0
    confidence = 1 - config.alpha
    for exp in sorted((e for e in mine if e.commit), key=lambda e: float((e.commit or {}).get("ts", 0))):
        commit = exp.commit or {}
        cmp = _metrics(exp).get(metric) or {}
        start = level_of.get(str(commit.get("parent")), timeline[-1][1] if timeline else 0.0)
        level = start + _log(cmp.get("delta_pct"))
        level_of[str(commit.get("commit"))] = level
        timeline.append((float(commit.get("ts", 0)), level))
        half = _half_width(cmp)
        variance += (half or 0.0) ** 2
    times = [t for t, _ in timeline]
    rows = []
    for index, exp in enumerate(mine, start=1):
        analysis = (exp.result or {}).get("analysis") or {}
        before = bisect.bisect_right(times, float(exp.launch.get("ts", 0)))
        fallback = timeline[before - 1][1] if before else 0.0
        row = Row(index, exp, _outcome(exp, analysis.get("verdict")), _metrics(exp), analysis.get("verdict"),
                  level_of.get(str(exp.launch.get("base_commit")), fallback))
        cmp = row.primary(metric)
        if cmp.get("delta_pct") is not None:
            row.level = row.base_level + _log(cmp["delta_pct"])
            if cmp.get("ci_low_pct") is not None and cmp.get("ci_high_pct") is not None:
                row.level_low = row.base_level + _log(cmp["ci_low_pct"])
                row.level_high = row.base_level + _log(cmp["ci_high_pct"])
        rows.append(row)
    total = timeline[-1][1] if timeline else 0.0
    half = math.sqrt(variance) if timeline else None
    machines = sorted({_machine(e) for e in mine if e.result})
    return SessionData(root, config, rows, _baseline(view, config), total, half, confidence,
                       machines=machines, warnings=list(view.warnings))


def _metrics(exp: ExperimentState) -> dict[str, dict[str, Any]]:
    metrics: dict[str, dict[str, Any]] = ((exp.result or {}).get("analysis") or {}).get("metrics") or {}
    return metrics


def _outcome(exp: ExperimentState, verdict: str | None) -> str:
    if exp.commit:
        return KEPT
    if exp.status not in FINAL_STATUSES:
        return RUNNING
    if exp.status in _FAILED_STATUSES or verdict in _FAILED_VERDICTS:
        return FAILED
    return DISCARDED


def _baseline(view: LedgerView, config: SessionConfig) -> float | None:
    """Mean of the primary metric in the session's validation at its start commit (else the first)."""
    records = [s for s in view.sessions if s.get("session_id") == config.session_id]
    records.sort(key=lambda s: s.get("head") != config.start_commit)
    for rec in records:
        values = (rec.get("baseline") or {}).get(config.metric)
        if values:
            return float(np.mean(values))
    return None


def _machine(exp: ExperimentState) -> str:
    host = ((exp.result or {}).get("outcome") or {}).get("host") or {}
    worker = exp.worker or (exp.result or {}).get("worker") or "?"
    detail = ", ".join(str(x) for x in (host.get("hostname"), host.get("cpu_model"),
                                        f"{host['cpus']} CPUs" if host.get("cpus") else None) if x)
    return f"{worker} ({detail})" if detail else str(worker)


def _kept_commits(root: Path, config: SessionConfig, rows: list[Row]) -> tuple[list[KeptCommit], str | None]:
    """The session branch's commits since the start, with messages and diff stats (one git call)."""
    by_commit = {str((r.exp.commit or {}).get("commit")): r.exp.experiment_id for r in rows if r.exp.commit}
    try:
        repo = git.Repo(root)
        out = repo.git.log("--reverse", "--first-parent", "--stat=100", "--format=%x1e%H%x1f%B%x1f",
                           f"{config.start_commit}..{config.branch}", "--")
    except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip()[:200]
        return [], f"the session branch {config.branch} could not be read from git ({detail})"
    commits = []
    for chunk in out.split("\x1e")[1:]:
        sha, message, stat = [*chunk.split("\x1f"), "", ""][:3]
        commits.append(KeptCommit(sha, message.strip(), stat.strip("\n"), by_commit.get(sha)))
    return commits, None


def _log(pct: float | None) -> float:
    return math.log1p(pct / 100.0) if pct is not None and pct > -100 else 0.0


def _half_width(cmp: dict[str, Any]) -> float | None:
    lo, hi = cmp.get("ci_low_pct"), cmp.get("ci_high_pct")
    if lo is None or hi is None:
        return None
    return (_log(hi) - _log(lo)) / 2


def _pct(level: float | None) -> float | None:
    return None if level is None else round(math.expm1(level) * 100.0, 4)


def _total_interval(data: SessionData) -> tuple[float | None, float | None]:
    if data.total_half_width is None:
        return None, None
    return _pct(data.total_log - data.total_half_width), _pct(data.total_log + data.total_half_width)


# --- text ------------------------------------------------------------------------------------------


def _fmt_pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}%"


def _fmt_num(value: float | None) -> str:
    return "–" if value is None else f"{value:.6g}"


def summarize(data: SessionData) -> str:
    c = data.config
    finished = data.count(KEPT) + data.count(DISCARDED) + data.count(FAILED)
    rate = f"{data.count(KEPT) / finished:.0%}" if finished else "–"
    low, high = _total_interval(data)
    head_value = data.baseline * math.exp(data.total_log) if data.baseline is not None else None
    lines = [
        f"Session {c.tag} ({c.branch}) of {data.root}: {c.metric}, {c.direction} is better.",
        f"{len(data.rows)} experiments: {data.count(KEPT)} kept, {data.count(DISCARDED)} discarded, "
        f"{data.count(FAILED)} failed, {data.count(RUNNING)} running (keep rate {rate} of finished).",
        f"Baseline {_fmt_num(data.baseline)} -> about {_fmt_num(head_value)} at the head: total "
        f"{_fmt_pct(_pct(data.total_log))}"
        + (f" ({data.confidence:.0%} CI {_fmt_pct(low)} to {_fmt_pct(high)}, combined from "
           f"{data.count(KEPT)} kept experiments)" if low is not None else " (nothing kept yet)") + ".",
    ]
    best = _best(data)
    if best is not None:
        lines.append(f"Best single experiment: {best.exp.title!r} "
                     f"{_fmt_pct(best.primary(c.metric).get('delta_pct'))} ({best.verdict}).")
    lines.append(f"Cost ${data.cost:.2f}; machines: {', '.join(data.machines) or 'none yet'}.")
    return "\n".join(lines)


def _best(data: SessionData) -> Row | None:
    sign = 1.0 if data.config.direction == "higher" else -1.0
    improved = [r for r in data.rows if r.verdict == "improved"
                and r.primary(data.config.metric).get("delta_pct") is not None]
    return max(improved, key=lambda r: sign * r.primary(data.config.metric)["delta_pct"], default=None)


# --- chart -----------------------------------------------------------------------------------------


def render_chart(data: SessionData, secondary: list[str]) -> bytes:
    """PNG of every experiment in launch order: the primary metric vs the session start, with CI
    whiskers and the running best; one panel per requested secondary metric below it."""
    panels = 1 + len(secondary)
    fig = Figure(figsize=(11, 4.8 + 2.6 * len(secondary)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False, height_ratios=[1.8] + [1.0] * len(secondary))
    ax = axes[0][0]
    c = data.config
    _primary_panel(ax, data)
    ax.set_title(f"{c.tag}: {c.metric} ({c.direction} is better) — {len(data.rows)} experiments, "
                 f"{data.count(KEPT)} kept, total {_fmt_pct(_pct(data.total_log))}", loc="left", fontsize=11)
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
        points = [(r.index, _pct(r.level), _pct(r.level_low), _pct(r.level_high)) for r in rows]
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
            ax.annotate(_short(r.exp.title), (r.index, _pct(r.level) or 0.0), xytext=(4, 6),
                        textcoords="offset points", fontsize=7, color=BEST_COLOR, rotation=20)
        ax.set_xlim(0.0, xs[-1] + 1)
    ax.axhline(0.0, color="#444444", linewidth=0.8, linestyle="--")
    ax.set_ylim(*_limits(shown))
    ax.set_ylabel(f"{data.config.metric} vs start (%)")
    ax.grid(True, alpha=0.3)
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
    """After each experiment: the gain of the newest head among the kept experiments launched so far."""
    out: list[float] = []
    current, current_ts = 0.0, -math.inf
    for r in data.rows:
        if r.outcome == KEPT and r.level is not None:
            ts = float((r.exp.commit or {}).get("ts", 0))
            if ts >= current_ts:
                current, current_ts = _pct(r.level) or 0.0, ts
        out.append(current)
    return out


def _limits(values: Iterable[float]) -> tuple[float, float]:
    """Y limits from the point estimates (robust to a few wild ones); whiskers beyond are clipped."""
    arr = np.array([v for v in values if math.isfinite(v)], dtype=float)
    lo, hi = (np.percentile(arr, [1, 99]) if arr.size > 50 else (arr.min(), arr.max()))
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    pad = max((hi - lo) * 0.15, 1.0)
    return lo - pad, hi + pad


def _short(text: str, limit: int = 32) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- HTML ------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;
color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.muted{color:#666}.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:12px 0}
.facts dt{color:#555}.facts dd{margin:0}
img.chart{width:100%;max-width:1100px;border:1px solid #ddd}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f5f5f5;position:sticky;top:0}td.num{text-align:right;white-space:nowrap}
tr.kept td:first-child{border-left:4px solid #1a9850}tr.failed td:first-child{border-left:4px solid #d73027}
tr.discarded td:first-child{border-left:4px solid #bdbdbd}tr.running td:first-child{border-left:4px solid #4575b4}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;color:#fff}
.badge.kept{background:#1a9850}.badge.failed{background:#d73027}.badge.discarded{background:#9e9e9e}
.badge.running{background:#4575b4}.hyp{color:#555;font-size:12px;max-width:520px}
pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
code{font-size:12px}
"""
# No script and no network: the page stays inert even if some agent-written text were mis-escaped.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def render_html(data: SessionData, png: bytes) -> str:
    c = data.config
    low, high = _total_interval(data)
    finished = data.count(KEPT) + data.count(DISCARDED) + data.count(FAILED)
    head_value = data.baseline * math.exp(data.total_log) if data.baseline is not None else None
    best = _best(data)
    facts = [
        ("repository", str(data.root)), ("branch", c.branch), ("started", f"{c.created_at} at {c.start_commit[:12]}"),
        ("metric", f"{c.metric} ({c.direction} is better)"), ("executor", c.executor),
        ("machines", ", ".join(data.machines) or "none yet"), ("baseline", _fmt_num(data.baseline)),
        ("at the head (estimated)", _fmt_num(head_value)),
        ("total gain", _fmt_pct(_pct(data.total_log)) + (
            f" ({data.confidence:.0%} CI {_fmt_pct(low)} to {_fmt_pct(high)}; combined from the kept "
            "experiments' intervals, assuming independent errors)" if low is not None else " (nothing kept yet)")),
        ("best experiment", f"{best.exp.title} ({_fmt_pct(best.primary(c.metric).get('delta_pct'))})"
         if best else "–"),
        ("experiments", f"{len(data.rows)}: {data.count(KEPT)} kept, {data.count(DISCARDED)} discarded, "
                        f"{data.count(FAILED)} failed, {data.count(RUNNING)} running"),
        ("keep rate", f"{data.count(KEPT) / finished:.0%} of finished" if finished else "–"),
        ("cost", f"${data.cost:.2f}"),
    ]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>autoresearch: {_e(c.tag)}</title><style>{_CSS}</style></head><body>",
        f"<h1>autoresearch session {_e(c.tag)}</h1>",
        f'<p class="muted">Written {_e(dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))} from '
        ".autoresearch/ledger.jsonl and git.</p>",
        '<section id="session"><dl class="facts">',
        *(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts), "</dl></section>",
        '<section id="progress"><h2>Progress</h2>',
        f'<img id="chart" class="chart" alt="progress chart of {_e(c.metric)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">',
        '<p class="muted">Each point is one experiment, measured against the session head it was launched on '
        "and placed relative to the session start; whiskers are its confidence interval; the line is the "
        "session head after each kept change.</p></section>",
        _experiments_table(data), _commits_section(data),
    ]
    if data.warnings:
        parts.append('<section id="warnings"><h2>Warnings</h2><ul>'
                     + "".join(f"<li>{_e(w)}</li>" for w in data.warnings) + "</ul></section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _experiments_table(data: SessionData) -> str:
    metric = data.config.metric
    logs = state_dir(data.root) / "logs"
    head = ("<tr><th>#</th><th>experiment</th><th>sources</th><th>outcome</th>"
            f"<th>{_e(metric)} change</th><th>CI</th><th>vs start</th><th>pairs</th><th>checks</th>"
            "<th>cost</th><th>log</th></tr>")
    body = []
    for r in data.rows:
        cmp = r.primary(metric)
        hyp = str(r.launch.get("hypothesis") or "")
        title = f"<b>{_e(r.exp.title)}</b> <code class=\"muted\">{_e(r.exp.experiment_id)}</code>"
        if hyp:
            title += f'<div class="hyp">{_e(_short(hyp, 400))}</div>'
        verdict = r.verdict or r.exp.status
        outcome = f'<span class="badge {r.outcome}">{r.outcome}</span> {_e(verdict)}'
        if r.verdict is not None and r.exp.status != "done":
            outcome += f" ({_e(r.exp.status)})"
        ci = (f"{_fmt_pct(cmp.get('ci_low_pct'))} … {_fmt_pct(cmp.get('ci_high_pct'))}"
              if cmp.get("ci_low_pct") is not None else "–")
        cost = (r.exp.result or {}).get("cost_usd")
        log_link = (f'<a href="../logs/{_e(r.exp.experiment_id)}.log">log</a>'
                    if (logs / f"{r.exp.experiment_id}.log").exists() else "–")
        body.append(
            f'<tr class="{r.outcome}"><td class="num">{r.index}</td><td>{title}</td>'
            f"<td>{_sources(r.launch.get('sources') or [])}</td><td>{outcome}</td>"
            f'<td class="num">{_fmt_pct(cmp.get("delta_pct"))}</td><td class="num">{ci}</td>'
            f'<td class="num">{_fmt_pct(_pct(r.level))}</td><td class="num">{_e(cmp.get("n_pairs", 0))}</td>'
            f"<td>{_e(r.checks())}</td><td class=\"num\">{'–' if cost is None else f'${float(cost):.2f}'}</td>"
            f"<td>{log_link}</td></tr>")
    return (f'<section id="experiments"><h2>Experiments ({len(data.rows)})</h2>'
            f'<table id="experiments-table"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table></section>')


def _sources(sources: list[Any]) -> str:
    items = []
    for s in sources:
        text = str(s)
        if re.fullmatch(r"https?://\S+", text):
            items.append(f'<a href="{_e(text)}" rel="noreferrer">{_e(_short(text, 60))}</a>')
        else:
            items.append(_e(_short(text, 120)))
    return "<br>".join(items) or "–"


def _commits_section(data: SessionData) -> str:
    parts = [f'<section id="commits"><h2>Commits on {_e(data.config.branch)} ({len(data.commits)})</h2>']
    if not data.commits:
        parts.append('<p class="muted">No commits since the session start.</p>')
    for commit in data.commits:
        origin = (f"experiment {_e(commit.experiment_id)}" if commit.experiment_id
                  else "not made by commit_winner")
        parts.append(f'<article class="commit"><h3><code>{_e(commit.sha[:12])}</code> '
                     f"{_e(commit.message.splitlines()[0] if commit.message else '')}</h3>"
                     f'<p class="muted">{origin}</p><pre>{_e(commit.message)}</pre>'
                     f"<pre>{_e(commit.stat)}</pre></article>")
    parts.append('<p class="muted">Review them one change per branch: <code>autoresearch-mcp report --finalize'
                 "</code> makes independent branches from the session start.</p></section>")
    return "".join(parts)


# --- TSV -------------------------------------------------------------------------------------------

TSV_COLUMNS = [
    "index", "experiment_id", "launched_at", "title", "status", "verdict", "outcome", "commit", "metric",
    "direction", "baseline_mean", "candidate_mean", "delta_pct", "ci_low_pct", "ci_high_pct", "p_value",
    "n_pairs", "vs_start_pct", "checks", "cost_usd", "worker", "sources", "changed_files", "hypothesis",
]


def write_tsv(data: SessionData, path: Path) -> None:
    """One row per experiment; tabs and newlines inside text become spaces so every row is one line."""
    metric = data.config.metric
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, delimiter="\t", lineterminator="\n")
        out.writerow(TSV_COLUMNS)
        for r in data.rows:
            cmp = r.primary(metric)
            launched = dt.datetime.fromtimestamp(float(r.launch.get("ts", 0)), dt.UTC).isoformat(timespec="seconds")
            values: list[object] = [
                r.index, r.exp.experiment_id, launched, r.exp.title, r.exp.status, r.verdict, r.outcome,
                (r.exp.commit or {}).get("commit"), metric, data.config.direction,
                (cmp.get("baseline") or {}).get("mean"), (cmp.get("candidate") or {}).get("mean"),
                cmp.get("delta_pct"), cmp.get("ci_low_pct"), cmp.get("ci_high_pct"), cmp.get("p_value"),
                cmp.get("n_pairs"), _pct(r.level), r.checks(), (r.exp.result or {}).get("cost_usd"),
                r.exp.worker or (r.exp.result or {}).get("worker"), "; ".join(map(str, r.launch.get("sources") or [])),
                " ".join(map(str, r.launch.get("changed_files") or [])), r.launch.get("hypothesis"),
            ]
            out.writerow(["" if v is None else re.sub(r"[\t\r\n]+", " ", str(v)) for v in values])


def main(repo: str, secondary: list[str], finalize: bool) -> int:
    """`autoresearch-mcp report [REPO] [--secondary M] [--finalize]`: print what was written."""
    try:
        result = write_report(repo, secondary)
        print(result.summary)
        print(f"\nreport: {result.html_path}\nchart:  {result.chart_path}\ntable:  {result.tsv_path}")
        if finalize:
            done = make_branches(repo)
            print("\n" + done.message)
            for branch in done.branches:
                print(f"  {branch.name}: {'; '.join(branch.titles)} ({', '.join(branch.files[:5])})")
            for reason in done.grouped:
                print(f"  {reason}")
            print(f"  {done.verification}")
            if not done.verified:
                return 1
    except AutoresearchError as exc:
        print(f"autoresearch-mcp report: {exc}", file=sys.stderr)
        return 1
    return 0
