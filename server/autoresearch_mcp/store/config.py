"""The session's configuration (`.autoresearch/config.json`) and where its files live.

The bottom of the package's layers: every other layer reads these models; this module imports only
the foundation (errors, models, resources, safefs) and the git module's path rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_serializer, field_validator, model_validator

from autoresearch_mcp import resources, safefs
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.git import gitops
from autoresearch_mcp.models import Direction, ExecutorName
from autoresearch_mcp.worker import sandbox

STATE_DIR = ".autoresearch"
BENCH_SCRIPT, CHECKS_SCRIPT = gitops.SCRIPTS

# Defaults of the statistics (measure/stats.py) a session may override in its config.
DEFAULT_ALPHA = 0.02
DEFAULT_MIN_EFFECT = 0.01
DEFAULT_NOISE_LIMIT = 0.10
DEFAULT_MAX_PAIRS = 100

# --- platforms: every machine a winner must work on (experiments/platforms.py runs them) ----------

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$"
HOST = "host"


class Platform(BaseModel):
    """One entry of `platforms` in `.autoresearch/config.json`."""

    name: str = Field(pattern=NAME_PATTERN)
    executor: ExecutorName = "local"
    env: dict[str, str] = Field(default_factory=dict)
    emulator: str = Field("", description="command that runs the platform's binaries, e.g. qemu-aarch64 -L ...")
    measure: bool = Field(True, description="benchmark here (the host always is; emulated platforms never are)")
    sky: dict[str, Any] = Field(default_factory=dict,
                                description="overrides of the session's `sky` settings for this platform's workers")

    @model_validator(mode="before")
    @classmethod
    def _emulated_is_not_measured(cls, data: Any) -> Any:
        # An emulated platform's timings mean nothing, so it is unmeasured unless someone insists
        # (which `resolve` then refuses with the reason).
        if isinstance(data, dict) and data.get("emulator") and "measure" not in data:
            return {**data, "measure": False}
        return data

    @property
    def label(self) -> str:
        kind = "emulated" if self.emulator else ("sky" if self.executor == "sky" else "local")
        return f"{self.name} ({kind}, {'measured' if self.measure else 'build and checks'})"


PRESETS: dict[str, Platform] = {
    HOST: Platform(name=HOST),
    "aarch64-qemu": Platform(
        name="aarch64-qemu",
        env={"CC": "aarch64-linux-gnu-gcc", "CXX": "aarch64-linux-gnu-g++",
             # read by CMake >= 3.21 when it configures a new build directory: CMake projects cross-compile
             "CMAKE_TOOLCHAIN_FILE": str(resources.toolchain("aarch64-linux-gnu.cmake"))},
        emulator="qemu-aarch64 -L /usr/aarch64-linux-gnu",
        measure=False,
    ),
}


def resolve(raw: list[Any], executor: str | None) -> list[Platform]:
    """Platforms from `start_session(platforms=...)` or the config: preset names or objects.

    An object named like a preset starts from the preset (its `env` merged over the preset's), so
    `{"name": "aarch64-qemu", "env": {"CFLAGS": "-O3"}}` keeps the cross compilers and the emulator.
    """
    if not raw:
        raise InputError("platforms is empty: leave it out for the host alone, or list the host first, "
                         "e.g. ['host', 'aarch64-qemu']")
    out: list[Platform] = []
    for i, item in enumerate(raw):
        if isinstance(item, Platform):
            out.append(item)
            continue
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise InputError(f"platforms[{i}] must be a preset name ({', '.join(PRESETS)}) or an object "
                             "{name, executor, env, emulator, measure, sky}")
        preset = PRESETS.get(str(item.get("name")))
        if preset is not None:
            item = {**preset.model_dump(), **item, "env": {**preset.env, **(item.get("env") or {})}}
        elif len(item) == 1:
            raise InputError(f"platforms[{i}]: {item.get('name')!r} is not a preset ({', '.join(PRESETS)}); "
                             "describe it as {name, executor, env, emulator, measure, sky}")
        try:
            out.append(Platform.model_validate(item))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
            raise InputError(f"platforms[{i}] is not a valid platform ({problems}); expected "
                             "{name, executor: local|sky, env: {VAR: value}, emulator, measure, sky}") from None
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"platform names must be unique; {dupes} appear more than once")
    for p in out:
        if p.emulator and p.measure:
            raise InputError(f"platform {p.name} runs under an emulator ({p.emulator}), where timings mean "
                             "nothing: set measure to false (it then builds and runs the checks)")
    host = out[0]
    if not host.measure:
        raise InputError(f"the first platform is the host where experiments are measured, but {host.name} is "
                         f"not measured; put a measured platform first, e.g. ['host', {', '.join(names)!s}]")
    if executor is not None and host.executor != executor:
        raise InputError(f"executor={executor!r} but the first platform ({host.name}) runs on "
                         f"{host.executor!r}: they are the same machine; make them agree")
    return out


def effective(configured: list[Platform], executor: str) -> list[Platform]:
    """The session's platforms; without any configured, the host alone on the session's executor."""
    return list(configured) if configured else [Platform.model_validate({"name": HOST, "executor": executor})]


def job_env(platform: Platform) -> dict[str, str]:
    """The environment every build, bench and checks run of `platform` gets, beside the process's."""
    return {**platform.env, "AUTORESEARCH_PLATFORM": platform.name, "AUTORESEARCH_EMULATOR": platform.emulator}


# --- the session ------------------------------------------------------------------------------


class Timeouts(BaseModel):
    build: float = 3600.0
    bench: float = 900.0
    checks: float = 1800.0

    def for_job(self) -> dict[str, float]:
        """As a job carries them (jobfile.Job.timeouts)."""
        return {"build": self.build, "bench": self.bench, "checks": self.checks}


class SkyConfig(BaseModel):
    """Resources of the SkyPilot worker pool (used by the `sky` executor).

    Without `instance_type`, the first worker is launched for `cpus`/`memory` and every later worker
    of the session gets the instance type (and cloud) it got, so all pairs run on the same hardware.
    """

    workers: int = 2
    cpus: str | None = "8+"
    memory: str | None = None
    instance_type: str | None = None
    infra: str | None = None
    region: str | None = None
    use_spot: bool = False
    idle_minutes_to_autostop: int = 30
    setup: list[str] = Field(default_factory=list, description="shell commands run once on each new worker")
    setup_script: str | None = Field(None, description="a committed script (path in the repo) run on each new worker")
    file_mounts: dict[str, str] = Field(
        default_factory=dict, description="path on the worker -> local path or bucket URL, copied once per worker")


class Guard(BaseModel):
    """A metric a winner must not regress beyond `tolerance_pct` (judged with its own interval)."""

    direction: Direction
    tolerance_pct: float = Field(ge=0, le=100)


class Holdout(BaseModel):
    """A benchmark the agent never runs: `commit_winner` runs a short A/B of it before committing.

    `command` lives outside the repository (so no candidate can change it); it runs in each side's
    built tree like `autoresearch.sh bench` and prints METRIC lines. Only its verdict and change are
    ever returned, never its output.
    """

    command: str
    pairs: int = Field(14, ge=14, le=100, description="at least the statistics' first look (14 pairs)")
    tolerance_pct: float = Field(2.0, ge=0, le=100)
    timeout_s: float = Field(900.0, gt=0)


class SessionConfig(BaseModel):
    """`.autoresearch/config.json`. Values a person may tune by editing the file are kept on resume."""

    session_id: str
    tag: str
    branch: str
    repo: str
    metric: str
    direction: Direction
    executor: ExecutorName
    start_commit: str
    created_at: str
    protected: list[str] = Field(default_factory=lambda: [BENCH_SCRIPT, CHECKS_SCRIPT])
    min_effect: float = DEFAULT_MIN_EFFECT
    noise_limit: float = DEFAULT_NOISE_LIMIT
    alpha: float = DEFAULT_ALPHA
    max_pairs: int = DEFAULT_MAX_PAIRS
    default_repeats: int | str = "auto"
    warmup: int = 1
    drift_limit: float = 0.05
    incremental: bool = Field(
        False, description="build candidates incrementally in a persistent worktree per slot; winners are "
                           "then confirmed on a clean, cache-backed build before they can be committed")
    keep_builds: int = Field(4, description="built worktrees kept for reuse beyond those in use")
    build_parallelism: int = 2
    threads: int | None = Field(
        None, description="AUTORESEARCH_THREADS of every run; start_session chooses it when unset (the steadiest "
                          "of the default and fewer) and records it here")
    read_only_runs: list[Literal["bench", "checks"]] | None = Field(
        None, description="the commands that see their tree read-only once it is built, so no state passes from "
                          "one run to the next nor from the checks to the pairs; start_session chooses them when "
                          "unset (the bench, and the checks, where they write nothing into the tree on the head) "
                          "and records them here")
    env: dict[str, str] = Field(default_factory=dict, description=(
        "settings the benchmark reads, given to every build, bench and checks run (a recipe's defaults, "
        "e.g. LLAMA_BENCH_GEN); a platform's env overrides them"))
    timeouts: Timeouts = Field(default_factory=Timeouts)
    budget_usd: float | None = None
    sky: SkyConfig = Field(default_factory=SkyConfig)
    platforms: list[Platform] = Field(
        default_factory=list, description="the host first, then every platform a winner must also work on")

    @property
    def all_platforms(self) -> list[Platform]:
        """The configured platforms, or the host alone on the session's executor."""
        return effective(self.platforms, self.executor)

    def sky_for(self, platform: Platform) -> SkyConfig:
        """The worker settings of a sky platform: the session's `sky`, with the platform's overrides."""
        return SkyConfig.model_validate({**self.sky.model_dump(), **platform.sky})

    recipe: str | None = None
    objectives: list[str] = Field(
        default_factory=list, description="metrics a winner may improve (default: the primary metric)")
    guards: dict[str, Guard] = Field(default_factory=dict)
    holdout: Holdout | None = None
    model: str | None = Field(None, description="model file for recipes that run one (AUTORESEARCH_MODEL)")
    model_url: str | None = Field(None, description="downloaded once into the cache when `model` is not set")
    focus_direction: Direction = Field("lower", description="which way the focus.* metrics a bench prints are better")
    focus_min_effect: float = Field(0.02, description="the smallest change of a focus metric that counts as a win")
    focus_tolerance_pct: dict[str, float] = Field(
        default_factory=dict, description="per objective: how much worse it may get in a focus experiment (percent)")
    focus_default_tolerance_pct: float = Field(2.0, description="the same, for an objective not listed")
    focus_guard_ceiling_pct: float = Field(
        5.0, gt=0, description="a focus experiment proves each objective no worse than what its pairs can resolve, "
        "never looser than this: an end-to-end slowdown of this much is always refused (the tolerances themselves "
        "are proven by the session's total, source='session')")
    sandbox: str = Field(
        "confined", description="confined: every build, bench and checks command runs under bubblewrap, sharing "
                                "no IPC, network, keyring or process with anything outside it; {\"share\": "
                                "[\"network\"]}: confined, with the machine's network open (a benchmark of a "
                                "local service); off: unconfined, by the user's choice only; every result says so")

    @field_validator("sandbox", mode="before")
    @classmethod
    def _sandbox_setting(cls, value: object) -> object:
        """"confined", "off", or {"mode": "confined", "share": ["network"]}, kept as one string
        ("confined+network") that every job carries; written back in the form it was given."""
        if isinstance(value, dict):
            unknown = set(value) - {"mode", "share"}
            share = value.get("share") or []
            if unknown or not isinstance(share, list) or not set(share) <= set(sandbox.SHARES):
                raise ValueError(f"sandbox: expected \"confined\", \"off\" or {{\"share\": [...]}} with shares "
                                 f"among {list(sandbox.SHARES)}, got {json.dumps(value)[:200]}")
            if value.get("mode", sandbox.CONFINED) == sandbox.OFF:
                return sandbox.OFF
            if value.get("mode", sandbox.CONFINED) != sandbox.CONFINED:
                raise ValueError(f"sandbox: mode must be \"confined\" or \"off\", got {value.get('mode')!r}")
            return sandbox.mode_string(share)
        if isinstance(value, str) and value != sandbox.OFF and (
                value.split("+")[0] != sandbox.CONFINED or sandbox.mode_string(value.split("+")[1:]) != value):
            raise ValueError(f"sandbox: expected \"confined\", \"off\" or {{\"share\": {list(sandbox.SHARES)}}}, "
                             f"got {value!r}")
        return value

    @field_serializer("sandbox")
    def _sandbox_form(self, value: str) -> Any:
        shares = sandbox.parse_mode(value)[1]
        return {"share": list(shares)} if shares else value
    processes_per_sample: int = Field(
        1, ge=1, le=9, description="bench runs (each its own process) per sample, each metric their median: the "
                                   "noise between processes (layout, page placement) is what a pair suffers most")
    pairing: Literal["sequential", "turns"] | None = Field(
        None, description="how a pair's two bench runs share the machine: one after the other, or both at "
                          "once in turns of about 20 ms of the CPU (each frozen while the other runs), so a "
                          "neighbour's burst falls on both; in turns every objective and guard is judged "
                          "on its CPU-time form (METRIC <name>.cpu=...) where the bench prints one, else a "
                          "time or rate (t_ms, items_per_s) over the wall time of the run's own turns. "
                          "start_session chooses it when unset (where each side is confined, every judged metric "
                          "can be judged in turns and a run lasts 0.25 s or more, it measures pairs of the head both "
                          "ways and keeps turns unless one after the other is clearly steadier) and records it here")
    turn_clock: Literal["cpu", "wall"] | None = Field(
        None, description="in turns, what a time or rate is judged on: its CPU-time form (cpu), or its figure over "
                          "the wall time of the run's own turns (wall: a program that runs several threads at once, "
                          "whose gain from better balance its CPU time may not show). start_session chooses it when "
                          "unset (wall where a run in turns kept 1.3 CPUs or more busy) and records it here")
    metric_kinds: dict[str, Literal["time", "rate", "steady"]] = Field(
        default_factory=dict, description="what each metric showed itself to be in start_session's own runs (one "
                                          "alone, one at half duty): a time of the bench's work (twice as long at "
                                          "half duty), a rate (half as high) or steady; a time or a rate is held to "
                                          "the harness's own time of the runs whatever its name. start_session "
                                          "records it")
    measured_share: dict[str, float] = Field(
        default_factory=dict, description="the share of each run's wall time that each time or rate times, as "
                                          "start_session's own runs showed it (its seconds over the run's): the "
                                          "harness's time of the runs must show a claimed change by that share "
                                          "(harness_share, set by hand, overrides it). start_session records it")
    harness_share: dict[str, float] = Field(
        default_factory=dict, description="per improving metric: the least share (0-1) of each bench run's time "
                                          "its timed work takes; the harness's CPU and wall time of the same runs "
                                          "must then show a claimed change by that share (0: direction only)")
    default_harness_share: float = Field(
        0.25, ge=0, le=1, description="the same, for an objective not listed (a focus metric counts at 0)")
    metric_directions: dict[str, Direction] = Field(
        default_factory=dict, description="which way is better for a metric that is measured but not judged "
                                          "(e.g. {\"ms_per_row\": \"lower\"}): shown with its figures, never "
                                          "given a verdict; an objective, guard, focus or control is not listed here")

    @model_validator(mode="after")
    def _directions_of_measured_metrics_only(self) -> SessionConfig:
        judged = [n for n in self.metric_directions if n in judged_metrics(self)
                  or n.startswith(("focus.", "control."))]
        if judged:
            raise ValueError(f"metric_directions: {judged} are judged (the metric, an objective, a guard, a focus "
                             "or a control), so their direction is set where they are; list only metrics that "
                             "are measured and not judged")
        return self

    @field_validator("protected")
    @classmethod
    def _plain_paths(cls, entries: list[str]) -> list[str]:
        """Entries as git names paths ('./x' is 'x'); the session folder is protected whatever they say."""
        return list(dict.fromkeys(gitops.normalize_protected(e) for e in entries))

    @field_validator("holdout", mode="before")
    @classmethod
    def _holdout_command(cls, value: object) -> object:
        return {"command": value} if isinstance(value, str) else value

    def objective_metrics(self) -> list[str]:
        return list(self.objectives) or [self.metric]

    def gate(self) -> dict[str, Any]:
        """The settings that decide a verdict (GATE_FIELDS), as the ledger records them."""
        return self.model_dump(mode="json", include=set(GATE_FIELDS))


# The settings that decide whether a candidate wins: what is measured and in which direction, the
# statistics' parameters, the objectives and guards, the hidden holdout and what candidates may not
# change. start_session records them in the ledger; a resume refuses a config that differs from the record.
GATE_FIELDS = ("metric", "direction", "objectives", "guards", "alpha", "min_effect", "noise_limit", "max_pairs",
               "default_repeats", "warmup", "holdout", "protected", "sandbox", "focus_direction", "focus_min_effect",
               "focus_tolerance_pct", "focus_default_tolerance_pct", "harness_share", "default_harness_share",
               "focus_guard_ceiling_pct", "pairing", "turn_clock", "metric_kinds",
               "measured_share")


def gate_changes(config: SessionConfig, recorded: dict[str, Any]) -> list[str]:
    """How `config`'s gate differs from a recorded one, one `name: old -> new` each. The record is read
    through the config's own model first, so a setting the record lacks counts at its default."""
    current = config.gate()
    try:
        before = SessionConfig.model_validate({**config.model_dump(exclude=set(GATE_FIELDS)), **recorded}).gate()
    except ValidationError:
        before = recorded

    def shown(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))[:200]

    return [f"{name}: {shown(before.get(name))} -> {shown(current.get(name))}"
            for name in GATE_FIELDS if before.get(name) != current.get(name)]


