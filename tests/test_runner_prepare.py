"""The runner prepares a job's commands once per tree (issue #31): the environment, the confinement with
bubblewrap's command line and the judging spec are made before the first pair, not again for each bench run
while the machine's lock is held; every run still starts the same command line it started before."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autoresearch_mcp.measure import stats
from autoresearch_mcp.worker import cgroups, decide, jobenv, jobfile, runner, sandbox

MODES = [pytest.param(sandbox.CONFINED, marks=pytest.mark.skipif(
    sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")), sandbox.OFF]
BENCH = 'echo "METRIC t=$((100 + RANDOM % 3))"'


def a_job(tmp_path: Path, mode: str, pairs: int) -> jobfile.Experiment:
    """A job of `pairs` pairs (after a warm-up pair) between two trees whose benchmark prints noise, each
    sample the median of two bench runs."""
    trees = {}
    for role in ("baseline", "candidate"):
        tree = trees[role] = tmp_path / f"{role}-{pairs}"
        tree.mkdir()
        (tree / "autoresearch.sh").write_text(f'#!/usr/bin/env bash\ncase "$1" in\n  bench) {BENCH} ;;\nesac\n')
    judging = dataclasses.asdict(decide.Spec("t", "lower", 0.01, processes_per_sample=2))
    return jobfile.Experiment(experiment_id=f"e{pairs}", baseline_dir=str(trees["baseline"]),
                              candidate_dir=str(trees["candidate"]), design=stats.make_design("auto", warmup=1).job(),
                              judging=judging, stops=[pairs], seed=1, threads=1, run_checks=False,
                              timeouts={"build": 60, "bench": 60, "checks": 60}, sandbox={"mode": mode})


def counted(calls: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)
    return wrapper


def preparations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, pairs: int) -> Counter[str]:
    """How often an experiment of `pairs` pairs made each of the things its commands share."""
    calls: Counter[str] = Counter()
    with monkeypatch.context() as m:
        m.setattr(jobenv, "run_env", counted(calls, "run_env", jobenv.run_env))
        m.setattr(sandbox, "for_job", counted(calls, "for_job", sandbox.for_job))
        m.setattr(sandbox, "_bwrap_args", counted(calls, "_bwrap_args", sandbox._bwrap_args))
        m.setattr(decide.Spec, "from_dict", classmethod(counted(calls, "Spec.from_dict",
                                                                vars(decide.Spec)["from_dict"].__func__)))
        with (tmp_path / f"{pairs}.log").open("w") as log:
            out = runner.run_experiment(a_job(tmp_path, mode, pairs), log)
    assert out.status == "done" and out.error is None, out
    assert len(out.samples) == 2 * pairs and all(s.processes == 2 for s in out.samples)
    return calls


@pytest.mark.parametrize("mode", MODES)
def test_a_job_prepares_its_environment_confinement_and_judging_once_whatever_its_pairs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    few = preparations(tmp_path, monkeypatch, mode, pairs=2)
    many = preparations(tmp_path, monkeypatch, mode, pairs=6)
    assert many == few
    # each tree's build, then each tree's bench: once per side; one judging spec
    assert few["run_env"] == few["for_job"] == 4 and few["Spec.from_dict"] == 1
    assert few["_bwrap_args"] == (4 if mode == sandbox.CONFINED else 0)


def started(argv: list[str], fds: list[int]) -> list[str]:
    """A command line with what is fresh in each run (the filter's descriptor, the memory cgroup) named."""
    for fd in fds:
        os.close(fd)
    fresh = {str(fd): "FD" for fd in fds}
    if argv[:3] == ["/bin/sh", "-c", cgroups.JOIN]:
        end = argv.index("--")
        fresh.update({folder: "GROUP" for folder in argv[4:end]})
    return [fresh.get(a, a) for a in argv]


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
def test_a_prepared_launch_starts_each_run_as_a_fresh_one_would(tmp_path: Path) -> None:
    tree, scripts, lock = tmp_path / "tree", tmp_path / "scripts", tmp_path / "locks" / "machine.lock"
    for folder in (tree / "src", scripts, lock.parent):
        folder.mkdir(parents=True)
    (tree / "src" / "bench.c").write_text("int main(void) { return 0; }\n")
    (scripts / sandbox.BENCH_SCRIPT).write_text("#!/usr/bin/env bash\ntrue\n")
    job = jobfile.Experiment(baseline_dir=str(tmp_path / "base"), machine_lock=str(lock),
                             sandbox={"mode": sandbox.CONFINED, "frozen": ["src/bench.c"], "read_only": ["bench"],
                                      "scripts": {sandbox.BENCH_SCRIPT: str(scripts / sandbox.BENCH_SCRIPT)}})
    c = sandbox.for_job(job, str(tree), "bench")
    env = jobenv.run_env(job, tree)
    prepared = sandbox.launch(c, env)
    argv = ["bash", "./autoresearch.sh", "bench"]
    first = started(*sandbox.command(argv, prepared, env)[::2])
    assert first == started(*sandbox.command(argv, c, env)[::2])
    assert str(tree / "src" / "bench.c") in first
    # a run moved the protected file's folder away: the next run's binds are read from the tree as it is now
    (tree / "src").rename(tree / "moved")
    again = started(*sandbox.command(argv, prepared, env)[::2])
    assert again == started(*sandbox.command(argv, c, env)[::2]) and str(tree / "src" / "bench.c") not in again
