"""The `sky` executor: the worker pool of sky_pool.py on real SkyPilot clusters.

This is the only module that imports `sky`, and it does so in a helper process, never in the
server: SkyPilot's SDK prints to stdout (the MCP channel), configures logging, and its import is
heavy. The server talks to the helper (`python -m autoresearch_mcp.executors.skypilot`) over
JSON lines on the helper's stdin and the stdout it had at start; inside the helper, fd 1 is
pointed at stderr (a log file), so whatever SkyPilot prints lands in that log. The helper starts
SkyPilot's local API server once, from the home directory (a directory that outlives any request),
and stops it again when the server exits if it was the one that started it. At exit it also
cancels launches still in flight (`sky.api_cancel`) and downs their clusters, so no VM is left
half-launched without autostop.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import io
import itertools
import json
import logging
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from autoresearch_mcp.executors import sky_port
from autoresearch_mcp.executors.sky_pool import SkyPool
from autoresearch_mcp.executors.sky_port import ApiServerDown, ClusterInfo, JobInfo, SkyError
from autoresearch_mcp.git import gitops
from autoresearch_mcp.git.worktrees import repo_key
from autoresearch_mcp.measure import figures
from autoresearch_mcp.settings import Settings
from autoresearch_mcp.store.config import SessionConfig, state_dir
from autoresearch_mcp.store.ledger import Ledger

log = logging.getLogger(__name__)

_ERRORS: dict[str, type[SkyError]] = {  # the helper's error kinds, as the port's errors
    "no_cloud": sky_port.NoCloudAccess, "unavailable": sky_port.ResourcesUnavailable, "gone": sky_port.ClusterGone,
    "api_down": ApiServerDown, "init": sky_port.ClusterInit, "mismatch": sky_port.ResourcesMismatch,
    "transient": sky_port.Transient, "error": SkyError,
}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# Operations that answer in seconds when SkyPilot is healthy; longer means it is stuck.
_SHORT_OPS = frozenset({"job", "logs", "cancel", "clusters", "price", "cost_report"})
SHORT_TIMEOUT_S = 300.0
# At exit the helper cancels launches, downs their clusters and may stop the API server.
SHUTDOWN_TIMEOUT_S = 120.0


class _Helper:
    """One helper process and the calls waiting for its replies (a restarted helper is a new one)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.waiting: dict[int, concurrent.futures.Future[dict[str, Any]]] = {}
        self.dead = False  # set by its reader, under the port's lock, once its replies have ended
        self.write_lock = threading.Lock()


