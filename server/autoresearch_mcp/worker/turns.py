"""Pairs in turns: both runs of a pair at once, each given the CPU in short turns of random length (of its CPU
time: a side keeps its turn while it waits) while the other is stopped (its cgroup frozen, or SIGSTOP to its
tree). Standard library only (shipped beside the runner)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from typing import Any

from . import cgroups, decide, jobenv, procs

# the process groups of the commands running in turns, with their cgroups (thawed and killed on SIGTERM)
running: dict[int, cgroups.Group | None] = {}


def _stopped(pid: int) -> bool:
    """Whether `pid` is stopped, gone or a zombie (it runs no more)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("T", "t", "Z", "X")


def hold(pid: int, stop: bool, rounds: int = 200) -> bool:
    """Stop (SIGSTOP) or continue (SIGCONT) every process of `pid`'s tree; whether it is all stopped (or all
    continued). Stopping walks the tree again until every process shows stopped: one may fork while it is
    walked, and a stopped one cannot (a process in an uninterruptible wait stops when it leaves it)."""
    for _ in range(rounds):
        pending = False
        for p in procs.tree(pid):
            if stop and _stopped(p):
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGSTOP if stop else signal.SIGCONT)
            pending = stop
        if not pending:
            return True
        time.sleep(0.0002)
    return False


_turn_rng = random.Random()  # turn lengths (seeded from the system: no rhythm a program could learn in advance)


_signalled: set[int] = set()  # the commands a turn stopped with SIGSTOP (a freeze that did not complete)
STOP_FAILED = "a turn's stop failed"  # the start of the problem of every run of a pair whose stop failed
_fallbacks = {"n": 0}  # turns stopped with SIGSTOP although the side has a freezer (said in the log)


def _pause(s: procs.Started, stop: bool) -> bool:
    """Stop (or continue) every process of a command running in turns; whether it all is. Its group is frozen where
    the machine gives a freezer (no signal, nothing a process sees); a freeze that does not complete in time (a
    process that stays in an uninterruptible wait, reading a model from disk) is undone and the turn stops the tree
    with SIGSTOP instead. Where no group can be made, its own init stops every process of its namespace at once
    (nsinit.py), asked again while one is in the kernel."""
    pid = s.proc.pid
    if s.init is not None:
        return s.init.pause(stop)
    if not stop:
        thawed = s.group.thaw() if s.group is not None and s.group.has("freeze") else True
        if pid in _signalled or s.group is None or not s.group.has("freeze"):
            _signalled.discard(pid)
            return hold(pid, False) and thawed
        return thawed
    if s.group is not None and s.group.has("freeze"):
        if s.group.freeze():
            return True
        s.group.thaw()
        _fallbacks["n"] += 1
    _signalled.add(pid)
    return hold(pid, True)


# A side keeps its turn while it waits, until it has had its turn's CPU time and is seen running, or this long: a
# wait then passes in its own turn, never in the other side's, wherever it falls (the other side's turn can hide at
# most its own length of a wait longer than this).
TURN_WAIT_CAP_S = 1.0
TURN_CPU_SHARE = 0.9  # the share of its turn's CPU time a side must have had for its turn to end
PROBE_S = 0.001  # how long a side that has had its CPU time is watched: a turn ends while it runs, not in a wait


def _cpu(s: procs.Started) -> float | None:
    return s.cpu_now()


def _own_turn(s: procs.Started, length: float, deadline: float, min_wall: float = 0.0) -> tuple[bool, float]:
    """One turn of a side: the CPU for `length` seconds of its CPU time (all its processes', from its group or its
    init), kept while it waits, up to TURN_WAIT_CAP_S, and at least `min_wall` of wall time (the other side's last
    turn); whether it ended, and how long the turn took before `min_wall` held it (its own length). The turn ends
    once the side has had that CPU time and runs (it ran through the turn, or it is seen using the CPU for a moment),
    never while it waits: a wait then passes in the side's own turn, where its wall time counts, wherever the side
    places it. Where the side has no CPU count the turn is `length` of wall time."""
    t0, cpu0 = time.monotonic(), _cpu(s)
    if s.reaped.wait(length):
        return True, time.monotonic() - t0
    if cpu0 is None:
        took = time.monotonic() - t0
        return (min_wall > took and s.reaped.wait(min_wall - took)), took
    natural: float | None = None
    while True:
        now, used = time.monotonic(), (_cpu(s) or cpu0) - cpu0
        if now - t0 >= TURN_WAIT_CAP_S or now >= deadline:
            return False, now - t0 if natural is None else natural  # it waited as long as a side may keep a turn
        if used < TURN_CPU_SHARE * length:
            if s.reaped.wait(max(length - used, PROBE_S)):  # the CPU time it has not had yet
                return True, time.monotonic() - t0
            continue
        running = used >= TURN_CPU_SHARE * (now - t0)  # it ran through its turn
        if not running:
            if s.reaped.wait(PROBE_S):
                return True, time.monotonic() - t0
            running = (_cpu(s) or cpu0) - cpu0 - used >= PROBE_S / 2
        if not running:
            continue  # in a wait: its turn goes on
        elapsed = time.monotonic() - t0
        natural = elapsed if natural is None else natural
        if elapsed >= min_wall:
            return False, natural  # it is running: its turn ends here, not in a wait
        if s.reaped.wait(min(min_wall - elapsed, max(0.0, deadline - time.monotonic()))):
            return True, natural


