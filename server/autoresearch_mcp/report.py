"""The session for people: a progress chart, one self-contained HTML page and a TSV for notebooks.

Everything is recomputed from `.autoresearch/ledger.jsonl`, the session config and git, so a report
can be written at any time, with or without a running server, and written again after more work.

The total gain is what is on the session branch now: its commits since the start are walked in
order, and each one the ledger records commit_winner making (never a trailer parsed from a message)
adds that experiment's measured log-ratio (each was measured against its own base commit, the session
head when it was launched). A commit naming no experiment (made by hand) adds nothing and is listed
as a warning; an experiment whose commit left the branch (a reset) is not counted as kept.
The total's interval combines the kept experiments' standard errors (each recovered from its own
design) in quadrature, assuming independent errors; chaining selected winners tends to overstate
the gain (winner's curse), which the page says.
"""

from __future__ import annotations

import base64
import bisect
import csv
import datetime as dt
import html
import io
import itertools
import logging
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autoresearch_mcp import notes as session_notes
from autoresearch_mcp import safefs
from autoresearch_mcp.core import gitops
from autoresearch_mcp.core.config import SessionConfig, load_config, state_dir
from autoresearch_mcp.core.ledger import ExperimentState, Ledger, LedgerView
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.measure import stats
from autoresearch_mcp.models import FINAL_STATUSES, ReportResult

log = logging.getLogger(__name__)

# Outcome classes of an experiment, and their colors in the chart and on the page.
KEPT, DISCARDED, FAILED, RUNNING = "kept", "discarded", "failed", "running"
COLORS = {KEPT: "#1a9850", DISCARDED: "#9e9e9e", FAILED: "#d73027", RUNNING: "#4575b4"}
BEST_COLOR = "#006837"
_FAILED_STATUSES = frozenset({"failed", "checks_failed", "cancelled", "lost"})
_FAILED_VERDICTS = frozenset({"invalid", "noisy"})
MAX_LABELS = 15
WINNERS_CURSE = ("chaining the experiments that were selected because they measured best tends to overstate "
                 "the gain (winner's curse): measure the session head against the start to confirm it")


@dataclass
class Row:
    """One experiment as the report shows it."""

    index: int
    exp: ExperimentState
    outcome: str
    base_level: float  # log-ratio of the experiment's base commit vs the session start
    level: float | None = None  # log-ratio of the candidate vs the session start
    level_low: float | None = None
    level_high: float | None = None
    position: int | None = None  # where its commit is on the session branch (kept experiments)
    head_level: float | None = None  # log-ratio of the session head right after its commit

    @property
    def launch(self) -> dict[str, Any]:
        return self.exp.launch

    @property
    def metrics(self) -> dict[str, dict[str, Any]]:
        return self.exp.metrics

    @property
    def verdict(self) -> str | None:
        return self.exp.verdict

    def primary(self, metric: str) -> dict[str, Any]:
        return self.exp.metric(metric)

    def checks(self) -> str:
        checks = self.exp.checks
        if not checks.get("ran"):
            return "not run"
        took = f" ({checks['duration_s']:.1f} s)" if checks.get("duration_s") is not None else ""
        return ("passed" if checks.get("passed") else "failed") + took


@dataclass
class KeptCommit:
    """A commit on the session branch since the start."""

    sha: str
    message: str
    stat: str
    ts: float  # committer time
    experiment_id: str | None = None  # the ledger experiment its trailer names, if any


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
    notes: str | None = None  # .autoresearch/notes.md, as the agent wrote it

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.rows if r.outcome == outcome)

    @property
    def cost(self) -> float:
        return sum(r.exp.cost_usd or 0.0 for r in self.rows)

    @property
    def finished(self) -> int:
        return self.count(KEPT) + self.count(DISCARDED) + self.count(FAILED)

    @property
    def keep_rate(self) -> float | None:
        return self.count(KEPT) / self.finished if self.finished else None

    @property
    def total_pct(self) -> float:
        return stats.pct(self.total_log)

    @property
    def total_interval(self) -> tuple[float | None, float | None]:
        """The total gain's confidence interval in percent (None, None while nothing is kept)."""
        if self.total_half_width is None:
            return None, None
        return stats.pct(self.total_log - self.total_half_width), stats.pct(self.total_log + self.total_half_width)

    @property
    def head_value(self) -> float | None:
        """The primary metric at the session head, estimated from the baseline and the total gain."""
        return None if self.baseline is None else self.baseline * math.exp(self.total_log)

    @property
    def best(self) -> Row | None:
        """The winner (improved, checks passed) with the largest change of the primary metric."""
        metric, sign = self.config.metric, 1.0 if self.config.direction == "higher" else -1.0
        winners = [r for r in self.rows if r.exp.is_winner and r.primary(metric).get("delta_pct") is not None]
        return max(winners, key=lambda r: sign * r.primary(metric)["delta_pct"], default=None)


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
        cost_usd=round(data.cost, 4), secondary_metrics_available=available, warnings=data.warnings,
    )


