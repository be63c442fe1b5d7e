"""Confinement of every build, bench and checks command: the one place a job's command is wrapped.

Standard library only, like the runner beside it: the runner imports it to start each command, the
SkyPilot executor ships it to workers beside runner.py, and the server's own job runs (start_session's
validation, the profiler, the holdout, other platforms' checks) go through the same `command`.

With bubblewrap a command sees the whole file system read-only (but for a private /run, which hides the
sockets of the machine's services), and may write only its own tree (with
its build outputs), a private /tmp and, when it builds the baseline's tree, the compiler cache. A
candidate's build reads the cache and never stores into it: an entry it planted for a source the baseline
compiles later would slow that baseline down. The session's scripts are bound read-only
from the session's own bytes over the tree, a PID namespace hides every process but the job's own
(the runner and the server among them), and the namespace's end takes every process of the job down.
A private /tmp would hide what lives under the real one (the worktrees themselves, when the cache
directory is there), so the paths a job needs there are bound into it again: its tree writable, the
baseline's tree and every existing path the job's environment names read-only.

What a job shares with the machine is as little as its work allows: its own IPC namespace (SysV shared
memory, semaphores, message queues), its own network (only a loopback of its own, unless the session
opens the network: `"sandbox": {"share": ["network"]}`), a read-only /proc, and a seccomp filter that
refuses ptrace, process_vm_readv/writev, pidfd_getfd, process_madvise and the keyring calls (the
keyring is per uid, and no namespace separates it): no process of the job can steer or read another,
the session's scripts among them, nor keep state in the kernel between two runs. The folder of the
machine lock and the job files is hidden under an empty tmpfs.
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import jobfile

from . import cgroups

BWRAP = "bwrap"
# The namespace init of a machine without cgroups (nsinit.py), run from its source by the runner's own interpreter
# (a real file, not a venv's link: it runs with -I -S, outside any environment), so it needs no file in the sandbox
NSINIT = (Path(__file__).with_name("nsinit.py")).read_text()
INIT_PYTHON = os.path.realpath(sys.executable)
CONFINED, OFF = "confined", "off"
BENCH_SCRIPT, CHECKS_SCRIPT = "autoresearch.sh", "autoresearch.checks.sh"
SCRIPTS = (BENCH_SCRIPT, CHECKS_SCRIPT)
TMP, RUN = "/tmp", "/run"
PROBE_TIMEOUT_S = 20.0
HOW_TO_FIX = ("Install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install "
              "bubblewrap`; `bash scripts/setup.sh` does it as root), or, to measure unconfined at your own risk, "
              "set \"sandbox\": \"off\" in .autoresearch/config.json (every result then says so)")
JOB_MARK = "AUTORESEARCH_JOB"  # procs.JOB_ENV
NETWORK, CHECKOUT = "network", "checkout"
# what a session may open up: `"sandbox": {"share": ["network"]}`; "checkout" leaves the user's checkout and
# its git directory in sight (a benchmark that reads untracked files there; a build reads the git directory
# anyway)
SHARES = (NETWORK, CHECKOUT)
LEDGER = ".autoresearch"  # the session folder in the user's checkout, never bound again into a job
# No capabilities (a root job could remount / writable), no other process in sight, nothing outliving it,
# no IPC object of anyone else's, a /proc no process can write another's memory through (/proc/PID/mem).
BASE_OPTIONS = ("--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc")
PROC_OPTIONS = ("--remount-ro", "/proc")
NET_OPTIONS = ("--unshare-net",)  # a network namespace of its own: only its own loopback
# The private /tmp and /run are memory: each sized, and the two together (with any shared memory) are the job's
# scratch, which the runner bounds at TMP_BYTES (cgroups.scratch): a job that fills it fails, saying so.
TMP_BYTES = 256 << 20
# A job's memory (its processes' and its /tmp's pages) is limited to this share of the machine's by a memory
# cgroup of its own, where one can be made (cgroup v2 with the memory controller, or v1's memory hierarchy).
# Not an rlimit: an address-space or data limit stops sanitizer builds, whose shadow memory is reserved.
MEMORY_SHARE = 0.75
# A build that may not store into the compiler cache is told so (and cannot anyway, confined): ccache
# then reads hits and compiles misses without storing, with its temporary files in the private /tmp.
CACHE_READ_ONLY = {"CCACHE_READONLY": "1", "CCACHE_TEMPDIR": f"{TMP}/ccache-tmp", "SCCACHE_LOCAL_RW_MODE": "READ_ONLY"}
_probed: dict[str, str | None] = {}  # bwrap path -> why it cannot confine here (None: it can)
_lacking: dict[str, dict[str, str]] = {}  # bwrap path -> the optional protections this machine refuses

# --- the seccomp filter ----------------------------------------------------------------------------
# A classic-BPF program as bubblewrap's `--seccomp FD` loads it (struct sock_filter: u16 code, u8 jt,
# u8 jf, u32 k) over struct seccomp_data (int nr at offset 0, u32 arch at 4). The calls refused with
# EPERM: those through which one process steers or reads another of the same uid (ptrace, the process_vm
# pair, pidfd_getfd, process_madvise), and the keyring's (per uid: shared with every job and the user).
# Each architecture the kernel may run a job's code in (the compat ABIs too) has its own numbers;
# an x32 call (nr with bit 30 set) is refused whole.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "i386": 0x40000003, "aarch64": 0xC00000B7, "arm": 0x40000028}
_DENIED = {  # ptrace, process_vm_readv, process_vm_writev, add_key, request_key, keyctl, pidfd_getfd, process_madvise
    "x86_64": (101, 310, 311, 248, 249, 250, 438, 440),
    "i386": (26, 347, 348, 286, 287, 288, 438, 440),
    "aarch64": (117, 270, 271, 217, 218, 219, 438, 440),
    "arm": (26, 376, 377, 309, 310, 311, 438, 440),
}
_X32_BIT = 0x40000000
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050000 | 1
_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_filter() -> bytes:
    """The compiled filter: one block per architecture (load arch; not it: next block; load nr; refused
    numbers jump to the block's EPERM), then allow whatever arch is left (none a job runs on here)."""
    out = b""
    for arch, numbers in _DENIED.items():
        x32 = arch == "x86_64"
        size = 3 + x32 + len(numbers) + 2
        deny = size - 1
        block = [_insn(_LD_ABS_W, 0, 0, 4), _insn(_JEQ_K, 0, size - 2, _AUDIT_ARCH[arch]), _insn(_LD_ABS_W, 0, 0, 0)]
        if x32:
            block.append(_insn(_JGE_K, deny - len(block) - 1, 0, _X32_BIT))
        for nr in numbers:
            block.append(_insn(_JEQ_K, deny - len(block) - 1, 0, nr))
        block += [_insn(_RET_K, 0, 0, _RET_ALLOW), _insn(_RET_K, 0, 0, _RET_EPERM)]
        out += b"".join(block)
    return out + _insn(_RET_K, 0, 0, _RET_ALLOW)


_FILTER = seccomp_filter()


def filter_fd() -> int:
    """A fresh descriptor holding the filter at offset 0, for one bubblewrap (which reads it to its end)."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, _FILTER)  # 200-odd bytes: far below a pipe's buffer
    os.close(write_fd)
    return read_fd


def shares_of(job: jobfile.Job) -> tuple[str, ...]:
    """What the job's session opened up (`"share": ["network"]`), in a fixed order."""
    return parse_mode(str(job.sandbox.get("mode") or CONFINED))[1]


def parse_mode(mode: str) -> tuple[str, tuple[str, ...]]:
    """A `sandbox` setting as the config keeps it ("confined", "off", "confined+network") -> (mode, shares)."""
    base, *rest = mode.split("+")
    return (OFF if base == OFF else CONFINED), tuple(s for s in SHARES if s in rest)


def mode_string(shares: list[str] | tuple[str, ...]) -> str:
    """The setting of a confined session that opens `shares` up ("confined" when none)."""
    return "+".join([CONFINED, *(s for s in SHARES if s in shares)])


@dataclass(frozen=True)
class Confinement:
    """How one command of a job is confined.

    `tree`: the job's own tree, its only writable place besides a private /tmp and, when `cache` is set
    (the tree is the baseline's), the compiler cache; otherwise the cache is read, never written.
    `frozen`: the protected paths of the tree (relative: folders holding only protected files, and files),
    each bound read-only from `frozen_from` (the session's bytes of them, from its git objects: in the cache
    here, in the staged job on a cloud worker) or, without it, over itself.
    `read_only`: the tree itself is read-only (a bench or checks command of a session whose benchmark and
    checks write nothing there): no state passes from one run to the next, nor from the checks to the pairs.
    `scripts`: the session's bytes (a file outside any worktree) of each script, bound read-only over
    the tree's copy. `readable`: paths the job reads that a private /tmp would hide (the baseline's
    tree, a holdout command). `off`: the user turned confinement off; the scripts are then written
    back into the tree before each command instead of bound. `share`: what the session opened up
    (SHARES). `hidden`: folders the job must not see at all (the machine lock's, with the job files).
    `private`: the user's checkout and its git directory, hidden as well (their files are the session head's,
    their refs name it, `.autoresearch/` holds the ledger: each would tell a baseline from a candidate), with
    what the job needs inside them bound again (its trees, the compiler cache, the files its environment
    names, the programs its PATH names, and for a build the git directory, read-only).
    """

    tree: str
    scripts: dict[str, str] = field(default_factory=dict)
    readable: tuple[str, ...] = ()
    off: bool = False
    cache: bool = False
    frozen: tuple[str, ...] = ()
    read_only: bool = False
    share: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    frozen_from: str | None = None
    private: tuple[str, ...] = ()


def mode_of(job: jobfile.Job) -> str:
    """The job's `sandbox` setting: confined unless the session turned it off."""
    return parse_mode(str(job.sandbox.get("mode") or CONFINED))[0]


def resolve(job: dict[str, Any], base_dir: str) -> None:
    """Make the job's script paths and its protected files' folder absolute (on a worker they are relative
    to the job file's folder), and its machine lock (on a worker, relative to where the runner starts). The
    job file's folder is hidden from its commands, as the lock's is: it holds the pair-order seed."""
    spec = job["sandbox"] = dict(job.get("sandbox") or {})
    spec["scripts"] = {name: str(Path(base_dir, path)) for name, path in (spec.get("scripts") or {}).items()}
    if spec.get("frozen_from"):
        spec["frozen_from"] = str(Path(base_dir, spec["frozen_from"]))
    if job.get("machine_lock"):
        job["machine_lock"] = os.path.abspath(job["machine_lock"])
    spec["hidden"] = [os.path.abspath(base_dir)]


def compared_tree(job: jobfile.Job, tree: str, phase: str) -> str | None:
    """The tree a `phase` command in `tree` may compare with (AUTORESEARCH_BASELINE_TREE, read-only): for the
    checks the baseline's; for a bench of a pair, the other side's (the baseline's bench sees the candidate's, and
    the candidate's the baseline's: the same view from both sides, and the same as the checks'); none for a build
    or a bench of one tree alone."""
    baseline, candidate = job.baseline_dir, job.candidate_dir
    if not baseline or phase not in ("checks", "bench"):
        return None
    if phase == "checks":
        return str(_real(baseline))
    if not candidate or _real(baseline) == _real(candidate):
        return None
    return str(_real(candidate if _real(tree) == _real(baseline) else baseline))


def for_job(job: jobfile.Job, tree: str, phase: str = "build", shown: str | None = None) -> Confinement:
    """The confinement of a runner job's `phase` command (build, bench, checks) in `tree`: the job's
    `sandbox` spec ({mode, scripts, readable, frozen, read_only: the phases that see the tree read-only,
    private: the user's checkout}) and the tree it compares with (compared_tree: readable). The compiler
    cache is writable only to the build of the baseline's tree; every bench and checks command reads it.

    One view for both sides: what a bench or a build sees does not depend on whether its tree is the
    baseline's (no baseline tree, the same cache rights, the checkout out of sight)."""
    spec = job.sandbox
    scripts = {name: str(path) for name, path in (spec.get("scripts") or {}).items() if name in SCRIPTS}
    baseline = job.baseline_dir
    other = shown or compared_tree(job, tree, phase)
    readable = [*spec.get("readable", []), *([other] if other else []),
                *(spec.get("git") or [] if phase == "build" else [])]  # a build may run git (a version from it)
    cache = phase == "build" and bool(baseline) and _real(str(baseline)) == _real(tree)
    frozen = tuple(str(p) for p in spec.get("frozen") or [])
    frozen_from = str(spec["frozen_from"]) if spec.get("frozen_from") else None
    read_only = phase != "build" and phase in (spec.get("read_only") or [])
    lock = job.machine_lock
    folders = [*([Path(lock).parent] if lock and Path(lock).is_absolute() else []),
               *(Path(p) for p in spec.get("hidden") or [])]  # each once, and none inside another
    hidden = tuple(dict.fromkeys(str(f) for f in folders if not any(o in f.parents for o in folders)))
    shares = shares_of(job)
    private = () if CHECKOUT in shares else tuple(str(p) for p in spec.get("private") or [])
    return Confinement(str(tree), scripts, tuple(str(p) for p in readable), mode_of(job) == OFF, cache, frozen,
                       read_only, shares, hidden, frozen_from, private)


def unavailable(bwrap: str | None = None) -> str | None:
    """Why no command can be confined on this machine, with what to do; None when bubblewrap works here.

    Probed once per process by running `true` the way jobs run (user namespaces, mounts and a PID
    namespace may be refused in a container or by a kernel setting even where bwrap is installed).
    """
    name = bwrap or BWRAP
    if name in _probed:
        return _probed[name]
    path = shutil.which(name)
    if path is None:
        why: str | None = f"no bubblewrap (`{name}`) on this machine, so no job can be confined. {HOW_TO_FIX}"
    else:
        try:
            probe = subprocess.run([path, *BASE_OPTIONS, "/bin/sh", "-c", "exit 0"], capture_output=True,
                                   text=True, timeout=PROBE_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
            why = None if probe.returncode == 0 else (
                f"bubblewrap ({path}) cannot confine a job here (exit {probe.returncode}: "
                f"{probe.stderr.strip()[:300]}); user namespaces may be disabled "
                "(sysctl kernel.unprivileged_userns_clone=1, or Ubuntu's "
                f"kernel.apparmor_restrict_unprivileged_userns=0). {HOW_TO_FIX}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"bubblewrap ({path}) did not run: {exc}. {HOW_TO_FIX}"
    _probed[name] = why
    return why


def memory_limit() -> int:
    """A job's memory limit in bytes: MEMORY_SHARE of the machine's."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * MEMORY_SHARE)
    except (ValueError, OSError):
        return 0


def group() -> cgroups.Group | None:
    """A fresh cgroup of one command (its memory limited to memory_limit()), or None where none can be made."""
    limit = memory_limit()
    return cgroups.make(limit) if limit else None


_measure: dict[str, str] = {}


def side_measure() -> str:
    """How this machine measures and stops each side of a pair (probed once per process), as start_session
    says it: what a confined command's cgroup gives here, and what it does not."""
    if "text" not in _measure:
        made = None if unavailable() is not None else group()
        pages = (". Each run starts with no page of its tree or the compared tree cached. Not promised: the cached "
                 "pages of files outside them (the system's, a model file), state the kernel keeps between runs")
        if made is None and cgroups.systemd_scope():
            _measure["text"] = (
                "no cgroup can be made by the server here, so each job's runner asks the user's systemd for a "
                "delegated scope of its own (systemd-run --user --scope -p Delegate=yes) and makes each command's "
                "cgroup there: the CPU time of every process it ran and, in turns, a freezer; what the scope allows "
                "(a memory bound) the job's log says" + pages)
        elif made is None:
            _measure["text"] = (
                "no cgroup can be made here (no writable cgroup v2 group or delegated subtree, no writable v1 "
                "hierarchy): each command runs under an init of our own in its PID namespace, which stops and "
                "continues every process of it at once (in turns: SIGSTOP and SIGCONT, which a program can notice) "
                "and gives the CPU time of every process it ran, those still running at its end included; its "
                "memory is watched by the runner (its processes' own memory, every 50 ms), its scratch bounded by the "
                "size of its private /tmp and /run (256 MiB each)" + pages)
        else:
            has = [w for w in ("cpu", "freeze", "memory") if made.has(w)]
            made.remove()
            _measure["text"] = (
                f"each command in a cgroup of its own ({cgroups.where(made)})"
                + (", the CPU time of every process it ran, orphans included" if "cpu" in has else
                   ", no CPU account (its init's count instead)")
                + (", and in turns a freezer that stops all of it at once, without a signal" if "freeze" in has else
                   "; in turns its init stops it with SIGSTOP, which a program can notice")
                + ("; its memory bounded by the kernel" if "memory" in has else
                   "; no memory controller is delegated here: its memory is watched by the runner (its processes' "
                   "own memory, every 50 ms) and its scratch bounded by the size of its private /tmp and /run")
                + pages)
    return _measure["text"]


# The protections a machine may refuse although bubblewrap runs (an old kernel without seccomp, a container
# that refuses a network namespace), probed one by one, and what a session then does not promise.
OPTIONAL = {
    "seccomp": (("--seccomp", "FD"), "no seccomp filter here: a job's processes may ptrace one another (the "
                "session's scripts among them) and use the user's keyring"),
    NETWORK: (NET_OPTIONS, "no network namespace here: a job shares the machine's network and its local services"),
    "proc": (PROC_OPTIONS, "no read-only /proc here: a job's processes may write one another's memory through "
             "/proc/PID/mem (the session's scripts' among them)"),
    "tmp_size": (("--size", str(TMP_BYTES), "--tmpfs", TMP), "no sized tmpfs here: a job's private /tmp may "
                 "fill the machine's memory"),
}


def lacking(bwrap: str | None = None) -> dict[str, str]:
    """The OPTIONAL protections bubblewrap cannot give on this machine (probed once per process), each with
    what the session then does not promise; empty where it gives them all (or cannot confine at all)."""
    name = bwrap or BWRAP
    if name in _lacking:
        return _lacking[name]
    out: dict[str, str] = {}
    path = shutil.which(name)
    if path is not None and unavailable(name) is None:
        for key, (options, what) in OPTIONAL.items():
            fd = filter_fd() if "FD" in options else None
            argv = [path, *BASE_OPTIONS, *(str(fd) if o == "FD" else o for o in options), "/bin/sh", "-c", "exit 0"]
            try:
                ok = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False,
                                    stdin=subprocess.DEVNULL, pass_fds=() if fd is None else (fd,)).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            finally:
                if fd is not None:
                    os.close(fd)
            if not ok:
                out[key] = what
        made = group()
        if made is None or not made.has("memory"):
            out["memory"] = ("no memory cgroup can be made here (cgroup v2 with the memory controller, or v1's memory "
                             "hierarchy, writable by this user): a job's memory is watched by the runner, not bounded "
                             "by the kernel, and its scratch by the size of its private /tmp and /run")
        if made is not None:
            made.remove()
    _lacking[name] = out
    return out


def describe(off: bool, share: tuple[str, ...] | list[str] = ()) -> str:
    """What a result says about how its commands ran."""
    if off:
        return OFF
    return f"{CONFINED} (bubblewrap" + "".join(f"; {s} shared" for s in share) + ")"


def prepare(c: Confinement) -> None:
    """Put the session's scripts in place in the tree before a command runs.

    Confined, each script's place must be a plain file to bind over (a link or a folder the build left
    there is removed first). Unconfined, the session's bytes are written there, so what a build wrote
    over a script is undone before the next command. No process of the job runs at this point.
    """
    for name, source in c.scripts.items():
        target = Path(c.tree) / name
        if c.off and target.is_file() and not target.is_symlink() and target.read_bytes() == Path(source).read_bytes():
            continue  # as the session has it: left alone (a rewrite could change its mode, which git would see)
        mode = target.stat().st_mode & 0o777 if target.is_file() and not target.is_symlink() else 0o755
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.is_symlink() or (c.off and target.exists()):
            target.unlink()
        if c.off:
            shutil.copyfile(source, target)
            target.chmod(mode)
        elif not target.exists():
            target.touch()
    if not c.off and c.frozen_from:
        for rel in c.frozen:
            _mount_point(Path(c.tree), rel, Path(c.frozen_from, rel).is_dir())


def _mount_point(tree: Path, rel: str, folder: bool) -> None:
    """Make `rel` under `tree` a place of the right kind to bind over: every folder on the way a real folder
    of the tree (a link the build left there, which would carry the bind elsewhere, is removed), and the
    place itself a folder or a plain file. What a build moved aside stays where it put it."""
    here = tree
    parts = Path(rel).parts
    for i, part in enumerate(parts):
        here = here / part
        last = i == len(parts) - 1
        want_dir = folder or not last
        if here.is_symlink() or (os.path.lexists(here) and here.is_dir() != want_dir):
            subprocess.run(["rm", "-rf", "--", str(here)], capture_output=True, check=False)
        if not os.path.lexists(here):
            if want_dir:
                here.mkdir()
            else:
                here.touch()


@dataclass(frozen=True)
class Launch:
    """How the commands of a job's phase in one tree start, prepared once for all their runs (`launch`): the
    confinement, and bubblewrap with the options that are the same for every run (none when off)."""

    confinement: Confinement
    options: tuple[str, ...] = ()


def launch(c: Confinement | Launch, env: dict[str, str]) -> Launch:
    """The launch of the commands confined by `c` with the environment `env` (a run's, but for its marker,
    which names no path); a launch prepared already is kept as it is."""
    if isinstance(c, Launch):
        return c
    if c.off:
        return Launch(c)
    path = shutil.which(BWRAP)
    if path is None:
        raise RuntimeError(unavailable() or "bubblewrap vanished")
    return Launch(c, tuple(_bwrap_args(path, c, _confined_env(c, env), lacking())))


def _confined_env(c: Confinement, env: dict[str, str]) -> dict[str, str]:
    if not c.cache:
        env = {**env, **CACHE_READ_ONLY}
    return env if c.off else {**env, "TMPDIR": TMP}  # a TMPDIR under the real /tmp is read-only in the job


def command(argv: list[str], c: Confinement | Launch, env: dict[str, str], into: cgroups.Group | None = None,
            init: tuple[int, int, int] | None = None) -> tuple[list[str], dict[str, str], list[int]]:
    """`argv` as it runs in `c`, its environment, and the descriptors it must inherit (the seccomp
    filter's, which the caller closes once it started the command): bubblewrap's command line (argv
    itself when off).

    Made for each run, whatever was prepared (`launch`): the scripts put back in place, the binds of the tree's
    protected paths as the tree holds them now, a fresh descriptor of the filter (bubblewrap reads it to its
    end) and a fresh cgroup (its limit and its account are this command's alone): `into` when the caller made it
    (the runner, which reads its CPU time and freezes it), else one of its own. In a group, the command gets a
    cgroup namespace of its own: it sees its group as the root, and no name of it. With `init` (where no group
    stops and counts the command: the descriptors of procs.Init's far ends), the namespace's PID 1 is our own init
    (nsinit.py), which stops, continues and counts every process of the command, and bubblewrap says its pid."""
    prepared = launch(c, env)
    c = prepared.confinement
    prepare(c)
    env = _confined_env(c, env)
    if c.off:
        return list(argv), env, []
    missing = lacking()
    fds = [] if "seccomp" in missing else [filter_fd()]
    # The runner marks every process it starts (procs.JOB_ENV: the experiment's id in it) to find what
    # escapes a command; confined, nothing escapes the PID namespace, so bubblewrap carries the mark and the
    # job does not see it: no id that could tell one experiment, or one side, from another.
    args = [*prepared.options, *_tree_binds(c), "--unsetenv", JOB_MARK]
    if fds:
        args += ["--seccomp", str(fds[0])]
    if init is not None:  # our own init as the namespace's PID 1 (nsinit.py); bubblewrap says its pid on `info`
        asks, answers, info = init
        args += ["--as-pid-1", "--info-fd", str(info)]
        argv = [INIT_PYTHON, "-I", "-S", "-c", NSINIT, str(asks), str(answers), "--", *argv]
        fds += [asks, answers, info]
    # a cgroup namespace of its own, in a group or not: it sees its group (or the one it started in) as "/"
    argv = [*args, "--unshare-cgroup-try", "--chdir", str(_real(c.tree)), "--", *argv]
    return (argv if into is None else into.join(argv)), env, fds


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def cache_dirs(env: dict[str, str]) -> list[Path]:
    """The compiler caches a build writes (ccache's cache_dir, sccache's directory), created if missing."""
    dirs = []
    ccache = shutil.which("ccache", path=env.get("PATH"))
    if ccache:
        found = env.get("CCACHE_DIR")
        if not found:
            try:
                found = subprocess.run([ccache, "-k", "cache_dir"], capture_output=True, text=True, env=env,
                                       timeout=PROBE_TIMEOUT_S, check=False).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                found = ""
        if found:
            dirs.append(Path(found))
    if shutil.which("sccache", path=env.get("PATH")):
        dirs.append(Path(env.get("SCCACHE_DIR") or Path(env.get("HOME", "~"), ".cache", "sccache")).expanduser())
    out = []
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        out.append(_real(d))
    return out


_cache_dirs: dict[tuple[str | None, str | None, str | None, str | None], list[Path]] = {}


def _caches(env: dict[str, str]) -> list[Path]:
    key = (env.get("PATH"), env.get("HOME"), env.get("CCACHE_DIR"), env.get("SCCACHE_DIR"))
    if key not in _cache_dirs:
        _cache_dirs[key] = cache_dirs(env)
    return _cache_dirs[key]


def _under(path: Path, root: str) -> bool:
    return path == Path(root) or Path(root) in path.parents


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False


def _holds_socket(folder: Path) -> bool:
    """Whether `folder` holds a socket at its top (XDG_RUNTIME_DIR holds the session bus's)."""
    try:
        with os.scandir(folder) as entries:
            return any(stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode) for e in entries)
    except OSError:
        return False


def _run_options(sized: bool = True) -> list[str]:
    """A private /run: the sockets of the machine's services live there (the system bus, whose systemd
    starts units outside any sandbox; docker's, whose containers mount /; databases'), and a unix socket
    on a read-only mount still accepts a connection. What programs expect of it stays: /run/shm, /run/lock."""
    if not os.path.isdir(RUN) or os.path.islink(RUN):
        return []
    return [*(["--size", str(TMP_BYTES)] if sized else []), "--tmpfs", RUN, "--symlink", "/dev/shm", f"{RUN}/shm",
            "--dir", f"{RUN}/lock"]


def _bwrap_args(bwrap: str, c: Confinement, env: dict[str, str], missing: dict[str, str] | None = None) -> list[str]:
    """bubblewrap's options for `c` that every run shares: a read-only root, a fresh /dev and /proc, a private
    /tmp and /run with the job's paths bound into them again, its tree (and the compiler cache for the baseline's
    build) writable, the scripts bound read-only, no capabilities (as root too) and a PID namespace that dies
    with the runner. The binds of the tree's protected paths follow, made for each run (`_tree_binds`)."""
    tree = _real(c.tree)
    named = [Path(v) for v in env.values() if v.startswith("/") and "\n" not in v and len(v) < 4096]
    programs = [Path(p) for p in env.get("PATH", "").split(":") if p.startswith("/")]
    caches = _caches(env)
    writable = [tree, *(caches if c.cache else [])]
    binds: list[tuple[int, int, str, Path, Path]] = []  # (depth, order, option, source, target)
    # Bound again into the private /tmp: what the job reads there. Into the private /run only what it
    # must read (its programs, the resolver's file), never a folder the environment names: that is where
    # the user's session keeps its bus and agents' sockets. A socket itself is never bound again (an
    # ssh or gpg agent's would sign as the user), nor a folder the environment names that holds one.
    needed: list[str | Path] = [*c.readable, *programs, *([] if c.cache else caches)]
    resolver = _real("/etc/resolv.conf")
    wanted = [*((p, True) for p in needed), *((p, False) for p in named), (resolver, True)]
    hidden = [_real(h) for h in c.hidden]
    private = [_real(p) for p in c.private]
    for path, needs in ((_real(p), needs) for p, needs in wanted if os.path.lexists(p)):
        inside = any(path == w or w in path.parents for w in writable)
        if inside or _is_socket(path) or path in (Path(TMP), Path(RUN)) or (not needs and _holds_socket(path)):
            continue
        if not needs and any(path == h or h in path.parents for h in hidden):
            continue  # a folder the environment names (a worker's PWD) that is hidden stays hidden
        if not needs and any(_under(path, str(p)) or p in path.parents for p in private) and not path.is_file():
            continue  # nor does a folder of the checkout, or one that holds it (`_private_binds`)
        if _under(path, TMP) or (_under(path, RUN) and (needs or path.is_file())):
            binds.append((len(path.parts), 0, "--ro-bind", path, path))
    for path in writable:
        binds.append((len(path.parts), 1, "--ro-bind" if c.read_only and path == tree else "--bind", path, path))
    missing = missing or {}
    args = [bwrap, *BASE_OPTIONS, *([] if "proc" in missing else PROC_OPTIONS)]
    if NETWORK not in c.share and NETWORK not in missing:
        args += NET_OPTIONS
    sized = "tmp_size" not in missing
    args += [*(["--size", str(TMP_BYTES)] if sized else []), "--tmpfs", TMP, *_run_options(sized)]
    # The machine lock's folder (the lock, its turn files, the job files with their pair-order seed) is an
    # empty tmpfs: a job could probe the lock (taken shared for checks, exclusively for a bench) or read the
    # seed. What the job needs under it (its trees, the cache) is bound again after it.
    for folder in c.hidden:
        real = _real(folder)
        if real.is_dir() and not any(real == w or w in real.parents for w in writable):
            binds.append((len(real.parts), -1, "--tmpfs", real, real))
            kept_places: list[str | Path] = [*c.readable, *writable, *([] if c.cache else caches)]
            for kept in kept_places:
                kept_real = _real(kept)
                if real in kept_real.parents and os.path.lexists(kept_real):
                    writable_place = any(kept_real == w for w in writable)
                    binds.append((len(kept_real.parts), 1 if writable_place else 0,
                                  ("--ro-bind" if c.read_only and kept_real == tree else "--bind")
                                  if writable_place else "--ro-bind", kept_real, kept_real))
    for place in private:
        binds += _private_binds(place, c, named, programs, writable, caches)
    # parents before children, and a writable place after a read-only one that holds it
    for _depth, _order, option, source, target in sorted(set(binds)):
        args += [option, str(source)] if option == "--tmpfs" else [option, str(source), str(target)]
    for name, script in sorted(c.scripts.items()):
        args += ["--ro-bind", str(_real(script)), str(tree / name)]
    return args


def _private_binds(folder: Path, c: Confinement, named: list[Path], programs: list[Path], writable: list[Path],
                   caches: list[Path]) -> list[tuple[int, int, str, Path, Path]]:
    """An empty tmpfs over `folder` (the user's checkout, or its git directory), and what the job needs inside
    it bound again: its trees, the compiler cache, the paths it reads (`readable`), the files its environment
    names (a model) and the folders its PATH names (a virtual environment whole); never the session folder,
    a git directory, nor a folder of the checkout's own files. Not over the home folder or one that holds it."""
    home = _real(Path.home())
    if not folder.is_dir() or folder == home or folder in home.parents \
            or any(folder == w or w in folder.parents for w in writable):
        return []
    out: list[tuple[int, int, str, Path, Path]] = [(len(folder.parts), -1, "--tmpfs", folder, folder)]
    venvs = [p.parent if (p.parent / "pyvenv.cfg").is_file() else p for p in programs]
    reads: list[str | Path] = [*venvs, *([] if c.cache else caches)]
    kept = [*((_real(p), False, True) for p in c.readable), *((_real(p), False, False) for p in reads),
            *((p, False, False) for p in (_real(n) for n in named) if p.is_file()),
            *((w, True, True) for w in writable)]
    for path, write, needed in kept:
        rel = path.relative_to(folder).parts if folder in path.parents else None
        if rel is None or LEDGER in rel or (".git" in rel and not needed) or not os.path.lexists(path) \
                or _is_socket(path):
            continue
        option = "--ro-bind" if not write or (c.read_only and path == _real(c.tree)) else "--bind"
        out.append((len(path.parts), 1 if write else 0, option, path, path))
    return out


def _tree_binds(c: Confinement) -> list[str]:
    """The binds of the tree's protected paths (and its link to its git directory), read from the tree before
    each run: a run may have changed the tree (moved a protected file's folder away) since the last one."""
    tree = _real(c.tree)
    args: list[str] = []
    for rel in c.frozen:
        path = tree / rel
        if c.frozen_from:  # the session's bytes, whatever the tree holds there now
            source = Path(c.frozen_from, rel)
            if os.path.lexists(source) and not source.is_symlink():
                args += ["--ro-bind", str(source), str(path)]
        elif (path.is_file() or path.is_dir()) and not path.is_symlink() and tree in _real(path).parents:
            args += ["--ro-bind", str(path), str(path)]  # as checked out: the launch checked they are the baseline's
    git_file = tree / ".git"  # a worktree's link to its git directory, which the server's git follows later
    if git_file.is_file() and not git_file.is_symlink():
        args += ["--ro-bind", str(git_file), str(git_file)]
    return args
