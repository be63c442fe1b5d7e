"""A full disk never stops a session for good: before a launch is refused for want of space, the server evicts the
trees of its cache folder that no job holds or waits for, and never one in use (issue #51)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.git import gitops, worktrees
from autoresearch_mcp.git.worktrees import Worktrees
from autoresearch_mcp.worker import builds
from autoresearch_mcp.worker.builds import BUILT_MARKER
from conftest import git, init_repo, script_repo
from helpers import call, measured_copies, wait_final

# The simulated disk holds the cache folder alone, its files counted at their apparent size: a build that truncates
# a sparse file to 2 GiB fills it, and costs no real space.
CAPACITY = 3 << 30
FILL = "truncate -s 2G filler"


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache folder, on a disk of CAPACITY bytes (at the server's one reading of free space)."""
    cache = tmp_path / "cache"

    def free(_place: Path) -> int:
        used = 0
        for root, _dirs, files in os.walk(cache):
            for name in files:
                with contextlib.suppress(OSError):
                    used += os.lstat(os.path.join(root, name)).st_size
        return max(0, CAPACITY - used)

    monkeypatch.setattr(worktrees, "free_bytes", free)
    return cache


def value_patch(old: str, new: str) -> str:
    return f"--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-{old}\n+{new}\n"


def filling_repo(tmp_path: Path, wait: bool = False) -> Path:
    """A session whose candidate 666 fills the disk in its build (which succeeds); on the full disk its bench fails,
    or first waits for a file named `go` in its tree (`wait`: the test holds it running)."""
    hold = "while [ ! -e go ]; do sleep 0.05; done; " if wait else ""
    bench = (f'if [ -e filler ]; then {hold}echo "write: No space left on device" >&2; exit 1; fi; '
             "echo METRIC score=$(cat value.txt)")
    return script_repo(tmp_path, bench, build=f'if [ "$(cat value.txt)" = 666 ]; then {FILL}; fi')


def filled(cache: Path) -> list[Path]:
    return [p.parent for p in cache.glob("worktrees/*/tree-*/filler")]


pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_a_build_that_filled_the_disk_is_evicted_and_the_next_good_candidate_runs(
        tmp_path: Path, disk: Path) -> None:
    repo = filling_repo(tmp_path)
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="disk")
        full = await call(c, "launch_experiment", title="fills the disk", source="patch",
                          patch=value_patch("100", "666"), repeats=30)
        assert (await wait_final(c, full["experiment_id"]))["status"] == "failed"
        [kept] = filled(disk)
        assert (kept / BUILT_MARKER).exists()  # kept as a reusable build, the disk left full
        # a clear change, so that the experiment ends after a few pairs
        good = await call(c, "launch_experiment", title="good", source="patch", patch=value_patch("100", "50"),
                          repeats="auto")
        res = await wait_final(c, good["experiment_id"])
    assert res["status"] == "done", res.get("error")
    assert not kept.exists()  # evicted, so the next launch had room
    assert res["build"]["baseline"]["mode"] == "reused"  # the session head's base build was spared


@pytest.mark.slow
async def test_a_tree_in_use_is_never_evicted_and_the_refusal_says_what_to_do(tmp_path: Path, disk: Path) -> None:
    repo = filling_repo(tmp_path, wait=True)
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="disk")
        running = await call(c, "launch_experiment", title="fills the disk, still running", source="patch",
                             patch=value_patch("100", "666"), repeats=30)
        with anyio.fail_after(60):
            while not filled(disk):
                await anyio.sleep(0.05)
        [held] = filled(disk)
        refused = await call(c, "launch_experiment", title="no room", source="patch",
                             patch=value_patch("100", "101"), repeats=30)
        res = await wait_final(c, refused["experiment_id"])
        assert (held / "filler").exists()  # the running experiment's tree stayed whole
        for tree in await measured_copies(disk, running["experiment_id"]):
            (tree / "go").touch()
        assert (await wait_final(c, running["experiment_id"]))["status"] == "failed"
        after = await call(c, "launch_experiment", title="room again", source="patch",
                           patch=value_patch("100", "50"), repeats="auto")
        assert (await wait_final(c, after["experiment_id"]))["status"] == "done"
    assert res["status"] == "failed" and "GiB free" in res["error"] and "evicting 0 tree(s)" in res["error"]
    assert "Free some space" in res["error"] and "AUTORESEARCH_CACHE_DIR" in res["error"]


