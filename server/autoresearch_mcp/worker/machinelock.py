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


# How many pairs an experiment measures in one turn of the machine before the others waiting for it get theirs:
# experiments sharing a machine go round, so a clear one is not held up by an undecidable one.
TURN_PAIRS = 2
_POLL_S = 0.05  # how often a waiter looks whether its turn has come


@contextlib.contextmanager
def machine_turn(path: str | None, shared: bool = False) -> Iterator[None]:
    """The machine lock, taken in turn: whoever waits for it is queued (a mark named for when it came), and takes
    the lock once every one who came before has had it. A job that ends a turn and comes back is queued behind all
    who wait, so jobs sharing the machine go round in rounds: experiments launched together progress, and finish,
    together (issue 52)."""
    if not path:
        yield
        return
    waiting = Path(path + ".wait")
    waiting.mkdir(parents=True, exist_ok=True)
    mark = waiting / f"{time.time_ns():020d}.{os.getpid()}"
    try:
        with open(mark, "w") as alive:
            fcntl.flock(alive, fcntl.LOCK_EX)  # held while it waits: the kernel lets go if this process dies
            while _ahead(waiting, mark):
                time.sleep(_POLL_S)
            with file_lock(path, shared):
                mark.unlink(missing_ok=True)
                yield
    finally:
        mark.unlink(missing_ok=True)


def _ahead(waiting: Path, mine: Path) -> bool:
    """Whether someone who came before `mine` still waits; the mark of one that died (its lock let go) is removed."""
    for mark in sorted(waiting.glob("*.*")):
        if mark.name >= mine.name:
            return False
        try:
            with open(mark) as fh:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except FileNotFoundError:
            continue  # it has its turn now
        mark.unlink(missing_ok=True)
    return False
