"""Which queued job goes to which free cluster of the sky pool: pure scheduling, no I/O and no locking."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from autoresearch_mcp.executors.port import EventSink, Job
from autoresearch_mcp.executors.sky_port import ClusterInfo


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

    def warm(self, worker: Worker) -> None:
        """A free worker whose cluster came up outside the scheduler moves to the warm line."""
        if worker.info is not None and worker.busy is None and worker.name in self._free_cold:
            self._free_cold.remove(worker.name)
            self._free_up.append(worker.name)

    def drain(self) -> list[Pending]:
        items = list(self.queued.values())
        self.queued.clear()
        self._order.clear()
        return items
