"""How long diff_backends takes on a real multi-backend tree (goal: 500k lines under 5 s on 2 cores).

Run: /work/venv/bin/python benchmarks/bench_diff_backends.py
The tree is llama.cpp's ggml (about 500k lines in 1,300 source files under 17 backends) as vendored in
the llama-cpp-python sdist on PyPI; the first run downloads it once with pip (about 75 MB) and caches
the extracted ggml folder (see tests/realtree.py). Each run re-reads every file (the OS page cache
is warm after the first), so the figures are end to end: discovery, reading, stripping and indexing
(in 2 worker processes), extraction, gaps.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from autoresearch_mcp.analysis.diff_backends import compare_backends
from realtree import CURRENT, llama_cpp_tree

GOAL_S = 5.0
RUNS = 5


def main() -> None:
    start = time.perf_counter()
    tree = llama_cpp_tree(CURRENT)
    print(f"tree: llama-cpp-python {CURRENT} sdist, {tree} (ready in {time.perf_counter() - start:.1f} s)")
    print(f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    walls = []
    for i in range(RUNS):
        start = time.perf_counter()
        result = compare_backends(str(tree))
        walls.append(time.perf_counter() - start)
        phases = "  ".join(f"{k} {v:.2f}" for k, v in result.timings_s.items())
        print(f"run {i + 1}: {walls[-1]:.2f} s wall  ({phases})")
    best, median = min(walls), statistics.median(walls)
    verdict = "ok" if median < GOAL_S else f"OVER the {GOAL_S:g} s goal"
    print(f"scanned {result.lines_scanned:,} lines in {result.files_scanned:,} files of "
          f"{len(result.backends)} backends")
    print(f"wall: best {best:.2f} s, median {median:.2f} s ({verdict}); "
          f"{result.lines_scanned / median / 1000:,.0f}k lines/s")
    size = len(result.model_dump_json())
    print(f"output: {size:,} characters of JSON (about {size // 4:,} tokens), "
          f"{len(result.gaps)} gaps shown of {result.total_gaps}")
    cut = [note for note in result.notes if note.startswith("cut to fit")]
    print(f"fitted to the answer cap: {cut[0] if cut else 'no, sent whole at full detail'}")
    built = [f"{b.name} <- {', '.join(b.built_from)}" for b in result.backends if b.built_from]
    print(f"built from another backend's sources: {'; '.join(built) or 'none'}")
    for gap in result.gaps[:5]:
        ev = gap.evidence[0]
        print(f"  {gap.kind:6} {gap.item:32} in {','.join(gap.present_in)}  ({ev.file}:{ev.line})")


if __name__ == "__main__":
    main()
