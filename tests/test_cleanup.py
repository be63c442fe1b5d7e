"""What a build leaves behind never changes a verdict, and no job takes the machine's disk or memory
(issue 32, points 15 and 16).

A tree nested deeper than a path may be long, or than Python recurses, is still removed; a result once
recorded stays the experiment's result, across restarts; an unbuilt tree is dropped; a launch on a full
disk is refused with the folder and the space it needs; a job's private /tmp is sized, and its memory
limited where a memory cgroup can be made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoresearch_mcp.executors.local import LocalExecutor
from autoresearch_mcp.executors.port import Job
from autoresearch_mcp.git import gitops, gitrun, worktrees
from autoresearch_mcp.git.worktrees import Worktrees
from autoresearch_mcp.store import ledger, records
from autoresearch_mcp.worker import jobenv, jobfile, procs, sandbox
from autoresearch_mcp.worker.builds import BUILT_MARKER
from conftest import init_repo

DEPTH = 1100  # a path of 1,100 folders of five characters each: longer than PATH_MAX, deeper than rmtree recurses


@pytest.fixture(autouse=True)
def _no_deep_folders_left(tmp_path: Path) -> Iterator[None]:
    """pytest's own clean-up of old temporary folders recurses (shutil.rmtree): leave it nothing deep."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False)


