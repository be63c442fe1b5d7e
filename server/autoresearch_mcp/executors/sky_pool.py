"""The SkyPilot worker pool: N clusters per session, one experiment at a time on each.

Pure scheduling (`Scheduler`) is separate from the driver (`SkyPool`), which talks to clusters
only through the `SkyPort` protocol, so all of it runs against a fake port in the tests. Policy:
- a job goes to a free cluster that is already up before one that must be launched;
- a cluster is launched on demand (autostop with down as a safety net) and then reused with exec;
- a worker whose per-run noise (from the pair differences) is above `noise_limit` is replaced
  (down, relaunched on next use) and its experiment queued again, once;
  a worker that vanishes (preempted, downed) loses its job, which is queued again once and then
  reported `lost`;
- each experiment costs its job time times the cluster's hourly price; when the session's spend
  reaches `budget_usd`, queued experiments fail with a clear message instead of launching.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import logging
import math
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp import safefs
from autoresearch_mcp.executors import sky_task
from autoresearch_mcp.executors.base import EventSink, Executor, Interrupted, Job
from autoresearch_mcp.executors.sky_port import (
    ApiServerDown,
    ClusterGone,
    ClusterInfo,
    JobInfo,
    NoCloudAccess,
    SkyError,
    SkyPort,
)
from autoresearch_mcp.experiments import runner
from autoresearch_mcp.session import SessionConfig

log = logging.getLogger(__name__)

MAX_LOST_RETRIES = 1
MAX_NOISY_RETRIES = 1
MAX_POLL_ERRORS = 5


@dataclass
class Pending:
    """A job between submit and its final event, across attempts."""

    job: Job
    sink: EventSink
    lost: int = 0
    noisy: int = 0
    cost_usd: float = 0.0
    earlier_logs: list[str] = field(default_factory=list)


@dataclass
class Worker:
    name: str
    info: ClusterInfo | None = None  # None: not known to be up (never launched, downed, vanished)
    busy: str | None = None  # the experiment running on it


class Scheduler:
    """Which queued job goes to which free cluster. No I/O and no locking: the pool holds its lock.

    Every operation is O(1) (amortized), so a decision costs the same at 4 workers or 400.
    """

    def __init__(self, names: list[str]) -> None:
        self.workers = {n: Worker(n) for n in names}
        self._free_up: collections.deque[str] = collections.deque()
        self._free_cold: collections.deque[str] = collections.deque(names)
        self._order: collections.deque[str] = collections.deque()  # ids; cancelled ones skipped lazily
        self.queued: dict[str, Pending] = {}

    def enqueue(self, item: Pending, front: bool = False) -> None:
        exp_id = item.job.experiment_id
        self.queued[exp_id] = item
        (self._order.appendleft if front else self._order.append)(exp_id)

    def dequeue(self, experiment_id: str) -> Pending | None:
        return self.queued.pop(experiment_id, None)

    def next(self) -> tuple[Worker, Pending] | None:
        """The next (worker, job) to start, warm workers first; None when no job or no worker is free."""
        if not self.queued or not (self._free_up or self._free_cold):
            return None
        while self._order:
            exp_id = self._order.popleft()
            item = self.queued.pop(exp_id, None)
            if item is not None:
                worker = self.workers[(self._free_up or self._free_cold).popleft()]
                worker.busy = exp_id
                return worker, item
        return None

    def free(self, worker: Worker) -> None:
        worker.busy = None
        (self._free_up if worker.info is not None else self._free_cold).append(worker.name)

    def cool(self, worker: Worker) -> None:
        """The worker's cluster is gone: a free worker moves from the warm line to the cold one."""
        if worker.info is not None and worker.busy is None:
            self._free_up.remove(worker.name)
            self._free_cold.append(worker.name)
        worker.info = None

    def drain(self) -> list[Pending]:
        items = list(self.queued.values())
        self.queued.clear()
        self._order.clear()
        return items


