"""A fake of our SkyPort: clusters, jobs and statuses as a small state machine on local directories.

Each cluster incarnation is a fresh "home" directory. `launch` runs the task's setup, and both
`launch` and `exec` copy the workdir into `~/sky_workdir` the way SkyPilot does (rsync without
deleting old files) and then really run the task's `run` command there with HOME pointing at the
cluster's home, so the generated scripts and the shared runner execute for real (with
FAKE_SKY_INCARNATION set to the cluster's incarnation, 1 for its first VM). A job can instead
return a canned log (`canned`), for scheduling tests that must not run anything. Preemption,
noisy VMs, missing cloud access, capacity errors and a slow `down` are switches a test flips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp.executors.local import kill_session
from autoresearch_mcp.executors.sky_port import (
    ClusterGone,
    ClusterInfo,
    JobInfo,
    NoCloudAccess,
    ResourcesUnavailable,
)

# (cluster, task) -> (log text, job seconds) for a job that completes at once.
Canned = Callable[[str, dict[str, Any]], tuple[str, float]]


@dataclass
class FakeJob:
    job_id: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    status: str = "RUNNING"
    start_at: float = field(default_factory=time.time)
    end_at: float | None = None


@dataclass
class FakeCluster:
    name: str
    home: Path
    incarnation: int
    status: str = "UP"
    jobs: dict[int, FakeJob] = field(default_factory=dict)
    noisy: bool = False


class FakeSky:
    def __init__(self, root: Path, hourly_usd: float = 0.8, canned: Canned | None = None) -> None:
        self.root = root
        self.hourly_usd = hourly_usd
        self.canned = canned
        self.vms: dict[str, FakeCluster] = {}
        self.incarnations: dict[str, int] = {}
        self.calls: list[tuple[str, str]] = []  # (operation, cluster)
        self.tasks: list[dict[str, Any]] = []
        self.no_cloud = False
        self.fail_setup = False
        self.overlaps = 0  # jobs submitted to a cluster that was still running another one
        self.unavailable = False
        self.noisy: set[tuple[str, int]] = set()  # (cluster, incarnation) that measure noisily
        self.synced: list[list[str]] = []  # the files of each workdir as SkyPilot received it
        self.down_gate: threading.Event | None = None  # when set by a test, `down` waits for it...
        self.downing = threading.Event()  # ...after setting this
        self._lock = threading.Lock()
        self._next_job = 1

    # --- test switches ----------------------------------------------------------------------------

    def preempt(self, name: str) -> None:
        """The cloud takes the VM away: its jobs die and the cluster is gone."""
        with self._lock:
            cluster = self.vms.pop(name)
        self._kill_all(cluster)

    def running_jobs(self) -> int:
        with self._lock:
            return sum(1 for c in self.vms.values() for j in c.jobs.values() if j.status == "RUNNING")

    # --- SkyPort ----------------------------------------------------------------------------------

    def launch(self, cluster: str, task: dict[str, Any], idle_minutes_to_autostop: int) -> tuple[int, ClusterInfo]:
        self.calls.append(("launch", cluster))
        assert idle_minutes_to_autostop > 0
        if self.no_cloud:
            raise NoCloudAccess("SkyPilot has no cloud access (fake). Run `sky check`")
        if self.unavailable:
            raise ResourcesUnavailable("no region had the requested resources (fake); run `sky check`")
        with self._lock:
            c = self.vms.get(cluster)
            if c is None:
                n = self.incarnations.get(cluster, 0) + 1
                self.incarnations[cluster] = n
                home = self.root / f"{cluster}.{n}"
                home.mkdir(parents=True)
                c = FakeCluster(cluster, home, n, noisy=(cluster, n) in self.noisy)
                self.vms[cluster] = c
            c.status = "UP"
        script = "echo 'setup failed (fake)' >&2; exit 1" if self.fail_setup else task["setup"]
        setup = subprocess.run(["bash", "-c", script], cwd=c.home, env=self._env(c),
                               capture_output=True)
        job_id = self._submit(c, task, failed_setup=setup.returncode != 0,
                              setup_log=setup.stdout + setup.stderr)
        return job_id, self._info(c)

    def exec(self, cluster: str, task: dict[str, Any]) -> int:
        self.calls.append(("exec", cluster))
        c = self._up(cluster)
        return self._submit(c, task)

    def job(self, cluster: str, job_id: int) -> JobInfo:
        c = self._up(cluster)
        j = c.jobs[job_id]
        if j.proc is not None and j.status == "RUNNING" and j.proc.poll() is not None:
            j.status = "SUCCEEDED" if j.proc.returncode == 0 else "FAILED"
            j.end_at = time.time()
        return JobInfo(job_id, j.status, j.start_at, j.end_at)

    def logs(self, cluster: str, job_id: int) -> str:
        c = self._up(cluster)
        return c.jobs[job_id].log.read_text(errors="replace")

    def cancel(self, cluster: str, job_id: int) -> None:
        self.calls.append(("cancel", cluster))
        c = self._up(cluster)
        self._kill(c.jobs[job_id])

    def down(self, cluster: str) -> None:
        self.calls.append(("down", cluster))
        self.downing.set()
        if self.down_gate is not None:
            self.down_gate.wait(30)
        with self._lock:
            c = self.vms.pop(cluster, None)
        if c is not None:
            self._kill_all(c)
            shutil.rmtree(c.home, ignore_errors=True)

    def stop(self, cluster: str) -> None:
        self.calls.append(("stop", cluster))
        with self._lock:
            c = self.vms.get(cluster)
        if c is not None:
            self._kill_all(c)
            c.status = "STOPPED"

    def clusters(self, names: list[str]) -> list[ClusterInfo]:
        with self._lock:
            return [self._info(self.vms[n]) for n in names if n in self.vms]

    # --- inside -------------------------------------------------------------------------------------

    def _up(self, cluster: str) -> FakeCluster:
        with self._lock:
            c = self.vms.get(cluster)
        if c is None or c.status != "UP":
            raise ClusterGone(f"cluster {cluster!r} does not exist or is not up")
        return c

    def _info(self, c: FakeCluster) -> ClusterInfo:
        return ClusterInfo(c.name, c.status, "fakecloud", "fake-region-1", "fake.4xlarge", False, self.hourly_usd)

    def _env(self, c: FakeCluster) -> dict[str, str]:
        env = dict(os.environ, HOME=str(c.home), FAKE_SKY_INCARNATION=str(c.incarnation))
        if c.noisy:
            env["FAKE_SKY_NOISY"] = "1"
        return env

    def _submit(self, c: FakeCluster, task: dict[str, Any], failed_setup: bool = False,
                setup_log: bytes = b"") -> int:
        self.tasks.append(task)
        workdir = c.home / "sky_workdir"
        shutil.copytree(task["workdir"], workdir, dirs_exist_ok=True)  # rsync without --delete
        self.synced.append(sorted(str(p.relative_to(task["workdir"])) for p in Path(task["workdir"]).rglob("*")))
        with self._lock:
            job_id = self._next_job
            self._next_job += 1
        if any(j.status == "RUNNING" and (j.proc is None or j.proc.poll() is None) for j in c.jobs.values()):
            self.overlaps += 1
        j = FakeJob(job_id, c.home / f"job-{job_id}.log")
        c.jobs[job_id] = j
        if failed_setup:
            j.log.write_bytes(setup_log)
            j.status, j.end_at = "FAILED_SETUP", time.time()
        elif self.canned is not None:
            text, seconds = self.canned(c.name, task)
            j.log.write_text(text)
            j.status, j.end_at = "SUCCEEDED", j.start_at + seconds
        else:
            with open(j.log, "wb") as out:
                j.proc = subprocess.Popen(["bash", "-c", task["run"]], cwd=workdir, env=self._env(c),
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return job_id

    def _kill(self, j: FakeJob) -> None:
        if j.proc is not None and j.proc.poll() is None:
            kill_session(j.proc.pid)  # the job and every process group the runner started in it
            j.proc.wait()
        if j.status == "RUNNING":
            j.status, j.end_at = "CANCELLED", time.time()

    def _kill_all(self, c: FakeCluster) -> None:
        for j in c.jobs.values():
            self._kill(j)
