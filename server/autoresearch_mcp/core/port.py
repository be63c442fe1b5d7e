"""The executor port: where and how one experiment's A/B protocol runs (local machine or cloud VMs).

Executors run the shared runner script (core/runner.py) and report what it prints as events;
they never judge results. The experiment manager owns the ledger and the verdicts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp.core import runner

# (experiment_id, event): events are {"event": "status", "status": ..., "worker"?, "runtime"?},
# {"event": "sample", ...} and finally exactly one {"event": "result", "outcome": {...}}.
EventSink = Callable[[str, dict[str, Any]], None]


@dataclass
class Job:
    """One experiment as an executor sees it."""

    experiment_id: str
    base_commit: str
    candidate_commit: str
    log_path: Path
    spec: dict[str, Any] = field(default_factory=dict)  # runner job fields: metric, design, timeouts...


@dataclass
class Released:
    """What `release` did: the machines released, what the user should know, what they cost."""

    names: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cost_usd: float | None = None


@dataclass
class Interrupted:
    """An experiment the ledger shows as unfinished after a restart."""

    experiment_id: str
    worker: str | None
    runtime: dict[str, Any]


class Executor(ABC):
    name: str

    @abstractmethod
    def submit(self, job: Job, sink: EventSink) -> None:
        """Queue the job and return at once; events arrive on `sink` from another thread."""

    @abstractmethod
    def cancel(self, experiment_id: str) -> bool:
        """Stop a queued or running job (and everything it started); True if it was ours."""

    @abstractmethod
    def recover(self, interrupted: list[Interrupted]) -> None:
        """After a restart: kill what is left of interrupted jobs and clean their files."""

    def release(self, mode: str) -> Released:
        """Stop (`stop`) or delete (`down`) the machines of the session."""
        return Released()

    def retire_base(self, commit: str) -> None:  # noqa: B027 - optional hook
        """A base commit no longer used by any experiment; its build may be dropped."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop accepting jobs and cancel those in flight (server shutdown)."""


# How many times start_session benches the head to validate the benchmark.
VALIDATION_RUNS = 2


@dataclass
class ValidationRun:
    """The raw results of building the session head once and benching it VALIDATION_RUNS times
    (fewer when a run fails), wherever that ran: `where` names the machine in messages."""

    where: str
    build: runner.CommandResult | None  # None when an existing build was reused
    build_s: float
    runs: list[runner.CommandResult]
    worker: str | None = None  # the cloud worker it ran on, as start_session reports it


# Runs the validation somewhere other than this machine: (head commit, its git tree) -> raw results.
RemoteValidator = Callable[[str, str], ValidationRun]
