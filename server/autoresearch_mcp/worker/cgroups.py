"""A cgroup of each confined command: its memory bounded, its CPU time counted, its processes frozen, thawed
and killed all at once, from outside every process the command runs.

Standard library only, like the runner and the sandbox beside it (the SkyPilot executor ships it with them).
A group is made where this process may make one: cgroup v2 (one folder: memory.max, cpu.stat, cgroup.freeze,
cgroup.kill) or v1's hierarchies (memory, cpuacct, freezer; each where it is mounted and writable). What the
machine does not give, `Group` says (`has`), and the runner falls back: the job's PID namespace init waited for
by its own pid for the CPU time, SIGSTOP for a turn. Names are random: nothing in a group's name (which a job
can list under /sys/fs/cgroup) tells one command, side or experiment from another.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

V2 = Path("/sys/fs/cgroup")
V1 = {"memory": Path("/sys/fs/cgroup/memory"), "cpu": Path("/sys/fs/cgroup/cpuacct"),
      "freeze": Path("/sys/fs/cgroup/freezer")}
PREFIX = "autoresearch-"
GRACE_S = 60.0  # a group this young may be one whose command has not joined it yet (never swept)
FREEZE_WAIT_S = 0.5  # how long a freeze may take before it counts as failed (the turn then uses SIGSTOP)
# Joins every folder named before `--` ($@), then runs what follows: the command's every process is in the group
# from its first instruction (bubblewrap then makes its cgroup namespace there: the job sees "/").
JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; done; shift; exec "$@"'


@dataclass
class Group:
    """One command's group: the folder of each capability this machine gives (`memory`, `cpu`, `freeze`)."""

    folders: dict[str, Path] = field(default_factory=dict)
    v2: bool = False

    def has(self, what: str) -> bool:
        return what in self.folders

    def join(self, argv: list[str]) -> list[str]:
        """`argv` started inside the group."""
        folders = list(dict.fromkeys(str(f) for f in self.folders.values()))
        return ["/bin/sh", "-c", JOIN, "join", *folders, "--", *argv]

    def cpu_s(self) -> float | None:
        """CPU time (user + system) of every process that ever ran in the group, orphans included."""
        folder = self.folders.get("cpu")
        with contextlib.suppress(OSError, ValueError):
            if folder is None:
                return None
            if self.v2:
                for line in (folder / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
                return None
            return int((folder / "cpuacct.usage").read_text()) / 1e9
        return None

    def _freezer(self, frozen: bool) -> bool:
        folder = self.folders.get("freeze")
        if folder is None:
            return False
        try:
            if self.v2:
                (folder / "cgroup.freeze").write_text("1" if frozen else "0")
            else:
                (folder / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
        except OSError:
            return False
        if not frozen:
            return True
        deadline = time.monotonic() + FREEZE_WAIT_S
        while True:  # a freeze completes once every process has left the kernel: wait until it says so
            try:
                if self.v2:
                    done = "frozen 1" in (folder / "cgroup.events").read_text().splitlines()
                else:
                    done = (folder / "freezer.state").read_text().strip() == "FROZEN"
            except OSError:
                return False
            if done:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0002)

    def freeze(self) -> bool:
        """Stop every process of the group at once (no signal: nothing a process sees); whether they all are."""
        return self._freezer(True)

    def thaw(self) -> bool:
        return self._freezer(False)

    def pids(self) -> list[int]:
        out: list[int] = []
        for folder in dict.fromkeys(self.folders.values()):
            with contextlib.suppress(OSError, ValueError):
                out += [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        return sorted(set(out))

    def kill(self) -> None:
        """End every process of the group: frozen first, so none forks while it is swept."""
        folder = self.folders.get("freeze")
        if self.v2 and folder is not None and (folder / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (folder / "cgroup.kill").write_text("1")
                return
        frozen = self.freeze()
        for _ in range(20):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if frozen:
                self.thaw()  # a frozen process dies only once thawed
                frozen = False
            time.sleep(0.01)
        self.thaw()

    def memory_hit(self) -> int | None:
        """The memory limit in bytes when the group's use reached it at some point (a job that passed its bound),
        else None."""
        folder = self.folders.get("memory")
        if folder is None:
            return None
        with contextlib.suppress(OSError, ValueError):
            if self.v2:
                events = dict(line.split() for line in (folder / "memory.events").read_text().splitlines())
                if int(events.get("max", 0)) or int(events.get("oom_kill", 0)):
                    return int((folder / "memory.max").read_text())
                return None
            if int((folder / "memory.failcnt").read_text()):
                return int((folder / "memory.limit_in_bytes").read_text())
        return None

    def remove(self) -> None:
        for folder in dict.fromkeys(self.folders.values()):
            with contextlib.suppress(OSError):
                folder.rmdir()


def _v2_usable() -> bool:
    with contextlib.suppress(OSError):
        return "memory" in (V2 / "cgroup.controllers").read_text().split() and os.access(V2, os.W_OK)
    return False


def make(memory_limit: int) -> Group | None:
    """A fresh group of one command, its memory limited to `memory_limit` bytes (processes and their tmpfs
    pages together, which the kernel charges to the group); None where no group can be made here."""
    name = PREFIX + secrets.token_hex(8)
    if _v2_usable():
        sweep([V2])
        folder = V2 / name
        try:
            folder.mkdir()
            (folder / "memory.max").write_text(str(memory_limit))
            with contextlib.suppress(OSError):
                (folder / "memory.swap.max").write_text("0")
        except OSError:
            with contextlib.suppress(OSError):
                folder.rmdir()
            return None
        folders = {"memory": folder, "cpu": folder}
        if (folder / "cgroup.freeze").exists():
            folders["freeze"] = folder
        return Group(folders, v2=True)
    group = Group()
    for what, root in V1.items():
        if not (root.is_dir() and os.access(root, os.W_OK)):
            continue
        sweep([root])
        folder = root / name
        try:
            folder.mkdir()
            if what == "memory":
                (folder / "memory.limit_in_bytes").write_text(str(memory_limit))
                with contextlib.suppress(OSError):  # swap too, where the kernel accounts it
                    (folder / "memory.memsw.limit_in_bytes").write_text(str(memory_limit))
        except OSError:
            with contextlib.suppress(OSError):
                folder.rmdir()
            continue
        group.folders[what] = folder
    if "memory" not in group.folders:
        group.remove()
        return None
    return group


_swept: dict[Path, float] = {}


def sweep(roots: list[Path]) -> None:
    """Remove the groups of commands that ended (empty, and older than GRACE_S: a younger one may not have been
    joined yet); any process's, since one that died leaves its groups behind. At most once a minute a root."""
    now = time.time()
    for root in roots:
        if now - _swept.get(root, 0.0) < GRACE_S:
            continue
        _swept[root] = now
        with contextlib.suppress(OSError):
            for entry in os.scandir(root):
                if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
                    continue
                with contextlib.suppress(OSError):
                    if now - entry.stat(follow_symlinks=False).st_ctime > GRACE_S \
                            and not Path(entry.path, "cgroup.procs").read_text().strip():
                        os.rmdir(entry.path)


def scratch(group: Group) -> int | None:
    """Bytes of the group's memory-backed files now (its private /tmp and /run, shared memory): its scratch."""
    folder = group.folders.get("memory")
    if folder is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        for line in (folder / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "shmem":
                return int(value)
    return None
