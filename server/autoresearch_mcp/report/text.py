"""The session as plain text: the few-line summary (tool result, SessionStart hook) and results.tsv."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re

from autoresearch_mcp import notes as session_notes
from autoresearch_mcp.measure import figures, stats
from autoresearch_mcp.measure.figures import experiment_cost
from autoresearch_mcp.report.accounting import DISCARDED, FAILED, KEPT, RUNNING, SessionData
from autoresearch_mcp.report.format import pct


def summarize(data: SessionData) -> str:
    """The session in a few lines: counts, keep rate, total gain with its interval, best, cost."""
    c = data.config
    low, high = data.total_interval
    rate = "–" if data.keep_rate is None else f"{data.keep_rate:.0%}"
    lines = [
        f"Session {c.tag} ({c.branch}) of {data.root}: {c.metric}, {c.direction} is better.",
        f"{len(data.rows)} experiments: {data.count(KEPT)} kept, {data.count(DISCARDED)} discarded, "
        f"{data.count(FAILED)} failed, {data.count(RUNNING)} running (keep rate {rate} of finished).",
        f"Baseline {data.baseline_label}.",
        f"At the head: {data.head_label}.",
        f"Total {pct(data.total_pct)}"
        + (f" ({data.total_level:.0%} CI {pct(low)} to {pct(high)}, {data.total_basis}; selected winners tend to "
           "overstate it)" if low is not None else " (nothing kept yet)") + ".",
    ]
    total = data.session_total
    if total is not None:
        cmp = total.primary(c.metric)
        level = cmp.get("ci_level")
        lines.append(f"Measured together (the head against the start, {cmp.get('n_pairs', 0)} pairs): "
                     f"{pct(cmp.get('delta_pct'))} ({f'{level:.0%} CI ' if level else ''}{pct(cmp.get('ci_low_pct'))} "
                     f"to {pct(cmp.get('ci_high_pct'))}), {total.verdict}; compare with the chained total.")
    if data.count(KEPT):
        lines.append(f"End to end: {data.session_claim}.")
    best = data.best
    if best is not None:
        lines.append(f"Best single experiment: {best.exp.title!r} "
                     f"{pct(best.primary(c.metric).get('delta_pct'))} ({best.verdict}).")
    lines.append(f"Cost ${data.cost:.2f}; machines: {', '.join(data.machines) or 'none yet'}.")
    lines += [w[:1].upper() + w[1:] + "." for w in figures.unconfined_warning(r.exp for r in data.rows)]
    if data.notes:
        lines.append(f"Notes: {session_notes.count(data.notes)} in .autoresearch/notes.md (shown in the report).")
    return "\n".join(lines)


TSV_COLUMNS = [
    "index", "experiment_id", "launched_at", "title", "status", "verdict", "outcome", "commit", "metric",
    "direction", "baseline_mean", "candidate_mean", "delta_pct", "ci_low_pct", "ci_high_pct", "p_value",
    "n_pairs", "vs_start_pct", "checks", "cost_usd", "worker", "sources", "changed_files", "hypothesis",
    "figures",  # samples: recomputed from the stored samples; recorded: the ledger's analysis; none
]


def tsv_text(data: SessionData) -> str:
    """One row per experiment; tabs and newlines inside text become spaces so every row is one line."""
    metric = data.config.metric
    fh = io.StringIO()
    out = csv.writer(fh, delimiter="\t", lineterminator="\n")
    out.writerow(TSV_COLUMNS)
    for r in data.rows:
        cmp = r.primary(metric)
        launched = dt.datetime.fromtimestamp(r.launch.ts, dt.UTC).isoformat(timespec="seconds")
        values: list[object] = [
            r.index, r.exp.experiment_id, launched, r.exp.title, r.exp.status, r.shown_verdict, r.outcome,
            r.exp.commit.commit if r.exp.commit else None, metric, data.config.direction,
            (cmp.get("baseline") or {}).get("mean"), (cmp.get("candidate") or {}).get("mean"),
            cmp.get("delta_pct"), cmp.get("ci_low_pct"), cmp.get("ci_high_pct"), cmp.get("p_value"),
            cmp.get("n_pairs"), stats.pct(r.level), r.checks(), experiment_cost(r.exp),
            r.exp.worker, "; ".join(r.launch.sources),
            " ".join(r.launch.changed_files), r.launch.hypothesis,
            r.measured.source,
        ]
        out.writerow(["" if v is None else re.sub(r"[\t\r\n]+", " ", str(v)) for v in values])
    return fh.getvalue()
