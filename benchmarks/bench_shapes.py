"""Benches as people write them, beside a memory-bound neighbour (issues 40 and 44): per-pair spread, pairs and
minutes to a decision for a real 3% and 10% win, sequential against turns, for
- a C program that does fixed work and prints only its wall-clock time (`t_ms`),
- a Python program that does the same (`t_ms`),
- a C program that runs for a fixed time and prints its rate and the work it did (`items_per_s`, `ops`),
- a C program with two threads whose win is better balance (the wall time shorter, the CPU time flat), in turns,
each a fresh session through the real MCP server (local executor).

    python benchmarks/bench_shapes.py [--kinds c,python,fixed-time,balance] [--wins 3,10]
                                      [--pairings sequential,turns] [--conditions neighbour,quiet]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autoresearch_mcp.app import build_server
from bench_noise import beside, load

# Fixed work: 4000 items of COST rounds each; prints its wall-clock time only.
C_WORK = r"""#include <stdio.h>
#include <time.h>
#include "cost.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
volatile unsigned sink;
int main(void) {
    double t0 = now(); unsigned x = 1;
    for (long n = 0; n < 4000; n++) for (int i = 0; i < COST; i++) x = x * 1103515245u + 12345u;
    sink = x;
    printf("METRIC t_ms=%.3f\n", (now() - t0) * 1e3);
    return 0;
}
"""
PY_WORK = """import time
cost = int(open("cost.h").read().split()[-1])
t = time.perf_counter()
x = 1
for i in range(cost * 6):
    x = (x * 1103515245 + 12345) & 0xffffffff
print(f"METRIC t_ms={(time.perf_counter() - t) * 1e3:.3f}")
"""
# Fixed time: runs 0.3 s on its clock; prints its rate and the items it did.
C_TIME = r"""#include <stdio.h>
#include <time.h>
#include "cost.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
volatile unsigned sink;
int main(void) {
    double t0 = now(), dt; long n = 0; unsigned x = 1;
    while ((dt = now() - t0) < 0.3) { for (int k = 0; k < 10; k++) for (int i = 0; i < COST; i++)
        x = x * 1103515245u + 12345u; n += 10; }
    sink = x;
    printf("METRIC items_per_s=%.1f\nMETRIC ops=%ld\n", n / dt, n);
    return 0;
}
"""
# Two threads share fixed work; SPLIT (percent) of it goes to the first: 50 is balanced, the wall time shortest.
C_BALANCE = r"""#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include "cost.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *work(void *arg) { long n = *(long *)arg; unsigned x = 1;
    for (long i = 0; i < n; i++) x = x * 1103515245u + 12345u; return (void *)(long)x; }
