"""The runner prepares a job's commands once per tree (issue #31): the environment, the confinement with
bubblewrap's command line and the judging spec are made before the first pair, not again for each bench run
while the machine's lock is held; every run still starts the same command line it started before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autoresearch_mcp.core import runner, sandbox


def started(argv: list[str], fds: list[int]) -> list[str]:
    """A command line with what is fresh in each run (the filter's descriptor, the memory cgroup) named."""
    for fd in fds:
        os.close(fd)
    fresh = {str(fd): "FD" for fd in fds}
    if argv[:3] == ["/bin/sh", "-c", sandbox.JOIN_GROUP]:
        fresh[argv[3]] = "GROUP"
    return [fresh.get(a, a) for a in argv]


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
def test_a_prepared_launch_starts_each_run_as_a_fresh_one_would(tmp_path: Path) -> None:
    tree, scripts, lock = tmp_path / "tree", tmp_path / "scripts", tmp_path / "locks" / "machine.lock"
    for folder in (tree / "src", scripts, lock.parent):
        folder.mkdir(parents=True)
    (tree / "src" / "bench.c").write_text("int main(void) { return 0; }\n")
    (scripts / sandbox.BENCH_SCRIPT).write_text("#!/usr/bin/env bash\ntrue\n")
    job = {"baseline_dir": str(tmp_path / "base"), "machine_lock": str(lock),
           "sandbox": {"mode": sandbox.CONFINED, "frozen": ["src/bench.c"], "read_only": ["bench"],
                       "scripts": {sandbox.BENCH_SCRIPT: str(scripts / sandbox.BENCH_SCRIPT)}}}
    c = sandbox.for_job(job, str(tree), "bench")
    env = runner.run_env(job, tree)
    prepared = sandbox.launch(c, env)
    argv = ["bash", "./autoresearch.sh", "bench"]
    first = started(*sandbox.command(argv, prepared, env)[::2])
    assert first == started(*sandbox.command(argv, c, env)[::2])
    assert str(tree / "src" / "bench.c") in first
    # a run moved the protected file's folder away: the next run's binds are read from the tree as it is now
    (tree / "src").rename(tree / "moved")
    again = started(*sandbox.command(argv, prepared, env)[::2])
    assert again == started(*sandbox.command(argv, c, env)[::2]) and str(tree / "src" / "bench.c") not in again
