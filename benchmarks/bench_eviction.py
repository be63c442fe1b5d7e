"""Evicting old builds on a full disk (issue #51): how long `make_room` takes to evict a few idle trees of a real
build's size, and what it costs a launch when the disk has room (the one check every experiment makes).

    python benchmarks/bench_eviction.py [--trees 4] [--files 3000] [--kib 32]

Each tree is a git worktree of a small repository plus a build of FILES files of KIB KiB each (3,000 x 32 KiB:
about 94 MiB, the order of a CPU build of llama.cpp's library). The disk reads full until one tree is left.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from autoresearch_mcp.git import gitops, worktrees
from autoresearch_mcp.git.worktrees import Worktrees
from autoresearch_mcp.worker.builds import BUILT_MARKER


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=repo, check=True,
                   capture_output=True)


def make_trees(root: Path, trees: int, files: int, kib: int) -> Worktrees:
    """A repository with `trees` commits, each checked out and built (idle, oldest first) in the cache."""
    src = root / "repo"
    (src / "src").mkdir(parents=True)
    for i in range(50):
        (src / "src" / f"f{i}.c").write_text(f"int f{i}(void) {{ return {i}; }}\n")
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "-A")
    git(src, "commit", "-qm", "0")
    wt = Worktrees(gitops.repo_at(src), root / "cache", keep=trees)
    block = os.urandom(kib << 10)
    for t in range(trees):
        if t:
            (src / "v.txt").write_text(f"{t}\n")
            git(src, "add", "-A")
            git(src, "commit", "-qm", str(t))
        path = wt.acquire(gitops.head_commit(wt.repo))
        for i in range(files):
            sub = path / "build" / f"d{i % 50}"
            sub.mkdir(parents=True, exist_ok=True)
            (sub / f"o{i}.o").write_bytes(block)
        (path / BUILT_MARKER).write_text("{}")
        wt.release(path)
        os.utime(path, (1e9 + t, 1e9 + t))
    return wt


def main(trees: int, files: int, kib: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        wt = make_trees(Path(tmp), trees, files, kib)
        os.sync()  # nothing left to write back: the eviction's own cost only
        real = worktrees.free_bytes
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            assert wt.make_room() is None
        room_us = (time.perf_counter() - t0) / n * 1e6

        def full_until_one_left(_place: Path) -> int:
            left = [p for p in wt.root.iterdir() if p.name.startswith("tree-") and p.is_dir()]
            return worktrees.MIN_FREE_BYTES if len(left) <= 1 else 0

        worktrees.free_bytes = full_until_one_left
        try:
            t0 = time.perf_counter()
            why = wt.make_room()
            evict_s = time.perf_counter() - t0
        finally:
            worktrees.free_bytes = real
        left = sorted(p.name for p in wt.root.iterdir() if p.name.startswith("tree-") and p.is_dir())
        assert why is None and len(left) == 1, (why, left)
        size_mib = files * kib / 1024
    print(f"trees: {trees} idle builds of {files} files x {kib} KiB ({size_mib:.0f} MiB each), git worktrees")
    print(f"make_room with room (every launch): {room_us:.1f} us a call (mean of {n})")
    print(f"make_room evicting {trees - 1} trees, least recently used first: {evict_s:.3f} s "
          f"({evict_s / (trees - 1):.3f} s a tree, {size_mib * (trees - 1) / evict_s:.0f} MiB/s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", type=int, default=4)
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--kib", type=int, default=32)
    args = parser.parse_args()
    main(args.trees, args.files, args.kib)
