"""Noise of the measures beside a noisy neighbour: the bundled example (always) and the llama.cpp recipe
(`--llama`), each session run quiet and beside a neighbour of our own, before (each sample one bench process,
the metric as the benchmark prints it) and after (each sample the median of `--processes` processes, with the
harness's outside CPU and wall time of every run beside it).

The neighbour is one extra process that takes a core in bursts of memory-bound work (copies of a 256 MB
buffer for 0.3-1.5 s, then 0.2-1.0 s idle), as another tenant of a shared VM does.

Per experiment it prints the verdict, the pairs it took to decide, its wall time and, per metric, the per-pair
spread (the noise the pair differences show, %), with the load average (`uptime`) when it ended: this
machine is shared, so "quiet" only means no neighbour of ours.

    python benchmarks/bench_noise.py [--pairs auto] [--processes 3] [--llama] [--conditions quiet,neighbour]
                                     [--ways before,after,turns]

`--ways`: which measures to run: `before` and `after` (above, pairs one run after the other) and `turns` (one
process a sample, both runs of a pair at once in turns of the CPU, judged on CPU time: config pairing "turns";
the llama.cpp recipe only, as the example's benchmark prints no CPU-time forms).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from autoresearch_mcp import recipes, resources
from autoresearch_mcp.app import build_server
from autoresearch_mcp.store.config import config_path

EXAMPLE = resources.example_dir() / "normsoft"
SPREAD_OF = ("rows_per_s", "ms_per_row", "tg_tps", "pp_tps", "harness.cpu_s", "harness.wall_s")


def neighbour(stop: Any, seed: int = 7) -> None:
    """Bursts of memory-bound work on one core until `stop` is set."""
    rng = random.Random(seed)
    src = bytearray(256 << 20)
    dst = bytearray(256 << 20)
    while not stop.is_set():
        end = time.monotonic() + rng.uniform(0.3, 1.5)
        while time.monotonic() < end:
            dst[:] = src
        time.sleep(rng.uniform(0.2, 1.0))


@contextlib.contextmanager
def beside(condition: str) -> Iterator[None]:
    """Our memory-bound neighbour running (condition "neighbour"), or nothing ("quiet"), for the block."""
    stop = multiprocessing.Event()
    other = multiprocessing.Process(target=neighbour, args=(stop,), daemon=True) if condition == "neighbour" else None
    if other is not None:
        other.start()
    try:
        yield
    finally:
        stop_neighbour(stop, other)


def stop_neighbour(stop: Any, other: Any) -> None:
    """Stop the neighbour process (if one was started), killing it when it does not end within 5 s."""
    if other is None:
        return
    stop.set()
    other.join(5)
    if other.is_alive():
        other.kill()


def load() -> str:
    return os.getloadavg().__repr__()


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args], cwd=repo,
                   check=True, capture_output=True)


def file_patch(repo: Path, rel: str, old: str, new: str) -> str:
    before = (repo / rel).read_text()
    assert old in before, f"{old!r} not in {rel}"
    after = before.replace(old, new, 1)
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}", f"b/{rel}"))


def example_session(root: Path) -> dict[str, Any]:
    repo = root / "normsoft"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("normsoft", "patches"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "normsoft")
    patches = EXAMPLE / "patches"
    return {"repo": repo, "start": {"metric": "rows_per_s", "direction": "higher"}, "config": {},
            "experiments": [
                ("fused rms_norm+mul (a real win)", {"patch": (patches / "fuse-rms-norm-mul.patch").read_text()}),
                ("comment only (a control)", {"patch": (patches / "comment-only.patch").read_text()}),
            ]}


def llama_session(root: Path) -> dict[str, Any]:
    from bench_rehearsal import RMS_ONE_PASS, RMS_SIG, RMS_TWO_PASSES, edit, setup_repo  # 0.3.19's own text

    repo, model = setup_repo(root)
    ops = "ggml/src/ggml-cpu/ops.cpp"
    text = (repo / ops).read_text()
    sig = "static void ggml_compute_forward_rms_norm_back_f32("
    start = text.index(sig)
    end = text.index("\n}\n", start) + 3
    moved = text[:start] + text[end:].lstrip("\n") + "\n" + text[start:end]
    move = "".join(difflib.unified_diff(text.splitlines(True), moved.splitlines(True), f"a/{ops}", f"b/{ops}"))
    return {"repo": repo, "start": {"metric": "tg_tps", "direction": "higher", "recipe": "llama.cpp",
                                    "model": str(model)},
            "config": {"threads": 1},
            "experiments": [
                ("rms_norm in one pass (a real win)",
                 {"patch": edit(repo, [(ops, RMS_TWO_PASSES, RMS_ONE_PASS, RMS_SIG)]), "focus": ["RMS_NORM"]}),
                ("a code move (a control)", {"patch": move, "focus": ["RMS_NORM"]}),
            ]}


async def call(c: Client, name: str, **args: Any) -> dict[str, Any]:
    res = await c.call_tool(name, args)
    if res.is_error:
        raise RuntimeError(f"{name}: {' '.join(getattr(x, 'text', '') for x in res.content)}")
    data: dict[str, Any] = res.structured_content or {}
    return data


async def run_session(setup: dict[str, Any], processes: int, pairs: str | int, tag: str,
                      pairing: str = "sequential") -> list[dict[str, Any]]:
    repo = setup["repo"]
    rows = []
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), tag=tag, **setup["start"])
        config = json.loads(config_path(repo).read_text())
        config.update(setup["config"], processes_per_sample=processes, pairing=pairing)
        config_path(repo).write_text(json.dumps(config))
        await call(c, "start_session", repo=str(repo), tag=tag, **setup["start"])
        for title, args in setup["experiments"]:
            t0 = time.monotonic()
            exp = await call(c, "launch_experiment", title=title, source="patch", repeats=pairs, **args)
            while True:
                res = await call(c, "fetch_sky_logs", experiment_id=exp["experiment_id"], tail_lines=0, wait_s=30)
                if res["status"] in ("done", "failed", "checks_failed", "cancelled", "lost"):
                    break
            spent = time.monotonic() - t0
            # everything, the harness's own measures among it (a plain answer puts them in one line)
            res = await call(c, "get_experiment", experiment_id=exp["experiment_id"], tail_lines=0, samples=True)
            metrics = res.get("metrics") or {}
            lead = next((n for n in metrics if n.startswith("focus.")), setup["start"]["metric"])
            names = [lead, *(n for n in SPREAD_OF if n in metrics and n != lead)]
            rows.append({"experiment": title, "status": res["status"], "verdict": res.get("verdict"),
                         "pairs": metrics.get(lead, {}).get("n_pairs"), "wall_s": round(spent, 1),
                         "delta_pct": {n: metrics[n].get("delta_pct") for n in names},
                         "spread_pct": {n: metrics[n].get("noise_pct") for n in names},
                         "warnings": res.get("warnings"), "note": metrics.get(lead, {}).get("note"),
                         "load": load()})
            # the next experiment starts from the same head: nothing is committed here
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="auto", help="pairs per experiment, or auto (pairs to a decision)")
    ap.add_argument("--processes", type=int, default=3, help="processes per sample of the 'after' measure")
    ap.add_argument("--llama", action="store_true", help="also the llama.cpp recipe (builds llama.cpp 0.3.19)")
    ap.add_argument("--conditions", default="quiet,neighbour")
    ap.add_argument("--iters", default="6", help="NORMSOFT_ITERS of the example's benchmark")
    ap.add_argument("--ways", default="before,after", help="before, after and turns (llama.cpp only)")
    args = ap.parse_args()
    pairs: str | int = args.pairs if args.pairs == "auto" else int(args.pairs)
    os.environ["NORMSOFT_ITERS"] = args.iters
    recipes.get("llama.cpp")  # the recipe exists in this tree
    kinds = [("example", example_session)] + ([("llama.cpp", llama_session)] if args.llama else [])
    print(f"bench_noise: pairs={pairs} processes={args.processes} conditions={args.conditions} load={load()}",
          flush=True)
    for kind, make in kinds:
        for condition in args.conditions.split(","):
            ways = {"before": ("before: 1 process a sample", 1, "sequential"),
                    "after": (f"after: median of {args.processes}", args.processes, "sequential"),
                    "turns": ("turns: 1 process a sample, in turns", 1, "turns")}
            for label, k, pairing in (ways[w] for w in args.ways.split(",")):
                if pairing == "turns" and kind != "llama.cpp":
                    continue
                with tempfile.TemporaryDirectory(prefix="bench-noise-") as tmp:
                    root = Path(tmp)
                    os.environ["AUTORESEARCH_CACHE_DIR"] = str(root / "cache")
                    setup = make(root)
                    with beside(condition):
                        rows = anyio.run(run_session, setup, k, pairs, f"noise{k}", pairing)
                for row in rows:
                    spread = ", ".join(f"{n} {v}" for n, v in row["spread_pct"].items())
                    delta = ", ".join(f"{n} {v}" for n, v in row["delta_pct"].items())
                    print(f"{kind} | {condition} | {label} | {row['experiment']}: {row['verdict']} "
                          f"({row['status']}) in {row['pairs']} pairs, {row['wall_s']} s | spread % {spread} | "
                          f"change % {delta} | load {row['load']}", flush=True)
                    if row["note"] or row["warnings"]:
                        print(f"    note: {row['note']} warnings: {row['warnings']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
