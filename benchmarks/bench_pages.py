"""What dropping a tree's cached pages before each run costs (issue 40: the page cache tells a run nothing of an
earlier one): `jobenv.forget_pages` on a llama.cpp tree (as llama-cpp-python vendors it; the test cache's copy),
and what it does to a run that reads its tree: `cat` of every file, cached against just dropped.

    python benchmarks/bench_pages.py [--tree DIR] [--rounds 10]

Prints the files, the median and worst time of a drop, and of a full read after a drop and with the pages cached,
with the load average (`os.getloadavg`): this machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from autoresearch_mcp.worker import jobenv


def read_all(tree: Path) -> int:
    size = 0
    for root, _dirs, names in os.walk(tree):
        for name in names:
            try:
                with open(os.path.join(root, name), "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        size += len(chunk)
            except OSError:
                continue
    return size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="a tree to drop (default: llama.cpp 0.3.19 from tests/realtree.py)")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    if args.tree is None:
        import realtree

        args.tree = realtree.llama_cpp_tree(realtree.UNFUSED_RMS_NORM)
    tree = str(args.tree)
    jobenv.settle()
    drops, cold, warm = [], [], []
    files = 0
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        files = jobenv.forget_pages(tree)
        drops.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        size = read_all(args.tree)
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        read_all(args.tree)
        warm.append(time.perf_counter() - t0)
    print(json.dumps({
        "tree": tree, "files": files, "bytes": size,
        "drop_ms": {"median": round(1e3 * statistics.median(drops), 1), "max": round(1e3 * max(drops), 1)},
        "read_after_drop_ms": round(1e3 * statistics.median(cold), 1),
        "read_cached_ms": round(1e3 * statistics.median(warm), 1),
        "load": [round(x, 2) for x in os.getloadavg()]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
