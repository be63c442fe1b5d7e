"""Experiments that share the machine take it in rounds (issue 52): each that waits when a turn ends gets its turn
before the one that ended takes another, so re-measures launched together progress, and finish, together."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from autoresearch_mcp import worker

# One job's pairs: its turns of the machine lock, each noted in the log, as the runner takes them.
JOB = """import sys, time
from autoresearch_mcp.worker import machinelock
lock, log, name, go = sys.argv[1:5]
while not __import__("os").path.exists(go):
    time.sleep(0.01)
for _ in range({turns}):
    with machinelock.machine_turn(lock):
        with open(log, "a") as fh:
            fh.write(name + "\\n")
        time.sleep(0.2)  # a turn: two pairs of a bench (seconds, in a real session)
"""


def test_jobs_waiting_for_the_machine_each_get_a_turn_before_any_gets_a_second(tmp_path: Path) -> None:
    lock, log, go, turns = tmp_path / "machine.lock", tmp_path / "turns.log", tmp_path / "go", 5
    server = str(Path(worker.__file__).resolve().parents[2])
    jobs = [subprocess.Popen([sys.executable, "-c", JOB.format(turns=turns), str(lock), str(log), name, str(go)],
                             env={"PYTHONPATH": server}) for name in "abc"]
    time.sleep(0.5)  # all three wait for the go
    go.touch()
    for job in jobs:
        assert job.wait(60) == 0
    order = log.read_text().split()
    assert sorted(order) == sorted("abc" * turns) and not list(Path(f"{lock}.wait").iterdir())
    started = max(order.index(name) for name in "abc")
    seen = {name: 0 for name in "abc"}
    for i, name in enumerate(order):
        seen[name] += 1
        if i >= started:  # once all three have had the machine, none is more than a turn ahead of another
            assert max(seen.values()) - min(seen.values()) <= 1, order


HOLD = """import sys, time
from autoresearch_mcp.worker import machinelock
with machinelock.machine_turn(sys.argv[1]):
    open(sys.argv[2], "w").close()
    time.sleep(float(sys.argv[3]))
"""


def test_a_job_killed_while_it_waited_keeps_no_one_waiting(tmp_path: Path) -> None:
    lock, env = tmp_path / "machine.lock", {"PYTHONPATH": str(Path(worker.__file__).resolve().parents[2])}

    def hold(name: str, seconds: float) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", HOLD, str(lock), str(tmp_path / name), str(seconds)], env=env)

    holder = hold("holding", 60)
    while not (tmp_path / "holding").exists():
        time.sleep(0.05)
    killed = hold("never", 0)
    while len(list(Path(f"{lock}.wait").iterdir())) < 1:
        time.sleep(0.05)
    killed.kill()  # SIGKILL while it waits: its mark stays behind
    killed.wait()
    holder.kill()
    holder.wait()
    after = hold("after", 0)
    assert after.wait(30) == 0 and (tmp_path / "after").exists()
    assert not (tmp_path / "never").exists()
