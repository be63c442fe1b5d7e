"""The trees each side of a pair is measured in: fresh copies of the two built trees made at the start of the
measuring, so that nothing a program can read of its own tree or of the one it is shown (AUTORESEARCH_BASELINE_TREE)
tells a baseline from a candidate, and nothing a side does to what it is shown reaches the other side. Standard
library only (the worker runtime).

Each side gets two copies, made one right after the other: its own tree, then its private copy of the other side's
tree. Every file's access and modification times are set alike; what cannot be set (the change and birth times, the
inode numbers) follows the order of making, which is the same for both sides (its own tree first, then what it is
shown), and so are their names (`tree`, `shown`, under a random folder of the side's): a program that compares its
tree's age, order or name with the other's sees the same on either side, and the order in which the two sides'
copies are made is a coin. A reused baseline build is far older than a fresh candidate's; a side that
drops the cached pages of what it is shown (posix_fadvise works on a read-only descriptor) drops its own copy's.

The built trees stay as they are (a build is reused by content); the copies live beside them, one folder per job,
removed when the job ends (`remove_all`, which the runner calls; the local executor sweeps what a killed one left).
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "measure-"
# every file and folder of a measured tree has these access and modification times (2001-09-09): a build's times
# would tell a tree built long ago (a reused baseline) from one built a moment ago
FIXED_TIME = 1_000_000_000
_made: list[Path] = []


@dataclass
class Measured:
    """The tree each side's runs use (`own`) and the tree each side is shown (`view`: its AUTORESEARCH_BASELINE_TREE),
    by role."""

    own: dict[str, str] = field(default_factory=dict)
    view: dict[str, str] = field(default_factory=dict)
    folder: Path | None = None


def copy_tree(source: str | os.PathLike[str], dest: Path) -> None:
    """`source` copied to `dest` (links as links, its git link left out), every entry's times FIXED_TIME."""
    done = subprocess.run(["cp", "-a", "--reflink=auto", "--no-target-directory", str(source), str(dest)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(source, dest, symlinks=True)
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        (dest / ".git").unlink()  # a worktree's link to the repository's git folder: no part of what is measured
    for root, dirs, files in os.walk(dest, topdown=False):
        for name in [*files, *dirs]:
            with contextlib.suppress(OSError):
                os.utime(os.path.join(root, name), (FIXED_TIME, FIXED_TIME), follow_symlinks=False)
    os.utime(dest, (FIXED_TIME, FIXED_TIME))


def make(experiment_id: str, trees: dict[str, str]) -> Measured:
    """For each side (`trees`: role -> built tree), its own copy and then its copy of the other side's tree, the two
    sides in a random order."""
    roles = sorted(trees)
    folder = Path(trees[roles[0]]).parent / f"{PREFIX}{experiment_id}-{secrets.token_hex(4)}"
    folder.mkdir()
    _made.append(folder)
    random.SystemRandom().shuffle(roles)
    out = Measured(folder=folder)
    for role in roles:
        other = next(r for r in roles if r != role)
        side = folder / secrets.token_hex(8)  # the side's two trees under one random name, named alike on either side
        side.mkdir()
        for kind, source in (("own", trees[role]), ("view", trees[other])):
            dest = side / ("tree" if kind == "own" else "shown")
            copy_tree(source, dest)
            (out.own if kind == "own" else out.view)[role] = str(dest)
    return out


def remove_all() -> None:
    """Remove every copy this process made (the job has ended)."""
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)


def sweep(folder: Path, experiment_id: str) -> None:
    """Remove what a runner that was killed left of `experiment_id`'s copies in `folder`."""
    for left in folder.glob(f"{PREFIX}{experiment_id}-*"):
        shutil.rmtree(left, ignore_errors=True)
