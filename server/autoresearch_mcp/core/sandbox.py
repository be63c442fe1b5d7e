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
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BWRAP = "bwrap"
CONFINED, OFF = "confined", "off"
BENCH_SCRIPT, CHECKS_SCRIPT = "autoresearch.sh", "autoresearch.checks.sh"
SCRIPTS = (BENCH_SCRIPT, CHECKS_SCRIPT)
TMP, RUN = "/tmp", "/run"
PROBE_TIMEOUT_S = 20.0
HOW_TO_FIX = ("Install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install "
              "bubblewrap`; `bash scripts/setup.sh` does it as root), or, to measure unconfined at your own risk, "
              "set \"sandbox\": \"off\" in .autoresearch/config.json (every result then says so)")
# No capabilities (a root job could remount / writable), no other process in sight, nothing outliving it.
BASE_OPTIONS = ("--cap-drop", "ALL", "--unshare-pid", "--die-with-parent", "--new-session",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", TMP)
# A build that may not store into the compiler cache is told so (and cannot anyway, confined): ccache
# then reads hits and compiles misses without storing, with its temporary files in the private /tmp.
CACHE_READ_ONLY = {"CCACHE_READONLY": "1", "CCACHE_TEMPDIR": f"{TMP}/ccache-tmp", "SCCACHE_LOCAL_RW_MODE": "READ_ONLY"}
_probed: dict[str, str | None] = {}  # bwrap path -> why it cannot confine here (None: it can)


@dataclass(frozen=True)
class Confinement:
    """How one command of a job is confined.

    `tree`: the job's own tree, its only writable place besides a private /tmp and, when `cache` is set
    (the tree is the baseline's), the compiler cache; otherwise the cache is read, never written.
    `frozen`: the protected files of the tree (relative paths), each bound read-only over itself.
    `read_only`: the tree itself is read-only (a bench or checks command of a session whose benchmark and
    checks write nothing there): no state passes from one run to the next, nor from the checks to the pairs.
    `scripts`: the session's bytes (a file outside any worktree) of each script, bound read-only over
    the tree's copy. `readable`: paths the job reads that a private /tmp would hide (the baseline's
    tree, a holdout command). `off`: the user turned confinement off; the scripts are then written
    back into the tree before each command instead of bound.
    """

    tree: str
    scripts: dict[str, str] = field(default_factory=dict)
    readable: tuple[str, ...] = ()
    off: bool = False
    cache: bool = False
    frozen: tuple[str, ...] = ()
    read_only: bool = False


def _spec(job: dict[str, Any]) -> dict[str, Any]:
    spec = job.get("sandbox") or {}
    return {"mode": spec} if isinstance(spec, str) else spec  # the manager's spec names only the mode


def mode_of(job: dict[str, Any]) -> str:
    """The job's `sandbox` setting: confined unless the session turned it off."""
    return OFF if _spec(job).get("mode") == OFF else CONFINED


def resolve(job: dict[str, Any], base_dir: str) -> None:
    """Make the job's script paths absolute: on a worker they are relative to the job file's folder."""
    spec = job["sandbox"] = _spec(job)
    spec["scripts"] = {name: str(Path(base_dir, path)) for name, path in (spec.get("scripts") or {}).items()}


def for_job(job: dict[str, Any], tree: str, phase: str = "build") -> Confinement:
    """The confinement of a runner job's `phase` command (build, bench, checks) in `tree`: the job's
    `sandbox` spec ({mode, scripts, readable, frozen, read_only: the phases that see the tree read-only})
    and its baseline's tree (readable); the compiler cache is writable only when `tree` is that baseline's."""
    spec = _spec(job)
    scripts = {name: str(path) for name, path in (spec.get("scripts") or {}).items() if name in SCRIPTS}
    baseline = job.get("baseline_dir")
    readable = [*spec.get("readable", []), *([baseline] if baseline else [])]
    cache = bool(baseline) and _real(str(baseline)) == _real(tree)
    frozen = tuple(str(p) for p in spec.get("frozen") or [])
    read_only = phase != "build" and phase in (spec.get("read_only") or [])
    return Confinement(str(tree), scripts, tuple(str(p) for p in readable), mode_of(job) == OFF, cache, frozen,
                       read_only)


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


def describe(off: bool) -> str:
    """What a result says about how its commands ran."""
    return OFF if off else f"{CONFINED} (bubblewrap)"


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


def command(argv: list[str], c: Confinement, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """`argv` as it runs in `c`, and its environment: bubblewrap's command line (argv itself when off), with
    the session's scripts put in place first."""
    prepare(c)
    return wrap(argv, c, env)


def wrap(argv: list[str], c: Confinement, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """`command` without putting the scripts in place: what a runner prepares once for a command it runs
    many times (the bench), calling `prepare` before each run."""
    if not c.cache:
        env = {**env, **CACHE_READ_ONLY}
    if c.off:
        return list(argv), env
    path = shutil.which(BWRAP)
    if path is None:
        raise RuntimeError(unavailable() or "bubblewrap vanished")
    env = {**env, "TMPDIR": TMP}  # a TMPDIR under the real /tmp is read-only in the job
    return [*_bwrap_args(path, c, env), "--chdir", str(_real(c.tree)), "--", *argv], env


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


def _run_options() -> list[str]:
    """A private /run: the sockets of the machine's services live there (the system bus, whose systemd
    starts units outside any sandbox; docker's, whose containers mount /; databases'), and a unix socket
    on a read-only mount still accepts a connection. What programs expect of it stays: /run/shm, /run/lock."""
    if not os.path.isdir(RUN) or os.path.islink(RUN):
        return []
    return ["--tmpfs", RUN, "--symlink", "/dev/shm", f"{RUN}/shm", "--dir", f"{RUN}/lock"]


def _bwrap_args(bwrap: str, c: Confinement, env: dict[str, str]) -> list[str]:
    """bubblewrap's options for `c`: a read-only root, a fresh /dev and /proc, a private /tmp and /run with
    the job's paths bound into them again, its tree (and the compiler cache for the baseline's build) writable,
    the scripts bound read-only, no capabilities (as root too) and a PID namespace that dies with the
    runner."""
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
    for path, needs in ((_real(p), needs) for p, needs in wanted if os.path.lexists(p)):
        inside = any(path == w or w in path.parents for w in writable)
        if inside or _is_socket(path) or path in (Path(TMP), Path(RUN)) or (not needs and _holds_socket(path)):
            continue
        if _under(path, TMP) or (_under(path, RUN) and (needs or path.is_file())):
            binds.append((len(path.parts), 0, "--ro-bind", path, path))
    for path in writable:
        binds.append((len(path.parts), 1, "--ro-bind" if c.read_only and path == tree else "--bind", path, path))
    args = [bwrap, *BASE_OPTIONS, *_run_options()]
    # parents before children, and a writable place after a read-only one that holds it
    for _depth, _order, option, source, target in sorted(set(binds)):
        args += [option, str(source), str(target)]
    for name, script in sorted(c.scripts.items()):
        args += ["--ro-bind", str(_real(script)), str(tree / name)]
    for rel in c.frozen:  # as checked out: the launch checked they are the baseline's
        path = tree / rel
        if path.is_file() and not path.is_symlink() and tree in _real(path).parents:
            args += ["--ro-bind", str(path), str(path)]
    git_file = tree / ".git"  # a worktree's link to its git directory, which the server's git follows later
    if git_file.is_file() and not git_file.is_symlink():
        args += ["--ro-bind", str(git_file), str(git_file)]
    return args
