"""The executor port: where and how one experiment's A/B protocol runs (local machine or cloud VMs).

Executors run the shared runner script (worker/runner.py) and report what it prints as events;
they never judge results. The experiment manager owns the ledger and the verdicts.
"""

from __future__ import annotations

import logging
import threading
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

from autoresearch_mcp import progress
from autoresearch_mcp.errors import StateError
from autoresearch_mcp.worker import channel, jobfile, outcomes, procs

log = logging.getLogger(__name__)


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


class ProgressEvent(TypedDict):
    """A step of a job the server waits for (a validation): told to the waiting call's client."""

    event: Literal["progress"]
    message: str


class LookEvent(TypedDict):
    event: Literal["look"]
    pairs: int
    verdict: str | None


class ResultEvent(TypedDict):
    """Final: the runner's result line (`outcome`: its kind's record as `to_dict` writes it, read back with
    worker/outcomes.py `ended`), or a failure the executor saw."""

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


Event = Annotated[StatusEvent | SampleEvent | LookEvent | ProgressEvent | ResultEvent | CancelledEvent | LostEvent,
                  Field(discriminator="event")]
FINAL_EVENTS = ("result", "cancelled", "lost")
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)

# (experiment_id, event), called from an executor's thread
EventSink = Callable[[str, Event], None]


def parse_event(line: str, secret: str) -> StatusEvent | SampleEvent | LookEvent | ProgressEvent | None:
    """A progress event the runner printed (`channel.EVENT_PREFIX` line with the job's `secret`); None, with
    a warning, if it is not one. Final events never come from these lines: the result line and the
    executor give them."""
    payload = channel.read_machine_line(line.rstrip("\n"), channel.EVENT_PREFIX, secret)
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
    """One job as an executor sees it: its record (executors/jobs.py builds it), the commits whose trees it places,
    and where its log goes."""

    experiment_id: str
    base_commit: str
    candidate_commit: str
    log_path: Path
    spec: jobfile.Job = field(default_factory=jobfile.Experiment)


def failed(experiment_id: str, phase: str, error: str) -> ResultEvent:
    """The final event of a job an executor could not run to its result (its disk, its runner, its machine)."""
    return {"event": "result", "outcome": outcomes.Failure(phase, error).outcome(experiment_id).to_dict()}


def result_of(job: Job, line: dict[str, Any]) -> outcomes.Outcome:
    """The runner's result line of `job` (its payload), read as its kind's outcome; a failed one that says why where
    it cannot be read."""
    try:
        return outcomes.read(outcomes.KINDS[job.spec.kind], line)
    except outcomes.OutcomeError as exc:
        return outcomes.Failure("runner", f"its result cannot be read: {exc}").outcome(job.experiment_id)


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

    def run_first(self, job: Job) -> Event:
        """Run `job` (ahead of queued experiments, where the executor queues) and wait for its final event."""
        final: list[Event] = []
        done = threading.Event()
        listener = progress.current()  # the waiting call's: events arrive on another thread

        def sink(_exp_id: str, event: Event) -> None:
            if event["event"] == "progress":
                with progress.listening(listener):
                    progress.report(event["message"])
            if event["event"] in FINAL_EVENTS:
                final.append(event)
                done.set()

        self.submit_first(job, sink)
        done.wait()
        return final[0]

    def submit_first(self, job: Job, sink: EventSink) -> None:
        """`submit`, ahead of the jobs already queued where the executor keeps a queue of its own."""
        self.submit(job, sink)

    def validate(self, job: Job) -> ValidationRun:
        """Run a validation job (jobs.JobMaker.validation or head_check) and wait for its raw results."""
        return validation_run(self.run_first(job), job)

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
    build: procs.CommandResult | None  # None when an existing build was reused
    build_s: float
    runs: list[procs.CommandResult]
    worker: str | None = None  # the cloud worker it ran on, as start_session reports it
    writes: list[str] | None = None  # what the bench runs wrote into the tree (None: not looked at)
    checks: dict[str, Any] | None = None  # the checks as they are (a checks trial or a head check)
    checks_writes: list[str] | None = None  # what they wrote into the tree
    checks_read_only: dict[str, Any] | None = None  # the checks again with the tree read-only (a checks trial)
    shape: dict[str, Any] | None = None  # a run alone and one at half duty (runner.shape_trial)


def _command(raw: dict[str, Any] | None, argv: list[str]) -> procs.CommandResult | None:
    if raw is None:
        return None
    res = procs.CommandResult(argv, raw["exit_code"], float(raw["duration_s"]), bool(raw["timed_out"]),
                               str(raw["output"]))
    res.wall_s, res.span_s = raw.get("wall_s"), raw.get("span_s")  # in turns: its own turns, and its whole span
    res.cpu_s = raw.get("cpu_s")
    return res


def validation_run(final: Event, job: Job) -> ValidationRun:
    """What a validation job's final event says, or the error that says why it gave no result."""
    done = outcomes.ended(final, outcomes.Validation)
    worker = final.get("worker")
    failure = done.failure()
    if failure is not None:
        on = f" on {worker}" if worker else ""
        if failure.phase in ("sandbox", "runner") and final["event"] == "result":
            raise StateError(f"the benchmark cannot be validated{on}: {failure.error}")
        raise StateError(f"the validation job{on} ended without its result ({failure.error}); read {job.log_path}")
    host = done.host
    where = done.tree or "?"
    if worker and worker != "local":
        price = host.get("hourly_usd")
        where = (f"{worker} ({host.get('cloud')}, {host.get('region')}, {host.get('instance_type')}"
                 + (f", ${price:.3f}/h)" if price is not None else ", price unknown)"))
    runs = [_command(r, ["bash", "./autoresearch.sh", "bench"]) for r in done.runs]
    return ValidationRun(where, _command(done.build, ["bash", "./autoresearch.sh", "build"]), done.build_s,
                         [r for r in runs if r is not None], worker=where if worker and worker != "local" else None,
                         writes=done.writes, checks=done.checks, checks_writes=done.checks_writes,
                         checks_read_only=done.checks_read_only, shape=done.shape)