int main(void) {
    long total = 600000000L, a = total * SPLIT / 100, b = total - a; pthread_t t;
    double t0 = now();
    pthread_create(&t, 0, work, &a); work(&b); pthread_join(t, 0);
    printf("METRIC t_ms=%.3f\n", (now() - t0) * 1e3);
    return 0;
}
"""
KINDS: dict[str, dict[str, Any]] = {
    "c": {"files": {"bench.c": C_WORK}, "build": "cc -O2 -o bench bench.c", "run": "./bench", "metric": "t_ms",
          "direction": "lower", "cost": 100000},
    "python": {"files": {"bench.py": PY_WORK}, "build": "true", "run": "python3 bench.py", "metric": "t_ms",
               "direction": "lower", "cost": 320000},
    "fixed-time": {"files": {"bench.c": C_TIME}, "build": "cc -O2 -o bench bench.c", "run": "./bench",
                   "metric": "items_per_s", "direction": "higher", "cost": 2000},
    "balance": {"files": {"bench.c": C_BALANCE}, "build": "cc -O2 -pthread -o bench bench.c", "run": "./bench",
                "metric": "t_ms", "direction": "lower", "cost": 0},
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout.strip()


def make_repo(root: Path, kind: str, pairing: str) -> Path:
    k = KINDS[kind]
    repo = root / f"{kind}-{pairing}"
    repo.mkdir()
    for name, text in k["files"].items():
        (repo / name).write_text(text)
    (repo / "cost.h").write_text("#define SPLIT 75\n" if kind == "balance" else f"#define COST {k['cost']}\n")
    (repo / "autoresearch.sh").write_text(f"#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n  build) {k['build']} ;;\n"
                                          f"  bench) {k['run']} ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\ntrue\n")
    (repo / ".gitignore").write_text("bench\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "bench")
    (repo / ".autoresearch").mkdir()
    threads = 2 if kind == "balance" else 1
    (repo / ".autoresearch" / "config.json").write_text(json.dumps({"pairing": pairing, "threads": threads}))
    return repo


def win_patch(repo: Path, kind: str, win_pct: float) -> str:
    """The change that makes the bench `win_pct` faster: less work per item, or (balance) an even split."""
    before = (repo / "cost.h").read_text()
    if kind == "balance":
        after = "#define SPLIT 50\n"  # from 75/25: the wall time of the longer thread drops by a third
    elif win_pct == 0:
        after = before.strip() + "  /* the same work: a no-op */\n"
    else:
        after = f"#define COST {round(KINDS[kind]['cost'] / (1 + win_pct / 100))}\n"
    return f"--- a/cost.h\n+++ b/cost.h\n@@ -1 +1 @@\n-{before.strip()}\n+{after.strip()}\n"


async def call(c: Client, name: str, **args: Any) -> dict[str, Any]:
    res = await c.call_tool(name, args)
    if res.is_error:
        raise RuntimeError(" ".join(getattr(x, "text", "") for x in res.content))
    assert res.structured_content is not None
    out: dict[str, Any] = res.structured_content
    return out


async def one(root: Path, kind: str, pairing: str, win: float) -> dict[str, Any]:
    repo = make_repo(root, kind, pairing)
    k = KINDS[kind]
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(repo), metric=k["metric"], direction=k["direction"],
                             tag="s")
        t0 = time.monotonic()
        exp = await call(c, "launch_experiment", title=f"{win:g}% less work", source="patch", repeats="auto",
                         patch=win_patch(repo, kind, win))
        while (await call(c, "get_experiment", experiment_id=exp["experiment_id"], tail_lines=0,
                          wait_s=30))["status"] not in ("done", "failed", "checks_failed", "cancelled", "lost"):
            pass
        res = await call(c, "get_experiment", experiment_id=exp["experiment_id"], tail_lines=0, samples=True)
    m = res["metrics"].get(k["metric"], {})
    cpu = res["metrics"].get("harness.cpu_s", {})
    return {"kind": kind, "pairing": pairing, "win_pct": win if kind != "balance" else "balance",
            "verdict": res.get("verdict"), "pairs": m.get("n_pairs"), "minutes": round((time.monotonic() - t0) / 60, 2),
            "delta_pct": m.get("delta_pct"), "spread_pct": m.get("noise_pct"), "cpu_delta_pct": cpu.get("delta_pct"),
            "bench_shape": started["settings"].get("bench"), "error": res.get("error"), "note": res.get("note"),
            "load": load()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="c,python,fixed-time,balance")
    ap.add_argument("--wins", default="3,10")
    ap.add_argument("--pairings", default="sequential,turns")
    ap.add_argument("--conditions", default="neighbour")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-shapes-") as tmp:
        for condition in args.conditions.split(","):
            for kind in args.kinds.split(","):
                wins = [0.0] if kind == "balance" else [float(w) for w in args.wins.split(",")]
                pairings = ["turns"] if kind == "balance" else args.pairings.split(",")
                for pairing in pairings:
                    for win in wins:
                        root = Path(tmp) / f"{condition}-{kind}-{pairing}-{win:g}"
                        root.mkdir()
                        with beside(condition):
                            row = {"condition": condition, **anyio.run(one, root, kind, pairing, win)}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
