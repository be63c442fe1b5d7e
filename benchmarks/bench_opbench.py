"""Noise and time per pair of the llama.cpp recipe's op micro-benchmark (autoresearch.opbench.cpp),
on the rehearsal's kind of tree and model (llama.cpp 0.3.19, TinyLlama's widths, 4 layers, Q4_0):

- A/A: the baseline build against itself, interleaved pairs, each side first in half of them: the
  per-run noise of each focus chain and of its controls;
- A/B: the baseline against a real candidate, rms_norm in one pass (0.3.19's ggml-cpu copies each
  row, then scales it in a second pass): the change per metric, which should show on RMS_NORM and
  RMS_NORM+MUL (this tree does not fuse the chain: it runs the same rms_norm), and not on SOFT_MAX,
  FLASH_ATTN_EXT or the controls;
- the time a pair costs (two op-benchmark runs), and one `autoresearch.sh bench` with and without a
  focus;
- the end-to-end metrics' noise at 32, 128 and 256 generated tokens with 1 thread, and at 128 with 2.

Both trees are built the way the harness builds them (builds.build_tree: the compiler cache shared
across trees). The figures go to stdout.

    python benchmarks/bench_opbench.py [--version 0.3.19] [--pairs 10] [--threads 1] [--runs 6]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import realtree
import tinymodel
from autoresearch_mcp import recipes
from autoresearch_mcp.worker import builds

FOCUSES = ["RMS_NORM", "RMS_NORM,MUL", "SOFT_MAX", "FLASH_ATTN_EXT"]
OPS = "ggml/src/ggml-cpu/ops.cpp"
# 0.3.19's rms_norm: memcpy(y, x), then ggml_vec_scale_f32(y, scale); one pass writes x * scale
TWO_PASSES = re.compile(r"memcpy\(y, x, ne00 \* sizeof\(float\)\);\n(?:\s*//.*\n)*(?P<body>(?:.*\n)*?)"
                        r"(?P<indent>\s*)ggml_vec_scale_f32\(ne00, y, scale\);")
METRIC = re.compile(r"^METRIC (\S+)=(\S+)$", re.M)


def one_pass(text: str) -> str:
    found = TWO_PASSES.search(text)
    if found is None:
        raise SystemExit(f"{OPS}: no memcpy-then-scale rms_norm in this tree")
    indent = found.group("indent").lstrip("\n")
    loop = (f"{indent}for (int64_t i00 = 0; i00 < ne00; i00++) {{\n{indent}    y[i00] = x[i00]*scale;\n"
            f"{indent}}}")
    return text[:found.start()] + found.group("body") + loop + text[found.end():]


def prepared(source: Path, dest: Path, change: bool) -> Path:
    shutil.copytree(source, dest)
    recipes.write(recipes.get("llama.cpp"), dest)
    if change:
        ops = dest / OPS
        ops.write_text(one_pass(ops.read_text()))
    log = dest.parent / f"{dest.name}-build.log"
    with open(log, "w") as fh:
        t0 = time.monotonic()
        built = builds.build_tree(str(dest), 3600.0, fh)
    if not built.ok:
        raise SystemExit(f"build of {dest} failed; see {log}")
    print(f"built {dest.name}: {time.monotonic() - t0:.0f} s ({built.cache})", flush=True)
    return dest


def opbench(tree: Path, model: Path, focus: str, threads: int) -> tuple[dict[str, float], float]:
    t0 = time.monotonic()
    done = subprocess.run([str(tree / "build-autoresearch/bin/autoresearch-opbench"), "--model", str(model),
                           "--focus", focus, "--threads", str(threads)], capture_output=True, text=True, check=True)
    return {k: float(v) for k, v in METRIC.findall(done.stdout)}, time.monotonic() - t0


def pairs(a: Path, b: Path, model: Path, focus: str, n: int, threads: int) -> tuple[dict[str, list[float]], float]:
    """Per metric, log(b / a) of each pair (a may be b: two runs of the same build); and the mean wall
    time of a pair."""
    logs: dict[str, list[float]] = {}
    spent = 0.0
    for i in range(n):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        (one, took_one), (two, took_two) = (opbench(t, model, focus, threads) for t in (first, second))
        spent += took_one + took_two
        base, cand = (one, two) if first is a else (two, one)
        for name in base:
            logs.setdefault(name, []).append(math.log(cand[name] / base[name]))
    return logs, spent / n


def summary(logs: list[float]) -> str:
    per_run = statistics.stdev(logs) / math.sqrt(2) * 100
    change = (math.exp(statistics.median(logs)) - 1) * 100
    lo, hi = ((math.exp(x) - 1) * 100 for x in (min(logs), max(logs)))
    return f"median {change:+.1f}% (pairs {lo:+.1f}% to {hi:+.1f}%), per-run noise {per_run:.1f}%"


def bench(tree: Path, model: Path, threads: int, **env: str) -> tuple[dict[str, float], float]:
    """One `autoresearch.sh bench` with the recipe's settings (and `env` over them): metrics, wall time."""
    full = {**os.environ, "AUTORESEARCH_MODEL": str(model), "AUTORESEARCH_THREADS": str(threads),
            "AUTORESEARCH_FOCUS": "", **recipes.get("llama.cpp").settings, **env}
    t0 = time.monotonic()
    done = subprocess.run(["bash", "./autoresearch.sh", "bench"], cwd=tree, env=full, check=True, capture_output=True,
                          text=True)
    return {k: float(v) for k, v in METRIC.findall(done.stdout)}, time.monotonic() - t0


