"""The report page: one self-contained HTML file (chart inline, no script, no network), rendered from a
Jinja2 template with autoescaping, so every text the agent wrote (titles, hypotheses, sources,
commit messages, notes) reaches the page as text."""

from __future__ import annotations

import base64
import datetime as dt
import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from autoresearch_mcp.measure import stats
from autoresearch_mcp.measure.figures import experiment_cost
from autoresearch_mcp.report.accounting import DISCARDED, FAILED, KEPT, RUNNING, Row, SessionData
from autoresearch_mcp.report.format import pct, short
from autoresearch_mcp.report.measured import RECORDED, SAMPLES
from autoresearch_mcp.store.config import state_dir

if TYPE_CHECKING:
    import jinja2

WINNERS_CURSE = ("chaining the experiments that were selected because they measured best tends to overstate "
                 "the gain (winner's curse): measure the session head against the start to confirm it")


@cache
def _template() -> jinja2.Template:
    import jinja2  # only where the page is rendered: the SessionStart hook imports the package too

    env = jinja2.Environment(loader=jinja2.PackageLoader("autoresearch_mcp.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    return env.get_template("report.html.j2")


@dataclass(frozen=True)
class _RowView:
    """One line of the experiments table, as text (escaped by the template)."""

    index: int
    id: str
    outcome: str
    title: str
    hypothesis: str
    sources: list[tuple[str, str | None]]  # (text, link target if it is a web address)
    verdict: str
    figures: str | None  # where the figures come from, unless recomputed from samples
    change: str
    ci: str
    vs_start: str
    pairs: str
    checks: str
    cost: str
    log: bool


def render_html(data: SessionData, png: bytes) -> str:
    logs = state_dir(data.root) / "logs"
    return _template().render(
        config=data.config, facts=_facts(data), chart=base64.b64encode(png).decode("ascii"),
        written=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        rows=[_row(r, data.config.metric, (logs / f"{r.exp.experiment_id}.log").exists()) for r in data.rows],
        commits=data.commits, notes=data.notes, warnings=data.warnings)


def _facts(data: SessionData) -> list[tuple[str, str]]:
    c = data.config
    low, high = data.total_interval
    best = data.best
    return [
        ("repository", str(data.root)), ("branch", c.branch), ("started", f"{c.created_at} at {c.start_commit[:12]}"),
        ("metric", f"{c.metric} ({c.direction} is better)"), ("executor", c.executor),
        ("machines", ", ".join(data.machines) or "none yet"), ("baseline", data.baseline_label),
        ("at the head", data.head_label),
        ("total gain", pct(data.total_pct) + (
            f" ({data.total_level:.0%} CI {pct(low)} to {pct(high)}; {data.total_basis}). "
            "Note: " + WINNERS_CURSE if low is not None else " (nothing kept yet)")),
        ("best experiment", f"{best.exp.title} ({pct(best.primary(c.metric).get('delta_pct'))})" if best else "–"),
        ("experiments", f"{len(data.rows)}: {data.count(KEPT)} kept, {data.count(DISCARDED)} discarded, "
                        f"{data.count(FAILED)} failed, {data.count(RUNNING)} running"),
        ("keep rate", "–" if data.keep_rate is None else f"{data.keep_rate:.0%} of finished"),
        ("cost", f"${data.cost:.2f}"),
    ]


def _row(r: Row, metric: str, has_log: bool) -> _RowView:
    cmp = r.primary(metric)
    verdict = r.shown_verdict or r.exp.status
    if r.verdict is not None and r.exp.status not in ("done", "checks_failed"):
        verdict += f" ({r.exp.status})"
    source = r.measured
    figures = (None if source.source == SAMPLES or source.why is None
               else f"as recorded, not recomputed: {source.why}" if source.source == RECORDED
               else source.why)
    cost = experiment_cost(r.exp)
    return _RowView(
        index=r.index, id=r.exp.experiment_id, outcome=r.outcome, title=r.exp.title,
        hypothesis=short(r.launch.hypothesis, 400),
        sources=[(short(str(s), 60), str(s)) if re.fullmatch(r"https?://\S+", str(s)) else (short(str(s), 120), None)
                 for s in r.launch.sources],
        verdict=verdict, figures=figures, change=pct(cmp.get("delta_pct")),
        ci=(f"{pct(cmp.get('ci_low_pct'))} … {pct(cmp.get('ci_high_pct'))}"
            + (f" ({cmp['ci_level']:.0%})" if cmp.get("ci_level") else "")
            if cmp.get("ci_low_pct") is not None else "–"),
        vs_start=pct(stats.pct(r.level)), pairs=str(cmp.get("n_pairs", 0)), checks=r.checks(),
        cost="–" if cost is None else f"${cost:.2f}", log=has_log)
