"""What holds for the user Claude Code runs as (issue #50): as root, as an ordinary user with a delegated cgroup v2
subtree, and as one with nothing delegated (scripts/test_as_users.sh runs the `as_user` tests in each): each side of a
pair is stopped whole in turns, its every process counted, and a real win is committed while a no-op is not."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.store.config import config_path
from autoresearch_mcp.worker import cgroups, jobenv, jobfile, procs, sandbox, turns
from conftest import init_repo
from helpers import call, error, wait_final

CONFINED = pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")

# A side that keeps re-forking: each round a new process notes the time and ends (a helper a stop must catch however
# it forks), beside a busy loop of 0.3 s of CPU time.
FORKER = """python3 - <<'PY'
import os, time
if os.fork() == 0:
    while True:
        child = os.fork()
        if child == 0:
            with open("forker-stamps", "a") as fh:
                fh.write(f"{time.time():.6f}\\n")
            os._exit(0)
        os.waitpid(child, 0)
t = time.process_time()
while time.process_time() - t < 0.3:
    pass
PY"""
# The other side: 0.3 s of CPU time, noting the time at every step.
STAMPER = """python3 - <<'PY'
import time
t, stamps = time.process_time(), []
while time.process_time() - t < 0.3:
    stamps.append(time.time())
with open("stamper-stamps", "w") as fh:
    fh.write("\\n".join(f"{s:.6f}" for s in stamps))
PY"""


def _while_running(stamps: list[float], inside: list[float], gap_s: float = 0.002) -> int:
    """How many of `inside` fall between two consecutive `stamps` less than `gap_s` apart (while that side ran)."""
    count, j = 0, 0
    for a, b in itertools.pairwise(stamps):
        while j < len(inside) and inside[j] <= a:
            j += 1
        k = j
        while k < len(inside) and inside[k] < b:
            if b - a < gap_s:
                count += 1
            k += 1
    return count


@CONFINED
@pytest.mark.as_user
@pytest.mark.serial
def test_in_turns_a_side_that_forks_every_round_never_runs_while_it_is_stopped(tmp_path: Path) -> None:
    job = jobfile.Experiment(baseline_dir=str(tmp_path), sandbox={"mode": sandbox.CONFINED})
    side = jobenv.Prepared.of(job, str(tmp_path), "bench")
    with (tmp_path.parent / "turns.log").open("w") as log:
        for _ in range(3):
            forker, stamper = turns.run_in_turns([(side, ["sh", "-c", FORKER]), (side, ["sh", "-c", STAMPER])], 60,
                                                 log)
            assert forker.ok and stamper.ok, (forker.output[-2000:], stamper.output[-2000:])
    helper = sorted(float(x) for x in (tmp_path / "forker-stamps").read_text().split())
    stamps = [float(x) for x in (tmp_path / "stamper-stamps").read_text().split()]
    assert len(helper) > 50 and len(stamps) > 10000
    # the helper forked hundreds of times while its side had the CPU, and never while the other side ran
    assert _while_running(stamps, helper) <= 2, _while_running(stamps, helper)


NO_GROUP = """import json, os, sys
os.environ["AUTORESEARCH_CGROUPS"] = "off"
from pathlib import Path
from autoresearch_mcp.worker import jobenv, jobfile, procs, sandbox, turns
tree = Path(sys.argv[1])
job = jobfile.Experiment(baseline_dir=str(tree), sandbox={"mode": sandbox.CONFINED})
side = jobenv.Prepared.of(job, str(tree), "bench")
burn = "python3 -c 'import time\\nt=time.process_time()\\nwhile time.process_time()-t<{}: pass'"
# the work in a child nobody waits for, and one still running when the command ends
# and, once that is done, 0.3 s of a process that goes on running when the command ends
argv = ["sh", "-c", "rm -f done burned; ( (" + burn.format(0.4) + "; touch done) & ); " + burn.format(0.1)
        + "; while [ ! -e done ]; do sleep 0.01; done; (" + burn.format(0.3) + "; touch burned; " + burn.format(5)
        + ") & while [ ! -e burned ]; do sleep 0.01; done"]
