"""A cgroup of each confined command: its CPU time counted, its processes frozen, thawed and killed all at once from
outside every process the command runs, and its memory bounded where the machine delegates that.

Standard library only (the worker runtime). A group is made where this process may make one, best first:
- cgroup v2 where this process may write: the mount's root (root, a container with a writable cgroupfs) or the
  process's own group or an ancestor delegated to its user (systemd's `user@UID.service` subtree, a scope asked for
  with `systemd-run --user --scope -p Delegate=yes`, a folder an administrator chowned to the user). A v2 group
  needs no controller for `cgroup.freeze`, `cgroup.kill` and `cpu.stat`; memory and pids limits where those
  controllers are offered (the processes of the delegated group moved into a leaf first, as v2's rule that a
  group with controllers for its children holds no process asks);
- cgroup v1's memory, cpuacct and freezer hierarchies where they are writable (root on a hybrid machine).
What the machine does not give, `Group` says (`has`), and `where` says how groups are made here. Where no group can
be made at all (a container's read-only cgroupfs, no delegation) the runner runs an init of its own in each job's
PID namespace instead (nsinit.py). Names are random: nothing in a group's name (which a job cannot see: it has a
cgroup namespace of its own) tells one command, side or experiment from another.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

V1 = {"memory": Path("/sys/fs/cgroup/memory"), "cpu": Path("/sys/fs/cgroup/cpuacct"),
      "freeze": Path("/sys/fs/cgroup/freezer")}
PREFIX = "autoresearch-"
# Where the processes of a delegated group go so that its children may have controllers (v2's no-internal-process
# rule): a leaf beside the commands' groups, never swept while a process is in it
LEAF = PREFIX + "leaf"
GRACE_S = 60.0  # a group this young may be one whose command has not joined it yet (never swept)
FREEZE_WAIT_S = 0.5  # how long a freeze may take before it counts as failed (the turn then uses SIGSTOP)
PIDS_MAX = 32768  # processes of one command at once, where the pids controller is delegated
# "off": make no group, as a machine without cgroups would (to compare, or to try the fallback as root)
SETTING = "AUTORESEARCH_CGROUPS"
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


# --- where v2 groups can be made --------------------------------------------------------------------------------


def v2_mount(mountinfo: str | None = None) -> Path | None:
    """The cgroup2 mount (the unified hierarchy: /sys/fs/cgroup, or a hybrid machine's /sys/fs/cgroup/unified),
    from /proc/self/mountinfo; None where there is none."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    found = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and right.split()[:1] == ["cgroup2"] and len(fields) >= 5 and fields[3] == "/":
            found.append(Path(fields[4].replace("\\040", " ")))
    return min(found, key=lambda p: len(p.parts)) if found else None


def own_group(proc_cgroup: str | None = None) -> str | None:
    """This process's v2 group, relative to the hierarchy's root ("/" at the root), from /proc/self/cgroup."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK) and os.access(folder / "cgroup.procs", os.W_OK)


def v2_base() -> Path | None:
    """The v2 group under which this process may make a group for each command: its own group (our own leaf's
    parent, when it is in one), or the nearest ancestor of it that this user may write (a delegated subtree). Moving
    a process between two groups takes write access to the `cgroup.procs` of the groups' common ancestor: the base,
    which holds both this process's group and the commands'."""
    mount, own = v2_mount(), own_group()
    if mount is None or own is None:
        return None
    group = mount / own.lstrip("/")
    if group.name == LEAF:
        group = group.parent
    while True:
        if group.is_dir() and _writable(group):
            return group
        if group == mount or mount not in group.parents:
            return None
        group = group.parent


def _controllers(base: Path, wanted: tuple[str, ...]) -> set[str]:
    """Enable `wanted` controllers (those the base is offered) for the base's children, moving the base's own
    processes into a leaf first where the base is not the hierarchy's root (no group with controllers for its
    children may hold a process); the controllers its children have now."""
    def enabled() -> set[str]:
        with contextlib.suppress(OSError):
            return set((base / "cgroup.subtree_control").read_text().split())
        return set()

    try:
        offered = set((base / "cgroup.controllers").read_text().split())
    except OSError:
        return set()
    need = [c for c in wanted if c in offered and c not in enabled()]
    if not need:
        return enabled()
    change = " ".join(f"+{c}" for c in need)
    try:
        (base / "cgroup.subtree_control").write_text(change)
        return enabled()
    except OSError:
        pass
    leaf = base / LEAF
    with contextlib.suppress(OSError):
        leaf.mkdir(exist_ok=True)
        for _ in range(5):  # a process may fork while the others are moved
            pids = (base / "cgroup.procs").read_text().split()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    (leaf / "cgroup.procs").write_text(pid)
        (base / "cgroup.subtree_control").write_text(change)
    return enabled()


def _make_v2(base: Path, name: str, memory_limit: int) -> Group | None:
    controllers = _controllers(base, ("memory", "pids"))
    folder = base / name
    try:
        folder.mkdir()
        if "memory" in controllers:
            (folder / "memory.max").write_text(str(memory_limit))
            with contextlib.suppress(OSError):
                (folder / "memory.swap.max").write_text("0")
        if "pids" in controllers:
            with contextlib.suppress(OSError):
                (folder / "pids.max").write_text(str(PIDS_MAX))
    except OSError:
        with contextlib.suppress(OSError):
            folder.rmdir()
        return None
    folders = {"cpu": folder}
    if "memory" in controllers:
        folders["memory"] = folder
    if (folder / "cgroup.freeze").exists():
        folders["freeze"] = folder
    return Group(folders, v2=True)


def _make_v1(name: str, memory_limit: int) -> Group | None:
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


def _offers_memory(base: Path) -> bool:
    with contextlib.suppress(OSError):
        return "memory" in (base / "cgroup.controllers").read_text().split()
    return False


def make(memory_limit: int) -> Group | None:
    """A fresh group of one command, its memory limited to `memory_limit` bytes where the machine lets this user
    bound it (processes and their tmpfs pages together, which the kernel charges to the group); None where no
    group can be made here. Best first: v2 with the memory controller, v1's hierarchies, v2 without it."""
    if os.environ.get(SETTING) == "off":
        return None
    name = PREFIX + secrets.token_hex(8)
    base = v2_base()
    if base is not None and _offers_memory(base):
        sweep([base])
        made = _make_v2(base, name, memory_limit)
        if made is not None and made.has("memory"):
            return made
        if made is not None:
            made.remove()
    made = _make_v1(name, memory_limit)
    if made is not None:
        return made
    if base is not None:
        sweep([base])
        return _make_v2(base, name, memory_limit)
    return None