class _Attempt:
    """One run of a job on one worker (a job that is queued again gets a new attempt)."""

    def __init__(self, worker: Worker, item: Pending) -> None:
        self.worker = worker
        self.item = item
        self.job_id: int | None = None
        self.cancelled = False
        self.wake = threading.Event()
        self.log = ""  # this attempt's part of the experiment's log
        self.fetched = ""  # the job's log as last fetched from the cluster


def machine_lines(text: str) -> list[str]:
    """The runner's event and result lines of a job log, whatever SkyPilot put before them."""
    out = []
    for line in text.splitlines():
        for prefix in (runner.EVENT_PREFIX, runner.RESULT_PREFIX):
            at = line.find(prefix)
            if at >= 0:
                out.append(line[at:])
                break
    return out


def noise_of(outcome: dict[str, Any]) -> float | None:
    """Per-run noise of the primary metric, from the pair differences at the runner's last look."""
    look = outcome.get("look") or {}
    return float(look["spread"]) / math.sqrt(2) if look.get("spread") is not None else None


def attempt_cost(info: JobInfo | None, wall_s: float, hourly_usd: float | None) -> float:
    """Job time (as the cluster measured it, else our clock) times the cluster's hourly price."""
    seconds = wall_s
    if info is not None and info.start_at is not None and info.end_at is not None:
        seconds = max(0.0, info.end_at - info.start_at)
    return seconds / 3600.0 * (hourly_usd or 0.0)