class SdkPort:
    """The real SkyPort: each call is one request to the SkyPilot helper process."""

    def __init__(self, log_path: Path, cwd: Path | None = None, *, command: list[str] | None = None,
                 short_timeout_s: float = SHORT_TIMEOUT_S) -> None:
        self.log_path = log_path
        self.cwd = cwd or Path.home()
        self.command = command or [sys.executable, "-m", "autoresearch_mcp.executors.skypilot"]
        self.short_timeout_s = short_timeout_s
        self.stray: list[str] = []  # lines on the reply channel that were not replies (should be none)
        self._helper: _Helper | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    # --- the helper process -------------------------------------------------------------------------

    def _live_helper(self) -> _Helper:
        """The running helper, started if needed (lock held)."""
        if self._closed:
            raise ApiServerDown("the SkyPilot port is closed (the server is shutting down)")
        helper = self._helper
        if helper is not None and not helper.dead and helper.proc.poll() is None:
            return helper
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as err:
            proc = subprocess.Popen(self.command, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=err, text=True, bufsize=1)
        helper = self._helper = _Helper(proc)
        threading.Thread(target=self._read, args=(helper,), name="autoresearch-sky-helper", daemon=True).start()
        return helper

    def _read(self, helper: _Helper) -> None:
        assert helper.proc.stdout is not None
        for line in helper.proc.stdout:
            try:
                reply = json.loads(line)
                req_id = reply["id"]
            except (json.JSONDecodeError, KeyError, TypeError):
                log.warning("the SkyPilot helper wrote a line that is not a reply: %.200s", line.rstrip())
                self.stray.append(line)
                continue
            with self._lock:
                fut = helper.waiting.pop(req_id, None)
            if fut is not None:
                fut.set_result(reply)
        helper.proc.wait()
        with self._lock:
            helper.dead = True
            orphans, helper.waiting = list(helper.waiting.values()), {}
        for fut in orphans:
            fut.set_result({"ok": False, "kind": "api_down", "message": (
                f"the SkyPilot helper process exited with status {helper.proc.returncode}; its log is "
                f"{self.log_path}. Is `autoresearch-mcp[sky]` installed (pip install 'autoresearch-mcp[sky]')?")})

    def call(self, op: str, **args: Any) -> Any:
        fut: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        with self._lock:  # registered while the helper is known alive: its reader answers or fails it
            helper = self._live_helper()
            req_id = next(self._ids)
            helper.waiting[req_id] = fut
        try:
            assert helper.proc.stdin is not None
            with helper.write_lock:
                helper.proc.stdin.write(json.dumps({"id": req_id, "op": op, "args": args}) + "\n")
                helper.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the helper is gone: its reader fails every waiting call
        timeout = self.short_timeout_s if op in _SHORT_OPS else None
        try:
            reply = fut.result(timeout)
        except concurrent.futures.TimeoutError:
            with self._lock:
                helper.waiting.pop(req_id, None)
            raise ApiServerDown(
                f"SkyPilot did not answer `{op}` for {args.get('cluster', '?')} within {timeout:.0f} s; the "
                f"API server may be stuck: check `sky api info` and `sky api logs`, and {self.log_path}") from None
        if not reply.get("ok"):
            raise _ERRORS.get(reply.get("kind", "error"), SkyError)(reply.get("message", "SkyPilot failed"))
        return reply.get("value")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            helper, self._helper = self._helper, None
        if helper is None or helper.proc.poll() is not None:
            return
        assert helper.proc.stdin is not None
        with contextlib.suppress(OSError), helper.write_lock:
            helper.proc.stdin.close()  # the helper then cancels what is in flight and stops what it started
        try:
            helper.proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.error("the SkyPilot helper did not finish its shutdown in %.0f s; see %s", SHUTDOWN_TIMEOUT_S,
                      self.log_path)
            helper.proc.kill()

    # --- SkyPort ------------------------------------------------------------------------------------

    def start_api_server(self) -> None:
        self.call("api_start")

    def launch(self, cluster: str, task: dict[str, Any], idle_minutes_to_autostop: int) -> tuple[int, ClusterInfo]:
        value = self.call("launch", cluster=cluster, task=task, idle=idle_minutes_to_autostop)
        return int(value["job_id"]), ClusterInfo(**value["cluster"])

    def exec(self, cluster: str, task: dict[str, Any]) -> int:
        return int(self.call("exec", cluster=cluster, task=task))

    def job(self, cluster: str, job_id: int) -> JobInfo:
        return JobInfo(**self.call("job", cluster=cluster, job_id=job_id))

    def logs(self, cluster: str, job_id: int, tail: int = 0) -> str:
        return str(self.call("logs", cluster=cluster, job_id=job_id, tail=tail))

    def cancel(self, cluster: str, job_id: int) -> None:
        self.call("cancel", cluster=cluster, job_id=job_id)

    def down(self, cluster: str) -> None:
        self.call("down", cluster=cluster)

    def stop(self, cluster: str) -> None:
        self.call("stop", cluster=cluster)

    def clusters(self, names: list[str], refresh: bool = False) -> list[ClusterInfo]:
        return [ClusterInfo(**c) for c in self.call("clusters", names=names, refresh=refresh)]

    def price(self, task: dict[str, Any]) -> float | None:
        value = self.call("price", task=task)
        return None if value is None else float(value)

    def cost_report(self, names: list[str], since: float) -> float | None:
        value = self.call("cost_report", names=names, since=since)
        return None if value is None else float(value)

    def validate(self, task: dict[str, Any]) -> dict[str, Any]:
        """SkyPilot's own reading of a task (from_yaml_config, validate, to_yaml_config)."""
        value: dict[str, Any] = self.call("validate", task=task)
        return value


def session_spend(repo_root: Path, session_id: str) -> float:
    """What the session's experiments cost, from the ledger: the spend of a session that was started
    before the cluster meter (sky-<session>.json) existed, so its budget still counts it."""
    view = Ledger(state_dir(repo_root) / "ledger.jsonl").view()
    # the host's runs only: each other platform's pool keeps its own meter
    return figures.session_cost((e for e in view.experiments.values() if e.launch.session_id == session_id),
                                platforms=False, profiles=(p for p in view.profiles if p.session_id == session_id))


