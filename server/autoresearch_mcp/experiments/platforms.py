"""Platforms: every machine a winner must work on (the measured host, an emulated aarch64, cloud VMs).

The first platform is the host where experiments are measured (today's single machine when none is
configured). The others take part once the host has a winner: each builds the candidate and runs
the checks with its own environment (a cross compiler, an emulator); a measured one (a real ARM or
x86 VM) also runs a confirmation A/B against the same base. `commit_winner` refuses a candidate
that failed to build or failed its checks on any platform, or regressed on a measured one.

Every build, bench and checks run sees `AUTORESEARCH_PLATFORM` (the platform's name),
`AUTORESEARCH_EMULATOR` (the command to prefix binaries with, empty when none) and the platform's
`env`, so one script serves all platforms: `$AUTORESEARCH_EMULATOR ./prog`.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from autoresearch_mcp.errors import StateError
from autoresearch_mcp.executors.port import ValidationRun
from autoresearch_mcp.models import FINAL_STATUSES, ChecksResult, PlatformResult
from autoresearch_mcp.store.config import Platform
from autoresearch_mcp.store.ledger import PlatformState
from autoresearch_mcp.store.records import Comparison
from autoresearch_mcp.worker import outcomes

log = logging.getLogger(__name__)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$"
HOST = "host"
# Environment variables naming a compiler a platform builds with; each must resolve at start_session.
COMPILER_VARS = ("CC", "CXX")
PROBE_TIMEOUT_S = 60.0
TAIL_CHARS = 1500


def job_id(experiment_id: str, platform: str, attempt: int = 1) -> str:
    """The executor's id of one platform run of an experiment: `<id>-<platform>`, then `-2`, `-3`..."""
    return f"{experiment_id}-{platform}" + (f"-{attempt}" if attempt > 1 else "")


def platform_job(experiment_id: str, platform: str, state: PlatformState) -> str:
    """The job id of a platform's latest run, from its folded ledger records."""
    return state.job_id or job_id(experiment_id, platform)


# --- can it run at all? (start_session) -----------------------------------------------------------


def _debian_package(tool: str) -> str | None:
    name = Path(tool).name
    if name.startswith("qemu-"):
        return "qemu-user"
    for compiler in ("gcc", "g++"):
        if name.endswith("-" + compiler):
            return f"{compiler}-{name[: -len(compiler) - 1]}"
    return None


def _missing(tool: str, what: str, platform: Platform) -> str:
    package = _debian_package(tool)
    how = (f"install it (apt-get install {package}, or run scripts/setup.sh as root)" if package
           else "install it or fix the platform's settings")
    return f"platform {platform.name}: {what} `{tool}` is not installed or not on PATH; {how}"


def preflight(platform: Platform) -> list[str]:
    """What keeps a local platform from running at all: a missing emulator, sysroot or compiler,
    or a compiler whose output the emulator cannot run (checked with a one-line C program)."""
    if platform.executor != "local":
        return []
    problems: list[str] = []
    emulator = shlex.split(platform.emulator)
    if emulator and shutil.which(emulator[0]) is None:
        problems.append(_missing(emulator[0], "the emulator", platform))
    if "-L" in emulator[:-1]:
        sysroot = emulator[emulator.index("-L") + 1]
        if not Path(sysroot).is_dir():
            problems.append(f"platform {platform.name}: the emulator's sysroot {sysroot} does not exist; install "
                            "the target's C library (e.g. apt-get install libc6-dev-arm64-cross)")
    compilers = {var: shlex.split(platform.env[var]) for var in COMPILER_VARS if platform.env.get(var, "").strip()}
    for var, argv in compilers.items():
        if shutil.which(argv[0]) is None:
            problems.append(_missing(argv[0], f"the compiler ({var})", platform))
    toolchain = platform.env.get("CMAKE_TOOLCHAIN_FILE")
    if toolchain and not Path(toolchain).is_file():
        problems.append(f"platform {platform.name}: its CMAKE_TOOLCHAIN_FILE {toolchain} does not exist (was the "
                        "package moved? pass platforms to start_session again to refresh a preset)")
    if problems or "CC" not in compilers:
        return problems
    problem = _probe(platform, compilers["CC"], emulator)
    return [problem] if problem else []


def _probe(platform: Platform, cc: list[str], emulator: list[str]) -> str | None:
    """Compile a trivial program with the platform's CC and run it the way its scripts will."""
    with tempfile.TemporaryDirectory(prefix="autoresearch-probe-") as tmp:
        src, exe = Path(tmp) / "probe.c", Path(tmp) / "probe"
        src.write_text('#include <stdio.h>\nint main(void) { puts("ok"); return 0; }\n')
        for argv, step in (([*cc, "-o", str(exe), str(src)], "compile"), ([*emulator, str(exe)], "run")):
            try:
                res = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                                     stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"platform {platform.name}: could not {step} a test program ({' '.join(argv)}): {exc}"
            if res.returncode != 0 or (step == "run" and res.stdout.strip() != "ok"):
                return (f"platform {platform.name}: a test program failed to {step} ({' '.join(argv)} exited "
                        f"with {res.returncode}): {(res.stderr or res.stdout).strip()[-600:]}")
    return None


def check_all(platforms: list[Platform]) -> None:
    problems = [p for platform in platforms for p in preflight(platform)]
    if problems:
        raise StateError("a platform cannot run, so its builds and checks could never pass:\n- "
                         + "\n- ".join(problems))


