"""A fifth round of attacks (issue #51), each through the real MCP client beside a control on the same checker: a side
cannot reach the other, the two trees tell nothing of which side runs, the turns count every moment a side held the
machine, and a claim cannot vouch for itself."""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.store.config import config_path
from autoresearch_mcp.worker import sandbox
from conftest import script_repo
from helpers import call, error, wait_final

confined = pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")


def edited(repo: Path, rel: str, old: str, new: str) -> str:
    before = (repo / rel).read_text()
    assert old in before
    after = before.replace(old, new)
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}", f"b/{rel}"))


def committed_bench(tmp_path: Path, files: dict[str, str], bench: str, pairing: str | None = "turns",
                    build: str = "true") -> Path:
    repo = script_repo(tmp_path, bench, build=build)
    for name, text in files.items():
        (repo / name).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "the bench"], cwd=repo, check=True)
    if pairing is not None:
        config_path(repo).parent.mkdir(exist_ok=True)
        config_path(repo).write_text(json.dumps({"pairing": pairing}) + "\n")
    return repo


# --- time the turns do not count: a long system call ------------------------------------------------------------

# The same bytes read through the kernel either in 64 KiB reads or in one read of 160 MiB each time (a sparse file in
# the private /tmp: no disk, every byte copied by the kernel), timed by the program's own wall clock. A stop cannot
# take effect inside one such read, so a side stopped mid-read goes on until it ends.
READS = """import os, time
chunk, rounds = (int(x) for x in open("reads.txt").read().split())
size = 160 << 20
with open("/tmp/data", "wb") as fh:
    fh.truncate(size)
buf = bytearray(size)
view = memoryview(buf)
t = time.perf_counter()
for _ in range(rounds):
    with open("/tmp/data", "rb", buffering=0) as fh:
        got = 0
        while got < size:
            got += fh.readinto(view[got:got + chunk])
print(f"METRIC t_ms={(time.perf_counter() - t) * 1e3:.3f}")
"""


@pytest.mark.serial
@confined
@pytest.mark.anyio
async def test_a_side_held_in_one_long_system_call_is_timed_for_it_in_its_own_turns(tmp_path: Path) -> None:
    """The same work in one read a time is no faster over the wall time of its own turns (it was -29.9%, committed:
    the stop waited for each read to end, and that time fell in neither side's turns); doing half the reads is."""
    repo = committed_bench(tmp_path, {"reads.py": READS, "reads.txt": "65536 6\n"}, "python3 reads.py")
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="reads")
        one_read = await call(c, "launch_experiment", title="one read a time", source="patch", repeats="auto",
                              patch=edited(repo, "reads.txt", "65536 6", "167772160 6"))
        fewer = await call(c, "launch_experiment", title="half the reads", source="patch", repeats="auto",
                           patch=edited(repo, "reads.txt", "65536 6", "65536 3"))
        same = await wait_final(c, one_read["experiment_id"], timeout=900)
        won = await wait_final(c, fewer["experiment_id"], timeout=900)
        refused = await error(c, "commit_winner", experiment_id=one_read["experiment_id"])
        await call(c, "commit_winner", experiment_id=fewer["experiment_id"])
    assert same["verdict"] != "improved", (same["verdict"], same["metrics"]["t_ms"])
    assert "not 'improved'" in refused
    assert won["verdict"] == "improved" and won["metrics"]["t_ms"]["delta_pct"] < -30, won["metrics"]["t_ms"]


# --- one side reaches the other: the tree a side is shown is its own copy ----------------------------------------

ROUNDS = """import os, time
rounds = int(open("rounds.txt").read())
t = time.perf_counter()
for _ in range(rounds):
    with open("data.bin", "rb", buffering=0) as fh:
        while fh.read(1 << 20):
            pass
print(f"METRIC t_ms={(time.perf_counter() - t) * 1e3:.3f}")
"""
# Dropping the cached pages of every file of the tree this side is shown, all the while it runs: the other side then
# reads its data from the disk again and again (posix_fadvise works on a read-only descriptor).
EVICT = """import os, time
if os.fork() == 0:
    shown = os.path.join(os.environ["AUTORESEARCH_BASELINE_TREE"], "data.bin")
    while True:
        try:
            fd = os.open(shown, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        except OSError:
            pass
        time.sleep(0.005)
"""


