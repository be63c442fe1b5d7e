"""The append-only ledger: `.autoresearch/ledger.jsonl`, one JSON object a line, the source of truth.

Each record has a `type` (`session`, `launch`, `status`, `result`, `continue`, `platform`, `commit`,
`workers`, `holdout`: one typed model each in store/records.py, with a `schema_version`) and, except
for `session` and `workers` (stop_workers released the session's machines), an `experiment_id`;
`platform` records (a status or a result of one of the other platforms a winner is checked on) also
name their `platform`. A `continue` record starts another round of pairs of the same experiment; its
result pools the earlier rounds' samples. Records are never rewritten (an older format is migrated as
it is read); the current state of an experiment is the fold of its records, so the ledger survives
restarts and every summary can be recomputed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp import safefs
from autoresearch_mcp.store.records import (
    Analysis,
    CommitRecord,
    Comparison,
    ContinueRecord,
    HoldoutRecord,
    LaunchRecord,
    Outcome,
    PlatformFields,
    PlatformRecord,
    ProfileRecord,
    Record,
    ResultRecord,
    SessionRecord,
    StatusRecord,
    parse,
)

log = logging.getLogger(__name__)


class PlatformState(PlatformFields):
    """The fold of an experiment's records on one other platform (the latest value of each field)."""

    ts: float = 0.0


_PLATFORM_FIELDS = tuple(f for f in PlatformState.model_fields if f != "runtime")


@dataclass
class ExperimentState:
    """The fold of one experiment's records."""

    experiment_id: str
    launch: LaunchRecord
    status: str = "queued"
    status_detail: str | None = None
    result: ResultRecord | None = None
    commit: CommitRecord | None = None
    holdout: HoldoutRecord | None = None  # the latest holdout A/B commit_winner ran
    updated_at: float = 0.0
    worker: str | None = None
    runtime: dict[str, Any] = field(default_factory=dict)
    platforms: dict[str, PlatformState] = field(default_factory=dict)
    rounds: list[ResultRecord] = field(default_factory=list)  # results of earlier rounds, oldest first
    continued: ContinueRecord | None = None  # the latest `continue` record

    @property
    def title(self) -> str:
        return self.launch.title

    @property
    def analysis(self) -> Analysis:
        """The statistics of the finished run (`metrics`, `verdict`, ...); empty until a result."""
        return self.result.analysis if self.result else Analysis()

    @property
    def verdict(self) -> str | None:
        return self.analysis.verdict

    @property
    def metrics(self) -> dict[str, Comparison]:
        """Metric name -> its paired comparison (delta_pct, ci_low_pct, ci_high_pct, n_pairs, ...)."""
        return self.analysis.metrics

    def metric(self, name: str) -> Comparison:
        """The comparison of one metric (the primary one, usually); empty if it was not measured."""
        return self.metrics.get(name) or Comparison()

    @property
    def outcome(self) -> Outcome:
        """What the executor reported: samples, checks, host, durations, ...; empty until a result."""
        return self.result.outcome if self.result else Outcome()

    @property
    def checks_passed(self) -> bool:
        """Whether its checks ran and passed (a winner's first condition)."""
        checks = self.outcome.checks
        return checks is not None and checks.passed

    @property
    def measured(self) -> ResultRecord | None:
        """The latest round that ran to its end (`done` or `checks_failed`): its samples are the ones
        more pairs are pooled with. None if no round got that far."""
        for result in ([self.result] if self.result else []) + self.rounds[::-1]:
            if result.status in ("done", "checks_failed"):
                return result
        return None


