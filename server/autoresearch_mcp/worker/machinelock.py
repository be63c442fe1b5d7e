"""The machine lock: a readers-writer flock that keeps our benches from overlapping anything of ours, taken in
turn so that experiments sharing a machine alternate. Standard library only (shipped beside the runner)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: str | None, shared: bool = False) -> Iterator[None]:
    """An flock; the kernel releases it if this process dies, so it never goes stale.

    The machine lock is a readers-writer lock: builds and checks hold it shared (they may overlap
    each other), a benchmark holds it exclusively, so nothing of ours loads the CPU while we measure.
    """
    if not path:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# How many pairs an experiment measures in one turn of the machine before another experiment waiting for it
# gets its turn: experiments sharing a machine alternate, so a clear one is not held up by an undecidable one.
TURN_PAIRS = 2


@contextlib.contextmanager
def machine_turn(path: str | None, shared: bool = False) -> Iterator[None]:
    """The machine lock, taken in turn: whoever waits for it is registered, and a bench that ends a turn
    while someone waits lets them have the machine before it takes it again (`yield_turn`)."""
    if not path:
        yield
        return
    waiting = Path(path + ".wait")
    waiting.mkdir(parents=True, exist_ok=True)
    mark = waiting / f"{os.getpid()}.{time.time_ns()}"
    mark.touch()
    try:
        with file_lock(path, shared):
            mark.unlink(missing_ok=True)
            _count_turn(path)
            yield
    finally:
        mark.unlink(missing_ok=True)


def _count_turn(path: str) -> None:
    with open(path + ".turns", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        text = fh.read().strip()
        fh.seek(0)
        fh.truncate()
        fh.write(str(int(text) + 1 if text.isdigit() else 1))


def _turns(path: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        return int(Path(path + ".turns").read_text().strip() or 0)
    return 0


def _others_waiting(path: str) -> bool:
    me = str(os.getpid())
    for mark in Path(path + ".wait").glob("*.*"):
        pid = mark.name.split(".", 1)[0]
        if pid == me or not pid.isdigit():
            continue
        if os.path.exists(f"/proc/{pid}") or not os.path.isdir("/proc"):
            return True
        mark.unlink(missing_ok=True)  # left by a process that died while it waited
    return False


def yield_turn(path: str | None, timeout_s: float = 3600.0) -> None:
    """After a turn: if another job waits for the machine, wait until it has taken its turn."""
    if not path or not _others_waiting(path):
        return
    before = _turns(path)
    deadline = time.monotonic() + timeout_s
    while _turns(path) == before and _others_waiting(path) and time.monotonic() < deadline:
        time.sleep(0.05)
