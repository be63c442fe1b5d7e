"""The append-only ledger: `.autoresearch/ledger.jsonl`, one JSON object a line, the source of truth.

Each record has a `type` (`session`, `launch`, `status`, `result`, `continue`, `platform`, `commit`,
`workers`) and, except for `session` and `workers` (stop_workers released the session's machines),
an `experiment_id`; `platform` records (a status or a result of one of the other platforms a winner
is checked on) also name their `platform`. A `continue` record starts another round of pairs of the
same experiment; its result pools the earlier rounds' samples. Records are never rewritten; the
current state of an experiment is the fold of its records, so the ledger survives restarts and every
summary can be recomputed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp import safefs

log = logging.getLogger(__name__)


@dataclass
class ExperimentState:
    """The fold of one experiment's records."""

    experiment_id: str
    launch: dict[str, Any]
    status: str = "queued"
    status_detail: str | None = None
    result: dict[str, Any] | None = None
    commit: dict[str, Any] | None = None
    updated_at: float = 0.0
    worker: str | None = None
    runtime: dict[str, Any] = field(default_factory=dict)
    platforms: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> its folded records
    rounds: list[dict[str, Any]] = field(default_factory=list)  # results of earlier rounds, oldest first
    continued: dict[str, Any] | None = None  # the latest `continue` record

    @property
    def title(self) -> str:
        return str(self.launch.get("title", ""))

    @property
    def analysis(self) -> dict[str, Any]:
        """The statistics of the finished run (`metrics`, `verdict`, ...); empty until a result."""
        analysis: dict[str, Any] = (self.result or {}).get("analysis") or {}
        return analysis

    @property
    def verdict(self) -> str | None:
        verdict = self.analysis.get("verdict")
        return None if verdict is None else str(verdict)

    @property
    def metrics(self) -> dict[str, dict[str, Any]]:
        """Metric name -> its paired comparison (delta_pct, ci_low_pct, ci_high_pct, n_pairs, ...)."""
        metrics: dict[str, dict[str, Any]] = self.analysis.get("metrics") or {}
        return metrics

    def metric(self, name: str) -> dict[str, Any]:
        """The comparison of one metric (the primary one, usually); empty if it was not measured."""
        return self.metrics.get(name) or {}

    @property
    def outcome(self) -> dict[str, Any]:
        """What the executor reported: samples, checks, host, durations, ...; empty until a result."""
        outcome: dict[str, Any] = (self.result or {}).get("outcome") or {}
        return outcome

    @property
    def checks(self) -> dict[str, Any]:
        checks: dict[str, Any] = self.outcome.get("checks") or {}
        return checks

    @property
    def measured(self) -> dict[str, Any] | None:
        """The latest round that ran to its end (`done` or `checks_failed`): its samples are the ones
        more pairs are pooled with. None if no round got that far."""
        for result in ([self.result] if self.result else []) + self.rounds[::-1]:
            if result.get("status") in ("done", "checks_failed"):
                return result
        return None


@dataclass
class LedgerView:
    sessions: list[dict[str, Any]] = field(default_factory=list)
    experiments: dict[str, ExperimentState] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class Ledger:
    """Appends are serialized, flushed and fsynced, so a crash loses at most the record in flight."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        record = {"ts": round(time.time(), 3), **record}
        line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
        # the repository is the anchor: no link below it (.autoresearch, the ledger) is followed
        with self._lock, safefs.open_write(self.path.parent.parent, self.path, "a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        return record

    def records(self) -> tuple[list[dict[str, Any]], list[str]]:
        """All well-formed records; a torn or corrupt line is skipped with a warning, never fatal."""
        if not self.path.exists():
            return [], []
        out: list[dict[str, Any]] = []
        warnings: list[str] = []
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    warnings.append(f"ledger line {number} is torn or corrupt and was skipped")
                    continue
                if isinstance(rec, dict):
                    out.append(rec)
                else:
                    warnings.append(f"ledger line {number} is not a JSON object and was skipped")
        for w in warnings:
            log.warning("%s: %s", self.path, w)
        return out, warnings

    def view(self) -> LedgerView:
        records, warnings = self.records()
        return fold(records, warnings)


def fold(records: list[dict[str, Any]], warnings: list[str] | None = None) -> LedgerView:
    view = LedgerView(warnings=list(warnings or []))
    for rec in records:
        apply(view, rec)
    return view


def apply(view: LedgerView, rec: dict[str, Any]) -> None:
    """Fold one record into the view."""
    kind = rec.get("type")
    if kind == "session":
        view.sessions.append(rec)
        return
    exp_id = rec.get("experiment_id")
    if not isinstance(exp_id, str):
        return
    if kind == "launch":
        view.experiments[exp_id] = ExperimentState(exp_id, rec, updated_at=float(rec.get("ts", 0)))
        return
    exp = view.experiments.get(exp_id)
    if exp is None:
        view.warnings.append(f"record for unknown experiment {exp_id} skipped")
        return
    exp.updated_at = float(rec.get("ts", exp.updated_at))
    if kind == "status":
        exp.status = str(rec["status"])
        exp.status_detail = rec.get("detail")
        exp.worker = rec.get("worker", exp.worker)
        exp.runtime.update(rec.get("runtime") or {})
    elif kind == "result":
        exp.result = rec
        exp.status = str(rec["status"])
        exp.worker = rec.get("worker", exp.worker)
    elif kind == "platform":
        state = exp.platforms.setdefault(str(rec.get("platform")), {})
        state.update({k: v for k, v in rec.items() if k not in ("type", "experiment_id", "platform", "runtime")})
        state["runtime"] = {**state.get("runtime", {}), **(rec.get("runtime") or {})}
    elif kind == "continue":
        if exp.result is not None:
            exp.rounds.append(exp.result)
        exp.result = None
        exp.continued = rec
        exp.status, exp.status_detail, exp.worker = "queued", None, None
    elif kind == "commit":
        exp.commit = rec