# --- reading the session ---------------------------------------------------------------------------


def load(repo_path: str) -> SessionData:
    root = Path(gitops.open_repo(repo_path).working_dir)
    if not (root / ".autoresearch").is_dir():
        raise StateError(f"{root} has no .autoresearch/ directory: no session ran there. Pass the repository "
                         "where start_session ran (or run start_session first)")
    config = load_config(root)
    if config is None:
        raise StateError(f"{root}/.autoresearch/config.json is missing: the session was never started there; "
                         "run start_session first")
    view = Ledger(state_dir(root) / "ledger.jsonl").view()
    commits, note = _branch_commits(root, config)
    data = _fold(root, config, view, commits, note)
    data.notes = session_notes.read(root, limit=None)
    return data


@dataclass
class _Link:
    """One step of the session head's chain: a commit and the experiments whose effect it carries."""

    sha: str
    ts: float
    experiments: list[ExperimentState]


def _fold(root: Path, config: SessionConfig, view: LedgerView, commits: list[KeptCommit],
          note: str | None) -> SessionData:
    mine = sorted((e for e in view.experiments.values() if e.launch.get("session_id") == config.session_id),
                  key=lambda e: float(e.launch.get("ts", 0)))
    warnings = list(view.warnings)
    chain = _chain(config, mine, commits, warnings)
    if note:
        warnings.append(note + "; the total is chained from the ledger's commit records instead")
        chain = [_Link(str(e.commit["commit"]), float(e.commit.get("ts", 0)), [e])
                 for e in sorted((e for e in mine if e.commit), key=lambda e: float((e.commit or {}).get("ts", 0)))
                 if e.commit]
    metric = config.metric
    # The session head after each commit of the branch: its log-ratio vs the start.
    level_of: dict[str, float] = {config.start_commit: 0.0}
    placed: dict[str, tuple[int, float]] = {}  # experiment id -> (position on the branch, head level after)
    errors: list[tuple[float, int]] = []
    level = 0.0
    for position, link in enumerate(chain):
        for exp in link.experiments:
            cmp = exp.metric(metric)
            level += _log(cmp.get("delta_pct"))
            error = stats.log_standard_error(cmp, _design(exp, config))
            if error is not None:
                errors.append(error)
        for exp in link.experiments:
            placed[exp.experiment_id] = (position, level)
        level_of[link.sha] = level
    for exp in mine:
        if exp.commit and exp.experiment_id not in placed:
            warnings.append(f"experiment {exp.experiment_id} ({exp.title!r}) was committed as "
                            f"{str(exp.commit.get('commit'))[:12]}, which is no longer on {config.branch} (reset or "
                            "rewritten?): it is not counted as kept")
    # For an experiment whose base commit left the branch: the head as it was when it was launched.
    times = list(itertools.accumulate((link.ts for link in chain), max))
    rows = []
    for index, exp in enumerate(mine, start=1):
        before = bisect.bisect_right(times, float(exp.launch.get("ts", 0)))
        fallback = level_of[chain[before - 1].sha] if before else 0.0
        row = Row(index, exp, _outcome(exp, exp.experiment_id in placed),
                  level_of.get(str(exp.launch.get("base_commit")), fallback))
        row.position, row.head_level = placed.get(exp.experiment_id, (None, None))
        cmp = row.primary(metric)
        if cmp.get("delta_pct") is not None:
            row.level = row.base_level + _log(cmp["delta_pct"])
            if cmp.get("ci_low_pct") is not None and cmp.get("ci_high_pct") is not None:
                row.level_low = row.base_level + _log(cmp["ci_low_pct"])
                row.level_high = row.base_level + _log(cmp["ci_high_pct"])
        rows.append(row)
    half = stats.combined_half_width(errors, 1 - config.alpha) if placed else None
    machines = sorted({_machine(e) for e in mine if e.result})
    return SessionData(root, config, rows, _baseline(view, config), level, half, 1 - config.alpha,
                       commits=commits, machines=machines, warnings=warnings)


