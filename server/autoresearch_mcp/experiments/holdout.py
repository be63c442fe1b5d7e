"""The hidden holdout: a short baseline/candidate A/B of a benchmark the agent never runs.

`commit_winner` runs it on this machine before it commits, in the same built trees the experiment
measured (reused by content, rebuilt if they were dropped), in randomized interleaved pairs. A
winner tuned to the visible benchmark (one prompt length, one model) shows here. The command lives
outside the repository, so no candidate can change it, and its output never leaves this module:
only the verdict and the change of each metric it prints.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp.core import runner, sandbox
from autoresearch_mcp.core.config import Holdout
from autoresearch_mcp.core.worktrees import Worktrees
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.measure import stats


@dataclass
class HoldoutOutcome:
    verdict: str  # "regressed" when any metric regressed beyond the tolerance, else "held"
    pairs: int
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> delta, CI, verdict

    @property
    def regressed(self) -> list[str]:
        return [name for name, m in self.metrics.items() if m["verdict"] == "regressed"]


def check_command(holdout: Holdout, repo_root: Path) -> list[str]:
    """The command as argv; refused when it could be changed by a candidate (a path in the repo)."""
    try:
        argv = shlex.split(holdout.command)
    except ValueError as exc:
        raise InputError(f"holdout.command cannot be parsed ({exc}); quote it like a shell command") from None
    if not argv:
        raise InputError("holdout.command is empty; name a command outside the repository")
    program = Path(argv[0]).expanduser()
    if "/" not in argv[0] and shutil.which(argv[0]) is None:
        raise InputError(f"holdout.command: {argv[0]!r} is not on PATH; give its absolute path")
    if "/" in argv[0] and not program.is_absolute():
        raise InputError(f"holdout.command: {argv[0]!r} is relative, so it would run the candidate's own copy; "
                         "give the absolute path of a script outside the repository")
    root = repo_root.resolve()
    for arg in argv:
        path = Path(arg).expanduser()
        if path.is_absolute() and path.resolve().is_relative_to(root):
            raise InputError(f"holdout.command uses {arg}, inside the repository; a holdout must live outside it, "
                             "where no candidate can change it and the agent does not read it")
    return [str(program) if i == 0 and "/" in argv[0] else a for i, a in enumerate(argv)]


def run(
    holdout: Holdout, repo_root: Path, worktrees: Worktrees, base_commit: str, candidate_commit: str,
    contents: tuple[str, str], env: dict[str, str], directions: dict[str, str], default_direction: str,
    build_timeout_s: float, threads: int | None, design: stats.Design, sandbox_mode: str = sandbox.CONFINED,
) -> HoldoutOutcome:
    """Build both sides if needed, run `holdout.pairs` interleaved pairs, judge every printed metric.

    Builds and holdout runs are confined as experiments' are; the holdout command (and the absolute
    paths its arguments name, with their folders) are readable by it.
    """
    argv = check_command(holdout, repo_root)
    trees = {"baseline": worktrees.acquire(base_commit), "candidate": worktrees.acquire(candidate_commit)}
    lock = str(worktrees.machine_lock())
    named = [Path(a) for a in argv if a.startswith("/")]
    job: dict[str, Any] = {
        "env": env, "threads": threads, "baseline_dir": str(trees["baseline"]), "machine_lock": lock,
        "sandbox": {"mode": sandbox_mode, "scripts": worktrees.scripts(base_commit),
                    "readable": [str(p) for p in named] + [str(p.parent) for p in named]}}
    try:
        with open(os.devnull, "w") as sink:
            for (role, tree), content in zip(trees.items(), contents, strict=True):
                built = runner.build_tree(str(tree), build_timeout_s, sink, content, lock, runner.run_env(job, tree),
                                          sandbox.for_job(job, str(tree)))
                if not built.ok:
                    raise StateError(f"holdout: the {role} build failed; launch the experiment again to see why")
        samples: dict[str, list[dict[str, float]]] = {"baseline": [], "candidate": []}
        rng = random.SystemRandom()
        for i in range(holdout.pairs):
            order = list(trees.items())
            rng.shuffle(order)
            for role, tree in order:
                with runner.file_lock(lock):
                    res = runner.run_command(argv, tree, holdout.timeout_s, env=runner.run_env(job, tree),
                                             confine=sandbox.for_job(job, str(tree)))
                values = runner.parse_metrics(res.output).values
                if not res.ok or not values:
                    why = "timed out" if res.timed_out else f"exited with status {res.exit_code}"
                    raise StateError(
                        f"the holdout {why} on the {role} (or printed no METRIC line) in pair {i}; its output is "
                        "hidden from the agent: ask the person who set it up to run it by hand")
                samples[role].append(values)
    finally:
        for tree in trees.values():
            worktrees.release(tree)
    names = sorted(set.intersection(*(set(s) for side in samples.values() for s in side)))
    judged = dataclasses.replace(design, min_effect=holdout.tolerance_pct / 100.0)
    metrics = {}
    for name in names:
        cmp = stats.paired([s[name] for s in samples["baseline"]], [s[name] for s in samples["candidate"]],
                           directions.get(name, default_direction), judged)
        metrics[name] = {"delta_pct": cmp.delta_pct, "ci_low_pct": cmp.ci_low_pct, "ci_high_pct": cmp.ci_high_pct,
                         "verdict": cmp.verdict, "n_pairs": cmp.n_pairs}
    if not metrics:
        raise StateError("the holdout printed no metric in every run; ask the person who set it up to check it")
    outcome = HoldoutOutcome("held", holdout.pairs, metrics)
    if outcome.regressed:
        outcome.verdict = "regressed"
    return outcome