class SkyExecutor(SkyPool):
    """The pool on real clusters; the API server is started in the background at once."""

    def __init__(self, repo: gitops.Repo, config: SessionConfig, settings: Settings) -> None:
        root = Path(repo.working_dir)
        self.sdk = SdkPort(settings.cache_dir / "sky" / "sdk.log")
        meter = state_dir(root) / f"sky-{config.session_id}.json"
        super().__init__(root, config, self.sdk, settings.cache_dir / "sky" / "staging" / repo_key(repo),
                         spent_usd=0.0 if meter.exists() else session_spend(root, config.session_id),
                         state_path=meter)
        threading.Thread(target=self._start_api, name="autoresearch-sky-api", daemon=True).start()

    def _start_api(self) -> None:
        try:
            self.sdk.start_api_server()
        except SkyError as exc:
            log.error("SkyPilot is not ready: %s", exc)

    def close(self) -> None:
        super().close()
        self.sdk.close()


# --- the helper process (imports sky) --------------------------------------------------------------


def _clean(exc: BaseException) -> str:
    return _ANSI.sub("", str(exc)).strip() or type(exc).__name__


def _cluster_status(exc: BaseException) -> str | None:
    """The status a ClusterNotUpError carries (an enum on the server, maybe its value after transport)."""
    status = getattr(exc, "cluster_status", None)
    if status is not None:
        return str(getattr(status, "value", status))
    found = re.search(r"\(status: ([A-Z_]+)\)", _clean(exc))  # sky/backends/backend_utils.py's message
    return found.group(1) if found else None


def _transient(exc: BaseException) -> bool:
    """An SSH or rsync hiccup, or a status fetch that failed: worth one more try.

    SSH exits 255 when it cannot connect; a failed rsync raises CommandError with "Failed to rsync"
    (sky/utils/command_runner.py, which already retried it with backoff).
    """
    from sky import exceptions as ex

    if isinstance(exc, ex.CommandError):
        return exc.returncode == 255 or "Failed to rsync" in _clean(exc)
    return isinstance(exc, ex.FetchClusterInfoError | ex.NetworkError | ex.ClusterStatusFetchingError
                      | ex.SkyletUnavailableError | ex.ServerTemporarilyUnavailableError)


def _error(exc: BaseException) -> tuple[str, str]:
    """Our error kind and an actionable message for an exception raised by the SDK."""
    from sky import exceptions as ex

    text = _clean(exc)
    if isinstance(exc, ex.NoCloudAccessError):
        return "no_cloud", (f"SkyPilot has no cloud access ({text}). Run `sky check` to see which clouds and "
                            "Kubernetes contexts are enabled, set up credentials for one, then launch again")
    if isinstance(exc, ex.ResourcesUnavailableError):
        return "unavailable", (
            f"no region or zone had the requested resources ({text[:600]}). Change `sky` in "
            ".autoresearch/config.json (cpus, instance_type, infra, region, use_spot), check quotas, and run "
            "`sky check` to confirm the cloud is enabled")
    if isinstance(exc, ex.ResourcesMismatchError):
        return "mismatch", text[:1500]
    if isinstance(exc, ex.ClusterNotUpError) and _cluster_status(exc) == "INIT":
        return "init", text
    if isinstance(exc, ex.ClusterDoesNotExist | ex.ClusterNotUpError):
        return "gone", text
    if isinstance(exc, ex.ApiServerConnectionError):
        return "api_down", (f"the SkyPilot API server is not reachable ({text}); start it with `sky api start` "
                            "(or check `sky api info`)")
    if _transient(exc):
        return "transient", f"{type(exc).__name__}: {text[:1500]}"
    return "error", f"SkyPilot failed: {type(exc).__name__}: {text[:1500]}"


def _hourly(res: Any) -> float | None:
    """The catalog's hourly price of launched (or fully specified) resources; None when unknown."""
    try:
        return float(res.get_cost(3600))
    except Exception:  # needs the cloud's price catalog, which is downloaded, not bundled
        return None


def _describe(name: str, status: str, handle: Any) -> dict[str, Any]:
    res = getattr(handle, "launched_resources", None)
    return {"name": name, "status": status, "cloud": str(res.cloud) if res is not None and res.cloud else None,
            "region": getattr(res, "region", None), "instance_type": getattr(res, "instance_type", None),
            "use_spot": bool(getattr(res, "use_spot", False)),
            "hourly_usd": _hourly(res) if res is not None else None}


def _field(record: Any, key: str) -> Any:
    return record[key] if isinstance(record, dict) else getattr(record, key)