def run_in_turns(runs: list[tuple[jobenv.Prepared, list[str]]], timeout_s: float, log: Any,
                 duty: float | None = None) -> list[procs.CommandResult]:
    """Run the commands at once, each given the CPU in turns while the others are stopped (frozen), in the order
    given; one that ends leaves the turns to the others. A burst of a neighbour's work then falls on every side
    of the pair. Each turn's length is drawn at random around decide.TURN_MS of the side's CPU time, and a side
    keeps its turn while it waits (_own_turn): no program can place its waits in the other side's turns. Each
    command's wall clock runs on while it is stopped, so what it prints must time CPU (decide.in_turns); its
    result's `wall_s` is the wall time of its own turns and its `cpu_s` the CPU time of its whole group, orphans
    included (where the machine gives a group). A stop that fails (a process forking faster than it is stopped)
    makes every run of the pair unusable, saying so. `timeout_s` is each command's: the turns end, and whatever
    still runs is killed, once they have run for the sum of them. With `duty`, a
    command left alone keeps being stopped so that it runs that share of the time (the checks of a session in
    turns, which must not tell a bench from a check; a calibration run at half duty)."""
    started: list[procs.Started] = []
    fallbacks = _fallbacks["n"]
    deadline = time.monotonic() + timeout_s * len(runs) / (duty or 1.0)
    late: list[procs.Started] = []  # still running when the turns timed out
    failed: str | None = None

    def turn() -> float:
        return decide.TURN_MS / 1000 * _turn_rng.uniform(0.5, 1.5)

    # the wall length of each side's last turn, its stop included: the other side's next turn lasts at least as long,
    # so each side has the same share of every stretch of the pair, however long one side makes its turns
    lengths: dict[int, float] = {}

    def stop(s: procs.Started, natural: float) -> None:
        """End a side's turn. The time its stop takes is its own: a stop completes once each of its processes has
        left the kernel (one long system call, a 160 MB read, holds it there), and that time the side held the
        machine, whether or not its clock shows it, so it counts in the side's own turns, never in neither side's;
        and the other side's next turn is as long."""
        nonlocal failed
        t = time.monotonic()
        stopped = _pause(s, stop=True)
        s.own_s += time.monotonic() - t
        lengths[s.proc.pid] = natural + time.monotonic() - t
        if not stopped and failed is None:
            failed = (f"{STOP_FAILED}: not every process of a side could be stopped in time (one stayed in the "
                      "kernel, or forked faster than it was stopped), so the pair's turns are not each side's own")
    try:
        for side, argv in runs:  # each starts at its first turn; the others are stopped by then
            s = procs.Started.of(argv, side.tree, side.env, side.launch)
            started.append(s)
            running[s.proc.pid] = s.group
            ended, natural = _own_turn(s, turn(), deadline, max(lengths.values(), default=0.0))
            s.own_s += time.monotonic() - s.start
            if not ended:
                stop(s, natural)
        while failed is None:
            alive = [s for s in started if not s.reaped.done.is_set()]
            if not alive:
                break
            if time.monotonic() > deadline:
                late = alive
                break
            for s in alive:
                _pause(s, stop=False)
                t = time.monotonic()
                others = [lengths.get(o.proc.pid, 0.0) for o in alive if o is not s]
                if len(alive) == 1 and not duty:
                    ended, natural = s.reaped.wait(max(0.0, deadline - t)), 0.0
                else:
                    ended, natural = _own_turn(s, turn(), deadline, max(others, default=0.0))
                s.own_s += time.monotonic() - t
                if not ended:
                    stop(s, natural)
                    if len(alive) == 1 and duty:
                        time.sleep(turn() * (1 / duty - 1))  # the turns of a side that is not there
                if failed is not None:
                    break
    finally:
        for s in started:
            _pause(s, stop=False)  # a stopped process would hold its SIGTERM until continued
            s.end()
            running.pop(s.proc.pid, None)
    if _fallbacks["n"] > fallbacks:
        log.write(f"[autoresearch] {_fallbacks['n'] - fallbacks} turn(s) stopped a side with SIGSTOP: its freeze did "
                  f"not complete within {cgroups.FREEZE_WAIT_S:g} s (a process in an uninterruptible wait)\n")
    return _results(started, late, failed, timeout_s, log)


def _results(started: list[procs.Started], late: list[procs.Started], failed: str | None, timeout_s: float,
             log: Any) -> list[procs.CommandResult]:
    """Each side's result: its wall time that of its own turns (none where the turns timed out on it), every side
    unusable where a stop failed."""
    results = []
    for s in started:
        if failed is not None:
            s.problem = s.problem or failed
        res = s.result(s in late, timeout_s, log, s.group_cpu_s)
        res.wall_s = None if s in late else round(s.own_s, 6)
        res.span_s = s.reaped.wall_s
        results.append(res)
    return results
