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
    repo = committed_bench(tmp_path, {"reads.py": READS, "reads.txt": "65536 4\n"}, "python3 reads.py")
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="reads")
        one_read = await call(c, "launch_experiment", title="one read a time", source="patch", repeats="auto",
                              patch=edited(repo, "reads.txt", "65536 4", "167772160 4"))
        fewer = await call(c, "launch_experiment", title="half the reads", source="patch", repeats="auto",
                           patch=edited(repo, "reads.txt", "65536 4", "65536 2"))
        same = await wait_final(c, one_read["experiment_id"], timeout=900)
        won = await wait_final(c, fewer["experiment_id"], timeout=900)
        await call(c, "commit_winner", experiment_id=fewer["experiment_id"])
    # one read instead of 2,560 saves their system calls' own work (a few %, seen in its CPU time too), never the
    # time a stopped side spent in a read that the stop could not cut short (-29.9% when that time was lost)
    gain = same["metrics"]["t_ms"]
    assert same["verdict"] != "improved" or gain["ci_low_pct"] > -20, (same["verdict"], gain)
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
    assert won["verdict"] == "improved", won["metrics"]["t_ms"]  # the control: half the reads is a win


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


# --- a figure whose name does not say it is a time: what it is, the harness learns from its own runs -------------

# Mostly waiting (three naps), a little work, and its own wall-clock time printed as `t`: a name that says nothing.
NAPS = r"""#include <stdio.h>
#include <time.h>
#include "naps.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
volatile unsigned sink;
int main(void) {
    double t0 = now(); unsigned x = 1;
    for (int k = 0; k < 3; k++) {
        struct timespec nap = {0, NAP_MS * 1000000L};
        nanosleep(&nap, NULL);
        for (int i = 0; i < 2000000; i++) x = x * 1103515245u + 12345u;
    }
    sink = x;
    printf("METRIC t=%.3f\n", (now() - t0) * 1e3);
    return 0;
}
"""


@pytest.mark.serial
@confined
@pytest.mark.anyio
async def test_a_forged_clock_is_refused_though_the_figure_is_named_t_and_a_real_win_is_not(tmp_path: Path) -> None:
    """Its own clock_gettime linked in, running at a quarter of the real one: `t` fell 75% while the run took as
    long (it won -75%: a name that does not say time had no outside check). The harness's own runs at start show
    `t` to be a time of each run, so it is held to the harness's time; napping half as long is a real win."""
    from conftest import slow_clock

    repo = committed_bench(tmp_path, {"naps.c": NAPS, "naps.h": "#define NAP_MS 70\n", ".gitignore": "naps\n"},
                           "./naps", pairing=None, build="cc -O1 -o naps *.c")
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(repo), metric="t", direction="lower", tag="naps")
        forged = await call(c, "launch_experiment", title="a faster clock", source="patch", repeats="auto",
                            patch="--- /dev/null\n+++ b/clock.c\n@@ -0,0 +1,"
                                  + str(len(slow_clock(0.25).splitlines())) + " @@\n"
                                  + "".join(f"+{line}\n" for line in slow_clock(0.25).splitlines()))
        shorter = await call(c, "launch_experiment", title="shorter naps", source="patch", repeats="auto",
                             patch=edited(repo, "naps.h", "#define NAP_MS 70", "#define NAP_MS 35"))
        fake = await wait_final(c, forged["experiment_id"], timeout=900)
        won = await wait_final(c, shorter["experiment_id"], timeout=900)
        refused = await error(c, "commit_winner", experiment_id=forged["experiment_id"])
        await call(c, "commit_winner", experiment_id=shorter["experiment_id"])
    config = json.loads(config_path(repo).read_text())
    assert config["metric_kinds"] == {"t": "time"}, (config.get("metric_kinds"), started["settings"])
    assert fake["metrics"]["t"]["delta_pct"] < -50  # the claim, as its own clock makes it
    assert fake["verdict"] != "improved" and "timed from outside" in refused, refused
    assert won["verdict"] == "improved" and won["metrics"]["t"]["delta_pct"] < -25, won["metrics"]["t"]


# --- a real win refused: a fixed-work bench that also prints the work it did ---------------------------------------

# A start of its own (work it does not time), then fixed work it times; it prints the work too (METRIC ops=).
STARTS = r"""#include <stdio.h>
#include <time.h>
#include "work.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
volatile unsigned sink;
int main(void) {
    unsigned x = 1;
    for (long i = 0; i < 60000000L; i++) x = x * 1103515245u + 12345u;  /* the start: not timed */
    double t0 = now();
    for (long i = 0; i < WORK; i++) x = x * 1103515245u + 12345u;
    sink = x;
    printf("METRIC t_ms=%.3f\nMETRIC ops=1000\n", (now() - t0) * 1e3);
    return 0;
}
"""


@pytest.mark.serial
@confined
@pytest.mark.anyio
async def test_a_fixed_work_benchs_real_win_is_committed_though_it_prints_its_work(tmp_path: Path) -> None:
    """Its timed work is a third of each run: the per-op check asked a real 60% win for -30% of the run (a share it
    assumed, at the claim's estimate) and saw -18% (it ended inconclusive); the share start_session measures is the
    run's own."""
    repo = committed_bench(tmp_path, {"starts.c": STARTS, "work.h": "#define WORK 30000000L\n",
                                      ".gitignore": "starts\n"}, "./starts", pairing=None,
                           build="cc -O1 -o starts starts.c")
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="starts")
        real = await call(c, "launch_experiment", title="less work", source="patch", repeats="auto",
                          patch=edited(repo, "work.h", "30000000L", "12000000L"))
        won = await wait_final(c, real["experiment_id"], timeout=900)
        await call(c, "commit_winner", experiment_id=real["experiment_id"])
    share = json.loads(config_path(repo).read_text())["measured_share"]["t_ms"]
    assert 0.15 < share < 0.6, share
    assert won["verdict"] == "improved" and won["metrics"]["t_ms"]["delta_pct"] < -45, won["metrics"]["t_ms"]
