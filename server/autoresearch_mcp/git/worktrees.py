"""Worktrees outside the user's repository, in the cache directory.

A worktree is named by the git tree it holds, not by the experiment: the same content is the same
build, so a baseline is built once for every experiment on its base, a candidate measured again
reuses its build, and a committed winner's build is the next baseline's. Unused builds are kept in
least-recently-used order up to a limit. In incremental mode each executor slot also keeps one
persistent candidate worktree at a fixed path that moves from candidate to candidate.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from filelock import FileLock

from autoresearch_mcp.git import gitops
from autoresearch_mcp.worker import sandbox
from autoresearch_mcp.worker.builds import BUILT_MARKER

log = logging.getLogger(__name__)
# What a launch needs free where the worktrees are: two trees and their builds (a build that fills the disk
# would leave the next experiment's real winner failing for want of space, never judged).
MIN_FREE_BYTES = 2 << 30


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


class Worktrees:
    def __init__(self, repo: gitops.Repo, cache_dir: Path, keep: int = 4) -> None:
        self.repo = repo
        self.root = cache_dir / "worktrees" / repo_key(repo)
        self.cache_dir = cache_dir
        self.keep = keep
        self._lock = threading.Lock()
        self._users: dict[Path, int] = {}

    def machine_lock(self) -> Path:
        """The lock file that keeps benchmarks of this machine from overlapping anything of ours."""
        return machine_lock(self.cache_dir)

    def lacks_space(self) -> str | None:
        """Why no experiment can start here now (too little free disk where the worktrees are), or None."""
        place = self.root if self.root.exists() else next(p for p in self.root.parents if p.exists())
        free = shutil.disk_usage(place).free
        if free >= MIN_FREE_BYTES:
            return None
        return (f"only {free / 2**30:.2f} GiB free in {place}, where the worktrees are; an experiment needs at least "
                f"{MIN_FREE_BYTES / 2**30:.2f} GiB there (two trees and their builds): free some space, or set "
                "AUTORESEARCH_CACHE_DIR to a folder on a larger disk")

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
        """A worktree holding `commit`'s content, kept from earlier use when it has been built.

        A `variant` (a platform that builds with another compiler) gets worktrees of its own.
        """
        tree = gitops.tree_of(self.repo, commit)
        path = self._path(tree, variant)
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock, FileLock(str(path) + ".lock"):
            unused = self._users.get(path, 0) == 0
            if path.exists() and unused and not (path / BUILT_MARKER).exists():
                # an unfinished build (a crash, a cancel): its objects cannot be trusted
                gitops.worktree_remove(self.repo, path)
            if not path.exists():
                gitops.worktree_add(self.repo, path, commit)
            self._users[path] = self._users.get(path, 0) + 1
        os.utime(path)  # recency for the LRU sweep
        return path

    def _path(self, tree: str, variant: str | None) -> Path:
        return self.root / (f"tree-{tree[:16]}" + (f"-{variant}" if variant else ""))

    def built(self, tree: str, variant: str | None = None) -> Path | None:
        """The finished build of git tree `tree` kept here, if there is one."""
        path = self._path(tree, variant)
        return path if (path / BUILT_MARKER).exists() else None

    def discard(self, path: Path) -> None:
        """Never reuse the build at `path`: removed now, or by its next user when a job still has it."""
        with self._lock:
            if self._users.get(path, 0) == 0:
                self._remove(path)
            else:
                (path / BUILT_MARKER).unlink(missing_ok=True)

    def release(self, path: Path) -> None:
        """Done with `path`; drop it if its build never finished (a failed build's objects and whatever it
        wrote only take disk space), and the least recently used builds nobody uses beyond the limit."""
        with self._lock:
            self._users[path] = max(0, self._users.get(path, 0) - 1)
            if self._users[path] == 0 and path.parent == self.root and path.name.startswith("tree-") \
                    and not (path / BUILT_MARKER).exists():
                self._remove(path)
            idle = [p for p in self._trees() if self._users.get(p, 0) == 0]
            idle.sort(key=lambda p: p.stat().st_mtime, reverse=True)
            for stale in idle[self.keep:]:
                self._remove(stale)

    def sweep_unbuilt(self) -> None:
        """After a restart: remove worktrees whose build never finished."""
        with self._lock:
            for path in self._trees():
                if self._users.get(path, 0) == 0 and not (path / BUILT_MARKER).exists():
                    self._remove(path)

    def _trees(self) -> list[Path]:
        return [p for p in self.root.glob("tree-*") if p.is_dir()] if self.root.exists() else []

    # --- incremental slots ---------------------------------------------------------------------------

    def slot(self, index: int, commit: str) -> Path:
        """The persistent candidate worktree of executor slot `index`, moved to `commit`.

        Only files that differ from what the slot held are rewritten, and those are stamped newer
        than anything built, so the build system's own dependency tracking rebuilds exactly them.
        """
        path = self.root / f"slot-{index}"
        with FileLock(str(path) + ".lock"):
            if not path.exists():
                gitops.worktree_add(self.repo, path, commit)
                return path
            slot_repo = gitops.repo_at(path)
            before = gitops.head_commit(slot_repo)
            changed = gitops.changed_paths(self.repo, before, commit) if before != commit else []
            gitops.checkout_detached(slot_repo, commit)
            now = time.time() + 1.0
            for rel in changed:
                target = path / rel
                if target.exists():
                    os.utime(target, (now, now))
        return path

    # --- removal -------------------------------------------------------------------------------------

    def _remove(self, path: Path) -> None:
        """Remove a worktree whatever its build left in it: folders nested deeper than a path may be long
        (`git worktree remove` fails with "File name too long") or than Python recurses (shutil.rmtree),
        folders without write permission. A removal that still fails is logged, never raised: it must not
        turn the experiment that used the tree into a failure after its result."""
        if os.path.lexists(path):
            remove_folder(path)
            try:
                gitops.worktree_prune(self.repo)
            except gitops.GitError as exc:
                log.warning("git worktree prune failed after removing %s: %s", path, exc)
        for suffix in (".lock", ".build.lock"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        self._users.pop(path, None)


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

