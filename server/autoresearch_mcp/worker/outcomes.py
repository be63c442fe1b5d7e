"""A runner job's outcome: one typed, versioned record per kind of job, beside its job record (jobfile.py), and the
one reader of it.

Standard library only (shipped beside the runner): each handler of the runner returns its kind's record, the runner
prints `to_dict()` in its result line (channel.py), an executor reads that line back with `read` as the record of
the job's kind, and the server reads a job's final event with `ended`. A field the kind does not declare, or a newer
version, is refused when the line is read, as a job file is (jobfile.read): nothing is added to an outcome on its
way, and nothing reads it by key.

Every record has the fields of `Outcome`, so a failure (`Failure.outcome`) is a result of any kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from . import jobfile

VERSION = 1


class OutcomeError(ValueError):
    """A result this reader cannot read: a newer version, a field its kind does not have."""


@dataclass
class Failure:
    """Why a job ended without the result it was for: where (`phase`: disk, sandbox, build, bench, runner,
    cancelled, lost...) and what was said."""

    phase: str
    error: str

    def outcome(self, experiment_id: str) -> Outcome:
        """As a runner's failed result: the fields every kind of outcome has."""
        return Outcome(experiment_id, status="failed", phase=self.phase, error=self.error)


@dataclass
class Outcome:
    """What every outcome carries: its job's id; `status` (done; failed, with where and why: `phase`, `error`); how
    its commands ran (`sandbox`: confined, or off by the user's choice); the machine (`host`, a worker adds its
    cloud and price) and the seconds of each phase (`durations`, an executor adds its `prepare`)."""

    kind: ClassVar[str] = ""

    experiment_id: str = ""
    status: str = "done"
    phase: str | None = None
    error: str | None = None
    sandbox: str | None = None
    host: dict[str, Any] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The result line's JSON object: the format's version and every field."""
        return {"version": VERSION, **dataclasses.asdict(self)}

    def failure(self) -> Failure | None:
        """Why the job ended without the result it was for; None when it has it."""
        if self.status != "failed":
            return None
        return Failure(self.phase or "runner", self.error or "no reason given")


@dataclass
class Sample:
    """One side's run of one pair (or of the warmup, at a negative pair): its metrics, the median of its
    `processes` bench runs, or the problems that make it unusable."""

    pair: int
    role: str  # baseline or candidate
    position: int | None = None  # which of the pair ran first (0) or second (1); None in the earliest ledgers
    exit_code: int | None = None
    duration_s: float = 0.0
    timed_out: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)  # printed resolution of each metric
    processes: int = 1  # the bench runs (processes) whose median each metric is

    def to_dict(self) -> dict[str, Any]:
        """As the statistics read samples (worker/decide.py): its fields, shallow (nothing there changes them)."""
        return dict(vars(self))


@dataclass
class Measured(Outcome):
    """An A/B's outcome: both trees built (`build`, per role), then interleaved pairs of runs (`samples`)."""

    samples: list[Sample] = field(default_factory=list)
    build: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Experiment(Measured):
    """An experiment's outcome: its checks, its warmup and pairs, the look it stopped at and why."""

    kind: ClassVar[str] = jobfile.EXPERIMENT

    warmup: list[Sample] = field(default_factory=list)
    stop_reason: str | None = None
    look: dict[str, Any] | None = None  # the analysis at the look the run stopped at (pairs, verdict, spread)
    checks: dict[str, Any] = field(default_factory=dict)  # {} when they did not run (runner.run_checks)
    rounds: list[dict[str, Any]] = field(default_factory=list)  # a continuation's earlier rounds (the server's)


@dataclass
class Holdout(Measured):
    """The hidden holdout's outcome: the values its command printed in each run of its pairs."""

    kind: ClassVar[str] = jobfile.HOLDOUT


@dataclass
class Validation(Outcome):
    """A validation of the session head, a trial of its checks or another platform's check of it: the build, the
    bench runs (raw, bounded), what they wrote into the tree, the bench's shape, and the checks where they ran."""

    kind: ClassVar[str] = jobfile.VALIDATION

    tree: str = ""
    build_s: float = 0.0
    build: dict[str, Any] | None = None  # None when an existing build was reused
    runs: list[dict[str, Any]] = field(default_factory=list)
    writes: list[str] | None = None  # what the bench runs wrote into the tree (None: not looked at)
    shape: dict[str, Any] | None = None  # a run alone and one at half duty (runner.shape_trial)
    checks: dict[str, Any] | None = None  # the checks as they are (a checks trial, a head check)
    checks_writes: list[str] | None = None
    checks_read_only: dict[str, Any] | None = None  # again with the tree read-only (a checks trial)


