"""What every command of a job runs with, prepared once per phase and tree: its environment (nothing in it
tells a baseline from a candidate, nor a bench from a check) and its confinement. Standard library only
(shipped beside the runner)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import jobfile

from . import procs, sandbox

BASELINE_ENV = "AUTORESEARCH_BASELINE_TREE"  # the checks' baseline tree (run_env)


def run_env(job: jobfile.Job | None, tree: str | os.PathLike[str], phase: str = "build",
            shown: str | None = None) -> dict[str, str]:
    """The one environment of a job's `phase` commands (build, bench, checks) in `tree`: nothing in it tells a
    baseline from a candidate, nor a bench from a check. The compiler cache's variables, the job's `env` (the
    platform's, the recipe's model), its threads and, for the checks and the bench, the tree to compare with
    (`BASELINE_ENV`, sandbox.compared_tree): the checks compare with the baseline's, and each side's bench sees
    the other side's, so a program that is right only when the variable is set is right in its bench too."""
    env = {k: v for k, v in os.environ.items() if k not in ("AUTORESEARCH_ROLE", "AUTORESEARCH_RUN", BASELINE_ENV)}
    env.update(compiler_cache_env(str(tree)))
    env.update(job.env if job is not None else {})
    env["AUTORESEARCH_THREADS"] = str((job.threads if job is not None else None) or os.cpu_count() or 1)
    other = shown or (sandbox.compared_tree(job, str(tree), phase) if job is not None else None)
    if other is not None:
        env[BASELINE_ENV] = other
    return env


@dataclass(frozen=True)
class Prepared:
    """The commands of one phase of a job in one tree, prepared once for all their runs: their environment, and
    their confinement with bubblewrap's command line (what must be fresh in each run, sandbox.command makes). A
    bench turn then holds the machine's lock only to run them."""

    tree: str
    env: dict[str, str]
    launch: sandbox.Launch

    @classmethod
    def of(cls, job: jobfile.Job, tree: str, phase: str, shown: str | None = None) -> Prepared:
        """`shown`: the tree the commands are shown (AUTORESEARCH_BASELINE_TREE) where it is not the job's other tree
        (a pair measured in copies: measuretrees.py)."""
        env = run_env(job, tree, phase, shown)
        return cls(str(tree), env, sandbox.launch(sandbox.for_job(job, tree, phase, shown), env))

    def run(self, argv: list[str], timeout_s: float, log: Any) -> procs.CommandResult:
        return procs.run_command(argv, self.tree, timeout_s, env=self.env, log=log, confine=self.launch)

    def forget(self) -> int:
        """Drop the page cache of this tree and of the tree its commands are shown beside (`BASELINE_ENV`), so a
        run starts as a fresh one would: no page of either is resident (forget_pages)."""
        return forget_pages(self.tree, *([self.env[BASELINE_ENV]] if BASELINE_ENV in self.env else []))


def settle() -> None:
    """Write back what a build wrote (os.sync), so that forget_pages can drop every page of a built tree: the
    kernel keeps a page it has not written back."""
    os.sync()


def forget_pages(*trees: str) -> int:
    """Drop the cached pages of every regular file of `trees` (posix_fadvise DONTNEED; clean pages only, which
    after `settle` are all of a built tree's pages that no running process maps). Which pages of a file are
    resident (mincore, or the time a read takes) is state the kernel keeps between runs that no namespace
    separates: a read-only run could read it to tell its first run from a later one, or the checks from the
    bench that follows them. Dropped before each run, it tells nothing. The number of files, or 0 where the
    system has no posix_fadvise."""
    if not hasattr(os, "posix_fadvise"):
        return 0
    files = 0
    for tree in trees:
        for root, _dirs, names in os.walk(tree):
            for name in names:
                try:
                    fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
                except OSError:
                    continue
                try:
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                        files += 1
                except OSError:
                    pass
                finally:
                    os.close(fd)
    return files


def compiler_cache_env(tree: str) -> dict[str, str]:
    """Settings that let builds in worktrees at different paths share one compiler cache.

    CCACHE_BASEDIR makes paths inside the tree relative in the cache key and CCACHE_NOHASHDIR
    leaves the working directory out of it, so the same file in another worktree is a hit; the
    CMake launcher variables are read by CMake >= 3.17 when a build directory is configured, and
    AUTORESEARCH_CCACHE lets a Makefile say `CC="$AUTORESEARCH_CCACHE cc"`. Empty without a cache.
    """
    import shutil

    tool = shutil.which("ccache") or shutil.which("sccache")
    if tool is None:
        return {}
    env = {"AUTORESEARCH_CCACHE": tool}
    for lang in ("C", "CXX", "CUDA"):
        env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] = os.environ.get(f"CMAKE_{lang}_COMPILER_LAUNCHER", tool)
    if Path(tool).name == "ccache":
        env.update({"CCACHE_BASEDIR": str(Path(tree).resolve()), "CCACHE_NOHASHDIR": "1"})
    return env
