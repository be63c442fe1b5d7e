"""Our own port onto SkyPilot: the few cluster and job operations the worker pool needs.

The pool depends on this protocol only; `skypilot.py` holds the real adapter (the only code that
imports `sky`), and the tests drive the pool through a fake of the same shape. Every method blocks
until SkyPilot has done the request (launch and exec return once the job is submitted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from autoresearch_mcp.errors import ExternalError

# Job statuses as SkyPilot names them; the terminal ones end a job.
JOB_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED"})


@dataclass(frozen=True)
class ClusterInfo:
    """A cluster as launched: what it runs on and what it costs an hour (None when unknown)."""

    name: str
    status: str  # UP, STOPPED, INIT, AUTOSTOPPING, PENDING
    cloud: str | None = None
    region: str | None = None
    instance_type: str | None = None
    use_spot: bool = False
    hourly_usd: float | None = None

    def describe(self) -> dict[str, Any]:
        return {"cluster": self.name, "cloud": self.cloud, "region": self.region,
                "instance_type": self.instance_type, "use_spot": self.use_spot, "hourly_usd": self.hourly_usd}


@dataclass(frozen=True)
class JobInfo:
    """One job of a cluster's queue; times are epoch seconds as the cluster reports them."""

    job_id: int
    status: str
    start_at: float | None = None
    end_at: float | None = None

    @property
    def done(self) -> bool:
        return self.status in JOB_TERMINAL


class SkyError(ExternalError):
    """SkyPilot refused or failed a request; the message says what to do."""


class NoCloudAccess(SkyError):
    """No cloud (or Kubernetes context) is enabled for SkyPilot."""


class ResourcesUnavailable(SkyError):
    """No region or zone had the requested resources (capacity, quota, spot market)."""


class ClusterGone(SkyError):
    """The cluster does not exist (any more) or is not up: downed, autostopped or preempted."""


class ApiServerDown(SkyError):
    """The SkyPilot API server is not reachable and could not be started."""


class ClusterInit(SkyError):
    """The cluster's status is INIT: still launching, or a status refresh failed (for example an SSH
    timeout on a busy VM). It may well be up: look again before calling it lost."""


class ResourcesMismatch(SkyError):
    """The existing cluster does not have the resources the task asks for (the config changed)."""


class Transient(SkyError):
    """A hiccup on the way to the VM (SSH or rsync failed, a status fetch timed out): try again."""


class SkyPort(Protocol):
    def launch(self, cluster: str, task: dict[str, Any], idle_minutes_to_autostop: int) -> tuple[int, ClusterInfo]:
        """Create (or restart) `cluster`, sync the task's workdir, run setup, submit the job."""

    def exec(self, cluster: str, task: dict[str, Any]) -> int:
        """Sync the workdir to an UP cluster and submit the job (no setup); its job id."""

    def job(self, cluster: str, job_id: int) -> JobInfo:
        """The job's status; raises ClusterGone when the cluster is not there or not up."""

    def logs(self, cluster: str, job_id: int, tail: int = 0) -> str:
        """The job's log so far (stdout and stderr of the run): its last `tail` lines, or all of it (0)."""

    def cancel(self, cluster: str, job_id: int) -> None: ...

    def down(self, cluster: str) -> None:
        """Delete the cluster; a cluster that does not exist is not an error."""

    def stop(self, cluster: str) -> None:
        """Stop the cluster (disks kept); a cluster that does not exist is not an error."""

    def clusters(self, names: list[str], refresh: bool = False) -> list[ClusterInfo]:
        """Those of `names` that exist, with their status (asked of the cloud when `refresh`)."""

    def price(self, task: dict[str, Any]) -> float | None:
        """The hourly price of the task's resources from the cloud's catalog, when it is known before launch."""

    def cost_report(self, names: list[str], since: float) -> float | None:
        """What SkyPilot's own cost report says the clusters `names` launched since `since` (epoch
        seconds) cost, in dollars; None when it does not answer."""
