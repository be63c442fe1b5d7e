"""Worktrees outside the user's repository, in the cache directory.

A worktree is named by the git tree it holds, not by the experiment: the same content is the same
build, so a baseline is built once for every experiment on its base, a candidate measured again
reuses its build, and a committed winner's build is the next baseline's. Unused builds are kept in
least-recently-used order up to a limit. In incremental mode each executor slot also keeps one
persistent candidate worktree at a fixed path that moves from candidate to candidate.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

from filelock import FileLock

from autoresearch_mcp.core import gitops, sandbox
from autoresearch_mcp.core.runner import BUILT_MARKER


def repo_key(repo: gitops.Repo) -> str:
    top = Path(repo.working_dir).resolve()
    return f"{top.name}-{hashlib.sha1(str(top).encode()).hexdigest()[:10]}"


class Worktrees:
    def __init__(self, repo: gitops.Repo, cache_dir: Path, keep: int = 4) -> None:
        self.repo = repo
        self.root = cache_dir / "worktrees" / repo_key(repo)
        self.keep = keep
        self._lock = threading.Lock()
        self._users: dict[Path, int] = {}

    def machine_lock(self) -> Path:
        """The lock file that keeps benchmarks of this machine from overlapping anything of ours."""
        return self.root.parent / "machine.lock"

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
        """Done with `path`; drop the least recently used builds nobody uses beyond the limit."""
        with self._lock:
            self._users[path] = max(0, self._users.get(path, 0) - 1)
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
        if path.exists():
            gitops.worktree_remove(self.repo, path)
        for suffix in (".lock", ".build.lock"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        self._users.pop(path, None)