def judged_metrics(config: SessionConfig) -> list[str]:
    """Every metric a verdict depends on: the primary, the objectives and the guards."""
    return list(dict.fromkeys([config.metric, *config.objective_metrics(), *config.guards]))


# Settings a person may edit in config.json; a new session on the same repository keeps them.
KEPT_ON_RESUME = {"protected", "min_effect", "noise_limit", "alpha", "max_pairs", "timeouts", "sky", "budget_usd",
         "build_parallelism", "threads", "read_only_runs", "env", "drift_limit", "warmup", "default_repeats",
         "incremental",
         "keep_builds", "recipe", "objectives", "guards", "holdout", "model", "model_url", "sandbox", "focus_direction",
         "focus_min_effect", "focus_tolerance_pct", "focus_default_tolerance_pct", "processes_per_sample",
         "harness_share", "default_harness_share", "focus_guard_ceiling_pct", "metric_directions", "pairing",
         "turn_clock", "metric_kinds", "measured_share"}


def state_dir(repo_root: Path) -> Path:
    return repo_root / STATE_DIR


def config_path(repo_root: Path) -> Path:
    return state_dir(repo_root) / "config.json"


def load_config(repo_root: Path) -> SessionConfig | None:
    """The session's config; None when there is none, or only settings written for the next session."""
    path = config_path(repo_root)
    if not path.exists() or seed_settings(repo_root):
        return None
    try:
        return SessionConfig.model_validate_json(path.read_text())
    except ValueError as exc:
        raise StateError(f"{path} is not a valid session config ({exc}); fix or delete it") from None


def seed_settings(repo_root: Path) -> dict[str, Any]:
    """Settings a person wrote into config.json before any session (`{"sandbox": "off"}`, say), which the
    first start_session takes over; empty when the file is a session's config or absent."""
    try:
        data = json.loads(config_path(repo_root).read_text())
    except (OSError, ValueError):
        return {}
    if isinstance(data, dict) and data and "session_id" not in data and set(data) <= KEPT_ON_RESUME:
        return data
    return {}


def save_config(repo_root: Path, config: SessionConfig) -> None:
    safefs.write_text(repo_root, config_path(repo_root), config.model_dump_json(indent=2) + "\n")