class SkyPool(Executor):
    name = "sky"

    def __init__(
        self, repo_dir: Path, config: SessionConfig, port: SkyPort, staging_root: Path, *,
        spent_usd: float = 0.0, poll_s: float = 5.0, log_refresh_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.repo_dir = repo_dir
        self.config = config
        self.port = port
        self.staging_root = staging_root
        self.poll_s = poll_s
        self.log_refresh_s = log_refresh_s
        self.clock = clock
        self.names = [sky_task.cluster_name(config.session_id, i) for i in range(max(1, config.sky.workers))]
        self.scheduler = Scheduler(self.names)
        self.spent_usd = spent_usd
        self.noisy_workers: list[dict[str, Any]] = []
        self._retired: list[str] = []
        self._running: dict[str, _Attempt] = {}
        self._threads: set[threading.Thread] = set()
        self._lock = threading.RLock()
        self._ready = threading.Event()
        self._ready.set()
        self._closed = False

    # --- port --------------------------------------------------------------------------------------

    def submit(self, job: Job, sink: EventSink) -> None:
        with self._lock:
            if self._closed:
                self._fail(Pending(job, sink), "executor", "the server is shutting down; launch it again")
                return
            self.scheduler.enqueue(Pending(job, sink))
            self._dispatch()

    def cancel(self, experiment_id: str) -> bool:
        with self._lock:
            item = self.scheduler.dequeue(experiment_id)
            attempt = self._running.get(experiment_id)
            if attempt is not None:
                attempt.cancelled = True
                attempt.wake.set()
        if item is not None:
            item.sink(experiment_id, {"event": "cancelled"})
            return True
        return attempt is not None

    def recover(self, interrupted: list[Interrupted]) -> None:
        """Cancel the jobs a previous server left on our clusters, in the background (new jobs wait).

        Their logs stay on the cluster until it is downed (`sky logs <cluster> <job_id>`).
        """
        leftovers = [(i, str(i.runtime["cluster"]), int(i.runtime["job_id"])) for i in interrupted
                     if isinstance(i.runtime.get("cluster"), str) and isinstance(i.runtime.get("job_id"), int)]
        if not leftovers:
            return
        self._ready.clear()

        def work() -> None:
            try:
                for item, cluster, job_id in leftovers:
                    with contextlib.suppress(SkyError):
                        self.port.cancel(cluster, job_id)
                        log.warning("cancelled job %s of interrupted experiment %s on %s",
                                    job_id, item.experiment_id, cluster)
            finally:
                self._ready.set()

        self._spawn(work, "autoresearch-sky-recover")

    def release(self, mode: str) -> list[str]:
        """Cancel queued and running experiments (logs saved), then stop or down every cluster.

        A cluster that SkyPilot fails to release does not keep the others up; the error names it.
        """
        self._cancel_all(closing=False, timeout=120.0)
        released: list[str] = []
        failed: list[str] = []
        for info in self.port.clusters(self.names):
            try:
                (self.port.stop if mode == "stop" else self.port.down)(info.name)
                released.append(info.name)
            except SkyError as exc:
                log.error("could not %s worker %s: %s", mode, info.name, exc)
                failed.append(f"{info.name}: {exc}")
        with self._lock:
            for w in self.scheduler.workers.values():
                self.scheduler.cool(w)
        if failed:
            done = f"released {', '.join(released)}; " if released else ""
            raise SkyError(f"{done}could not {mode} {len(failed)} worker(s), which may still cost money: "
                           + "; ".join(failed) + f". Run `sky status` and `sky {mode} <cluster>`, or call "
                           "stop_workers again")
        return released

    def retire_base(self, commit: str) -> None:
        with self._lock:
            self._retired.append(commit)

    def close(self) -> None:
        self._cancel_all(closing=True, timeout=30.0)

    def _cancel_all(self, *, closing: bool, timeout: float) -> None:
        """Cancel every queued and running experiment and wait (up to `timeout`) for them to end."""
        with self._lock:  # atomically, so no attempt ending meanwhile queues its job again
            self._closed = self._closed or closing
            queued = self.scheduler.drain()
            for attempt in self._running.values():
                attempt.cancelled = True
                attempt.wake.set()
        for item in queued:
            item.sink(item.job.experiment_id, {"event": "cancelled"})
        self._join(running_only=not closing, timeout=timeout)

    # --- scheduling ---------------------------------------------------------------------------------

    def _budget_left(self) -> bool:
        budget = self.config.budget_usd
        return budget is None or self.spent_usd < budget

    def _dispatch(self) -> None:
        """Start every job that has a free worker (lock held)."""
        if self._closed:
            return
        if not self._budget_left():
            budget = self.config.budget_usd
            for item in self.scheduler.drain():
                self._fail(item, "budget", (
                    f"the session's cloud budget is used up (spent ${self.spent_usd:.2f} of "
                    f"budget_usd=${budget:.2f}); no new cloud job is started. Raise budget_usd in "
                    ".autoresearch/config.json (or remove it) and launch again"))
            return
        while (pick := self.scheduler.next()) is not None:
            worker, item = pick
            attempt = _Attempt(worker, item)
            self._running[item.job.experiment_id] = attempt
            self._spawn(functools.partial(self._run, attempt), f"autoresearch-sky-{worker.name}")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        def wrapped() -> None:
            try:
                target()
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        t = threading.Thread(target=wrapped, name=name, daemon=True)
        with self._lock:
            self._threads.add(t)
        t.start()

    def _join(self, running_only: bool, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                busy = bool(self._running) if running_only else bool(self._threads)
            if not busy:
                return
            time.sleep(0.02)

    def _fail(self, item: Pending, phase: str, error: str) -> None:
        exp_id = item.job.experiment_id
        item.sink(exp_id, {"event": "result", "cost_usd": round(item.cost_usd, 6), "outcome": {
            "experiment_id": exp_id, "status": "failed", "phase": phase, "error": error}})

    # --- one attempt ----------------------------------------------------------------------------------

    def _run(self, a: _Attempt) -> None:
        exp_id = a.item.job.experiment_id
        requeue = False
        try:
            self._ready.wait()
            requeue = self._attempt(a)
        except Exception as exc:  # a job must always end with an event
            log.exception("experiment %s crashed in the sky executor", exp_id)
            self._cancel_job(a)  # nobody follows it any more: it must not share the VM with the next
            self._fail(a.item, "executor", f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._running.pop(exp_id, None)
                self.scheduler.free(a.worker)
                # A cancel (or release, or shutdown) that came while the worker was being replaced wins.
                again = requeue and not a.cancelled and not self._closed
                if again:
                    self.scheduler.enqueue(a.item, front=True)
                self._dispatch()
            if requeue and not again:
                a.item.sink(exp_id, {"event": "cancelled"})

    def _attempt(self, a: _Attempt) -> bool:
        """Run the job once on its worker; True when it must be queued again."""
        item, worker = a.item, a.worker
        exp_id = item.job.experiment_id
        t0 = self.clock()
        try:
            a.job_id = self._start(a)
        except NoCloudAccess as exc:
            self._fail(item, "launch", str(exc))
            with self._lock:  # every queued job would fail the same way
                others = self.scheduler.drain()
            for other in others:
                self._fail(other, "launch", str(exc))
            return False
        except SkyError as exc:
            self._fail(item, "launch", str(exc))
            return False
        info = worker.info
        assert info is not None
        item.sink(exp_id, {"event": "status", "status": "building", "worker": worker.name,
                           "runtime": {"job_id": a.job_id, **info.describe()}})
        final, gone = self._follow(a)
        wall = self.clock() - t0
        text = self._save_log(a, gone)
        cost = attempt_cost(final, wall, info.hourly_usd)
        item.cost_usd += cost
        with self._lock:
            self.spent_usd += cost
        if a.cancelled:
            item.sink(exp_id, {"event": "cancelled"})
            return False
        if gone is not None:
            return self._lost(a, gone)
        outcome = runner.parse_result_line("\n".join(machine_lines(text)))
        status = final.status if final else "?"
        if outcome is None:
            if status == "FAILED_SETUP":
                self._replace(worker, "its setup failed")
            self._fail(item, "setup" if status == "FAILED_SETUP" else "runner",
                       f"the job on {worker.name} ended {status} without a result line; "
                       f"read {item.job.log_path}:\n{text[-2000:]}")
            return False
        outcome.setdefault("host", {}).update(info.describe())
        noise = noise_of(outcome)
        limit = float(item.job.spec.get("design", {}).get("noise_limit", float("inf")))
        # The worker's own noise, not the verdict: `noisy` says the budget cannot decide this change, which
        # a quieter VM may or may not change, and measuring it afresh would spend a second alpha on it.
        if noise is not None and noise > limit:
            self._replace(worker, f"per-run noise {noise:.3f} is above the limit {limit:g}", outcome.get("host"))
            if item.noisy < MAX_NOISY_RETRIES:
                item.noisy += 1
                item.earlier_logs.append(a.log)
                item.sink(exp_id, {"event": "status", "status": "queued", "worker": None, "runtime": {
                    "requeued": f"worker {worker.name} was noisy; measuring again on a fresh VM"}})
                return True
        item.sink(exp_id, {"event": "result", "outcome": outcome, "worker": worker.name,
                           "cost_usd": round(item.cost_usd, 6)})
        return False

    def _start(self, a: _Attempt) -> int:
        """Stage the job and submit it: exec on a warm worker, launch on a cold (or vanished) one."""
        worker, job = a.worker, a.item.job
        with self._lock:
            retired = list(self._retired)
        self.staging_root.mkdir(parents=True, exist_ok=True)
        # A fresh directory per request: SkyPilot reads it until the request returns, and nothing
        # else writes there meanwhile.
        staging = Path(tempfile.mkdtemp(prefix=f"{job.experiment_id}-", dir=self.staging_root))
        try:
            sky_task.stage(self.repo_dir, job, staging, retired)
            task = sky_task.task_config(self.config.sky, job, staging)
            if worker.info is not None:
                try:
                    return self.port.exec(worker.name, task)
                except ClusterGone:
                    log.info("worker %s is gone (autostopped or preempted); launching it again", worker.name)
                    worker.info = None
            job_id, info = self.port.launch(worker.name, task, self.config.sky.idle_minutes_to_autostop)
            worker.info = info
            return job_id
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _follow(self, a: _Attempt) -> tuple[JobInfo | None, str | None]:
        """Poll the job until it ends, is cancelled or its cluster vanishes; (last info, why gone)."""
        cluster, job_id = a.worker.name, a.job_id
        assert job_id is not None
        errors = 0
        last_refresh = self.clock()
        forwarded = 0
        info: JobInfo | None = None
        while True:
            if a.cancelled:
                with contextlib.suppress(SkyError):
                    self.port.cancel(cluster, job_id)
                return info, None
            try:
                info = self.port.job(cluster, job_id)
                errors = 0
            except ClusterGone as exc:
                return info, str(exc)
            except ApiServerDown as exc:  # our side is down, not the cluster: keep waiting
                log.warning("cannot poll job %s on %s: %s", job_id, cluster, exc)
            except SkyError as exc:
                errors += 1
                if errors >= MAX_POLL_ERRORS:
                    return info, f"{cluster} did not answer {errors} times in a row: {exc}"
            if info is not None and info.status == "FAILED_DRIVER":
                return info, f"the job's driver on {cluster} died (the VM restarted or ran out of memory)"
            if info is not None and info.done:
                return info, None
            if self.clock() - last_refresh >= self.log_refresh_s:
                last_refresh = self.clock()
                with contextlib.suppress(SkyError):
                    forwarded = self._forward(a, self.port.logs(cluster, job_id), forwarded)
            a.wake.wait(self.poll_s)

    def _forward(self, a: _Attempt, text: str, already: int) -> int:
        """Save the log so far and pass on the runner's events that were not passed on yet."""
        a.fetched = text
        self._write_log(a, text)
        events = [ln for ln in machine_lines(text) if ln.startswith(runner.EVENT_PREFIX)]
        exp_id = a.item.job.experiment_id
        for line in events[already:]:
            with contextlib.suppress(json.JSONDecodeError):
                event = json.loads(line[len(runner.EVENT_PREFIX):])
                if event.get("event") == "status":
                    event["worker"] = a.worker.name
                a.item.sink(exp_id, event)
        return len(events)

    def _save_log(self, a: _Attempt, gone: str | None) -> str:
        """Fetch the job's whole log into the experiment's log_path (before any stop or down).

        When the cluster cannot give it any more, the part fetched while following the job stays.
        """
        text = a.fetched
        if a.job_id is not None:
            try:
                text = self.port.logs(a.worker.name, a.job_id)
            except SkyError as exc:
                text += f"\n[autoresearch] could not fetch the rest of the job log: {exc}\n"
        if gone:
            text += f"\n[autoresearch] worker {a.worker.name} lost: {gone}\n"
        self._write_log(a, text)
        return text

    def _write_log(self, a: _Attempt, text: str) -> None:
        info = a.worker.info
        where = ", ".join(str(v) for v in (info.cloud, info.region, info.instance_type) if v) if info else "?"
        header = f"[autoresearch] worker {a.worker.name} ({where}), job {a.job_id}\n"
        path = a.item.job.log_path
        a.log = header + text
        # never through a link planted in the session folder
        anchor = self.repo_dir if path.is_relative_to(self.repo_dir) else path.parent
        anchor.mkdir(parents=True, exist_ok=True)
        safefs.write_text(anchor, path, "".join(a.item.earlier_logs) + a.log)

    def _lost(self, a: _Attempt, why: str) -> bool:
        item, exp_id = a.item, a.item.job.experiment_id
        item.earlier_logs.append(a.log)
        self._cancel_job(a)  # in case the cluster is only unreachable: its next job must run alone
        self._replace(a.worker, why)
        if item.lost < MAX_LOST_RETRIES:
            item.lost += 1
            item.sink(exp_id, {"event": "status", "status": "queued", "worker": None,
                               "runtime": {"requeued": f"worker {a.worker.name} was lost ({why}); running again"}})
            return True
        item.sink(exp_id, {"event": "lost", "detail": f"worker {a.worker.name} was lost twice; last: {why}"})
        return False

    def _cancel_job(self, a: _Attempt) -> None:
        if a.job_id is not None:
            with contextlib.suppress(SkyError):
                self.port.cancel(a.worker.name, a.job_id)

    def _replace(self, worker: Worker, why: str, host: dict[str, Any] | None = None) -> None:
        """Down a worker that cannot be trusted; the next job on it launches a fresh VM."""
        log.warning("replacing worker %s: %s", worker.name, why)
        if host is not None:
            self.noisy_workers.append({**host, "reason": why})
        with contextlib.suppress(SkyError):
            self.port.down(worker.name)
        worker.info = None
