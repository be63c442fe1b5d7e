"""What the session's clusters cost: each VM's time from the launch request to its down, at its price.

A cloud bills a VM from provisioning to termination, not only while a job runs: provisioning and
setup, the idle minutes before autostop downs it, a replacement VM for a noisy or lost one. So the
meter charges every cluster incarnation from the moment its launch was requested until it is downed
(or stopped, or found gone), at the hourly price of what was launched. A cluster that is still up
will cost at least its idle minutes before autodown; `committed` counts that too, and the budget is
checked against it. The record lives in `.autoresearch/sky-<session>.json` so a restart keeps the spend and
the pinned worker hardware.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_mcp import safefs
from autoresearch_mcp.errors import StateError

log = logging.getLogger(__name__)

# A cluster found gone after a restart was downed by autostop some time after its last use; the
# down itself takes a few minutes more.
DOWN_GRACE_S = 300.0


@dataclass
class Incarnation:
    """One VM of a cluster name: launch requested at `started`, released at `ended` (epoch seconds)."""

    cluster: str
    started: float
    hourly_usd: float | None = None
    ended: float | None = None
    last_used: float | None = None

    def seconds(self, now: float) -> float:
        return max(0.0, (self.ended if self.ended is not None else now) - self.started)


@dataclass
class Pin:
    """The hardware every worker of the session runs on, fixed by the first launch."""

    instance_type: str
    cloud: str | None = None
    hourly_usd: float | None = None


@dataclass
class _State:
    incarnations: list[Incarnation] = field(default_factory=list)
    pin: Pin | None = None
    reported_usd: float = 0.0  # the largest total SkyPilot's cost report gave for our clusters


class Meter:
    """Cluster time at catalog prices, persisted as JSON at `path` (None: in memory only), written
    from `anchor` (the repository; default the file's folder) without following a link below it."""

    def __init__(self, path: Path | None, idle_minutes: float, clock: Callable[[], float] = time.time,
                 anchor: Path | None = None) -> None:
        self.path = path
        self.anchor = anchor if anchor is not None else (path.parent if path is not None else None)
        self.idle_s = idle_minutes * 60.0
        self.clock = clock
        self._lock = threading.Lock()
        self._state = self._load()

    # --- reading -------------------------------------------------------------------------------------

    @property
    def pin(self) -> Pin | None:
        return self._state.pin

    def spent(self) -> float:
        """Dollars so far: every incarnation up to its end (or now), or SkyPilot's figure if larger."""
        now = self.clock()
        with self._lock:
            own = sum(i.seconds(now) / 3600.0 * (i.hourly_usd or 0.0) for i in self._state.incarnations)
            return max(own, self._state.reported_usd)

    def committed(self) -> float:
        """`spent` plus the idle minutes each cluster still up will cost before it autodowns."""
        with self._lock:
            tail = sum(self.idle_s / 3600.0 * (i.hourly_usd or 0.0) for i in self._state.incarnations
                       if i.ended is None)
        return self.spent() + tail

    def open_clusters(self) -> list[str]:
        with self._lock:
            return sorted({i.cluster for i in self._state.incarnations if i.ended is None})

    def first_start(self) -> float | None:
        with self._lock:
            return min((i.started for i in self._state.incarnations), default=None)

    # --- events --------------------------------------------------------------------------------------

    def launching(self, cluster: str, hourly_usd: float | None) -> None:
        """A launch request is about to be sent: the VM may be billed from now on."""
        with self._lock:
            if self._current(cluster) is None:
                self._state.incarnations.append(Incarnation(cluster, self.clock(), hourly_usd))
            self._save()

    def launched(self, cluster: str, hourly_usd: float | None) -> None:
        """The launch answered with the price of what it provisioned."""
        with self._lock:
            inc = self._current(cluster)
            if inc is not None and hourly_usd is not None:
                inc.hourly_usd = hourly_usd
            self._save()

    def used(self, cluster: str) -> None:
        with self._lock:
            inc = self._current(cluster)
            if inc is not None:
                inc.last_used = self.clock()
                self._save()

    def ended(self, cluster: str, at: float | None = None) -> None:
        """The cluster was downed, stopped or found gone: its billing ends."""
        with self._lock:
            inc = self._current(cluster)
            if inc is not None:
                inc.ended = at if at is not None else self.clock()
                self._save()

    def reconcile(self, existing: set[str]) -> None:
        """After a restart: a cluster we left up that no longer exists was autodowned after its idle time."""
        now = self.clock()
        with self._lock:
            for inc in self._state.incarnations:
                if inc.ended is None and inc.cluster not in existing:
                    inc.ended = min(now, (inc.last_used or inc.started) + self.idle_s + DOWN_GRACE_S)
            self._save()

    def set_pin(self, pin: Pin) -> None:
        with self._lock:
            self._state.pin = pin
            self._save()

    def reported(self, usd: float) -> None:
        with self._lock:
            self._state.reported_usd = max(self._state.reported_usd, usd)
            self._save()

    # --- inside --------------------------------------------------------------------------------------

    def _current(self, cluster: str) -> Incarnation | None:
        for inc in reversed(self._state.incarnations):
            if inc.cluster == cluster:
                return inc if inc.ended is None else None
        return None

    def _load(self) -> _State:
        if self.path is None or not (self.path.exists() or self.path.is_symlink()):
            return _State()
        if self.path.is_symlink():
            raise StateError(f"{self.path} is a link: the session's cost record is never read or written through "
                             "one. Remove it (it is not part of your code; the session folder is the server's)")
        try:
            raw: dict[str, Any] = json.loads(self.path.read_text())
            pin = raw.get("pin")
            return _State([Incarnation(**i) for i in raw.get("incarnations", [])],
                          Pin(**pin) if pin else None, float(raw.get("reported_usd", 0.0)))
        except (ValueError, TypeError) as exc:
            # Never start from zero silently: a lost record would let the budget be spent twice.
            raise StateError(f"{self.path} is not a valid SkyPilot cost record ({exc}); fix it, or delete it "
                             "after checking `sky cost-report` for what the session's clusters cost") from None

    def _save(self) -> None:
        if self.path is None or self.anchor is None:
            return
        self.anchor.mkdir(parents=True, exist_ok=True)
        safefs.write_text(self.anchor, self.path, json.dumps(asdict(self._state), indent=1))