results = turns.run_in_turns([(side, argv), (side, ["sh", "-c", burn.format(0.2)])], 60, sys.stderr)
alone = side.run(argv, 60, sys.stderr)
print(json.dumps([r.cpu_s for r in results] + [alone.cpu_s]))
"""


@CONFINED
@pytest.mark.as_user
@pytest.mark.serial
def test_without_a_cgroup_each_side_has_the_cpu_time_of_every_process_it_ran_those_left_running_too(
        tmp_path: Path) -> None:
    """As a machine without cgroups measures (AUTORESEARCH_CGROUPS=off): each command under an init of our own."""
    done = subprocess.run([sys.executable, "-c", NO_GROUP, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                        "PYTHONPATH": str(Path(cgroups.__file__).parents[2])})
    orphaned, plain, alone = json.loads(done.stdout.strip().splitlines()[-1])
    # 0.1 s its own, 0.4 s its orphan's, and 0.3 s (at least) of a process still running when it ended
    for cpu in (orphaned, alone):
        assert cpu is not None and 0.8 <= cpu < 2.0, done.stdout + done.stderr[-3000:]
    assert plain is not None and 0.15 <= plain < 0.45, done.stdout


def test_the_cgroup2_mount_and_the_own_group_are_read_from_proc() -> None:
    hybrid = ("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
              "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
              "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    unified = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    assert cgroups.v2_mount(hybrid) == Path("/sys/fs/cgroup/unified")
    assert cgroups.v2_mount(unified) == Path("/sys/fs/cgroup")
    assert cgroups.v2_mount("22 1 0:5 / /proc rw - proc proc rw\n") is None
    assert cgroups.own_group("4:memory:/x\n0::/user.slice/user-1000.slice/user@1000.service/app.slice\n") == \
        "/user.slice/user-1000.slice/user@1000.service/app.slice"
    assert cgroups.own_group("4:memory:/x\n") is None


@CONFINED
@pytest.mark.as_user
def test_start_session_says_how_this_machine_stops_and_counts_each_side() -> None:
    said = sandbox.side_measure()
    made = sandbox.group()
    if made is None:
        assert "init of our own" in said and "memory is watched by the runner" in said
    else:
        made.remove()
        assert "cgroup of its own" in said and cgroups.where(made) in said
        assert ("memory bounded by the kernel" in said) == made.has("memory")
        if not made.has("memory"):
            assert "memory" in sandbox.lacking()


# A C program doing fixed work (COST rounds of 4000 items), printing its wall-clock time only: in turns it is judged
# over its own turns; the win halves the work.
C_WORK = r"""#include <stdio.h>
#include <time.h>
#include "cost.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
volatile unsigned sink;
int main(void) {
    double t0 = now(); unsigned x = 1;
    for (long n = 0; n < 4000; n++) for (int i = 0; i < COST; i++) x = x * 1103515245u + 12345u;
    sink = x;
    printf("METRIC t_ms=%.3f\n", (now() - t0) * 1e3);
    return 0;
}
"""


def work_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "work"
    repo.mkdir()
    (repo / "work.c").write_text(C_WORK)
    (repo / "cost.h").write_text("#define COST 60000\n")
    (repo / "autoresearch.sh").write_text('#!/usr/bin/env bash\nset -eu\ncase "$1" in\n'
                                          '  build) cc -O1 -o work work.c ;;\n  bench) ./work ;;\nesac\n')
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\n./work > /dev/null\n")
    (repo / ".gitignore").write_text("work\n")
    return init_repo(repo)


def edited(repo: Path, name: str, old: str, new: str) -> str:
    return (f"--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-{old}\n+{new}\n")


@CONFINED
@pytest.mark.as_user
@pytest.mark.serial
@pytest.mark.anyio
async def test_a_real_win_in_turns_is_committed_and_a_no_op_is_not(tmp_path: Path) -> None:
    repo = work_repo(tmp_path)
    config_path(repo).parent.mkdir(exist_ok=True)  # in turns, whichever start_session would measure steadier here
    config_path(repo).write_text(json.dumps({"pairing": "turns"}) + "\n")
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="user")
        half = await call(c, "launch_experiment", title="half the work", source="patch", repeats="auto",
                          patch=edited(repo, "cost.h", "#define COST 60000", "#define COST 30000"))
        same = await call(c, "launch_experiment", title="a comment", source="patch", repeats="auto",
                          patch=edited(repo, "cost.h", "#define COST 60000", "#define COST 60000  /* rounds */"))
        won = await wait_final(c, half["experiment_id"], timeout=600)
        flat = await wait_final(c, same["experiment_id"], timeout=600)
        committed = await call(c, "commit_winner", experiment_id=half["experiment_id"])
        refused = await error(c, "commit_winner", experiment_id=same["experiment_id"])
    measure = started["settings"]["measure"]
    assert started["pairing"] == "turns", started["settings"]
    assert won["verdict"] == "improved" and won["status"] == "done", (won["verdict"], won.get("error"), measure)
    assert -60 < won["metrics"]["t_ms"]["delta_pct"] < -40, won["metrics"]["t_ms"]
    assert committed["commit"] and "not 'improved'" in refused
    assert flat["verdict"] in ("no_change", "inconclusive", "noisy"), (flat["verdict"], flat.get("error"), measure)
    assert os.getuid() == 0 or "init of our own" in measure or "cgroup v2" in measure


def test_a_command_under_its_own_init_is_stopped_and_continued_whole(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if sandbox.unavailable() is not None:
        pytest.skip("bubblewrap cannot confine here")
    monkeypatch.setenv(cgroups.SETTING, "off")
    job = jobfile.Experiment(baseline_dir=str(tmp_path), sandbox={"mode": sandbox.CONFINED})
    side = jobenv.Prepared.of(job, str(tmp_path), "bench")
    started = procs.Started.of(["sh", "-c", "sleep 1 & sleep 1 & wait"], side.tree, side.env, side.launch)
    try:
        assert started.init is not None and started.group is None
        for _ in range(200):  # the init has started the shell, and the shell its two sleeps
            if len(started.pids()) >= 3:
                break
            time.sleep(0.01)
        assert started.init.pause(True)
        pids = started.pids()
        assert len(pids) >= 3  # the shell and its two sleeps, below the init
        states = {p: Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] for p in pids}
        assert set(states.values()) <= {"T", "t"}, states
        assert started.init.pause(False)
        assert started.reaped.wait(10)
    finally:
        started.end()
    assert started.proc.returncode == 0
    assert started.group_cpu_s is not None and started.group_cpu_s >= 0


@CONFINED
@pytest.mark.anyio
async def test_where_the_server_can_make_no_group_each_runner_asks_the_users_systemd_for_a_delegated_scope(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """systemd itself is not on this machine: a stand-in `systemd-run` on PATH records how it is asked and runs the
    command as `--scope` does (in place); the user manager's socket is a socket in XDG_RUNTIME_DIR."""
    import socket

    bin_dir, runtime = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    (runtime / "systemd").mkdir(parents=True)
    asked = tmp_path / "asked"
    fake = bin_dir / "systemd-run"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {asked}\nwhile [ "$1" != -- ]; do shift; done; shift; exec "$@"\n')
    fake.chmod(0o755)
    manager = socket.socket(socket.AF_UNIX)
    manager.bind(str(runtime / "systemd" / "private"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setattr(cgroups, "v2_base", lambda: None)
    monkeypatch.setitem(cgroups.V1, "memory", tmp_path / "no-v1-memory")
    monkeypatch.setattr(cgroups, "_scope", [])
    repo = work_repo(tmp_path)
    try:
        async with Client(build_server()) as c:
            await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="scope")
    finally:
        manager.close()
    lines = asked.read_text().splitlines()
    assert lines and all(line.startswith("--user --scope --quiet --collect -p Delegate=yes --") for line in lines)
    assert all("-m autoresearch_mcp.worker" in line for line in lines), lines