def validate_head(platform: Platform, done: ValidationRun, log_path: Path) -> str:
    """What the head check of `platform` (the unchanged session head built in its own worktree and its checks
    run there: jobs.JobMaker.head_check) says, or the error that says how it failed.

    The build is kept: it is the baseline the platform's first experiment reuses.
    """
    fix = (f"Fix it for that platform (the scripts see AUTORESEARCH_PLATFORM={platform.name}"
           + "".join(f", {k}={v}" for k, v in platform.env.items())
           + f", AUTORESEARCH_EMULATOR={platform.emulator!r}) or drop the platform. Log: {log_path}")
    if done.build is not None and not done.build.ok:
        raise StateError(f"platform {platform.name}: the session head (before any change) fails to build "
                         f"there. {fix}. Output tail:\n{done.build.tail(2000)}")
    checks = done.checks or {"ran": False, "passed": False, "note": "the checks did not run"}
    if not checks["ran"]:
        if checks["passed"]:
            return f"{platform.label}: the session head builds ({done.build_s:.1f} s); no checks script"
        raise StateError(f"platform {platform.name}: {checks['note']}. {fix}")
    if not checks["passed"]:
        how = "timed out" if checks["timed_out"] else f"exited with status {checks['exit_code']}"
        raise StateError(f"platform {platform.name}: the checks of the session head (before any change) {how} "
                         f"there. {fix}. Output tail:\n{checks['tail']}")
    return (f"{platform.label}: the session head builds ({done.build_s:.1f} s) and passes the checks "
            f"({checks['duration_s']:.1f} s)")


# --- one platform's result -------------------------------------------------------------------------


def judge(platform: Platform, outcome: outcomes.Experiment, verdict: str | None,
          delta_pct: float | None) -> tuple[bool | None, str]:
    """Whether a platform's run lets the winner through (None: the run ended without a verdict of its
    own, e.g. a worker or cloud error, so it must run again), and one line saying what happened."""
    status = outcome.status
    error = (outcome.error or "").strip()
    if status == "failed":
        phase = outcome.phase or "run"
        what = {"build": "failed to build", "bench": "its benchmark failed"}.get(phase, f"did not run ({phase})")
        summary = f"{what}: {error[-TAIL_CHARS:]}" if error else what
        return (False if phase in ("build", "bench") else None), summary
    checks = outcome.checks or {}
    if status == "checks_failed" or (checks.get("ran") and not checks.get("passed")):
        how = "timed out" if checks.get("timed_out") else f"exit {checks.get('exit_code')}"
        return False, f"failed its checks ({how}): {(checks.get('tail') or '').strip()[-TAIL_CHARS:]}"
    if status != "done":
        return False, f"did not finish ({status})"
    if not checks:  # the runner skips the checks of a run it stops as noisy
        return False, f"its checks did not run (verdict {verdict}); launch it again on a quieter worker"
    checked = "checks passed" if checks.get("ran") else "no checks script"
    if not platform.measure:
        return True, f"built, {checked}"
    delta = f" {delta_pct:+.2f}%" if delta_pct is not None else ""
    if verdict == "regressed":
        return False, f"regressed{delta} in the confirmation A/B, {checked}"
    if verdict in (None, "invalid"):
        return False, f"the confirmation A/B has no valid measurement ({verdict}): {error[-TAIL_CHARS:]}"
    return True, f"{verdict}{delta} in the confirmation A/B, {checked}"


def result_of(platform: Platform, record: PlatformState | None, incremental: bool = False) -> PlatformResult:
    """One extra platform's row for fetch_sky_logs, from its folded ledger records."""
    base = dict(name=platform.name, executor=platform.executor, measured=platform.measure,
                emulator=platform.emulator or None)
    if record is None:
        return PlatformResult(**base, status="not_run", summary=(
            "runs on the clean-build confirmation of this incremental result" if incremental
            else "runs once the host's verdict is improved with passing checks"))
    outcome, analysis = record.outcome, record.analysis
    built: str | None = None
    if outcome is not None:
        built = "failed" if outcome.status == "failed" and outcome.phase == "build" else (
            "ok" if outcome.build else None)
    checks = outcome.checks if outcome else None
    primary = (analysis.primary if analysis else None) or Comparison()
    return PlatformResult(
        **base, status=record.status or "queued", worker=record.worker, build=built,
        checks=ChecksResult.model_validate(checks.model_dump(exclude_unset=True)) if checks else None,
        verdict=analysis.verdict if analysis else None,
        delta_pct=primary.delta_pct, ci_low_pct=primary.ci_low_pct, ci_high_pct=primary.ci_high_pct,
        passed=record.passed, summary=record.summary, error=(outcome.error if outcome else None) or record.detail,
        cost_usd=record.cost_usd)


def refusal(experiment_id: str, extra: list[Platform], records: dict[str, PlatformState]) -> str | None:
    """Why commit_winner must refuse, naming each platform that blocks; None when all passed."""
    state = {p.name: records.get(p.name) or PlatformState() for p in extra}
    blocked = [name for name, r in state.items() if r.passed is False]
    gone = [name for name, r in state.items() if r.passed is None and r.status in FINAL_STATUSES]
    pending = [name for name, r in state.items() if r.passed is None and name not in gone]
    if blocked:
        reasons = [f"{name}: {state[name].summary or state[name].status}" for name in blocked]
        return (f"experiment {experiment_id} fails on platform(s) {', '.join(blocked)}; a winner must build and "
                "pass its checks on every platform and must not regress on a measured one:\n- "
                + "\n- ".join(reasons) + "\nFix the change for those platforms and launch it again")
    if gone:
        ended = "; ".join(f"{name}: {state[name].summary or state[name].status}" for name in gone)
        return (f"experiment {experiment_id} was not checked on every platform ({ended}); check it there again: "
                f"launch_experiment(source='experiment', experiment_id='{experiment_id}')")
    if pending:
        return (f"experiment {experiment_id} is still being checked on platform(s) {', '.join(pending)}; poll "
                "fetch_sky_logs until each platform has passed, then commit")
    return None