@dataclass
class Profile(Outcome):
    """A profile: the hot functions of one bench run under perf record and the top of its report; or, failed, what
    kept perf from it (`problem`: no_perf, build, bench, record, no_samples; `detail`)."""

    kind: ClassVar[str] = jobfile.PROFILE

    problem: str | None = None
    detail: str | None = None
    refused: bool = False  # perf was not allowed to record (perf_event_paranoid, a pod's capabilities)
    paranoid: str | None = None
    bench: dict[str, Any] = field(default_factory=dict)  # exit_code, timed_out, duration_s
    event: str = ""
    total_samples: int = 0
    functions: list[dict[str, Any]] = field(default_factory=list)  # as models.HotFunction reads them
    report: str = ""
    report_rows_dropped: int = 0
    perf: str = ""  # the perf that ran, and its version
    perf_data: str = ""  # where the raw perf.data stays (a worker's own path)

    def failure(self) -> Failure | None:
        if self.status != "failed":
            return None
        return Failure(self.phase or self.problem or "runner", self.error or self.detail or "no reason given")


@dataclass
class Counters(Outcome):
    """The counters job's commands (analyze_bounds): each one's exit, time and the tail of its output."""

    kind: ClassVar[str] = jobfile.COUNTERS

    commands: list[dict[str, Any]] = field(default_factory=list)


KINDS: dict[str, type[Outcome]] = {jobfile.EXPERIMENT: Experiment, jobfile.HOLDOUT: Holdout,
                                   jobfile.VALIDATION: Validation, jobfile.CHECKS_TRIAL: Validation,
                                   jobfile.HEAD_CHECK: Validation, jobfile.PROFILE: Profile,
                                   jobfile.COUNTERS: Counters}
_SAMPLED = ("samples", "warmup")  # the fields that hold samples

_O = TypeVar("_O", bound=Outcome)


def read(record: type[_O], data: Mapping[str, Any]) -> _O:
    """The outcome `data` holds, as the record of its job's kind (`KINDS`); OutcomeError when it cannot be read as
    it is (a newer version, a field the kind does not have)."""
    what = f"a result of the {record.kind or 'any'} kind"
    version = data.get("version", VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION:
        raise OutcomeError(f"{what} is of version {version!r}; this server reads up to {VERSION}: run the server's "
                           "own runner")
    names = {f.name for f in dataclasses.fields(record)}
    unknown = sorted(set(data) - names - {"version"})
    if unknown:
        raise OutcomeError(f"{what} has no field {', '.join(unknown)}")
    values = {k: v for k, v in data.items() if k in names}
    for name in _SAMPLED:
        if name in values:
            values[name] = [_sample(s) for s in values[name]]
    return record(**values)


def _sample(data: Any) -> Sample:
    if not isinstance(data, Mapping):
        raise OutcomeError(f"a sample is {type(data).__name__}, not an object")
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(Sample)})
    if unknown:
        raise OutcomeError(f"a sample has no field {', '.join(unknown)}")
    if "pair" not in data or "role" not in data or not isinstance(data.get("metrics", {}), Mapping):
        raise OutcomeError("a sample names no pair or role, or its metrics are not an object")
    return Sample(**data)


def ended(final: Mapping[str, Any], record: type[_O]) -> _O:
    """What a job's final event (an executor's: result, cancelled, lost) says, as the record of its kind: its
    result, or a failed one that says why it has none (a cancel, a lost machine, a result that cannot be read)."""
    event = final.get("event")
    if event == "cancelled":
        return record(status="failed", phase="cancelled", error="the job was cancelled")
    if event == "lost":
        why = str(final.get("detail") or "the machine running it was lost")
        return record(status="failed", phase="lost", error=why)
    result = final.get("outcome")
    if event != "result" or not isinstance(result, Mapping):
        return record(status="failed", phase="runner", error=f"the job ended without a result ({event})")
    try:
        return read(record, result)
    except OutcomeError as exc:
        return record(status="failed", phase="runner", error=f"its result could not be read: {exc}")
