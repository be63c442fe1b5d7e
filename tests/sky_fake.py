"""A fake of our SkyPort: clusters, jobs and statuses as a small state machine on local directories.

Each cluster incarnation is a fresh "home" directory. `launch` runs the task's setup, and both
`launch` and `exec` copy the workdir into `~/sky_workdir` the way SkyPilot does (rsync without
deleting old files) and then really run the task's `run` command there with HOME pointing at the
cluster's home, so the generated scripts and the shared runner execute for real (with
FAKE_SKY_INCARNATION set to the cluster's incarnation, 1 for its first VM). A job can instead
return a canned log (`canned`), for scheduling tests that must not run anything. Preemption,
noisy VMs, missing cloud access, capacity errors, a slow `down`, provisioning time, a cluster
that answers INIT, a warm cluster whose resources no longer match, transient SSH/rsync failures
and a launch that fails after provisioning are switches a test flips. Time is a `FakeClock`
(real time plus what the test adds), which the pool meters with, so provisioning and job time
can be long without a test waiting for them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autoresearch_mcp.executors.local import kill_session
from autoresearch_mcp.executors.sky_port import (
    ClusterGone,
    ClusterInfo,
    ClusterInit,
    JobInfo,
    NoCloudAccess,
    ResourcesMismatch,
    ResourcesUnavailable,
    SkyError,
    Transient,
)

# (cluster, task) -> (log text, job seconds) for a job that completes at once.
Canned = Callable[[str, dict[str, Any]], tuple[str, float]]


def _cloud_of(resources: dict[str, Any]) -> str | None:
    """The cloud a task's `infra` names, spelled as SkyPilot's cloud objects print it (None: any)."""
    cloud = str(resources.get("infra", "*")).split("/")[0].lower()
    return None if cloud == "*" else {"k8s": "Kubernetes", "kubernetes": "Kubernetes", "fakecloud": "FakeCloud"}.get(
        cloud, cloud.capitalize())


def _cpus_ok(cpus: str, vcpus: int) -> bool:
    return vcpus >= float(cpus.rstrip("+")) if cpus.endswith("+") else vcpus == float(cpus)


class FakeClock:
    """Epoch seconds: the real clock plus what the test (or the fake cloud) added."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


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
    resources: dict[str, Any] = field(default_factory=dict)
    instance_type: str = "fake.4xlarge"
    launched_at: float = 0.0


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
        self.clock = FakeClock()
        self.provision_s = 0.0  # cloud time a launch takes (added to the clock)
        # prices of instance types; any other type costs hourly_usd (and the default for a cpus request)
        self.catalog: dict[str, float] = {"fake.4xlarge": hourly_usd, "fake.8xlarge": 2 * hourly_usd}
        self.vcpus = {"fake.4xlarge": 4, "fake.8xlarge": 8}
        self.unpriced = False  # the price catalog cannot be had (before or after launch)
        self.init_answers: dict[str, int] = {}  # cluster -> how many next `job` calls answer INIT
        self.stuck_init: set[tuple[str, int]] = set()  # (cluster, incarnation) INIT even when refreshed
        self.transient: dict[str, int] = {}  # operation -> how many next calls fail with an SSH hiccup
        self.fail_after_provision = False  # the next launch provisions a VM, then fails
        self.down_keeps: set[str] = set()  # clusters whose first `down` answers but leaves the VM up
        self.down_fails: set[str] = set()  # clusters whose `down` raises
        self.down_s = 0.0  # real seconds a `down` takes
        self.downs_at_once = 0  # the most downs that ran at the same time
        self.refreshes = 0  # `clusters` calls that asked the cloud
        self.billed: list[tuple[str, float, float | None, float]] = []  # (cluster, launched, downed, hourly)
        self.log_tails: list[int] = []  # the `tail` of every logs call
        self.polls = 0  # `job` calls
        self.mounted: list[tuple[str, str]] = []  # (cluster, path on the VM) of each file mount copied
        self._downs = 0
        self._lock = threading.Lock()
        self._next_job = 1

    # --- test switches ----------------------------------------------------------------------------

    def preempt(self, name: str) -> None:
        """The cloud takes the VM away: its jobs die and the cluster is gone."""
        with self._lock:
            cluster = self.vms.pop(name)
        self._bill_end(cluster)
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
        self._hiccup("launch")
        with self._lock:
            c = self.vms.get(cluster)
            if c is not None and not self._fits(task["resources"], c):
                raise ResourcesMismatch(f"Requested resources do not match the existing cluster {cluster} (fake)")
            if c is None:
                n = self.incarnations.get(cluster, 0) + 1
                self.incarnations[cluster] = n
                home = self.root / f"{cluster}.{n}"
                home.mkdir(parents=True)
                c = FakeCluster(cluster, home, n, noisy=(cluster, n) in self.noisy, resources=task["resources"],
                                instance_type=self._pick(task["resources"]), launched_at=self.clock())
                self.vms[cluster] = c
                self.clock.advance(self.provision_s)
            c.status = "UP"
            if self.fail_after_provision:
                self.fail_after_provision = False
                c.status = "INIT"
                raise SkyError("SkyPilot failed: the runtime setup failed after provisioning (fake)")
        for remote, source in task.get("file_mounts", {}).items():  # synced before setup, at launch only
            dest = c.home / remote.removeprefix("~/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if Path(source).is_dir() else shutil.copyfile)(source, dest)
            self.mounted.append((cluster, remote))
        script = "echo 'setup failed (fake)' >&2; exit 1" if self.fail_setup else task["setup"]
        setup = subprocess.run(["bash", "-c", script], cwd=c.home, env=self._env(c),
                               capture_output=True)
        job_id = self._submit(c, task, failed_setup=setup.returncode != 0,
                              setup_log=setup.stdout + setup.stderr)
        return job_id, self._info(c)

    def exec(self, cluster: str, task: dict[str, Any]) -> int:
        self.calls.append(("exec", cluster))
        c = self._up(cluster)
        self._hiccup("exec")
        if not self._fits(task["resources"], c):
            raise ResourcesMismatch(f"Requested resources do not match the existing cluster {cluster} (fake)")
        return self._submit(c, task)

    def job(self, cluster: str, job_id: int) -> JobInfo:
        with self._lock:
            self.polls += 1
            init = self.init_answers.get(cluster, 0)
            if init:
                self.init_answers[cluster] = init - 1
        if init or self._stuck(cluster):
            raise ClusterInit(f"Getting job status: skipped for cluster {cluster!r} (status: INIT) (fake)")
        c = self._up(cluster)
        j = c.jobs[job_id]
        if j.proc is not None and j.status == "RUNNING" and j.proc.poll() is not None:
            j.status = "SUCCEEDED" if j.proc.returncode == 0 else "FAILED"
            j.end_at = time.time()
        return JobInfo(job_id, j.status, j.start_at, j.end_at)

    def logs(self, cluster: str, job_id: int, tail: int = 0) -> str:
        self.log_tails.append(tail)
        c = self._up(cluster)
        text = c.jobs[job_id].log.read_text(errors="replace")
        return "".join(text.splitlines(keepends=True)[-tail:]) if tail else text

    def cancel(self, cluster: str, job_id: int) -> None:
        self.calls.append(("cancel", cluster))
        c = self._up(cluster)
        self._kill(c.jobs[job_id])

    def down(self, cluster: str) -> None:
        self.calls.append(("down", cluster))
        self.downing.set()
        if cluster in self.down_fails:
            raise SkyError(f"SkyPilot failed: the cloud refused to terminate {cluster} (fake)")
        if self.down_gate is not None:
            self.down_gate.wait(30)
        with self._lock:
            self._downs += 1
            self.downs_at_once = max(self.downs_at_once, self._downs)
        try:
            time.sleep(self.down_s)
            with self._lock:
                if cluster in self.down_keeps:
                    self.down_keeps.discard(cluster)
                    return
                c = self.vms.pop(cluster, None)
        finally:
            with self._lock:
                self._downs -= 1
        if c is not None:
            self._bill_end(c)
            self._kill_all(c)
            shutil.rmtree(c.home, ignore_errors=True)

    def stop(self, cluster: str) -> None:
        self.calls.append(("stop", cluster))
        with self._lock:
            c = self.vms.get(cluster)
        if c is not None and c.resources.get("use_spot"):
            # SkyPilot refuses to stop spot clusters
            raise SkyError(f"SkyPilot failed: NotSupportedError: Stopping spot instances is not supported: {cluster}")
        if c is not None:
            self._kill_all(c)
            self._bill_end(c)
            c.status = "STOPPED"

    def clusters(self, names: list[str], refresh: bool = False) -> list[ClusterInfo]:
        with self._lock:
            self.refreshes += refresh
            found = [self._info(self.vms[n]) for n in names if n in self.vms]
        return [replace(i, status="INIT") if refresh and self._stuck(i.name) else i for i in found]

    def price(self, task: dict[str, Any]) -> float | None:
        if self.unpriced:
            return None
        itype = task["resources"].get("instance_type")
        return self.catalog.get(itype, self.hourly_usd) if itype else self.hourly_usd  # default type for cpus

    def cost_report(self, names: list[str], since: float) -> float | None:
        now = self.clock()
        with self._lock:
            return sum(((end or now) - start) / 3600 * hourly for name, start, end, hourly in self.billed
                       if name in names and start >= since)

    # --- inside -------------------------------------------------------------------------------------

    def _up(self, cluster: str) -> FakeCluster:
        with self._lock:
            c = self.vms.get(cluster)
        if c is None or c.status != "UP":
            raise ClusterGone(f"cluster {cluster!r} does not exist or is not up")
        return c

    def _info(self, c: FakeCluster) -> ClusterInfo:
        itype = c.instance_type
        return ClusterInfo(c.name, c.status, _cloud_of(c.resources) or "FakeCloud", "fake-region-1", itype,
                           bool(c.resources.get("use_spot")),
                           None if self.unpriced else self.catalog.get(itype, self.hourly_usd))

    def _pick(self, wanted: dict[str, Any]) -> str:
        """What the optimizer launches: the instance type asked for, else the smallest with the cpus."""
        if "instance_type" in wanted:
            return str(wanted["instance_type"])
        return min((t for t in self.vcpus if _cpus_ok(str(wanted.get("cpus", "0+")), self.vcpus[t])),
                   key=self.vcpus.__getitem__)

    def _stuck(self, cluster: str) -> bool:
        with self._lock:
            c = self.vms.get(cluster)
            return c is not None and (cluster, c.incarnation) in self.stuck_init

    def exited_jobs(self) -> int:
        """Jobs whose process has ended, whether or not anybody has asked for their status."""
        with self._lock:
            return sum(1 for c in self.vms.values() for j in c.jobs.values()
                       if j.proc is not None and j.proc.poll() is not None)

    def _fits(self, wanted: dict[str, Any], c: FakeCluster) -> bool:
        """SkyPilot's `less_demanding_than`, for what the tasks here ask: the task fits on the cluster."""
        have = self._info(c)
        cloud = _cloud_of(wanted)
        return (wanted.get("instance_type", have.instance_type) == have.instance_type
                and cloud in (None, have.cloud)
                and _cpus_ok(str(wanted.get("cpus", "0+")), self.vcpus.get(have.instance_type or "", 0))
                and bool(wanted.get("use_spot")) == have.use_spot)

    def _hiccup(self, op: str) -> None:
        with self._lock:
            left = self.transient.get(op, 0)
            if left:
                self.transient[op] = left - 1
        if left:
            raise Transient(f"CommandError: Failed to rsync up: ... Ensure that the network is stable, then retry "
                            f"(fake {op})")

    def _bill_end(self, c: FakeCluster) -> None:
        with self._lock:
            if c.status != "STOPPED":
                self.billed.append((c.name, c.launched_at, self.clock(), self._info(c).hourly_usd or 0.0))

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
            self.clock.advance(seconds)
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
