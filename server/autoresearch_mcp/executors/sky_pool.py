"""The SkyPilot worker pool: N clusters per session, one experiment at a time on each.

Pure scheduling (`Scheduler`, sky_scheduler.py) is separate from the driver (`SkyPool`), which talks
to clusters only through the `SkyPort` protocol, so all of it runs against a fake port in the tests. Policy:
- a job goes to a free cluster that is already up before one that must be launched;
- a cluster is launched on demand (autostop with down as a safety net) and then reused with exec;
- a worker whose per-run noise (from the pair differences) is above `noise_limit` is replaced
  (down, relaunched on next use) and its experiment queued again, once;
  a worker that vanishes (preempted, downed) loses its job, which is queued again once and then
  reported `lost`;
- the session pays for every VM from its launch request to its down (sky_meter.py); an experiment's
  share is its attempts' time on the worker. With `budget_usd` set, a launch whose price is unknown
  is refused, and once the spend plus the idle time still to come reaches the budget, queued
  experiments fail with a clear message instead of launching;
- the job is polled rarely (a status check makes SkyPilot refresh the cluster over SSH, on the VM
  being measured), its log is fetched by tail, and a cluster in INIT is looked at again before it
  is called lost.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from autoresearch_mcp import safefs
from autoresearch_mcp.errors import StateError
from autoresearch_mcp.executors import sky_task
from autoresearch_mcp.executors.port import (
    EventSink,
    Executor,
    Interrupted,
    Job,
    Released,
    ValidationRun,
    failed,
    parse_event,
    result_of,
)
from autoresearch_mcp.executors.sky_joblog import fetch_log, has_result, machine_lines
from autoresearch_mcp.executors.sky_meter import Meter, Pin
from autoresearch_mcp.executors.sky_port import (
    ApiServerDown,
    ClusterGone,
    ClusterInfo,
    ClusterInit,
    JobInfo,
    NoCloudAccess,
    ResourcesMismatch,
    SkyError,
    SkyPort,
    Transient,
)
from autoresearch_mcp.executors.sky_scheduler import Pending, Scheduler, Worker
from autoresearch_mcp.measure import figures
from autoresearch_mcp.store.config import SessionConfig
from autoresearch_mcp.worker import channel, jobfile, outcomes

log = logging.getLogger(__name__)

MAX_LOST_RETRIES = 1
MAX_NOISY_RETRIES = 1
MAX_POLL_ERRORS = 5
MAX_INIT_CHECKS = 3  # INIT answers in a row before the cloud is asked whether the cluster is up
STATUS_EVERY = 5  # while pairs run, the job's status is asked every this many ticks (the log's tail otherwise)
POLL_S = 30.0  # job status while building or checking
BENCH_POLL_S = 2 * POLL_S  # job status and log while benchmark pairs run (the default)
RELEASE_ROUNDS = 3
_T = TypeVar("_T")


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
        self.forwarded = 0  # runner events of `fetched` already passed on
        self.phase = "building"  # the runner's last status: "running" while pairs are measured
        self.hourly_usd: float | None = None  # the worker's price, known before launch when possible
        self.secret = secrets.token_hex(16)  # the runner's lines carry it (sky_task.stage, run.sh)


class SkyPool(Executor):
    name = "sky"

    def __init__(
        self, repo_dir: Path, config: SessionConfig, port: SkyPort, staging_root: Path, *,
        spent_usd: float = 0.0, poll_s: float = POLL_S, bench_poll_s: float | None = None,
        log_refresh_s: float = BENCH_POLL_S, state_path: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.repo_dir = repo_dir
        self.config = config
        self.port = port
        self.staging_root = staging_root
        self.poll_s = poll_s
        self.bench_poll_s = bench_poll_s if bench_poll_s is not None else 2 * poll_s
        self.log_refresh_s = log_refresh_s
        self.clock = clock
        self.names = [sky_task.cluster_name(config.session_id, i) for i in range(max(1, config.sky.workers))]
        self.scheduler = Scheduler(self.names)
        self.meter = Meter(state_path, config.sky.idle_minutes_to_autostop, clock,
                           anchor=repo_dir if state_path is not None and state_path.is_relative_to(repo_dir) else None)
        self.earlier_usd = spent_usd  # spend recorded before this session had a meter
        self.noisy_workers: list[dict[str, Any]] = []
        self._retired: list[str] = []
        self._running: dict[str, _Attempt] = {}
        self._threads: set[threading.Thread] = set()
        self._lock = threading.RLock()
        self._pin_lock = threading.Lock()
        self._spot_names: set[str] = set()  # one launch at a time until the session's hardware is pinned
        self._ready = threading.Event()
        self._ready.set()
        self._closed = False

    @property
    def spent_usd(self) -> float:
        """What the session's clusters cost so far (launch to down, at their price)."""
        return self.earlier_usd + self.meter.spent()

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
        """Cancel the jobs a previous server left on our clusters and settle the meter, in the
        background (new jobs wait). Their logs stay on the cluster until it is downed
        (`sky logs <cluster> <job_id>`)."""
        leftovers = [(i, str(i.runtime["cluster"]), int(i.runtime["job_id"])) for i in interrupted
                     if isinstance(i.runtime.get("cluster"), str) and isinstance(i.runtime.get("job_id"), int)]
        if not leftovers and not self.meter.open_clusters():
            return
        self._ready.clear()

        def work() -> None:
            try:
                for item, cluster, job_id in leftovers:
                    with contextlib.suppress(SkyError):
                        self.port.cancel(cluster, job_id)
                        log.warning("cancelled job %s of interrupted experiment %s on %s",
                                    job_id, item.experiment_id, cluster)
                with contextlib.suppress(SkyError):
                    self.meter.reconcile({c.name for c in self.port.clusters(self.names)})
            finally:
                self._ready.set()

        self._spawn(work, "autoresearch-sky-recover")

    def release(self, mode: str) -> Released:
        """Cancel queued and running experiments (logs saved), then stop or down every cluster at once.

        Spot clusters are always downed (SkyPilot cannot stop them, and a stopped cluster never
        autodowns). The clusters are listed again, refreshed from the cloud, until none is left up;
        one that SkyPilot fails to release does not keep the others up, and the error names it.
        """
        self._cancel_all(closing=False, timeout=120.0)
        released: list[str] = []
        notes: list[str] = []
        failed: dict[str, str] = {}
        for round_ in range(RELEASE_ROUNDS + 1):
            left = [c for c in self.port.clusters(self.names, refresh=round_ > 0)
                    if mode == "down" or c.use_spot or c.status != "STOPPED"]
            if not left:
                failed.clear()
                break
            if round_ == RELEASE_ROUNDS:
                for c in left:
                    failed.setdefault(c.name, f"still {c.status} after {RELEASE_ROUNDS} attempts")
                break
            for info, error in self._release_all(left, mode):
                if error is None:
                    released.append(info.name)
                    failed.pop(info.name, None)
                else:
                    failed[info.name] = error
        for name in set(self.meter.open_clusters()) - set(failed):  # gone, or released above
            self.meter.ended(name)
        with self._lock:
            for w in self.scheduler.workers.values():
                self.scheduler.cool(w)
        released = sorted(set(released))
        spot = sorted({n for n in released if n in self._spot_names})
        if mode == "stop" and spot:
            notes.append(f"downed {', '.join(spot)} instead of stopping: spot clusters cannot be stopped")
        if mode == "stop" and set(released) - set(spot):
            notes.append("stopped clusters keep their disks, which are billed until you `sky down` them, and "
                         "they never autodown: call stop_workers(mode='down') when the session is over")
        self._cross_check_cost()
        if failed:
            done = f"released {', '.join(released)}; " if released else ""
            raise SkyError(f"{done}could not {mode} {len(failed)} worker(s), which may still cost money: "
                           + "; ".join(f"{n}: {e}" for n, e in sorted(failed.items()))
                           + f". Run `sky status` and `sky {mode} <cluster>`, or call stop_workers again")
        return Released(released, notes, round(self.spent_usd, 4))

    def validate(self, job: Job) -> ValidationRun:
        """Run the validation `job` on a worker (the session's first, launched if needed: call it before any
        experiment is submitted, as start_session does), so the baseline comes from the hardware experiments
        run on. Blocks."""
        done = super().validate(job)
        if done.worker is not None and not self.config.sky.instance_type and self.meter.pin is not None:
            done.worker += " — every worker of this session gets that instance type (set sky.instance_type to choose)"
        return done

    def submit_first(self, job: Job, sink: EventSink) -> None:
        """Queue `job` ahead of the queued experiments. It runs as they do: alone on a worker (never beside a
        measured pair), warm workers first, queued again if its worker is lost, its time charged (`cost_usd`),
        and refused once the budget is spent."""
        with self._lock:
            if self._closed:
                raise StateError("the server is shutting down; try again after it restarts")
            self.scheduler.enqueue(Pending(job, sink), front=True)
            self._dispatch()

    def retire_base(self, commit: str) -> None:
        with self._lock:
            self._retired.append(commit)

    def close(self) -> None:
        self._cancel_all(closing=True, timeout=30.0)
        up = self.meter.open_clusters()
        if up:
            log.warning("leaving %s up: autostop downs each after %d idle minutes (or call stop_workers)",
                        ", ".join(up), self.config.sky.idle_minutes_to_autostop)

    def _release_all(self, infos: list[ClusterInfo], mode: str) -> list[tuple[ClusterInfo, str | None]]:
        """Stop or down the clusters in parallel (a down takes minutes); (cluster, error or None) each."""
        def one(info: ClusterInfo) -> tuple[ClusterInfo, str | None]:
            if info.use_spot:
                self._spot_names.add(info.name)
            try:
                (self.port.down if mode == "down" or info.use_spot else self.port.stop)(info.name)
            except SkyError as exc:
                log.error("could not %s worker %s: %s", mode, info.name, exc)
                return info, str(exc)
            self.meter.ended(info.name)
            return info, None

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(infos)) as pool:
            return list(pool.map(one, infos))

    def _cross_check_cost(self) -> None:
        """Take SkyPilot's own cost report for our clusters when it answers and says more than we do."""
        since = self.meter.first_start()
        if since is None:
            return
        try:
            reported = self.port.cost_report(self.names, since)
        except SkyError as exc:
            log.info("SkyPilot's cost report did not answer: %s", exc)
            return
        if reported is not None:
            self.meter.reported(reported)

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

    def _budget_note(self) -> str | None:
        """Why no new cloud job may start (the budget is used up), or None."""
        budget = self.config.budget_usd
        if budget is None:
            return None
        committed = self.earlier_usd + self.meter.committed()
        if committed < budget:
            return None
        return (f"the session's cloud budget is used up: ${self.spent_usd:.2f} spent, ${committed:.2f} with the "
                f"idle time of the workers still up, of budget_usd=${budget:.2f}; no new cloud job is started. "
                "Raise budget_usd in .autoresearch/config.json (or remove it) and launch again")

    def _dispatch(self) -> None:
        """Start every job that has a free worker (lock held)."""
        if self._closed:
            return
        note = self._budget_note()
        if note is not None:
            for item in self.scheduler.drain():
                self._fail(item, "budget", note)
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
        item.sink(exp_id, {**failed(exp_id, phase, error), "cost_usd": round(item.cost_usd, 6)})

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
        except (SkyError, StateError) as exc:
            self._charge(a, t0)
            self._fail(item, "launch", str(exc))
            return False
        info = worker.info
        assert info is not None
        item.sink(exp_id, {"event": "status", "status": "building", "worker": worker.name,
                           "runtime": {"job_id": a.job_id, **info.describe()}})
        final, gone = self._follow(a)
        text = self._save_log(a, gone)
        self._charge(a, t0)
        if gone is None:
            self.meter.used(worker.name)
        if a.cancelled:
            item.sink(exp_id, {"event": "cancelled"})
            return False
        if gone is not None:
            return self._lost(a, gone)
        status = final.status if final else "?"
        # only a runner that finished gives a result, and only a line with its secret is the runner's
        line = channel.parse_result_line("\n".join(machine_lines(text)), a.secret) if status == "SUCCEEDED" else None
        if line is None:
            if status == "FAILED_SETUP":
                self._replace(worker, "its setup failed")
            self._fail(item, "setup" if status == "FAILED_SETUP" else "runner",
                       f"the job on {worker.name} ended {status} without a result line; "
                       f"read {item.job.log_path}:\n{text[-2000:]}")
            return False
        result = result_of(item.job, line)
        result.host.update(info.describe())
        noise = figures.worker_noise(result) if isinstance(result, outcomes.Experiment) else None
        design = item.job.spec.design if isinstance(item.job.spec, jobfile.Experiment) else {}
        limit = float(design.get("noise_limit", float("inf")))
        # The worker's own noise, not the verdict: `noisy` says the budget cannot decide this change, which
        # a quieter VM may or may not change, and measuring it afresh would spend a second alpha on it.
        if noise is not None and noise > limit:
            self._replace(worker, f"per-run noise {noise:.3f} is above the limit {limit:g}", result.host)
            if item.noisy < MAX_NOISY_RETRIES:
                item.noisy += 1
                item.earlier_logs.append(a.log)
                item.sink(exp_id, {"event": "status", "status": "queued", "worker": None, "runtime": {
                    "requeued": f"worker {worker.name} was noisy; measuring again on a fresh VM"}})
                return True
        item.sink(exp_id, {"event": "result", "outcome": result.to_dict(), "worker": worker.name,
                           "cost_usd": round(item.cost_usd, 6)})
        return False

    def _charge(self, a: _Attempt, t0: float) -> None:
        """The experiment's share of the cluster's bill: its time on the worker, launch included."""
        hourly = a.hourly_usd if a.hourly_usd is not None else (a.worker.info.hourly_usd if a.worker.info else None)
        a.item.cost_usd += max(0.0, self.clock() - t0) / 3600.0 * (hourly or 0.0)

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
            sky_task.stage(self.repo_dir, job, staging, retired, a.secret)
            if worker.info is not None:
                task = sky_task.task_config(self.config.sky, job, staging, self.repo_dir, self.meter.pin)
                try:
                    return self._twice(lambda: self.port.exec(worker.name, task))
                except ClusterGone:
                    log.info("worker %s is gone (autostopped or preempted); launching it again", worker.name)
                    self.meter.ended(worker.name)
                    worker.info = None
                except ResourcesMismatch as exc:
                    self._replace(worker, f"its resources no longer match the config ({exc})")
            return self._launch(a, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _twice(self, call: Callable[[], _T]) -> _T:
        """`call`, tried once more after a transient SSH or rsync failure."""
        try:
            return call()
        except Transient as exc:
            log.warning("retrying after a transient SkyPilot failure: %s", exc)
            return call()

    def _launch(self, a: _Attempt, staging: Path) -> int:
        """Launch the worker's cluster with the job; a failed launch leaves no VM behind.

        Until the session's hardware is pinned, launches go one at a time, so the first one decides
        the instance type every later worker gets.
        """
        worker, job = a.worker, a.item.job
        with self._pin_lock if self.meter.pin is None else contextlib.nullcontext():
            task = sky_task.task_config(self.config.sky, job, staging, self.repo_dir, self.meter.pin)
            price = self._price(task)
            a.hourly_usd = price
            for attempt in range(2):
                self.meter.launching(worker.name, price)
                try:
                    job_id, info = self.port.launch(worker.name, task, self.config.sky.idle_minutes_to_autostop)
                    break
                except NoCloudAccess:
                    self.meter.ended(worker.name)
                    raise
                except (Transient, ResourcesMismatch) as exc:
                    if attempt == 1:
                        self._down_failed_launch(worker.name, exc)
                        raise
                    log.warning("launching %s again after: %s", worker.name, exc)
                    if isinstance(exc, ResourcesMismatch):  # a cluster left from another config
                        self._down_failed_launch(worker.name, exc)
                except SkyError as exc:
                    self._down_failed_launch(worker.name, exc)
                    raise
            hourly = info.hourly_usd if info.hourly_usd is not None else price
            if hourly is None and self.config.budget_usd is not None:
                self._down_failed_launch(worker.name, "its price is unknown")
                raise SkyError(self._unknown_price(task))
            a.hourly_usd = hourly
            self.meter.launched(worker.name, hourly)
            if hourly is None:
                log.warning("the price of %s (%s) is unknown: its cost is not counted", worker.name,
                            info.instance_type)
            worker.info = replace(info, hourly_usd=hourly)
            if self.meter.pin is None and info.instance_type and not self.config.sky.instance_type:
                self.meter.set_pin(Pin(info.instance_type, info.cloud.lower() if info.cloud else None, hourly))
                log.info("every worker of the session will be %s on %s", info.instance_type, info.cloud)
            return job_id

    def _price(self, task: dict[str, Any]) -> float | None:
        """The hourly price before launch; with a budget, a launch whose price is unknown is refused."""
        pin = self.meter.pin
        price = pin.hourly_usd if pin is not None and not self.config.sky.instance_type else None
        if price is None:
            try:
                price = self.port.price(task)
            except SkyError as exc:
                log.info("no catalog price before launch: %s", exc)
        if price is None and self.config.budget_usd is not None:
            raise SkyError(self._unknown_price(task))
        return price

    def _unknown_price(self, task: dict[str, Any]) -> str:
        return (f"refusing to launch: budget_usd is set and the hourly price of {task['resources']} is unknown "
                "(SkyPilot's price catalog has no entry, or could not be downloaded). Set sky.instance_type and "
                "sky.infra in .autoresearch/config.json to a type the catalog lists (`sky show-gpus --all` / "
                "the cloud's price list), or remove budget_usd to run without a cost limit")

    def _down_failed_launch(self, cluster: str, why: object) -> None:
        """A launch that failed after provisioning can leave a VM without autostop: down it."""
        log.warning("downing %s after a failed launch (%s)", cluster, why)
        try:
            self.port.down(cluster)
        except SkyError as exc:
            log.error("could not down %s after its failed launch: %s; run `sky down %s`", cluster, exc, cluster)
            return
        self.meter.ended(cluster)

    def _follow(self, a: _Attempt) -> tuple[JobInfo | None, str | None]:
        """Poll the job until it ends, is cancelled or its cluster vanishes; (last info, why gone).

        Each request makes SkyPilot refresh the cluster's status, over SSH on the VM being measured
        (sky/backends/backend_utils.py: clusters with autostop are stale after 2 s), so requests are
        rare: every `poll_s` while building or checking, every `bench_poll_s` while pairs run, and
        then one a tick: the log's tail (the runner's progress, and its result line when it is done),
        with the job's status only every STATUS_EVERY-th tick or once the result line is in (a log
        fetch cannot tell a running job from a finished one: job_lib maps NOT_FINISHED to 0 there).
        """
        cluster, job_id = a.worker.name, a.job_id
        assert job_id is not None
        errors = inits = ticks = 0
        last_log = self.clock()
        info: JobInfo | None = None
        while True:
            if a.cancelled:
                with contextlib.suppress(SkyError):
                    self.port.cancel(cluster, job_id)
                return info, None
            ticks += 1
            log_only = a.phase == "running" and ticks % STATUS_EVERY != 0 and not has_result(a.fetched, a.secret)
            try:
                if log_only:
                    self._forward(a, self._fetch_log(a))
                    last_log = self.clock()
                else:
                    info = self.port.job(cluster, job_id)
                errors = inits = 0
            except ClusterGone as exc:
                return info, str(exc)
            except ClusterInit as exc:
                # A failed status refresh under load turns a healthy cluster INIT: look again.
                inits += 1
                if inits >= MAX_INIT_CHECKS and not self._still_up(cluster):
                    return info, f"{cluster} stayed INIT for {inits} checks in a row: {exc}"
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
            if log_only and has_result(a.fetched, a.secret):
                continue  # the runner is done: confirm with the job's status at once
            if not log_only and self.clock() - last_log >= self.log_refresh_s:
                last_log = self.clock()
                with contextlib.suppress(SkyError):
                    self._forward(a, self._fetch_log(a))
            a.wake.wait(self.bench_poll_s if a.phase == "running" else self.poll_s)

    def _still_up(self, cluster: str) -> bool:
        """Ask the cloud (a refreshed status) whether a cluster that keeps answering INIT is up."""
        try:
            found = self.port.clusters([cluster], refresh=True)
        except SkyError as exc:
            log.warning("could not refresh the status of %s: %s", cluster, exc)
            return True  # unknown is not lost; the poll errors decide
        return any(c.status == "UP" for c in found)

    def _fetch_log(self, a: _Attempt) -> str:
        assert a.job_id is not None
        return fetch_log(self.port, a.worker.name, a.job_id, a.fetched)

    def _forward(self, a: _Attempt, text: str) -> None:
        """Save the log so far and pass on the runner's events that were not passed on yet."""
        a.fetched = text
        self._write_log(a, text)
        events = [ln for ln in machine_lines(text) if ln.startswith(channel.EVENT_PREFIX)]
        exp_id = a.item.job.experiment_id
        for line in events[a.forwarded:]:
            event = parse_event(line, a.secret)
            if event is None:
                continue
            if event["event"] == "status":
                event["worker"] = a.worker.name
                a.phase = event["status"]
            a.item.sink(exp_id, event)
        a.forwarded = len(events)

    def _save_log(self, a: _Attempt, gone: str | None) -> str:
        """Fetch the rest of the job's log into the experiment's log_path (before any stop or down).

        When the cluster cannot give it any more, the part fetched while following the job stays.
        """
        text = a.fetched
        if a.job_id is not None:
            try:
                text = self._fetch_log(a)
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
        try:
            self.port.down(worker.name)
            self.meter.ended(worker.name)
        except SkyError as exc:
            log.error("could not down worker %s: %s; autostop downs it after %d idle minutes", worker.name, exc,
                      self.config.sky.idle_minutes_to_autostop)
        worker.info = None
