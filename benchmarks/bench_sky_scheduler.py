"""The sky worker pool's scheduling cost: one decision, and how the total grows with the queue.

Part 1 drives the pure Scheduler: N queued experiments onto W workers, each finished job freeing
its worker for the next decision. Part 2 drains 1,000 experiments through the whole SkyPool
(threads, staging with git archive, the fake port with canned results) at 64 workers.

Run: python benchmarks/bench_sky_scheduler.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from autoresearch_mcp.executors.port import Job
from autoresearch_mcp.executors.sky_pool import SkyPool
from autoresearch_mcp.executors.sky_scheduler import Pending, Scheduler
from autoresearch_mcp.measure import stats
from autoresearch_mcp.store.config import SessionConfig, SkyConfig
from autoresearch_mcp.worker import channel, jobfile, outcomes
from sky_fake import FakeSky


def _noop(_exp: str, _event: dict[str, Any]) -> None:
    return None


def schedule_all(workers: int, jobs: int) -> tuple[float, int]:
    """Seconds to place every job (queue, pick, finish), and the number of decisions made."""
    s = Scheduler([f"w{i}" for i in range(workers)])
    items = [Pending(Job(f"e{i}", "b", "c", Path("l")), _noop) for i in range(jobs)]
    decisions = 0
    t0 = time.perf_counter()
    for item in items:
        s.enqueue(item)
    busy = []
    while decisions < jobs:
        while (pick := s.next()) is not None:
            busy.append(pick[0])
            decisions += 1
        s.free(busy.pop(0))  # the oldest job ends
    return time.perf_counter() - t0, decisions


def part1() -> None:
    print("Scheduler (pure): time per scheduling decision")
    print(f"{'workers':>8} {'jobs':>7} {'total ms':>10} {'us/decision':>12}")
    for workers, jobs in [(64, 250), (64, 1000), (64, 4000), (64, 16000), (16, 1000), (256, 1000)]:
        best = min(schedule_all(workers, jobs)[0] for _ in range(5))
        print(f"{workers:>8} {jobs:>7} {best * 1e3:>10.2f} {best / jobs * 1e6:>12.2f}")


def part2(jobs: int = 1000, workers: int = 64) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        (repo / "autoresearch.sh").write_text("echo METRIC t=1\n")
        run = ["git", "-C", str(repo)]
        subprocess.run([*run, "init", "-q"], check=True)
        subprocess.run([*run, "add", "-A"], check=True)
        subprocess.run([*run, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "x"], check=True)
        head = subprocess.run([*run, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
        outcome = outcomes.Experiment("x").to_dict()
        result = channel.machine_line(channel.RESULT_PREFIX, outcome, compact=True) + "\n"
        fake = FakeSky(Path(tmp) / "vms", canned=lambda _c, _t: (result, 60.0))
        cfg = SessionConfig(session_id="bench0000000", tag="b", branch="b", repo=str(repo), metric="t",
                            direction="lower", executor="sky", start_commit=head, created_at="now",
                            sky=SkyConfig(workers=workers))
        pool = SkyPool(repo, cfg, fake, Path(tmp) / "staging", poll_s=0.001, bench_poll_s=0.001, log_refresh_s=60)
        done = threading.Semaphore(0)

        def sink(_exp: str, event: dict[str, Any]) -> None:
            if event["event"] == "result":
                done.release()

        spec = jobfile.Experiment(metric="t", design=stats.make_design(3).job(),
                                  timeouts={"build": 60, "bench": 60, "checks": 60})
        t0 = time.perf_counter()
        for i in range(jobs):
            pool.submit(Job(f"e{i}", head, head, Path(tmp) / "logs" / f"e{i}.log", spec=spec), sink)
        submit_s = time.perf_counter() - t0
        for _ in range(jobs):
            done.acquire()
        total = time.perf_counter() - t0
        print(f"\nSkyPool with the fake port: {jobs} experiments on {workers} workers")
        print(f"  submit all: {submit_s * 1e3:.1f} ms ({submit_s / jobs * 1e6:.1f} us per submit)")
        print(f"  drain all:  {total:.2f} s ({total / jobs * 1e3:.2f} ms per experiment, mostly git archive "
              "and file staging; launches {}, execs {})".format(
                  sum(1 for op, _ in fake.calls if op == "launch"), sum(1 for op, _ in fake.calls if op == "exec")))
        pool.close()


if __name__ == "__main__":
    part1()
    part2()
