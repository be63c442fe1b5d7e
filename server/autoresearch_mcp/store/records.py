"""The ledger's records as typed models, one per `type`, each stamped with the format's `schema_version`.

A record is written as one JSON object with only the fields its writer set (a field it does not
carry leaves the fold's value as it was: a `status` without `worker` keeps the experiment's worker).
Reading parses each line into its model after migrating it, one version at a time, to the current
format; the file itself is never rewritten (the ledger is append-only). Records written before the
format had a version are version 0. A record of a type this code does not know, of a newer version,
or that does not fit its model is skipped with a warning, never fatal: an older server reading a
newer ledger keeps what it understands.

The runner's outcome (its result line: samples, checks, build, host...) is stored as it came, typed where the
server reads it, its other fields kept (`extra="allow"`); the statistics read it as the runner's own typed record
(`Outcome.typed`, worker/outcomes.py). The manager's analysis (per-metric comparisons, verdict) is typed in full;
a field a later version adds is kept the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from autoresearch_mcp.worker import outcomes

SCHEMA_VERSION = 1


class _Open(BaseModel):
    """A part of a record another program wrote (the runner) or may extend: unknown fields are kept."""

    model_config = ConfigDict(extra="allow")

    def carries(self, name: str) -> bool:
        """Whether it holds `name` (even as null), not only its default."""
        return name in self.model_fields_set


# --- what the runner reported ----------------------------------------------------------------------


class Sample(_Open):
    pair: int
    role: str  # baseline or candidate
    metrics: dict[str, float] = Field(default_factory=dict)


class Checks(_Open):
    ran: bool = False
    passed: bool = False
    duration_s: float | None = None


class Outcome(_Open):
    """The runner's result line for one run (pooled with earlier rounds' samples for a continuation)."""

    experiment_id: str | None = None
    status: str = "failed"
    phase: str | None = None
    error: str | None = None
    samples: list[Sample] = Field(default_factory=list)
    stop_reason: str | None = None
    look: dict[str, Any] | None = None
    build: dict[str, dict[str, Any]] = Field(default_factory=dict)
    checks: Checks | None = None
    durations: dict[str, float] = Field(default_factory=dict)
    host: dict[str, Any] = Field(default_factory=dict)
    rounds: list[dict[str, Any]] = Field(default_factory=list)
    sandbox: str | None = None  # how its commands ran: "confined (bubblewrap)", or "off" by the user's choice

    @field_validator("checks", mode="before")
    @classmethod
    def _no_checks(cls, value: Any) -> Any:
        return value or None  # the runner writes {} for checks that never ran

    def raw(self) -> dict[str, Any]:
        """As the runner wrote it."""
        return self.model_dump(mode="json", exclude_unset=True)

    def typed(self, status: str) -> outcomes.Experiment:
        """As the runner's typed outcome (worker/outcomes.py), what the statistics read; `status` where the line
        named none (its result record's). OutcomeError (a ValueError) when a field is not one of its kind's."""
        return outcomes.read(outcomes.Experiment, {"status": status, **self.raw()})


# --- what the manager judged -----------------------------------------------------------------------


class Summary(_Open):
    n: int = 0
    mean: float | None = None
    median: float | None = None
    stddev: float | None = None
    cv: float | None = None
    samples: list[float] = Field(default_factory=list)


class Comparison(_Open):
    """The paired comparison of one metric (measure/metrics.py `analyze`)."""

    baseline: Summary = Field(default_factory=Summary)
    candidate: Summary = Field(default_factory=Summary)
    delta_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    p_value: float | None = None
    log_se: float | None = None  # standard error of the log-ratio estimate
    n_pairs: int = 0
    verdict: str | None = None
    pairs_needed: int | None = None
    noise_pct: float | None = None
    resolvable_pct: float | None = None
    direction: str | None = None
    role: str | None = None
    tolerance_pct: float | None = None
    judgement: str | None = None
    ci_level: float | None = None  # the confidence of [ci_low_pct, ci_high_pct] (absent: a design before it)
    mean_pct: float | None = None  # the average run's change, with its interval
    mean_low_pct: float | None = None
    mean_high_pct: float | None = None
    tail_pct: float | None = None  # the worst runs' change
    equivalence_pct: float | None = None  # no_change: no change beyond +-this
    note: str | None = None  # why noisy, or why a metric whose typical run improved is not improved
    measure: str | None = None  # how the metric was measured (worker/decide.py `measure_of`)
    # a guard's (or a session total objective's) claim (measure/metrics.py `claim_fields`): the worst change its
    # one-sided bounds leave (+ is better), the margin it was judged against, their level, and the claim in a line
    bound_pct: float | None = None
    margin_pct: float | None = None
    claim_level: float | None = None
    claim: str | None = None


class Analysis(_Open):
    """The statistics of one run: every metric's comparison, the judgement and the verdict."""

    metrics: dict[str, Comparison] = Field(default_factory=dict)
    verdict: str | None = None
    noise_cv: float | None = None
    noise_note: str | None = None
    problems: list[str] = Field(default_factory=list)
    pairs_needed: int | None = None
    won: list[str] = Field(default_factory=list)
    blocking: list[str] = Field(default_factory=list)
    primary: Comparison | None = None  # a measured platform's: its primary metric's comparison
    claims: list[str] = Field(default_factory=list)  # what was shown, each at its level
    disagreement: str | None = None  # a focus and the end-to-end objectives that tell different stories
    layout_pct: float | None = None  # focus: the most the untouched controls moved, %

    def metric(self, name: str) -> Comparison | None:
        return self.metrics.get(name)


# --- the records -----------------------------------------------------------------------------------


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: str  # each record's own Literal
    schema_version: int = SCHEMA_VERSION
    ts: float = 0.0

    def line(self) -> dict[str, Any]:
        """The JSON object written to the ledger: the fields set, the type and the version always."""
        data = self.model_dump(mode="json", exclude_unset=True, exclude={"ts", "type", "schema_version"})
        return {"ts": self.ts, "type": self.type, "schema_version": SCHEMA_VERSION, **data}

    def carries(self, name: str) -> bool:
        """Whether the record holds `name` (even as null), not only its default."""
        return name in self.model_fields_set


class _OfExperiment(_Record):
    """A record of one experiment's life (launch, status, result, continue, platform, commit, holdout)."""

    experiment_id: str


class SessionRecord(_Record):
    """start_session validated the benchmark at `head`: the raw values of each metric."""

    type: Literal["session"] = "session"
    session_id: str
    resumed: bool = False
    tag: str | None = None
    branch: str | None = None
    head: str | None = None
    metric: str | None = None
    direction: str | None = None
    baseline: dict[str, list[float]] = Field(default_factory=dict)
    build_duration_s: float | None = None
    # the config's settings that decide a verdict (config.GATE_FIELDS), as this start applied them; a resume
    # refuses a config that differs from the latest recorded (None: a ledger of an earlier version)
    gate: dict[str, Any] | None = None
    settings: dict[str, str] = Field(default_factory=dict)  # threads and env the baseline was measured with
    # the settings this start chose itself (threads, read_only_runs, pairing, turn_clock), as it chose them: chosen
    # again for another bench where the config still holds them
    chosen: dict[str, Any] = Field(default_factory=dict)


class LaunchRecord(_OfExperiment):
    """A candidate queued for measurement, with everything its verdict is judged by."""

    type: Literal["launch"] = "launch"
    session_id: str
    title: str = ""
    hypothesis: str = ""
    sources: list[str] = Field(default_factory=list)
    source: str | None = None  # worktree, commit, patch, experiment
    base_commit: str = ""
    candidate_commit: str = ""
    candidate_tree: str = ""
    changed_files: list[str] = Field(default_factory=list)
    repeats: int | str = "auto"
    design: dict[str, Any] = Field(default_factory=dict)  # measure/stats.py Design (its fields)
    metric: str = ""
    direction: str = "higher"
    executor: str | None = None
    incremental: bool = False
    objectives: list[str] = Field(default_factory=list)
    guards: dict[str, dict[str, Any]] = Field(default_factory=dict)  # name -> direction, tolerance_pct
    reapplies: str | None = None  # the experiment whose change this one re-applied on a newer head
    focus: list[str] = Field(default_factory=list)  # what the change acts on (AUTORESEARCH_FOCUS)
    judging: dict[str, Any] = Field(default_factory=dict)  # worker/decide.py Spec: everything a verdict is judged on
    combines: list[str] = Field(default_factory=list)  # the winners whose changes this one keeps together


class StatusRecord(_OfExperiment):
    type: Literal["status"] = "status"
    status: str
    detail: str | None = None
    worker: str | None = None
    runtime: dict[str, Any] = Field(default_factory=dict)  # what a restart needs to find the job


class ResultRecord(_OfExperiment):
    """A run ended: the runner's outcome and the manager's analysis of it."""

    type: Literal["result"] = "result"
    status: str
    worker: str | None = None
    cost_usd: float | None = None
    outcome: Outcome = Field(default_factory=Outcome)
    analysis: Analysis = Field(default_factory=Analysis)


class ContinueRecord(_OfExperiment):
    """Another round of pairs of the same experiment, pooled with the `prior_pairs` measured before."""

    type: Literal["continue"] = "continue"
    prior_pairs: int = 0
    stops: list[int] = Field(default_factory=list)
    repeats: int | str = "auto"


class PlatformFields(BaseModel):
    """What one other platform's run of a host winner says: a `platform` record's fields, and the fold of them
    (`ledger.PlatformState`)."""

    status: str | None = None
    attempt: int = 0  # the platform's tries of this winner, from 1
    job_id: str | None = None
    worker: str | None = None
    cost_usd: float | None = None
    runtime: dict[str, Any] = Field(default_factory=dict)  # what the worker says of itself
    passed: bool | None = None  # whether this platform lets the winner through (None: not yet)
    summary: str | None = None
    detail: str | None = None
    outcome: Outcome | None = None
    analysis: Analysis | None = None


class PlatformRecord(_OfExperiment, PlatformFields):
    """A status or result of a host winner's run on another platform (`platform`)."""

    type: Literal["platform"] = "platform"
    platform: str


class CommitRecord(_OfExperiment):
    """commit_winner made `commit` on `branch` (the only evidence the report counts a gain by)."""

    type: Literal["commit"] = "commit"
    commit: str
    parent: str | None = None
    branch: str | None = None
    title: str | None = None
    reconciled: bool = False  # found on the branch after a crash between moving it and this record


class WorkersRecord(_Record):
    """stop_workers released the session's machines."""

    type: Literal["workers"] = "workers"
    session_id: str
    mode: str
    released: list[str] = Field(default_factory=list)


class HoldoutRecord(_OfExperiment):
    """The hidden holdout's A/B at commit time: its verdict and per-metric change, with what they are recomputed
    from (experiments/holdout.judge): every run's metric values and the seed that drew each pair's order."""

    type: Literal["holdout"] = "holdout"
    verdict: str
    pairs: int = 0
    metrics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    seed: int | None = None
    samples: list[dict[str, Any]] = Field(default_factory=list)


class ProfileRecord(_Record):
    """profile_hotspots ran the benchmark under perf (on a cloud worker it was charged like a job)."""

    type: Literal["profile"] = "profile"
    session_id: str
    profile_id: str
    build: str  # baseline, or the experiment whose candidate was profiled
    commit: str
    worker: str | None = None
    cost_usd: float | None = None


Record = Annotated[SessionRecord | LaunchRecord | StatusRecord | ResultRecord | ContinueRecord | PlatformRecord
                   | CommitRecord | WorkersRecord | HoldoutRecord | ProfileRecord, Field(discriminator="type")]
TYPES = frozenset({"session", "launch", "status", "result", "continue", "platform", "commit", "workers", "holdout",
                   "profile"})
_RECORD: TypeAdapter[Record] = TypeAdapter(Record)


# --- reading: migrations ---------------------------------------------------------------------------


def _from_v0(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 0 (no `schema_version`) to 1: the same fields, except that v0 wrote `null` for an
    absent runtime (a status or platform record), which v1 leaves out."""
    out = {k: v for k, v in raw.items() if not (k == "runtime" and v is None)}
    if out.get("type") == "platform":  # a queued platform record spelled its empty results as null
        out = {k: v for k, v in out.items() if not (k in ("outcome", "analysis") and v is None)}
    return {**out, "schema_version": 1}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _from_v0}  # version -> to the next


def migrate(raw: dict[str, Any]) -> dict[str, Any]:
    """A record as the current version spells it. Raises ValueError for a newer version than this code knows."""
    version = raw.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ValueError(f"its schema_version {version!r} is not a version number")
    if version > SCHEMA_VERSION:
        raise ValueError(f"it is of schema_version {version}, newer than this server's {SCHEMA_VERSION}: "
                         "update autoresearch-mcp to read it")
    while version < SCHEMA_VERSION:
        raw = MIGRATIONS[version](raw)
        version = raw["schema_version"]
    return raw


def parse(raw: dict[str, Any]) -> Record:
    """One record of any version as its current model. Raises ValueError, saying why, if it cannot be read."""
    kind = raw.get("type")
    if kind not in TYPES:
        raise ValueError(f"its type {str(kind)[:40]!r} is not one this server knows")
    try:
        return _RECORD.validate_python(migrate(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "record"
        raise ValueError(f"its {where} does not fit a {kind} record ({first['msg']})") from None
