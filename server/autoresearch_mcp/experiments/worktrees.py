"""Worktrees outside the user's repository, in the cache directory: one per base commit (shared by
every experiment on that base, so its build is reused) and one per candidate."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import git
from filelock import FileLock

from autoresearch_mcp.experiments import snapshot


def repo_key(repo: git.Repo) -> str:
    top = Path(repo.working_dir).resolve()
    return f"{top.name}-{hashlib.sha1(str(top).encode()).hexdigest()[:10]}"


class Worktrees:
    def __init__(self, repo: git.Repo, cache_dir: Path) -> None:
        self.repo = repo
        self.root = cache_dir / "worktrees" / repo_key(repo)
        self._lock = threading.Lock()

    def machine_lock(self) -> Path:
        """The lock file that keeps benchmarks of this machine from overlapping anything of ours."""
        return self.root.parent / "machine.lock"

    def baseline(self, commit: str) -> Path:
        return self._ensure(self.root / f"base-{commit[:16]}", commit)

    def candidate(self, experiment_id: str, commit: str) -> Path:
        return self._ensure(self.root / f"exp-{experiment_id}", commit)

    def _ensure(self, path: Path, commit: str) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        # Two servers (or two threads) may want the same base worktree at once.
        with self._lock, FileLock(str(path) + ".lock"):
            if (path / ".git").exists():
                head = self.repo.git.execute(["git", "-C", str(path), "rev-parse", "HEAD"])
                if str(head).strip() == commit:
                    return path
                snapshot.worktree_remove(self.repo, path)
            elif path.exists():
                snapshot.worktree_remove(self.repo, path)
            snapshot.worktree_add(self.repo, path, commit)
        return path

    def remove(self, path: Path) -> None:
        with self._lock:
            if path.exists():
                snapshot.worktree_remove(self.repo, path)
            for suffix in (".lock", ".build.lock"):
                Path(str(path) + suffix).unlink(missing_ok=True)

    def base_paths(self) -> list[Path]:
        return sorted(self.root.glob("base-*/")) if self.root.exists() else []
