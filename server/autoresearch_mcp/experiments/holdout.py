"""The hidden holdout: a short baseline/candidate A/B of a benchmark the agent never runs.

`commit_winner` runs it on this machine before it commits, in the same built trees the experiment
measured (reused by content, rebuilt if they were dropped), in randomized interleaved pairs: one runner
job, judged by decide.judge like every verdict. A
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
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.executors.jobs import JobMaker
from autoresearch_mcp.executors.port import Executor, Job
from autoresearch_mcp.measure import stats
from autoresearch_mcp.store.config import Holdout
from autoresearch_mcp.worker import decide, outcomes


@dataclass
class HoldoutOutcome:
    verdict: str  # "regressed" when any metric regressed beyond the tolerance, else "held"
    pairs: int
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> delta, CI, verdict
    seed: int | None = None  # what drew each pair's order
    samples: list[dict[str, Any]] = field(default_factory=list)  # every run's metric values (no output)

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


def run(holdout: Holdout, maker: JobMaker, here: Executor, base_commit: str, candidate_commit: str,
        contents: tuple[str, str], directions: dict[str, str], design: stats.Design) -> HoldoutOutcome:
    """Build both sides if needed, run `holdout.pairs` interleaved pairs, judge every printed metric.

    One runner job on this machine (`here`: the holdout lives here, outside the repository), confined as an
    experiment's bench is (its protected files read-only, its tree read-only when the session's bench
    is); the holdout command (and the absolute paths its arguments name, with their folders) are readable
    by it. Each metric is judged by decide.judge against the tolerance, from the samples and the seed that
    drew each pair's order, both recorded: the verdict can be recomputed from the ledger (`judge`).
    """
    argv = check_command(holdout, Path(maker.repo.working_dir))
    seed = random.SystemRandom().randrange(2**32)
    spec = maker.holdout(base_commit, contents[0], contents[1], argv, holdout.pairs, holdout.timeout_s, seed)
    # its output is hidden from the agent: the runner's log of it goes nowhere
    job = Job(f"holdout-{uuid.uuid4().hex[:10]}", base_commit, candidate_commit, Path(os.devnull), spec=spec)
    done = outcomes.ended(here.run_first(job), outcomes.Holdout)
    failure = done.failure()
    if failure is not None or done.status != "done":
        why = failure.error if failure is not None else f"it ended {done.status}"
        raise StateError(f"{why}; its output is hidden from the agent: ask the person who set it up to run it by "
                         "hand (or launch the experiment again if a build failed)")
    return judge([s.to_dict() for s in done.samples], seed, holdout, directions, maker.config.direction, design)


def judge(samples: list[dict[str, Any]], seed: int, holdout: Holdout, directions: dict[str, str],
          default_direction: str, design: stats.Design) -> HoldoutOutcome:
    """The holdout's verdict from its samples: each metric every run printed, judged by decide.judge with the
    tolerance as its minimum effect, at the last look of the design its pairs reach."""
    names = sorted(set.intersection(*(set(s["metrics"]) for s in samples))) if samples else []
    if not names:
        raise StateError("the holdout printed no metric in every run; ask the person who set it up to check it")
    judged = dataclasses.replace(design, min_effect=holdout.tolerance_pct / 100.0)
    plan = judged.plan()
    pairs = len({int(s["pair"]) for s in samples})
    k = judged.look_for(pairs)
    n = judged.looks[k] if k is not None else pairs
    metrics = {}
    for name in names:
        direction = directions.get(name, default_direction)
        decision = decide.judge(samples, decide.Spec(name, direction, judged.min_effect), plan, n=n, final_n=n)
        j = decision.metrics[name]
        cmp = stats.comparison(decide.pairs_of(samples, name), n, j, j.rule, judged, plan)
        metrics[name] = {"delta_pct": cmp.delta_pct, "ci_low_pct": cmp.ci_low_pct, "ci_high_pct": cmp.ci_high_pct,
                         "verdict": "inconclusive" if j.verdict == "undecided" else j.verdict, "n_pairs": cmp.n_pairs}
    outcome = HoldoutOutcome("held", pairs, metrics, seed, samples)
    if outcome.regressed:
        outcome.verdict = "regressed"
    return outcome