def _chain(config: SessionConfig, mine: list[ExperimentState], commits: list[KeptCommit],
           warnings: list[str]) -> list[_Link]:
    """The branch's commits with the experiments the ledger records commit_winner making them as; a
    warning for each commit whose effect cannot be counted (made by hand, or rewritten since). Commit
    messages are never parsed for this: their text is not evidence."""
    by_commit = {str(e.commit.get("commit")): e for e in mine if e.commit}
    chain = []
    for commit in commits:
        exp = by_commit.get(commit.sha)
        commit.experiment_id = exp.experiment_id if exp else None
        if exp is None:
            title = commit.message.splitlines()[0] if commit.message else ""
            warnings.append(f"commit {commit.sha[:12]} ({title!r}) on {config.branch} is not one the ledger records "
                            "commit_winner making (made by hand, or rewritten since): its effect is not in the total")
        chain.append(_Link(commit.sha, commit.ts, [exp] if exp else []))
    return chain


def _design(exp: ExperimentState, config: SessionConfig) -> stats.Design:
    """The design the experiment was analyzed with (if unrecorded: the earliest one, a fixed t test at the
    session's alpha)."""
    recorded = exp.launch.get("design")
    if isinstance(recorded, dict):
        try:
            return stats.Design.from_dict(recorded)
        except (TypeError, KeyError):
            pass
    return stats.Design.from_dict({"looks": [max(2, int(exp.metric(config.metric).get("n_pairs") or 2))],
                                   "alphas": [config.alpha], "min_effect": config.min_effect,
                                   "noise_limit": config.noise_limit, "alpha": config.alpha})


def _outcome(exp: ExperimentState, on_branch: bool) -> str:
    if on_branch:
        return KEPT
    if exp.status not in FINAL_STATUSES:
        return RUNNING
    if exp.status in _FAILED_STATUSES or exp.verdict in _FAILED_VERDICTS:
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
    host = exp.outcome.get("host") or {}
    worker = exp.worker or "?"
    detail = ", ".join(str(x) for x in (host.get("hostname"), host.get("cpu_model"),
                                        f"{host['cpus']} CPUs" if host.get("cpus") else None) if x)
    return f"{worker} ({detail})" if detail else str(worker)


def _branch_commits(root: Path, config: SessionConfig) -> tuple[list[KeptCommit], str | None]:
    """The session branch's commits since the start, with messages and diff stats (one git call)."""
    try:
        log = gitops.branch_log(gitops.repo_at(root), config.start_commit, config.branch)
    except (gitops.GitError, InputError) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip()[:200]
        return [], f"the session branch {config.branch} could not be read from git ({detail})"
    return [KeptCommit(c.sha, c.message, c.stat, c.committed_at) for c in log], None


def _log(pct: float | None) -> float:
    return stats.log_pct(pct) or 0.0


# --- text ------------------------------------------------------------------------------------------


def _fmt_pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}%"


def _fmt_num(value: float | None) -> str:
    return "–" if value is None else f"{value:.6g}"


def summarize(data: SessionData) -> str:
    c = data.config
    low, high = data.total_interval
    rate = "–" if data.keep_rate is None else f"{data.keep_rate:.0%}"
    lines = [
        f"Session {c.tag} ({c.branch}) of {data.root}: {c.metric}, {c.direction} is better.",
        f"{len(data.rows)} experiments: {data.count(KEPT)} kept, {data.count(DISCARDED)} discarded, "
        f"{data.count(FAILED)} failed, {data.count(RUNNING)} running (keep rate {rate} of finished).",
        f"Baseline {_fmt_num(data.baseline)} -> about {_fmt_num(data.head_value)} at the head: total "
        f"{_fmt_pct(data.total_pct)}"
        + (f" ({data.confidence:.0%} CI {_fmt_pct(low)} to {_fmt_pct(high)}, combined from "
           f"{data.count(KEPT)} kept experiments; chained winners tend to overstate it)"
           if low is not None else " (nothing kept yet)") + ".",
    ]
    best = data.best
    if best is not None:
        lines.append(f"Best single experiment: {best.exp.title!r} "
                     f"{_fmt_pct(best.primary(c.metric).get('delta_pct'))} ({best.verdict}).")
    lines.append(f"Cost ${data.cost:.2f}; machines: {', '.join(data.machines) or 'none yet'}.")
    if data.notes:
        lines.append(f"Notes: {session_notes.count(data.notes)} in .autoresearch/notes.md (shown in the report).")
    return "\n".join(lines)


