"""One profile run: a build of a commit, its benchmark once under perf record (worker/profiler.py), through the
session's executor (on this machine, or alone on a worker of the pool) ahead of the queued experiments.

profile_hotspots (analysis/hotspots.py) and the focus check at commit (experiments/focus.py) both profile through
`run`; each says what its profile means and what to do when there is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autoresearch_mcp.executors.jobs import JobMaker
from autoresearch_mcp.executors.port import Executor, Job
from autoresearch_mcp.git import gitops
from autoresearch_mcp.worker import outcomes, profiler


@dataclass(frozen=True)
class ProfileRun:
    """What a profile job gave (`outcome`: failed where it gave no profile), where it ran (`worker`: None or local on
    this machine), what it cost (cloud workers only) and where its log is."""

    outcome: outcomes.Profile
    worker: str | None
    cost_usd: float | None
    log_path: Path

    @property
    def remote(self) -> bool:
        """Whether it ran on a cloud worker (which keeps the raw perf.data)."""
        return self.worker is not None and self.worker != "local"

    @property
    def answered(self) -> bool:
        """Whether the profiler answered (a profile, or what kept perf from one: `problem`), rather than the job
        failing before it (its runner, its confinement, a cancel, a lost machine)."""
        return self.outcome.status == "done" or self.outcome.problem is not None


def run(executor: Executor, maker: JobMaker, profile_id: str, base: str, commit: str, data: Path, log_path: Path,
        frequency_hz: int = profiler.FREQUENCY_HZ, functions_only: bool = False) -> ProfileRun:
    """Build `commit` (on `base`, the session's protected files as it has them) and run its benchmark once under
    perf, `frequency_hz` samples a second of CPU time, the raw perf.data written to `data` where it runs; a report
    line a function (`functions_only`) or a source line."""
    spec = maker.profile(profile_id, base, gitops.tree_of(maker.repo, base), gitops.tree_of(maker.repo, commit),
                         str(data), frequency_hz, functions_only)
    final = executor.run_first(Job(f"profile-{profile_id}", base, commit, log_path, spec=spec))
    worker, cost = (final.get("worker"), final.get("cost_usd")) if final["event"] == "result" else (None, None)
    return ProfileRun(outcomes.ended(final, outcomes.Profile), worker, cost, log_path)
