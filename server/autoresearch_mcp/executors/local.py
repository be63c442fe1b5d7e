"""The local executor: worktrees in the cache directory, builds in parallel, benchmarks one at a time.

Each job runs the shared runner script in a process session of its own (the runner is the session
leader; each build, bench or check it starts gets its own process group), so cancel, timeouts and
recovery after a crash can find and kill everything a job started.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from autoresearch_mcp import safefs, worker
from autoresearch_mcp.executors.port import EventSink, Executor, Interrupted, Job, failed, parse_event, result_of
from autoresearch_mcp.git import gitops
from autoresearch_mcp.git.worktrees import Worktrees
from autoresearch_mcp.worker import cgroups, channel, jobfile, measuretrees, procs, sandbox

log = logging.getLogger(__name__)


def kill_session(pid: int, started: float | None = None) -> bool:
    """SIGKILL every process in the session led by `pid` (if `pid` is still the process we started)."""
    try:
        leader = psutil.Process(pid)
        if started is not None and abs(leader.create_time() - started) > 1.0:
            return False  # the pid was reused by an unrelated process
    except psutil.NoSuchProcess:
        leader = None
    killed = False
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(proc.pid) == pid:
                proc.kill()
                killed = True
    if leader is not None:
        with contextlib.suppress(psutil.Error):
            leader.kill()
            killed = True
    return killed


def _crashed(job: Job, sink: EventSink, exc: Exception) -> None:
    """The failed result of a job the executor itself failed to run (logged with its traceback)."""
    log.exception("experiment %s crashed in the local executor", job.experiment_id)
    sink(job.experiment_id, failed(job.experiment_id, "executor", f"{type(exc).__name__}: {exc}"))


class _Running:
    def __init__(self, proc: subprocess.Popen[str], marker: str) -> None:
        self.proc = proc
        self.marker = marker  # the procs.JOB_ENV value every process of this run carries
        self.cancelled = False


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, repo: gitops.Repo, worktrees: Worktrees, parallelism: int = 2) -> None:
        self.repo = repo
        self.worktrees = worktrees
        self._queue: queue.Queue[tuple[Job, EventSink] | None] = queue.Queue()
        self._queued: dict[str, tuple[Job, EventSink]] = {}  # the job each experiment waits with
        self._running: dict[str, _Running] = {}
        self._cancelled: set[str] = set()
        self._starting: set[str] = set()  # dequeued, runner not started yet (worktrees being prepared)
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._work, args=(i,), name=f"autoresearch-local-{i}", daemon=True)
            for i in range(max(1, parallelism))
        ]
        for t in self._threads:
            t.start()

    # --- port --------------------------------------------------------------------------------------

    def confinement_problem(self, mode: str) -> str | None:
        return None if mode == sandbox.OFF else sandbox.unavailable()

    def submit(self, job: Job, sink: EventSink) -> None:
        # a queued job's trees are spared by evictions until it has taken them
        self.worktrees.want(id(job), (job.base_commit, job.candidate_commit), job.spec.worktree_variant)
        with self._lock:
            self._queued[job.experiment_id] = (job, sink)
        self._queue.put((job, sink))

    def cancel(self, experiment_id: str) -> bool:
        with self._lock:
            queued = self._queued.pop(experiment_id, None)
            if queued is not None:  # the worker that dequeues it skips it
                self.worktrees.unwant(id(queued[0]))
                queued[1](experiment_id, {"event": "cancelled"})
                return True
            if experiment_id in self._starting:
                self._cancelled.add(experiment_id)  # _run stops the runner as soon as it has started it
                return True
            running = self._running.get(experiment_id)
            if running is None:
                return False
            running.cancelled = True
        self._stop(running.proc, running.marker)
        return True

    def recover(self, interrupted: list[Interrupted]) -> None:
        for item in interrupted:
            pid = item.runtime.get("pid")
            if isinstance(pid, int) and kill_session(pid, item.runtime.get("pid_started")):
                log.warning("killed the leftover processes of experiment %s", item.experiment_id)
            marker = item.runtime.get("marker")
            if isinstance(marker, str) and procs.kill_marked(marker):
                log.warning("killed processes experiment %s left outside its session", item.experiment_id)
        self.worktrees.sweep_unbuilt()
        with contextlib.suppress(gitops.GitError):
            gitops.worktree_prune(self.repo)

    def close(self) -> None:
        with self._lock:
            self._cancelled.update(self._queued)
            for job, _sink in self._queued.values():
                self.worktrees.unwant(id(job))
            self._queued.clear()
            running = list(self._running.values())
        for r in running:
            r.cancelled = True
            self._stop(r.proc, r.marker)
        for _ in self._threads:
            self._queue.put(None)

    # --- work --------------------------------------------------------------------------------------

    def _stop(self, proc: subprocess.Popen[str], marker: str) -> None:
        # The runner's SIGTERM handler kills the group it is waiting on; then we sweep the session, then
        # whatever carries the experiment's marker (what left the session: `setsid cmd &`).
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        kill_session(proc.pid)
        procs.kill_marked(marker)

    def _work(self, slot: int) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job, sink = item
            if not self._take(job):
                self.worktrees.unwant(id(job))
                continue
            try:
                self._run(job, sink, slot)
            except Exception as exc:  # a job must always end with an event
                _crashed(job, sink, exc)
            finally:
                self.worktrees.unwant(id(job))
                with self._lock:
                    self._starting.discard(job.experiment_id)
                    self._cancelled.discard(job.experiment_id)

    def _take(self, job: Job) -> bool:
        """Whether a dequeued job is to run (False: it was cancelled while queued). A run of the same
        experiment that is still ending (cancelled, then launched again at once) ends first: the executor's
        books are kept by experiment id, and the other worker must not take the new run for the old one."""
        exp_id = job.experiment_id
        while True:
            with self._lock:
                if exp_id not in self._starting and exp_id not in self._running:
                    queued = self._queued.get(exp_id)
                    if queued is None or queued[0] is not job:  # cancelled while queued (or launched anew)
                        return False
                    del self._queued[exp_id]
                    self._cancelled.discard(exp_id)
                    self._starting.add(exp_id)
                    return True
            time.sleep(0.05)

    def _run(self, job: Job, sink: EventSink, slot: int) -> None:
        t0 = time.monotonic()
        incremental = isinstance(job.spec, jobfile.Experiment) and job.spec.incremental
        # trees of the cache no job needs are evicted before a launch is refused for want of disk
        full = self.worktrees.make_room(spare=[self.worktrees.slot_path(slot)] if incremental else [])
        if full is not None:
            sink(job.experiment_id, failed(job.experiment_id, "disk", full))
            return
        base, cand = self._trees(job, slot, incremental)
        job_file = self.worktrees.root / f"exp-{job.experiment_id}.job.json"
        marker = f"{job.experiment_id}.{uuid.uuid4().hex}"
        secret = secrets.token_hex(16)  # the runner's lines carry it; the job never sees it
        try:  # from here on the trees are released whatever fails (a full disk fails the job file's write)
            # the session's scripts: the base commit's, which a candidate cannot change (protected)
            spec = job.spec.placed(experiment_id=job.experiment_id, baseline_dir=str(base), candidate_dir=str(cand),
                                   log_path=str(job.log_path), machine_lock=str(self.worktrees.machine_lock()),
                                   scripts=self.worktrees.scripts(job.base_commit),
                                   # the protected paths' bytes from the base commit's objects, bound over the trees
                                   frozen_from=self.worktrees.frozen_store(job.base_commit, job.spec.frozen))
            job_file.write_text(json.dumps(spec.to_dict()))
            root = Path(self.repo.working_dir)
            if job.log_path.is_relative_to(root):
                safefs.ensure_dir(root, job.log_path.parent)  # never through a link planted in .autoresearch/
            else:
                job.log_path.parent.mkdir(parents=True, exist_ok=True)
            prep_s = time.monotonic() - t0
            proc = subprocess.Popen(
                # in a delegated scope of the user's systemd where the server can make no cgroup itself
                [*cgroups.systemd_scope(), sys.executable, "-m", worker.__name__, str(job_file)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                env={**os.environ, procs.JOB_ENV: marker},
            )
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(secret + "\n")
                proc.stdin.close()
            running = _Running(proc, marker)
            with self._lock:
                self._running[job.experiment_id] = running
                self._starting.discard(job.experiment_id)
                running.cancelled = job.experiment_id in self._cancelled  # cancelled while it was prepared
            started = psutil.Process(proc.pid).create_time()
            sink(job.experiment_id, {"event": "status", "status": "building", "worker": "local",
                                     "runtime": {"pid": proc.pid, "pid_started": started, "marker": marker,
                                                 "prepare_s": round(prep_s, 3)}})
            if running.cancelled:
                self._stop(proc, marker)
        except BaseException:
            self._cleanup(marker, job_file, base, cand)
            raise
        # A job that measures no longer needs its slot (benches take the machine in turns, never side by
        # side): the rest of it is followed by a thread of its own, so the next job's build and checks start
        # now instead of after this job's last pair. An incremental job keeps its slot (its tree is the slot's).
        measuring = threading.Event()
        follow = threading.Thread(target=self._follow, name=f"autoresearch-follow-{job.experiment_id}",
                                  args=(job, sink, proc, running, secret, prep_s, marker, job_file, base, cand,
                                        None if incremental else measuring), daemon=True)
        follow.start()
        while follow.is_alive() and not measuring.wait(0.2):
            pass

    def _follow(self, job: Job, sink: EventSink, proc: subprocess.Popen[str], running: _Running, secret: str,
                prep_s: float, marker: str, job_file: Path, base: Path, cand: Path,
                measuring: threading.Event | None) -> None:
        """Read a started runner to its end and report its result; `measuring` is set once it measures."""
        try:
            line = self._read(proc, job.experiment_id, sink, secret, measuring)
            proc.wait()
            if proc.returncode != 0:
                line = None  # only a runner that finished gives a result
            with self._lock:
                self._running.pop(job.experiment_id, None)
            if running.cancelled:
                sink(job.experiment_id, {"event": "cancelled"})
            elif line is None:
                sink(job.experiment_id, failed(job.experiment_id, "runner",
                                               f"the runner exited with status {proc.returncode} without a result"))
            else:
                result = result_of(job, line)
                result.durations["prepare"] = round(prep_s, 3)
                sink(job.experiment_id, {"event": "result", "outcome": result.to_dict(), "worker": "local"})
        except Exception as exc:  # a job must always end with an event
            _crashed(job, sink, exc)
        finally:
            with self._lock:
                self._running.pop(job.experiment_id, None)
            self._cleanup(marker, job_file, base, cand)

    def _trees(self, job: Job, slot: int, incremental: bool) -> tuple[Path, Path]:
        """The job's base and candidate trees (an incremental job's candidate: its slot's), held until `_cleanup`;
        neither stays held when the other cannot be had."""
        variant = job.spec.worktree_variant
        base = self.worktrees.acquire(job.base_commit, variant)
        try:
            cand = (self.worktrees.slot(slot, job.candidate_commit) if incremental
                    else self.worktrees.acquire(job.candidate_commit, variant))
        except BaseException:
            self.worktrees.release(base)
            raise
        return base, cand

    def _cleanup(self, marker: str, job_file: Path, base: Path, cand: Path) -> None:
        # nothing the experiment started outlives it, even if the runner itself was killed
        procs.kill_marked(marker)
        job_file.unlink(missing_ok=True)
        measuretrees.sweep(self.worktrees.root, marker.split(".")[0])  # the copies a killed runner left
        # what cleaning up fails at is logged: the experiment's result is given, and stays its result
        for tree in (base, cand):
            try:
                self.worktrees.release(tree)
            except Exception:
                log.exception("could not release the worktree %s (job file %s)", tree, job_file.name)

    def _read(self, proc: subprocess.Popen[str], exp_id: str, sink: EventSink, secret: str,
              measuring: threading.Event | None = None) -> dict[str, Any] | None:
        """Report the runner's events as they come; its result line's object (None: it printed none)."""
        assert proc.stdout is not None
        result = None
        for line in proc.stdout:
            if line.startswith(channel.EVENT_PREFIX):
                event = parse_event(line, secret)
                if event is not None:
                    sink(exp_id, event)
                    if measuring is not None and event.get("event") == "status" and event.get("status") == "running":
                        measuring.set()
            elif line.startswith(channel.RESULT_PREFIX):
                result = channel.parse_result_line(line, secret)
        return result
