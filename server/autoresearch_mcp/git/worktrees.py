"""Worktrees outside the user's repository, in the cache directory.

A worktree is named by the git tree it holds, not by the experiment: the same content is the same
build, so a baseline is built once for every experiment on its base, a candidate measured again
reuses its build, and a committed winner's build is the next baseline's. Unused builds are kept in
least-recently-used order up to a limit. In incremental mode each executor slot also keeps one
persistent candidate worktree at a fixed path that moves from candidate to candidate.

Every server process sharing the cache folder sees which trees are in use: a job's trees are held by a
shared flock on their folder, and a tree is created or removed only under its `<tree>.lock`. Before a
launch is refused for want of disk, the trees nobody holds or waits for are evicted (`make_room`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

from autoresearch_mcp.git import gitops
from autoresearch_mcp.worker import sandbox
from autoresearch_mcp.worker.builds import BUILT_MARKER

log = logging.getLogger(__name__)
# What a launch needs free where the worktrees are: two trees and their builds (a build that fills the disk
# would leave the next experiment's real winner failing for want of space, never judged).
MIN_FREE_BYTES = 2 << 30
GiB = float(1 << 30)


def free_bytes(place: Path) -> int:
    """The bytes free for us on the file system of `place` (the one reading of the disk's space)."""
    return shutil.disk_usage(place).free


def repo_key(repo: gitops.Repo) -> str:
    top = Path(repo.working_dir).resolve()
    return f"{top.name}-{hashlib.sha1(str(top).encode()).hexdigest()[:10]}"


def protected_entries(repo: gitops.Repo, commit: str, units: list[str]) -> list[gitops.TreeEntry]:
    """The files and links of the protected paths `units` of `commit`."""
    return [e for unit in units for e in gitops.tree_entries(repo, commit, unit)
            if e.mode in ("100644", "100755", "120000")]


def write_protected(repo: gitops.Repo, commit: str, units: list[str], folder: Path,
                    entries: list[gitops.TreeEntry] | None = None) -> None:
    """Write the protected paths `units` of `commit` from git's objects under `folder` (files read-only,
    programs read-only and executable, links as links): the bytes a job's commands bind over their tree."""
    if entries is None:
        entries = protected_entries(repo, commit, units)
    for entry, data in zip(entries, gitops.read_blobs(repo, [e.sha for e in entries]), strict=True):
        target = folder / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.mode == "120000":
            os.symlink(data, target)
        else:
            target.write_bytes(data)
            target.chmod(0o555 if entry.mode == "100755" else 0o444)


def machine_lock(cache_dir: Path) -> Path:
    """The lock file that keeps benchmarks of this machine from overlapping anything of ours (every session's
    worktrees under `cache_dir` share it)."""
    return cache_dir / "worktrees" / "machine.lock"


@contextlib.contextmanager
def tree_lock(path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold `<path>.lock`, under which any process creates, claims or removes the tree at `path`: True once held;
    without `wait`, False when another holds it. A removal unlinks the file while holding it; whoever then wins
    the unlinked file opens the new one, so two never hold different files for one tree."""
    lock = Path(f"{path}.lock")
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if not _flock(fd, fcntl.LOCK_EX, wait):
                yield False
                return
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock))
            except FileNotFoundError:
                same = False
            if same:
                yield True
                return
        finally:
            os.close(fd)


def _flock(fd: int, how: int, wait: bool) -> bool:
    try:
        fcntl.flock(fd, how if wait else how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def held(path: Path) -> bool:
    """Whether a job of any process holds the tree at `path` (a shared flock on its folder, `Worktrees._use`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # a folder we cannot open is never ours to remove
    try:
        return not _flock(fd, fcntl.LOCK_EX, wait=False)
    finally:
        os.close(fd)


def _named_by_jobs(root: Path) -> set[str]:
    """The trees of `root` that a job file there names: a job runs on them, whatever server started it."""
    names: set[str] = set()
    for job_file in root.glob("exp-*.job.json"):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(job_file.read_text())
            if isinstance(data, dict):
                names.update(Path(data[k]).name for k in ("baseline_dir", "candidate_dir")
                             if isinstance(data.get(k), str))
    return names


def _by_age(roots: Iterable[Path]) -> list[Path]:
    """The trees of `roots`, those whose build never finished first (no use to anyone), then least recently used
    first (a job touches its trees when it takes them)."""
    def age(path: Path) -> tuple[bool, float]:
        try:
            return (path / BUILT_MARKER).exists(), path.stat().st_mtime
        except OSError:
            return True, 0.0
    found = [p for root in roots if root.is_dir() for p in root.iterdir()
             if p.name.startswith(("tree-", "slot-")) and p.is_dir()]
    return sorted(found, key=age)


class Worktrees:
    def __init__(self, repo: gitops.Repo, cache_dir: Path, keep: int = 4) -> None:
        self.repo = repo
        self.root = cache_dir / "worktrees" / repo_key(repo)
        self.cache_dir = cache_dir
        self.keep = keep
        self._lock = threading.Lock()
        self._users: dict[Path, int] = {}
        self._holds: dict[Path, int] = {}  # the folder descriptor that holds each tree our jobs use
        self._wanted: dict[int, tuple[tuple[str, ...], str | None]] = {}  # queued jobs' commits, by job

    def machine_lock(self) -> Path:
        """The lock file that keeps benchmarks of this machine from overlapping anything of ours."""
        return machine_lock(self.cache_dir)

    def _place(self) -> Path:
        return self.root if self.root.exists() else next(p for p in self.root.parents if p.exists())

    def make_room(self, spare: Collection[Path] = ()) -> str | None:
        """None when an experiment has room where the worktrees are, once the trees of this cache folder that no
        job holds or waits for have been evicted as far as needed, least recently used first: this session's
        (never `spare`, nor a tree of a job queued here: `want`), then other sessions' (never one a process
        holds). Otherwise why not, with what was evicted and what to do."""
        place = self._place()
        before = free_bytes(place)
        if before >= MIN_FREE_BYTES:
            return None
        keep = set(spare) | self._wanted_paths()
        with self._lock:
            evicted, kept = self._evict(keep, place)
        free = free_bytes(place)
        freed = f"{len(evicted)} tree(s) no job was using or waiting for ({max(0, free - before) / GiB:.2f} GiB freed)"
        if free >= MIN_FREE_BYTES:
            log.warning("evicted %s from %s to make room for an experiment", freed, self.cache_dir / "worktrees")
            return None
        return (f"only {free / GiB:.2f} GiB free in {place}, where the worktrees are, after evicting {freed} "
                f"and keeping {kept} that experiments use or wait for; an experiment needs at least "
                f"{MIN_FREE_BYTES / GiB:.2f} GiB there (two trees and their builds). Free some space on that disk, or "
                "set AUTORESEARCH_CACHE_DIR to a folder on a larger disk and restart the server; then launch again")

    def _evict(self, keep: set[Path], place: Path) -> tuple[list[Path], int]:
        """Remove trees until an experiment has room, this session's first (`keep` and those a job holds or runs
        on stay); the trees removed, and how many stayed because a job needs them (lock held)."""
        top = self.root.parent
        others = [p for p in top.iterdir() if p.is_dir() and p != self.root] if top.is_dir() else []
        evicted: list[Path] = []
        kept = 0
        for roots in ([self.root], others):
            named = {(root, name) for root in roots for name in _named_by_jobs(root)}
            for path in _by_age(roots):
                if free_bytes(place) >= MIN_FREE_BYTES:
                    return evicted, kept
                if path in keep or (path.parent, path.name) in named or not self._remove_unheld(path):
                    kept += int(path.exists())
                    continue
                evicted.append(path)
        return evicted, kept

    def want(self, job: int, commits: Iterable[str], variant: str | None = None) -> None:
        """A queued job (`job`: a key of its own) will use the trees of `commits`: no eviction takes them until
        `unwant(job)`."""
        with self._lock:
            self._wanted[job] = (tuple(commits), variant)

    def unwant(self, job: int) -> None:
        with self._lock:
            self._wanted.pop(job, None)

    def _wanted_paths(self) -> set[Path]:
        with self._lock:
            wanted = list(self._wanted.values())
        paths = set()
        for commit, variant in {(c, v) for commits, v in wanted for c in commits}:
            with contextlib.suppress(gitops.GitError):
                paths.add(self._path(gitops.tree_of(self.repo, commit), variant))
        return paths

    def scripts(self, commit: str) -> dict[str, str]:
        """The session's scripts at `commit` (autoresearch.sh, and autoresearch.checks.sh when it has one),
        kept read-only outside any worktree under their content's hash: the bytes a job's commands run,
        bound over whatever its tree holds."""
        store = self.root.parent / "scripts"
        out = {}
        for name in sandbox.SCRIPTS:
            data = gitops.file_at(self.repo, commit, name)
            if data is None:
                continue
            path = store / hashlib.sha256(data).hexdigest()
            if not path.is_file():
                store.mkdir(parents=True, exist_ok=True)
                part = store / f".{path.name}.{os.getpid()}.{threading.get_ident()}"
                part.write_bytes(data)
                part.chmod(0o444)
                part.replace(path)
            out[name] = str(path)
        return out

    def frozen_store(self, commit: str, units: list[str]) -> str | None:
        """The protected paths `units` (gitops.protected_files) of `commit`, written once from the session's
        git objects into a read-only folder outside any worktree (and out of every job's sight): what each
        command of a job binds over its tree, whatever the tree holds at those paths by then (a build may
        have moved a protected folder aside and written its own). None when nothing is protected."""
        if not units:
            return None
        # named from the content (each file's mode, object and path), never the commit: the folder's name shows in
        # every job's mount table, and a commit's would tell a baseline from a candidate (and one side from the other)
        entries = protected_entries(self.repo, commit, units)
        digest = hashlib.sha256("\0".join(f"{e.mode} {e.sha} {e.path}" for e in entries).encode()).hexdigest()[:24]
        store = self.root.parent / "protected" / digest
        if store.is_dir():
            return str(store)
        part = store.parent / f".{digest}.{os.getpid()}.{threading.get_ident()}"
        remove_folder(part)
        part.mkdir(parents=True)
        write_protected(self.repo, commit, units, part, entries)
        for folder, _dirs, _files in os.walk(part, topdown=False):
            os.chmod(folder, 0o555)
        try:
            part.replace(store)
        except OSError:  # another job wrote the same bytes first
            subprocess.run(["chmod", "-R", "u+w", "--", str(part)], capture_output=True, check=False)
            remove_folder(part)
        return str(store)

    # --- content-named worktrees ---------------------------------------------------------------------

    def acquire(self, commit: str, variant: str | None = None) -> Path:
        """A worktree holding `commit`'s content, kept from earlier use when it has been built; held for every
        process of this cache until `release`.

        A `variant` (a platform that builds with another compiler) gets worktrees of its own.
        """
        tree = gitops.tree_of(self.repo, commit)
        path = self._path(tree, variant)
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock, tree_lock(path):
            if path.exists() and not (path / BUILT_MARKER).exists() and self._users.get(path, 0) == 0 \
                    and not held(path):
                # an unfinished build (a crash, a cancel): its objects cannot be trusted
                gitops.worktree_remove(self.repo, path)
            if not path.exists():
                self._add(path, commit)
            self._use(path)
        os.utime(path)  # recency for the LRU sweep
        return path

    def _path(self, tree: str, variant: str | None) -> Path:
        return self.root / (f"tree-{tree[:16]}" + (f"-{variant}" if variant else ""))

    def _add(self, path: Path, commit: str) -> None:
        """Check `commit` out at `path`; what a checkout that failed (a full disk) wrote is removed."""
        try:
            gitops.worktree_add(self.repo, path, commit)
        except BaseException:
            remove_folder(path)
            raise

    def _use(self, path: Path) -> None:
        """One more job of ours uses `path`; the first holds it for every process (a shared flock on its folder,
        taken under its tree lock, so that no removal can come between). Lock held."""
        self._users[path] = self._users.get(path, 0) + 1
        if path not in self._holds:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fcntl.flock(fd, fcntl.LOCK_SH)
            self._holds[path] = fd

    def built(self, tree: str, variant: str | None = None) -> Path | None:
        """The finished build of git tree `tree` kept here, if there is one."""
        path = self._path(tree, variant)
        return path if (path / BUILT_MARKER).exists() else None

    def discard(self, path: Path) -> None:
        """Never reuse the build at `path`: removed now, or by its next user when a job still has it."""
        with self._lock:
            if self._users.get(path, 0) or not self._remove_unheld(path):
                (path / BUILT_MARKER).unlink(missing_ok=True)

    def release(self, path: Path) -> None:
        """Done with `path`; drop it if its build never finished (a failed build's objects and whatever it
        wrote only take disk space), and the least recently used builds nobody uses beyond the limit."""
        with self._lock:
            self._users[path] = max(0, self._users.get(path, 0) - 1)
            if self._users[path]:
                return
            with contextlib.suppress(KeyError):
                os.close(self._holds.pop(path))
            if path.parent == self.root and path.name.startswith("tree-") and not (path / BUILT_MARKER).exists():
                self._remove_unheld(path)
            idle = [p for p in _by_age([self.root]) if p.name.startswith("tree-") and not self._users.get(p, 0)]
            for stale in idle[:max(0, len(idle) - self.keep)]:
                self._remove_unheld(stale)

    def sweep_unbuilt(self) -> None:
        """After a restart: remove worktrees whose build never finished."""
        with self._lock:
            for path in _by_age([self.root]):
                if path.name.startswith("tree-") and not (path / BUILT_MARKER).exists():
                    self._remove_unheld(path)

    # --- incremental slots ---------------------------------------------------------------------------

    def slot_path(self, index: int) -> Path:
        return self.root / f"slot-{index}"

    def slot(self, index: int, commit: str) -> Path:
        """The persistent candidate worktree of executor slot `index`, moved to `commit`; held as `acquire`
        holds a tree, until `release`.

        Only files that differ from what the slot held are rewritten, and those are stamped newer
        than anything built, so the build system's own dependency tracking rebuilds exactly them.
        """
        path = self.slot_path(index)
        self.root.mkdir(parents=True, exist_ok=True)
        with tree_lock(path):
            if not path.exists():
                self._add(path, commit)
            else:
                slot_repo = gitops.repo_at(path)
                before = gitops.head_commit(slot_repo)
                changed = gitops.changed_paths(self.repo, before, commit) if before != commit else []
                gitops.checkout_detached(slot_repo, commit)
                now = time.time() + 1.0
                for rel in changed:
                    target = path / rel
                    if target.exists():
                        os.utime(target, (now, now))
            with self._lock:
                self._use(path)
        os.utime(path)
        return path

    # --- removal -------------------------------------------------------------------------------------

    def _remove_unheld(self, path: Path) -> bool:
        """Remove the tree at `path` (of this session or another's) unless a job of any process holds it or is
        taking it; whether it was removed. Lock held."""
        with tree_lock(path, wait=False) as mine:
            return bool(mine) and not self._users.get(path, 0) and path.is_dir() and not held(path) \
                and self._remove(path)

    def _remove(self, path: Path) -> bool:
        """Remove a worktree whatever its build left in it: folders nested deeper than a path may be long
        (`git worktree remove` fails with "File name too long") or than Python recurses (shutil.rmtree),
        folders without write permission. A removal that still fails is logged, never raised: it must not
        turn the experiment that used the tree into a failure after its result. Another session's tree leaves
        a registration in its repository that git prunes (and `git worktree add --force` overrides). Whether
        the tree is gone."""
        gone = True
        if os.path.lexists(path):
            gone = remove_folder(path)
            if path.parent == self.root:
                try:
                    gitops.worktree_prune(self.repo)
                except gitops.GitError as exc:
                    log.warning("git worktree prune failed after removing %s: %s", path, exc)
        if gone:
            for suffix in (".lock", ".build.lock"):
                Path(str(path) + suffix).unlink(missing_ok=True)
            self._users.pop(path, None)
        return gone


def remove_folder(path: Path) -> bool:
    """Remove `path` and everything under it, of any depth, iteratively (GNU rm walks with descriptors, not
    paths); folders a build made unwritable are opened up first. Whether `path` is gone."""
    for attempt in range(2):
        if attempt:
            subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", "--", str(path)], capture_output=True, check=False)
        if not os.path.lexists(path):
            return True
    log.warning("could not remove %s", path)
    return False