# --- the trees of the cache, directly ------------------------------------------------------------------------------


def session(tmp_path: Path, name: str, commits: int) -> tuple[Worktrees, list[str]]:
    """A repository with `commits` commits, and its worktrees in the shared cache folder."""
    src = tmp_path / name
    src.mkdir()
    (src / "v.txt").write_text("0\n")
    init_repo(src)
    for i in range(1, commits):
        (src / "v.txt").write_text(f"{i}\n")
        git(src, "commit", "-qam", f"v{i}")
    repo = gitops.repo_at(src)
    shas = git(src, "rev-list", "--reverse", "HEAD").split()
    return Worktrees(repo, tmp_path / "cache", keep=10), shas


def built(trees: Worktrees, commit: str, size: int = 0, *, hold: bool = False) -> Path:
    """A kept build of `commit` (of `size` apparent bytes), released unless `hold`."""
    path = trees.acquire(commit)
    (path / BUILT_MARKER).write_text("{}")
    if size:
        with open(path / "filler", "wb") as fh:
            fh.truncate(size)
    if not hold:
        trees.release(path)
    return path


@contextlib.contextmanager
def held_by_another_process(path: Path) -> Iterator[None]:
    """Another server process's job holding the tree at `path` (a shared flock on its folder, as ours take)."""
    proc = subprocess.Popen(["flock", "-s", str(path), "sh", "-c", "echo held; exec sleep 60"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield
    finally:
        proc.kill()
        proc.wait()


def test_idle_trees_are_evicted_least_recently_used_first_and_only_as_far_as_needed(
        tmp_path: Path, disk: Path) -> None:
    trees, shas = session(tmp_path, "repo", 4)
    oldest, older, recent = (built(trees, sha, 700 << 20) for sha in shas[:3])
    for age, path in enumerate((oldest, older, recent)):
        os.utime(path, (1e9 + age, 1e9 + age))
    assert trees.make_room() is None  # 0.9 GiB free: two evicted, the most recent kept
    assert not oldest.exists() and not older.exists() and recent.exists()


def test_a_tree_a_job_holds_or_waits_for_is_never_evicted(tmp_path: Path, disk: Path) -> None:
    trees, shas = session(tmp_path, "repo", 4)
    mine = built(trees, shas[0], 256 << 20, hold=True)  # a running job of this server
    theirs = built(trees, shas[1], 512 << 20)
    queued = built(trees, shas[2], 768 << 20)  # with the others, 1.5 GiB free
    trees.want(1, [shas[2]])  # a queued job's base
    with held_by_another_process(theirs):
        why = trees.make_room()
    assert mine.exists() and theirs.exists() and queued.exists()
    assert why is not None and "evicting 0 tree(s)" in why and "keeping 3" in why
    trees.unwant(1)
    assert trees.make_room() is None and not queued.exists()  # the control: idle, it goes


def test_other_sessions_trees_are_evicted_only_when_no_process_holds_or_runs_on_them(
        tmp_path: Path, disk: Path) -> None:
    trees, _ = session(tmp_path, "repo", 1)
    other, shas = session(tmp_path, "other", 3)
    in_use, running, idle = (built(other, sha, size) for sha, size in zip(shas, (256 << 20, 256 << 20, 1536 << 20),
                                                                             strict=True))  # oldest first
    for age, path in enumerate((in_use, running, idle)):
        os.utime(path, (1e9 + age, 1e9 + age))
    # a job of a server that holds no lock on its trees still names them in its job file
    (other.root / "exp-x.job.json").write_text(json.dumps({"baseline_dir": str(running), "candidate_dir": None}))
    with held_by_another_process(in_use):
        assert trees.make_room() is None
    assert not idle.exists() and in_use.exists() and running.exists()


def test_a_failed_build_leaves_no_marker_even_one_it_wrote_itself(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "autoresearch.sh").write_text(f'echo "{{}}" > {BUILT_MARKER}; {FILL}; exit 1\n')
    with open(tmp_path / "build.log", "w") as log:
        res = builds.build_tree(str(tree), 60, log)
    assert not res.ok and not (tree / BUILT_MARKER).exists()