def _price(task_config: dict[str, Any]) -> float | None:
    """The hourly price of a task's resources from the catalogs, before launch; None when unknown.

    With an instance type, its price (Kubernetes is priced at 0). Without one, the price of the
    instance type each catalog picks by default for the cpus and memory asked for, the highest of
    those (the optimizer may pick any enabled cloud). The catalogs are downloaded, not bundled:
    offline the price is unknown.
    """
    import sky
    from sky.utils import registry

    task = sky.Task.from_yaml_config(copy.deepcopy(task_config))
    prices: list[float] = []
    for res in task.resources:
        if res.instance_type is not None and res.cloud is not None:
            price = _hourly(res)
            if price is None:
                return None
            prices.append(price)
            continue
        names = [str(res.cloud)] if res.cloud is not None else ["aws", "gcp"]
        found = []
        for cloud in (registry.CLOUD_REGISTRY.from_str(name) for name in names):
            if cloud is None:
                continue
            with contextlib.suppress(Exception):
                itype = res.instance_type or cloud.get_default_instance_type(
                    cpus=res.cpus, memory=res.memory, region=res.region, use_spot=res.use_spot)
                if itype is not None:
                    found.append(float(cloud.instance_type_to_hourly_cost(itype, res.use_spot, res.region, None)))
        if not found:
            return None
        prices.append(max(found))
    return max(prices) if prices else None