def where(group: Group) -> str:
    """Where the groups of this machine are made, as start_session says it."""
    if not group.v2:
        return "cgroup v1 (memory, cpuacct and freezer hierarchies)"
    folder = next(iter(group.folders.values())).parent
    mount = v2_mount()
    at = "/" + str(folder.relative_to(mount)) if mount is not None and mount in [folder, *folder.parents] else folder
    return f"cgroup v2 under {str(at).replace('//', '/')}"


_scope: list[list[str]] = []


def systemd_scope() -> list[str]:
    """The prefix that starts a command in a scope of its own delegated by the user's systemd (`systemd-run --user
    --scope -p Delegate=yes`, as rootless Podman gets its groups), where this process can make no group itself but a
    user manager runs (its socket in XDG_RUNTIME_DIR); [] otherwise. The runner started so finds its own group
    writable and makes each command's group beneath it."""
    if not _scope:
        runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
        tool = shutil.which("systemd-run")
        can_make = v2_base() is not None or os.access(V1["memory"], os.W_OK)
        usable = (os.environ.get(SETTING) != "off" and not can_make and tool is not None
                  and os.path.exists(os.path.join(runtime, "systemd", "private")))
        _scope.append([tool, "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes", "--"]
                      if usable and tool else [])
    return list(_scope[0])


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
                if not entry.name.startswith(PREFIX) or entry.name == LEAF or not entry.is_dir(follow_symlinks=False):
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