def nest(top: Path, depth: int = DEPTH) -> None:
    """Folders nested `depth` deep under `top`, made through descriptors (as a build's `mkdir d; cd d` does)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("ddddd", dir_fd=fd)
            inner = os.open("ddddd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("leaf.o", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as fh:
            fh.write("x")
    finally:
        os.close(fd)


def repo_with_tree(tmp_path: Path) -> tuple[Worktrees, Path, str]:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    repo = gitops.repo_at(init_repo(src))
    head = gitops.head_commit(repo)
    return Worktrees(repo, tmp_path / "cache", keep=0), src, head


def test_a_worktree_nested_deeper_than_a_path_is_removed(tmp_path: Path) -> None:
    trees, _, head = repo_with_tree(tmp_path)
    path = trees.acquire(head)
    (path / BUILT_MARKER).write_text("{}")
    nest(path)
    trees.release(path)  # keep=0: the idle build goes at once
    assert not path.exists()
    assert str(path) not in gitrun.git(trees.repo, "worktree", "list")  # git forgot it too
    again = trees.acquire(head)  # the same content checks out again in the same place
    assert (again / "a.txt").read_text() == "a\n"


def test_an_unbuilt_worktree_is_dropped_when_its_job_ends(tmp_path: Path) -> None:
    trees, _, head = repo_with_tree(tmp_path)
    trees.keep = 4
    path = trees.acquire(head)
    nest(path, 10)  # a build that failed half way: no marker
    trees.release(path)
    assert not path.exists()
    built = trees.acquire(head)
    (built / BUILT_MARKER).write_text("{}")
    trees.release(built)
    assert built.exists()  # a finished build is kept for the next experiment


def result(exp_id: str, status: str) -> records.ResultRecord:
    return records.ResultRecord(experiment_id=exp_id, status=status, outcome=records.Outcome(
        experiment_id=exp_id, status=status))


def test_a_recorded_result_is_never_replaced_by_a_later_one(tmp_path: Path) -> None:
    launch = records.LaunchRecord.model_validate({
        "experiment_id": "e1", "session_id": "s", "title": "t", "base_commit": "a" * 40,
        "candidate_commit": "b" * 40, "candidate_tree": "d" * 40, "metric": "m",
        "direction": "lower", "source": "patch"})
    path = tmp_path / "repo" / ".autoresearch" / "ledger.jsonl"
    path.parent.mkdir(parents=True)
    held, append = ledger.Ledger(path).folding()
    for rec in (launch, result("e1", "done"), result("e1", "failed")):  # the executor's second, after cleanup
        append(rec)
    for view in (held, ledger.Ledger(path).view()):  # as the server holds it, and as a restart reads it
        assert view.experiments["e1"].status == "done"
        assert view.experiments["e1"].result is not None and view.experiments["e1"].result.status == "done"


@pytest.mark.parametrize("status", ["done", "checks_failed"])
def test_a_continued_round_gets_its_own_result(tmp_path: Path, status: str) -> None:
    view = ledger.LedgerView()
    launch = records.LaunchRecord.model_validate({
        "experiment_id": "e1", "session_id": "s", "title": "t", "base_commit": "a" * 40,
        "candidate_commit": "b" * 40, "candidate_tree": "d" * 40, "metric": "m",
        "direction": "lower", "source": "patch"})
    for rec in (launch, result("e1", status), records.ContinueRecord(experiment_id="e1"), result("e1", "failed")):
        ledger.apply(view, rec)
    assert view.experiments["e1"].status == "failed"


def test_a_launch_on_a_full_disk_is_refused_with_the_folder_and_the_space_it_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trees, _, head = repo_with_tree(tmp_path)
    assert trees.make_room() is None  # this machine has room for an experiment
    free = shutil.disk_usage(tmp_path).free
    monkeypatch.setattr(worktrees, "MIN_FREE_BYTES", free + (1 << 40))  # a disk that much fuller than this one
    why = trees.make_room()
    assert why is not None and str(tmp_path) in why and "GiB" in why and "AUTORESEARCH_CACHE_DIR" in why
    executor = LocalExecutor(trees.repo, trees, parallelism=1)
    events: list[dict[str, Any]] = []
    done = threading.Event()
    try:
        executor.submit(Job("e1", head, head, tmp_path / "e1.log", spec=jobfile.Experiment()),
                        lambda _id, event: (events.append(dict(event)), done.set()))
        assert done.wait(60)
    finally:
        executor.close()
    assert events[-1]["outcome"]["status"] == "failed" and events[-1]["outcome"]["phase"] == "disk"
    assert not list((tmp_path / "cache").glob("worktrees/*/tree-*"))  # no tree was checked out for it


def confined(tree: Path, script: str) -> procs.CommandResult:
    job = jobfile.Experiment(baseline_dir=str(tree), sandbox={"mode": sandbox.CONFINED})
    return procs.run_command(["sh", "-c", script], tree, 120, env=jobenv.run_env(job, tree),
                              confine=sandbox.for_job(job, str(tree), "bench"))


@pytest.mark.as_user
def test_a_job_cannot_fill_the_machines_memory_through_its_private_tmp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "TMP_BYTES", 32 << 20)
    res = confined(tmp_path, "head -c 100M /dev/zero > /tmp/fill; echo wrote=$(wc -c < /tmp/fill)")
    # the sized tmpfs stops the write; where a memory cgroup counts the scratch, the runner may end the command first
    assert "No space left" in res.output or "filled its scratch space" in res.output, res.output[-500:]
    assert f"wrote={32 << 20}" in res.output or not res.ok, res.output[-500:]
    assert f"wrote={100 << 20}" not in res.output
    control = confined(tmp_path, "head -c 1M /dev/zero > /tmp/fill && wc -c < /tmp/fill")
    assert control.ok and "1048576" in control.output


@pytest.mark.as_user
def test_a_job_that_takes_more_memory_than_its_limit_is_stopped(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """By its memory cgroup, or where none can be made, by the runner, which watches its processes' memory."""
    monkeypatch.setattr(sandbox, "memory_limit", lambda: 64 << 20)
    # zero-filled: every page; held a moment, as a program that uses what it took
    res = confined(tmp_path, "python3 -c 'import time; x = bytearray(300 << 20); time.sleep(0.5); print(\"took\")'")
    assert not res.ok and "took" not in res.output
    control = confined(tmp_path, "python3 -c 'x = bytearray(8 << 20); print(\"took\", len(x))'")
    assert control.ok and "took" in control.output


@pytest.mark.skipif("memory" in sandbox.lacking(), reason="no memory cgroup can be made on this machine")
def test_a_command_keeps_its_memory_group_while_others_start(tmp_path: Path) -> None:
    # another command (of this process or another) sweeps ended groups: never one made a moment ago
    group = sandbox.group()
    assert group is not None
    try:
        for _ in range(3):
            assert confined(tmp_path, "true").ok
        assert all(folder.is_dir() for folder in group.folders.values())
    finally:
        group.remove()