class _Server:
    """The API server as this helper uses it: started once, stopped at exit when we started it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = False
        self.ours = False
        # launches and execs whose SkyPilot requests are still running: request id -> (op, cluster)
        self.inflight: dict[str, tuple[str, str]] = {}

    def ensure(self) -> None:
        """Start the local API server once (a remote endpoint, if configured, is only checked)."""
        import sky
        from sky.server import common as server_common

        with self.lock:
            if self.started:
                return
            if not server_common.is_api_server_local():
                sky.api_info()
            else:
                running = server_common.get_api_server_status().status == server_common.ApiServerStatus.HEALTHY
                sky.api_start()
                self.ours = not running
                if self.ours:
                    log.info("started the local SkyPilot API server; it is stopped when this server exits")
            self.started = True

    def run(self, op: str, cluster: str, request_id: Any) -> Any:
        """Wait for a launch or exec request, remembered so that shutdown can cancel it."""
        import sky

        with self.lock:
            self.inflight[str(request_id)] = (op, cluster)
        try:
            return sky.get(request_id)
        finally:
            with self.lock:
                self.inflight.pop(str(request_id), None)

    def shutdown(self) -> None:
        """Cancel launches in flight and down their clusters; stop the API server if we started it."""
        import sky

        with self.lock:
            inflight, started = dict(self.inflight), self.started
        if not started:
            return
        if inflight:
            with contextlib.suppress(Exception):
                sky.get(sky.api_cancel(list(inflight), silent=True))
                log.warning("cancelled SkyPilot requests still in flight at exit: %s",
                            ", ".join(f"{op} {cluster}" for op, cluster in inflight.values()))
        downs = []
        for op, cluster in inflight.values():
            if op == "launch":  # it may have provisioned a VM whose autostop is not set yet
                try:
                    downs.append((cluster, sky.down(cluster)))
                except Exception as exc:
                    log.error("could not down %s after cancelling its launch: %s; run `sky down %s`",
                              cluster, _clean(exc), cluster)
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S / 2
        for cluster, request_id in downs:
            waiter = threading.Thread(target=lambda r=request_id: sky.get(r), daemon=True)
            waiter.start()
            waiter.join(max(0.0, deadline - time.monotonic()))
            log.warning("%s %s after its launch was cancelled", "downing" if waiter.is_alive() else "downed", cluster)
        if not self.ours:
            return
        from sky.server import constants as server_constants
        from sky.server import daemons

        def internal(request_id: str) -> bool:  # the server's own background work (sky/server/daemons.py)
            return daemons.is_daemon_request_id(request_id) or request_id == server_constants.ON_BOOT_CHECK_REQUEST_ID

        try:
            busy = [r for r in sky.api_status() if r.status in ("PENDING", "WAITING", "RUNNING")
                    and not internal(r.request_id)]
        except Exception as exc:
            log.warning("could not list the SkyPilot API server's requests (%s); leaving it running", _clean(exc))
            return
        if busy:
            log.warning("leaving the SkyPilot API server this session started running: %d request(s) still "
                        "run (%s); stop it later with `sky api stop`", len(busy),
                        ", ".join(sorted({f"{r.name} {r.cluster_name or ''}".strip() for r in busy})))
            return
        with contextlib.suppress(Exception):
            sky.api_stop()
            log.info("stopped the local SkyPilot API server this session started")


_server = _Server()


def _op(op: str, args: dict[str, Any]) -> Any:
    import sky

    if op == "validate":
        task = sky.Task.from_yaml_config(copy.deepcopy(args["task"]))  # it empties the dict it reads
        task.validate()
        return task.to_yaml_config()
    if op == "price":
        return _price(args["task"])
    _server.ensure()
    if op == "api_start":
        return None
    cluster = str(args.get("cluster"))
    if op in ("launch", "exec"):
        task = sky.Task.from_yaml_config(copy.deepcopy(args["task"]))
        if op == "exec":
            job_id, _ = _server.run(op, cluster, sky.exec(task, cluster_name=cluster))
            return job_id
        job_id, handle = _server.run(op, cluster, sky.launch(
            task, cluster_name=cluster, idle_minutes_to_autostop=args["idle"], down=True))
        return {"job_id": job_id, "cluster": _describe(str(cluster), "UP", handle)}
    if op == "job":
        job_id = int(args["job_id"])
        status = sky.get(sky.job_status(cluster, [job_id])).get(job_id)
        if status is None:
            raise sky.exceptions.ClusterDoesNotExist(f"job {job_id} is not in the queue of {cluster}")
        info = {"job_id": job_id, "status": getattr(status, "value", str(status)), "start_at": None, "end_at": None}
        if status.is_terminal():  # the queue has the job's times; read it once, at the end
            for rec in sky.get(sky.queue(cluster, skip_finished=False)):
                if int(_field(rec, "job_id")) == job_id:
                    info.update(start_at=_field(rec, "start_at"), end_at=_field(rec, "end_at"))
        return info
    if op == "logs":
        buf = io.StringIO()
        sky.tail_logs(cluster, args["job_id"], follow=False, tail=int(args.get("tail") or 0), output_stream=buf)
        return buf.getvalue()
    if op == "cancel":
        return sky.get(sky.cancel(cluster, job_ids=[args["job_id"]]))
    if op in ("down", "stop"):
        with contextlib.suppress(sky.exceptions.ClusterDoesNotExist):
            sky.get((sky.down if op == "down" else sky.stop)(cluster))
        return None
    if op == "clusters":
        from sky.utils import common as sky_common

        refresh = sky_common.StatusRefreshMode.FORCE if args.get("refresh") else sky_common.StatusRefreshMode.NONE
        records = sky.get(sky.status(cluster_names=args["names"], refresh=refresh))
        return [_describe(str(_field(r, "name")), getattr(_field(r, "status"), "value", "?"), _field(r, "handle"))
                for r in records]
    if op == "cost_report":
        since, names = float(args["since"]), set(args["names"])
        days = max(1, math.ceil((time.time() - since) / 86400) + 1)
        return sum(float(_field(r, "total_cost") or 0.0) for r in sky.get(sky.cost_report(days=days))
                   if _field(r, "name") in names and float(_field(r, "launched_at") or 0) >= since - 60)
    raise ValueError(f"unknown operation {op!r}")


def _serve(requests: IO[str], replies: IO[str]) -> None:
    lock = threading.Lock()

    def handle(req: dict[str, Any]) -> None:
        try:
            reply = {"id": req["id"], "ok": True, "value": _op(req["op"], req.get("args", {}))}
        except BaseException as exc:  # every request gets an answer, whatever happened
            kind, message = ("error", f"{type(exc).__name__}: {_clean(exc)}")
            with contextlib.suppress(Exception):
                kind, message = _error(exc)
            reply = {"id": req["id"], "ok": False, "kind": kind, "message": message}
        with lock, contextlib.suppress(OSError, ValueError):
            replies.write(json.dumps(reply, default=str) + "\n")
            replies.flush()

    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
        for line in requests:
            with contextlib.suppress(json.JSONDecodeError):
                pool.submit(handle, json.loads(line))
        # The server closed our stdin: it is exiting. Launches still waiting are cancelled here, so
        # the pool can finish; then the API server is stopped if we started it.
        _server.shutdown()


def main() -> int:
    # Keep the reply channel, then send fd 1 (and sys.stdout) to stderr: SkyPilot prints freely.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    _serve(sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