@pytest.mark.serial
@confined
@pytest.mark.anyio
async def test_a_side_that_drops_the_pages_of_the_tree_it_is_shown_slows_only_its_own_copy(tmp_path: Path) -> None:
    repo = committed_bench(tmp_path, {"rounds.py": ROUNDS, "rounds.txt": "6\n", ".gitignore": "data.bin\n"},
                           "python3 rounds.py", build="head -c 48M /dev/urandom > data.bin")
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="reach")
        evict = await call(c, "launch_experiment", title="drop the other's pages", source="patch", repeats="auto",
                           patch=edited(repo, "rounds.py", "import os, time\n", EVICT))
        fewer = await call(c, "launch_experiment", title="half the rounds", source="patch", repeats="auto",
                           patch=edited(repo, "rounds.txt", "6", "3"))
        same = await wait_final(c, evict["experiment_id"], timeout=900)
        won = await wait_final(c, fewer["experiment_id"], timeout=900)
    assert same["verdict"] != "improved", (same["verdict"], same["metrics"]["t_ms"])
    assert won["verdict"] == "improved" and won["metrics"]["t_ms"]["delta_pct"] < -25, won["metrics"]["t_ms"]


# --- telling which side runs by age: each side's own tree and the tree it is shown look alike on either side ------

# What a program can read of the age and order of its tree and of the one it is shown: each comparison one digit.
AGES = """import os, sys
shown = os.environ.get("AUTORESEARCH_BASELINE_TREE")
if shown is None:  # a run of one tree alone (start_session's)
    print("METRIC score=100\\nMETRIC score.cpu=100")
    sys.exit(0)
a, b = os.stat("."), os.stat(shown)
fa, fb = os.stat("ages.py"), os.stat(os.path.join(shown, "ages.py"))
digits = [a.st_ctime_ns < b.st_ctime_ns, a.st_ino < b.st_ino, a.st_mtime_ns < b.st_mtime_ns,
          fa.st_ctime_ns < fb.st_ctime_ns, fa.st_ino < fb.st_ino, fa.st_mtime_ns == fb.st_mtime_ns,
          a.st_mtime_ns == b.st_mtime_ns, os.path.basename(os.getcwd()) < os.path.basename(shown)]
score = "1" + "".join("1" if d else "2" for d in digits)
print(f"METRIC score={score}\\nMETRIC score.cpu={score}")
"""


@confined
@pytest.mark.slow
@pytest.mark.parametrize("pairing", ["sequential", "turns"])
@pytest.mark.anyio
async def test_what_a_side_reads_of_the_age_and_order_of_its_tree_is_the_same_on_either_side(
        tmp_path: Path, pairing: str) -> None:
    """The baseline's build is reused (made long before), the candidate's fresh: a committed winner that slowed
    itself when its tree was the older one made a later no-op win -73.9%, committed."""
    repo = committed_bench(tmp_path, {"ages.py": AGES}, "python3 ages.py", pairing=pairing)
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="ages")
        first = await call(c, "launch_experiment", title="a note", source="patch", repeats=30,
                           patch="--- /dev/null\n+++ b/note.txt\n@@ -0,0 +1 @@\n+a note\n")
        await wait_final(c, first["experiment_id"], timeout=600)
        res = await call(c, "get_experiment", experiment_id=first["experiment_id"], samples=True)
    score = res["metrics"]["score"]
    seen = set(score["baseline"]["samples"]) | set(score["candidate"]["samples"])
    assert len(seen) == 1, (score["baseline"]["samples"][:6], score["candidate"]["samples"][:6])
    assert res["verdict"] == "no_change"
