"""The executor port: where and how one experiment's A/B protocol runs (local machine or cloud VMs).

Executors run the shared runner script (core/runner.py) and report what it prints as events;
they never judge results. The experiment manager owns the ledger and the verdicts.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,  # pydantic validates typing's only from Python 3.12
)

from pydantic import Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from autoresearch_mcp.core import runner

log = logging.getLogger(__name__)


# --- what a job asks of the runner -----------------------------------------------------------------


class JobTimeouts(TypedDict):
    build: float
    bench: float
    checks: float


class JobSpec(TypedDict, total=False):
    """The runner job fields the manager sets (core/runner.py reads them from job.json, beside the
    paths an executor adds: experiment_id, baseline_dir, candidate_dir, log_path, machine_lock)."""

    metric: str
    direction: str
    design: dict[str, Any]  # measure/stats.py Design.job(): the plan core/decide.py applies
    judging: dict[str, Any]  # core/decide.py Spec: the metrics judged, their roles, the focus
    stops: list[int]  # the pair counts this round judges at; the last ends it
    timeouts: JobTimeouts
    threads: int | None
    seed: int
    run_checks: bool
    incremental: bool
    baseline_tree: str
    candidate_tree: str
    required_metrics: list[str]
    env: dict[str, str]
    platform: str
    measure: bool
    worktree_variant: str | None
    sandbox: str  # the session's `sandbox` setting (confined or off); executors add the scripts to bind
    frozen: list[str]  # the protected files of the tree (relative paths), bound read-only over themselves
    read_only: list[str]  # the commands (bench, checks) that see their tree read-only (config read_only_runs)
    prior_samples: list[dict[str, Any]]  # a continuation: the earlier rounds' samples (complete pairs)
    validate: int  # a validation run (start_session on a worker): how many benches
    profile: str  # a profile run (profile_hotspots on a worker): the profile's id


# --- what an executor reports, in order: status..., samples..., exactly one final event -------------
# Typed dicts, so a sink can keep them as they are; `parse_event` validates what a runner printed.


class StatusEvent(TypedDict):
    event: Literal["status"]
    status: str  # building, running, checking; queued when an executor requeues the job
    worker: NotRequired[str | None]
    runtime: NotRequired[dict[str, Any]]  # what a restart needs to find the job again (pid, cluster...)


class SampleEvent(TypedDict):
    event: Literal["sample"]
    pair: int
    role: str  # baseline or candidate
    metrics: dict[str, float]
    problems: list[str]


class LookEvent(TypedDict):
    event: Literal["look"]
    pairs: int
    verdict: str | None


class ResultEvent(TypedDict):
    """Final: the runner's result line (`outcome`), or a failure the executor saw."""

    event: Literal["result"]
    outcome: dict[str, Any]
    worker: NotRequired[str | None]
    cost_usd: NotRequired[float]


class CancelledEvent(TypedDict):
    """Final: the job was cancelled before it ended."""

    event: Literal["cancelled"]


class LostEvent(TypedDict):
    """Final: the machine running the job was lost and the job could not be run again."""

    event: Literal["lost"]
    detail: str


Event = Annotated[StatusEvent | SampleEvent | LookEvent | ResultEvent | CancelledEvent | LostEvent,
                  Field(discriminator="event")]
FINAL_EVENTS = ("result", "cancelled", "lost")
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)

# (experiment_id, event), called from an executor's thread
EventSink = Callable[[str, Event], None]


def parse_event(line: str, secret: str) -> StatusEvent | SampleEvent | LookEvent | None:
    """A progress event the runner printed (`runner.EVENT_PREFIX` line with the job's `secret`); None, with
    a warning, if it is not one. Final events never come from these lines: the result line and the
    executor give them."""
    payload = runner.read_machine_line(line.rstrip("\n"), runner.EVENT_PREFIX, secret)
    if payload is None:
        log.warning("ignoring a runner event line without the job's secret: %r", line[:200])
        return None
    try:
        event = _EVENT.validate_python(payload)
    except (ValueError, ValidationError) as exc:
        log.warning("ignoring a malformed runner event %r: %s", line[:200], exc)
        return None
    if event["event"] in FINAL_EVENTS:
        log.warning("ignoring a final event printed as a runner event: %r", line[:200])
        return None
    return event  # type: ignore[return-value]  # narrowed by the check above


@dataclass
class Job:
    """One experiment as an executor sees it."""

    experiment_id: str
    base_commit: str
    candidate_commit: str
    log_path: Path
    spec: JobSpec = field(default_factory=lambda: JobSpec())


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

    def confinement_problem(self, mode: str) -> str | None:
        """Why this executor cannot confine jobs as the session's `sandbox` setting asks (None: it can, or
        it learns so only on its workers, whose runner then refuses the job with the reason)."""
        return None

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
    writes: list[str] | None = None  # what the bench runs wrote into the tree (None: not looked at)


# Runs the validation somewhere other than this machine: (head commit, its git tree) -> raw results.
RemoteValidator = Callable[[str, str], ValidationRun]