@dataclass
class LedgerView:
    sessions: list[SessionRecord] = field(default_factory=list)
    experiments: dict[str, ExperimentState] = field(default_factory=dict)
    profiles: list[ProfileRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # session id -> where the ledger left its branch: the head its latest validation measured, or the
    # latest commit commit_winner made there, whichever came last
    heads: dict[str, str] = field(default_factory=dict)


class Ledger:
    """The session's one ledger object: appends are serialized, flushed and fsynced, so a crash loses at most
    the record in flight; the file is read once, and its fold kept up to date by every append."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._view: LedgerView | None = None

    def append(self, record: Record | dict[str, Any]) -> Record:
        """Write one record (a dict is read as the record its `type` names), stamped with the time
        unless it carries its own, and fold it into the view once it is written."""
        if isinstance(record, dict):
            record = parse(record)
        if not record.carries("ts"):
            record = record.model_copy(update={"ts": round(time.time(), 3)})
        line = json.dumps(record.line(), separators=(",", ":"), allow_nan=False) + "\n"
        # the repository is the anchor: no link below it (.autoresearch, the ledger) is followed
        with self._lock:
            with safefs.open_write(self.path.parent.parent, self.path, "a") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
            if self._view is not None:
                apply(self._view, record)
        return record

    def records(self) -> tuple[list[Record], list[str]]:
        """Every record this code can read, migrated to the current format; a torn or corrupt line,
        or a record of an unknown type or a newer format, is skipped with a warning, never fatal."""
        if not self.path.exists():
            return [], []
        out: list[Record] = []
        warnings: list[str] = []
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError:
                    warnings.append(f"ledger line {number} is torn or corrupt and was skipped")
                    continue
                if not isinstance(raw, dict):
                    warnings.append(f"ledger line {number} is not a JSON object and was skipped")
                    continue
                try:
                    out.append(parse(raw))
                except ValueError as exc:
                    warnings.append(f"ledger line {number} was skipped: {exc}")
        for w in warnings:
            log.warning("%s: %s", self.path, w)
        return out, warnings

    def view(self) -> LedgerView:
        """The fold of every record: read from the file the first time, then kept by `append` (the one view
        of the server: callers that change it hold the manager's lock)."""
        with self._lock:
            if self._view is None:
                records, warnings = self.records()
                self._view = fold(records, warnings)
            return self._view

    def folding(self) -> tuple[LedgerView, Callable[[Record], None]]:
        """The ledger's view, and an append that folds each record it writes into that view."""
        def append(record: Record) -> None:
            self.append(record)

        return self.view(), append


def fold(records: list[Record], warnings: list[str] | None = None) -> LedgerView:
    view = LedgerView(warnings=list(warnings or []))
    for rec in records:
        apply(view, rec)
    return view


def apply(view: LedgerView, rec: Record) -> None:
    """Fold one record into the view."""
    if isinstance(rec, SessionRecord):
        view.sessions.append(rec)
        if rec.head:
            view.heads[rec.session_id] = rec.head
        return
    if isinstance(rec, ProfileRecord):
        view.profiles.append(rec)
        return
    if isinstance(rec, LaunchRecord):
        view.experiments[rec.experiment_id] = ExperimentState(rec.experiment_id, rec, updated_at=rec.ts)
        return
    exp_id = getattr(rec, "experiment_id", None)
    if exp_id is None:  # `workers`: no experiment's
        return
    exp = view.experiments.get(exp_id)
    if exp is None:
        view.warnings.append(f"record for unknown experiment {exp_id} skipped")
        return
    exp.updated_at = rec.ts if rec.carries("ts") else exp.updated_at
    if isinstance(rec, StatusRecord):
        exp.status = rec.status
        exp.status_detail = rec.detail
        exp.worker = rec.worker if rec.carries("worker") else exp.worker
        exp.runtime.update(rec.runtime)
    elif isinstance(rec, ResultRecord):
        if exp.result is not None:  # a round has one result, its first: a later one (a cleanup's) never replaces it
            view.warnings.append(f"a second result of experiment {exp_id} ({rec.status}) ignored: the first stands")
            return
        exp.result = rec
        exp.status = rec.status
        exp.worker = rec.worker if rec.carries("worker") else exp.worker
    elif isinstance(rec, PlatformRecord):
        state = exp.platforms.setdefault(rec.platform, PlatformState())
        for name in _PLATFORM_FIELDS:
            if rec.carries(name):
                setattr(state, name, getattr(rec, name))
        state.runtime = {**state.runtime, **rec.runtime}
    elif isinstance(rec, ContinueRecord):
        if exp.result is not None:
            exp.rounds.append(exp.result)
        exp.result = None
        exp.continued = rec
        exp.status, exp.status_detail, exp.worker = "queued", None, None
    elif isinstance(rec, CommitRecord):
        exp.commit = rec
        view.heads[exp.launch.session_id] = rec.commit
    elif isinstance(rec, HoldoutRecord):
        exp.holdout = rec
