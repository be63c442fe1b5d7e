"""What a long tool call is doing right now, told as it happens: one call, `report(message)`, anywhere
below the face, and whoever runs the call (app.py: MCP progress notifications and log messages to the
client) hears it. Nothing is told when nobody listens; every step also goes to the stderr log.

The listener travels in a context variable, so the layers in between pass nothing along; work handed to
another thread takes it with `current()` and tells it directly. A listener can also say that the call
was given up (`stopped()`: the client went away or cancelled), so a wait can end early.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# (message, done, total): `done` of `total` steps when they are known (pairs of an experiment)
Sink = Callable[[str, float | None, float | None], None]


@dataclass
class Listener:
    """Who hears a call's progress, and whether the call was given up."""

    sink: Sink
    stop: threading.Event = field(default_factory=threading.Event)


_current: ContextVar[Listener | None] = ContextVar("autoresearch_progress", default=None)


def report(message: str, done: float | None = None, total: float | None = None) -> None:
    """Tell the running call's listener (if any) what is happening now; never raises."""
    log.info("%s", message)
    listener = _current.get()
    if listener is None:
        return
    try:
        listener.sink(message, done, total)
    except Exception:  # progress is a courtesy: it never breaks the work it describes
        log.debug("could not report progress %r", message, exc_info=True)


def stopped() -> bool:
    """Whether the running call was given up (its client went away or cancelled it)."""
    listener = _current.get()
    return listener is not None and listener.stop.is_set()


def current() -> Listener | None:
    return _current.get()


@contextmanager
def listening(listener: Listener | None) -> Iterator[None]:
    """Run the body with `listener` hearing what `report` is told (None: nobody)."""
    token = _current.set(listener)
    try:
        yield
    finally:
        _current.reset(token)
