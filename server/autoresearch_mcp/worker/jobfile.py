"""A runner job's file: one typed, versioned record per kind of job (its outcome's record is beside it: outcomes.py).

Standard library only (shipped beside the runner): the server builds a record (executors/jobs.py), an executor places
it (`placed`: where its trees, its log and the machine's lock are) and writes `to_dict()` as job.json; the runner
reads it back with `read` and runs the handler its `kind` names. A field no kind declares is refused when the file
is read, so nothing can be added to a job on its way (an executor places and runs records; it adds no field).

A new kind of job is one record here, its outcome's record (outcomes.py `KINDS`), one builder method
(executors/jobs.py `JobMaker`) and one entry in the runner's table (worker/runner.py `HANDLERS`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict, TypeVar

VERSION = 1

EXPERIMENT = "experiment"
VALIDATION = "validation"
CHECKS_TRIAL = "checks_trial"
HEAD_CHECK = "head_check"
HOLDOUT = "holdout"
PROFILE = "profile"
COUNTERS = "counters"


class JobFileError(ValueError):
    """A job file this runner cannot run: an unknown kind, a newer version, a field its kind does not have."""


class SandboxSpec(TypedDict, total=False):
    """How a job's commands are confined (worker/sandbox.py reads it; executors/jobs.py builds it)."""

    mode: str  # the session's `sandbox` setting: confined or off
    frozen: list[str]  # the protected files of the tree (relative paths), bound read-only over themselves
    read_only: list[str]  # the commands (bench, checks) that see their tree read-only (config read_only_runs)
    readable: list[str]  # paths a private /tmp would hide that the job reads (the holdout's command)
    scripts: dict[str, str]  # the session's scripts as the executor stores them (added when it places the job)
    frozen_from: str  # where the protected files' bytes are stored (added when it places the job, when kept)
    private: list[str]  # the user's checkout and its git directory, which no command sees (jobs.checkout)
    git: list[str]  # the checkout's git directory, which a build reads (a version from git)
    hidden: list[str]  # the job file's folder, hidden from its commands (sandbox.resolve, where it is read)


def _timeouts() -> dict[str, float]:
    return {"build": 3600.0, "bench": 900.0, "checks": 900.0}


@dataclass
class Job:
    """What every job carries: its limits, environment and confinement (the session's), and where an executor
    placed it (`placed`)."""

    kind: ClassVar[str] = ""
    confined: ClassVar[bool] = True  # its commands run in the session's confinement (refused where there is none)

    timeouts: dict[str, float] = field(default_factory=_timeouts)  # build, bench, checks (seconds)
    threads: int | None = None
    env: dict[str, str] = field(default_factory=dict)  # the session's, the platform's, the focus (jobs.environment)
    platform: str = ""
    measure: bool = True  # False on an emulated platform: its timings mean nothing, it builds and checks only
    worktree_variant: str | None = None  # another platform's worktrees
    sandbox: SandboxSpec = field(default_factory=lambda: SandboxSpec())  # how its commands are confined
    baseline_tree: str | None = None  # the content (git tree) of the baseline: a build of it is reused
    # where the executor placed it
    experiment_id: str = ""
    baseline_dir: str | None = None
    candidate_dir: str | None = None
    log_path: str | None = None
    machine_lock: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The job file's JSON object: its kind, the format's version and every field."""
        return {"kind": self.kind, "version": VERSION, **dataclasses.asdict(self)}

    def placed(self: _J, *, experiment_id: str, baseline_dir: str | None, candidate_dir: str | None,
               log_path: str | None, machine_lock: str, scripts: dict[str, str],
               frozen_from: str | None = None) -> _J:
        """This job where an executor put it: its trees, log and machine lock, the session's scripts (the base
        commit's, bound over the trees) and where the protected files' bytes are stored (when kept)."""
        box = SandboxSpec(**self.sandbox)
        box["scripts"] = scripts
        if frozen_from is not None:
            box["frozen_from"] = frozen_from
        return dataclasses.replace(self, experiment_id=experiment_id, baseline_dir=baseline_dir,
                                   candidate_dir=candidate_dir, log_path=log_path, machine_lock=machine_lock,
                                   sandbox=box)

    @property
    def frozen(self) -> list[str]:
        """The protected files its commands see read-only."""
        return list(self.sandbox.get("frozen") or [])

    @property
    def judged_in_turns(self) -> bool:
        """Whether the session pairs in turns (its checks then run stopped and continued as a bench is)."""
        return False


_J = TypeVar("_J", bound=Job)


@dataclass
class Experiment(Job):
    """One experiment's A/B on one platform: both trees built, the checks, then pairs until a stop decides."""

    kind: ClassVar[str] = EXPERIMENT

    metric: str = ""
    design: dict[str, Any] = field(default_factory=dict)  # measure/stats.py Design.job(): the plan decide applies
    judging: dict[str, Any] = field(default_factory=dict)  # decide.Spec: the metrics judged, their roles, the focus
    stops: list[int] = field(default_factory=list)  # the pair counts this round judges at; the last ends it
    seed: int | None = None  # draws each pair's order
    run_checks: bool = True
    incremental: bool = False
    candidate_tree: str | None = None
    prior_samples: list[dict[str, Any]] = field(default_factory=list)  # a continuation: earlier rounds' pairs

    @property
    def judged_in_turns(self) -> bool:
        return self.judging.get("pairing") == "turns"


