"""How long find_passes takes on ggml-cpu's ops.cpp (goal: well under 5 s on 2 cores).

Run: .venv/bin/python benchmarks/bench_passes.py
The file is llama.cpp's ggml-cpu/ops.cpp (about 11,000 lines, 218 functions) as vendored in the
llama-cpp-python 0.3.19 sdist on PyPI; the first run downloads it once with pip and caches the
extracted ggml folder (see tests/realtree.py). Each run parses the file with tree-sitter and scans
every function; the second figure scans only the functions a profile would name, the third the
same file in a current ggml (llama-cpp-python 0.3.36: C++ templates, `if constexpr`, lambdas), the
fourth the whole ggml/src folder once. Helpers called from another file (vec.h, vec.cpp, simd-gemm.h) are
followed by parsing the files the scanned one includes, so their parse is part of each figure. Last, which of
the five multi-pass functions of issue 27 a call with the default limit (20 findings) shows.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from autoresearch_mcp.analysis.passes import find_passes, source_files
from realtree import CURRENT, UNFUSED_RMS_NORM, llama_cpp_tree

GOAL_S = 5.0
RUNS = 5
HOT = {"ggml_compute_forward_rms_norm_f32", "ggml_compute_forward_soft_max_f32", "ggml_compute_forward_norm_f32"}
MULTI_PASS = {*HOT, "ggml_compute_forward_flash_attn_ext_f16_one_chunk", "ggml_compute_forward_flash_attn_ext_tiled"}


def timed(files: list[Path], functions: set[str] | None, runs: int) -> tuple[list[float], list[float], int, int]:
    """Wall and CPU seconds of each run (CPU time says more than wall time on a shared machine)."""
    walls, cpus = [], []
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        result = find_passes(files, functions, limit=1000)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return walls, cpus, result.total_findings, result.functions_scanned


def main() -> None:
    src = llama_cpp_tree(UNFUSED_RMS_NORM) / "ggml" / "src"
    ops = src / "ggml-cpu" / "ops.cpp"
    lines = ops.read_text(errors="replace").count("\n")
    print(f"file: {ops} ({lines:,} lines), llama-cpp-python {UNFUSED_RMS_NORM}")
    print(f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    current = llama_cpp_tree(CURRENT) / "ggml" / "src" / "ggml-cpu" / "ops.cpp"
    everything = source_files([src])
    cases = (("ops.cpp, every function", [ops], None, RUNS), ("ops.cpp, 3 named functions", [ops], HOT, RUNS),
             (f"ops.cpp of {CURRENT} ({current.read_text(errors='replace').count(chr(10)):,} lines), every function",
              [current], None, RUNS),
             (f"all of ggml/src ({len(everything)} files)", everything, None, 1))
    for label, files, functions, runs in cases:
        walls, cpus, findings, scanned = timed(files, functions, runs)
        median = statistics.median(walls)
        verdict = "" if len(files) > 1 else " (ok)" if median < GOAL_S else f" (OVER the {GOAL_S:g} s goal)"
        print(f"{label}: wall best {min(walls):.2f} s, median {median:.2f} s{verdict}; "
              f"CPU median {statistics.median(cpus):.2f} s; {scanned} functions, {findings} findings")
    for path in (ops, current):
        shown = {f.function for f in find_passes([path]).findings} & MULTI_PASS
        print(f"default answer on {path.parent.parent.parent.parent.parent.name}: {len(shown)} of the "
              f"{len(MULTI_PASS)} multi-pass functions ({', '.join(sorted(MULTI_PASS - shown)) or 'none missing'})")


if __name__ == "__main__":
    main()