def end_to_end_noise(tree: Path, model: Path, runs: int) -> None:
    """tg_tps and pp_tps by generated tokens and threads, the settings interleaved run by run (the order
    reversed every other round): each setting's coefficient of variation, and its noise as pairs see it
    (log-ratios of its consecutive runs, per run)."""
    settings = [(1, "32"), (1, "128"), (1, "256"), (2, "128")]
    seen: dict[tuple[int, str], dict[str, list[float]]] = {s: {"tg_tps": [], "pp_tps": []} for s in settings}
    took: dict[tuple[int, str], float] = dict.fromkeys(settings, 0.0)
    for i in range(runs):
        for threads, gen in settings[:: 1 if i % 2 == 0 else -1]:
            metrics, spent = bench(tree, model, threads, LLAMA_BENCH_GEN=gen)
            took[(threads, gen)] += spent / runs
            for name, values in seen[(threads, gen)].items():
                values.append(metrics[name])

    def noise(values: list[float]) -> str:
        cv = statistics.stdev(values) / statistics.mean(values) * 100
        d = [math.log(values[i + 1] / values[i]) for i in range(0, len(values) - 1, 2)]
        return f"{statistics.median(values):.1f} (cv {cv:.1f}%, pairs {statistics.stdev(d) / math.sqrt(2) * 100:.1f}%)"

    print(f"\nend to end, {runs} runs of each setting interleaved:")
    for (threads, gen), values in seen.items():
        print(f"  {threads} thread(s), tg{gen}: tg_tps {noise(values['tg_tps'])}, pp_tps {noise(values['pp_tps'])}; "
              f"{took[(threads, gen)]:.1f} s a run")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", default=realtree.UNFUSED_RMS_NORM)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=12, help="end-to-end runs per setting")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-opbench-") as tmp:
        root = Path(tmp)
        source = realtree.llama_cpp_tree(args.version)
        base = prepared(source, root / "base", change=False)
        cand = prepared(source, root / "one-pass", change=True)
        model = tinymodel.write_model(base, root / "rehearsal.gguf", shape="REHEARSAL")
        print(f"tree: llama-cpp-python=={args.version}; model: TinyLlama widths (n_embd 2048, 32 heads, 4 KV heads, "
              f"n_ff 5632), 4 layers, Q4_0; {args.threads} thread(s), {args.pairs} pairs each; "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
        for focus in FOCUSES:
            same, same_s = pairs(base, base, model, focus, args.pairs, args.threads)
            changed, changed_s = pairs(base, cand, model, focus, args.pairs, args.threads)
            print(f"\nfocus {focus}: a pair (two op-benchmark runs) takes {same_s:.2f} s (A/A), "
                  f"{changed_s:.2f} s (A/B)")
            for name in same:
                print(f"  {name:24} A/A {summary(same[name])}")
                print(f"  {'':24} one-pass rms_norm {summary(changed[name])}")
        for focus in ("", "RMS_NORM,MUL"):
            took = statistics.median(bench(base, model, args.threads, AUTORESEARCH_FOCUS=focus)[1] for _ in range(3))
            print(f"\nautoresearch.sh bench{f' with AUTORESEARCH_FOCUS={focus}' if focus else ''}: {took:.2f} s "
                  "(median of 3)")
        end_to_end_noise(base, model, args.runs)
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