@dataclass
class Validation(Job):
    """The session head built and benched `runs` times (start_session), then, unless the bench is a recipe's,
    once alone and once at half duty (its shape)."""

    kind: ClassVar[str] = VALIDATION

    runs: int = 2
    metric: str = ""
    pairing: str = "sequential"  # turns: its runs go two at a time in turns, as an experiment's pairs do
    shape_trial: bool = False

    @property
    def judged_in_turns(self) -> bool:
        return self.pairing == "turns"


@dataclass
class ChecksTrial(Validation):
    """The session head built, its checks run as they are and then with the tree read-only."""

    kind: ClassVar[str] = CHECKS_TRIAL
    runs: int = 0


@dataclass
class HeadCheck(Validation):
    """The unchanged session head built on another platform, and its checks run there."""

    kind: ClassVar[str] = HEAD_CHECK
    runs: int = 0


@dataclass
class Holdout(Job):
    """The hidden holdout's A/B (commit_winner): `pairs` interleaved pairs of `command` in both built trees."""

    kind: ClassVar[str] = HOLDOUT

    command: list[str] = field(default_factory=list)
    pairs: int = 0
    timeout_s: float = 300.0
    seed: int = 0
    candidate_tree: str | None = None


@dataclass
class Profile(Job):
    """One tree built (its own baseline) and its bench run once under perf record (profile_hotspots)."""

    kind: ClassVar[str] = PROFILE

    profile_id: str = ""
    data: str = ""  # where the raw perf.data goes, on the machine that runs it
    frequency_hz: int = 999  # samples a second of CPU time (profiler.FREQUENCY_HZ; a focus check takes more)
    functions_only: bool = False  # a report line per function, not per source line (every function fits in it)
    candidate_tree: str | None = None

    @property
    def profiled_content(self) -> str | None:
        """The content of the profiled tree: the baseline's when the profile is of the base itself."""
        return self.candidate_tree or self.baseline_tree


@dataclass
class Counters(Job):
    """Commands of analyze_bounds (perf stat of a command, the peak probe) run on this machine under its turn, so
    that neither loads the CPU during another experiment's pairs; outside any confinement (perf follows the
    user's own command)."""

    kind: ClassVar[str] = COUNTERS
    confined: ClassVar[bool] = False

    commands: list[dict[str, Any]] = field(default_factory=list)  # each {argv, cwd, timeout_s, interrupt}


KINDS: dict[str, type[Job]] = {c.kind: c for c in (Experiment, Validation, ChecksTrial, HeadCheck, Holdout, Profile,
                                                   Counters)}


def read(data: dict[str, Any]) -> Job:
    """The record a job file holds; JobFileError when this runner cannot run it as it is."""
    kind = data.get("kind")
    cls = KINDS.get(str(kind))
    if cls is None:
        raise JobFileError(f"a job of kind {kind!r}; this runner runs {', '.join(sorted(KINDS))}")
    version = data.get("version", VERSION)
    if not isinstance(version, int) or version > VERSION:
        raise JobFileError(f"a {kind} job file of version {version!r}; this runner reads up to {VERSION}: ship the "
                           "server's runner with the job")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names - {"kind", "version"})
    if unknown:
        raise JobFileError(f"a {kind} job has no field {', '.join(unknown)}")
    return cls(**{k: v for k, v in data.items() if k in names})