# --- chart -----------------------------------------------------------------------------------------


def render_chart(data: SessionData, secondary: list[str]) -> bytes:
    """PNG of every experiment in launch order: the primary metric vs the session start, with CI
    whiskers and the running best; one panel per requested secondary metric below it."""
    panels = 1 + len(secondary)
    # matplotlib only where the chart is drawn: the SessionStart hook and summaries load this module too
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.8 + 2.6 * len(secondary)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False, height_ratios=[1.8] + [1.0] * len(secondary))
    ax = axes[0][0]
    c = data.config
    _primary_panel(ax, data)
    ax.set_title(f"{c.tag}: {c.metric} ({c.direction} is better) — {len(data.rows)} experiments, "
                 f"{data.count(KEPT)} kept, total {_fmt_pct(data.total_pct)}", loc="left", fontsize=11)
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
            ax.annotate(_short(r.exp.title), (r.index, stats.pct(r.level) or 0.0), xytext=(4, 6),
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
    low, high = data.total_interval
    best = data.best
    facts = [
        ("repository", str(data.root)), ("branch", c.branch), ("started", f"{c.created_at} at {c.start_commit[:12]}"),
        ("metric", f"{c.metric} ({c.direction} is better)"), ("executor", c.executor),
        ("machines", ", ".join(data.machines) or "none yet"), ("baseline", _fmt_num(data.baseline)),
        ("at the head (estimated)", _fmt_num(data.head_value)),
        ("total gain", _fmt_pct(data.total_pct) + (
            f" ({data.confidence:.0%} CI {_fmt_pct(low)} to {_fmt_pct(high)}; combined from the kept "
            "experiments' standard errors, each from its own design, assuming independent errors). Note: "
            + WINNERS_CURSE if low is not None else " (nothing kept yet)")),
        ("best experiment", f"{best.exp.title} ({_fmt_pct(best.primary(c.metric).get('delta_pct'))})"
         if best else "–"),
        ("experiments", f"{len(data.rows)}: {data.count(KEPT)} kept, {data.count(DISCARDED)} discarded, "
                        f"{data.count(FAILED)} failed, {data.count(RUNNING)} running"),
        ("keep rate", "–" if data.keep_rate is None else f"{data.keep_rate:.0%} of finished"),
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
    if data.notes:
        parts.append('<section id="notes"><h2>Notes</h2><p class="muted">What the agent tried and learned, '
                     f"from .autoresearch/notes.md.</p><pre>{_e(data.notes)}</pre></section>")
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
        cost = r.exp.cost_usd
        log_link = (f'<a href="../logs/{_e(r.exp.experiment_id)}.log">log</a>'
                    if (logs / f"{r.exp.experiment_id}.log").exists() else "–")
        body.append(
            f'<tr class="{r.outcome}"><td class="num">{r.index}</td><td>{title}</td>'
            f"<td>{_sources(r.launch.get('sources') or [])}</td><td>{outcome}</td>"
            f'<td class="num">{_fmt_pct(cmp.get("delta_pct"))}</td><td class="num">{ci}</td>'
            f'<td class="num">{_fmt_pct(stats.pct(r.level))}</td><td class="num">{_e(cmp.get("n_pairs", 0))}</td>'
            f"<td>{_e(r.checks())}</td><td class=\"num\">{'–' if cost is None else f'${cost:.2f}'}</td>"
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


def tsv_text(data: SessionData) -> str:
    """One row per experiment; tabs and newlines inside text become spaces so every row is one line."""
    metric = data.config.metric
    fh = io.StringIO()
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
            cmp.get("n_pairs"), stats.pct(r.level), r.checks(), r.exp.cost_usd,
            r.exp.worker, "; ".join(map(str, r.launch.get("sources") or [])),
            " ".join(map(str, r.launch.get("changed_files") or [])), r.launch.get("hypothesis"),
        ]
        out.writerow(["" if v is None else re.sub(r"[\t\r\n]+", " ", str(v)) for v in values])
    return fh.getvalue()
