"""Can two builds share a shared machine's noise? Pairs of llama-bench runs two ways, on the same machine:

- sequential: one build's run, then the other's (the order a coin per pair), as the harness pairs them today;
- alternating: both runs started together and given the CPU in turns of `--slice-ms` (the one not on turn is
  stopped with SIGSTOP), so a neighbour's burst of a second or more falls on both sides of the pair.

A stopped process's wall clock runs on, so the alternating pairs compare the runs' CPU time (user + system, of
the whole process, from wait4), which a stop does not inflate; the sequential pairs give both their CPU time and
llama-bench's own tg_tps and pp_tps. Printed: the spread of each figure's pair log-ratios (sample standard
deviation and MAD x1.4826), the seconds a pair takes, and the load average at the start and the end.

    python benchmarks/bench_duet.py --model DIR/rehearsal.gguf --tree A --tree B [--pairs 20] [--slice-ms 50]

The trees are built the harness's way (`bench_rehearsal.py --keep DIR` leaves them under DIR/cache/worktrees/).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import statistics
import subprocess
import time
from pathlib import Path

from bench_llama_settings import parsed, spread, two_builds


def argv(tree: Path, model: Path, threads: int) -> list[str]:
    return [str(tree / "build-autoresearch/bin/llama-bench"), "-m", str(model), "-ngl", "0", "-t", str(threads),
            "-fa", "1", "-p", "128", "-n", "128", "-r", "1", "-o", "json"]


def reap(proc: subprocess.Popen[bytes]) -> float:
    """Wait for `proc` and return its CPU seconds (user + system); a failed run stops the benchmark."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{proc.args!r} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def rates(out: bytes) -> dict[str, float]:
    return {"tg_tps" if r.get("n_gen") else "pp_tps": float(r["avg_ts"]) for r in json.loads(out)}


def sequential(cmd: dict[str, list[str]], order: list[str]) -> dict[str, dict[str, float]]:
    found = {}
    for side in order:
        proc = subprocess.Popen(cmd[side], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        out = proc.stdout.read()
        found[side] = {"cpu_s": reap(proc), **rates(out)}
    return found


def alternating(cmd: dict[str, list[str]], order: list[str], slice_s: float) -> dict[str, dict[str, float]]:
    procs = {side: subprocess.Popen(cmd[side], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for side in order}
    for proc in procs.values():
        os.kill(proc.pid, signal.SIGSTOP)
    running = list(order)
    while running:
        for side in list(running):
            proc = procs[side]
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(slice_s)
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):  # ended (kept for reap's wait4)
                running.remove(side)
                continue
            os.kill(proc.pid, signal.SIGSTOP)
    return {side: {"cpu_s": reap(proc)} for side, proc in procs.items()}


def main() -> None:
    ap = two_builds(__doc__, 20)
    ap.add_argument("--slice-ms", type=float, default=50.0)
    ap.add_argument("--seed", type=int, default=1)
    args = parsed(ap)
    cmd = {"a": argv(args.tree[0], args.model, args.threads), "b": argv(args.tree[1], args.model, args.threads)}
    coin = random.Random(args.seed)
    logs: dict[str, list[float]] = {}
    spent = {"sequential": 0.0, "alternating": 0.0}
    start_load = os.getloadavg()[0]
    for _ in range(args.pairs):
        for mode in coin.sample(list(spent), 2):  # the two modes in a random order each round: the same machine
            order = coin.sample(["a", "b"], 2)
            t0 = time.monotonic()
            found = sequential(cmd, order) if mode == "sequential" else alternating(cmd, order, args.slice_ms / 1e3)
            spent[mode] += time.monotonic() - t0
            for figure in found["a"]:
                logs.setdefault(f"{mode} {figure}", []).append(math.log(found["b"][figure] / found["a"][figure]))
    print(f"{args.pairs} pairs a mode, {args.threads} thread(s), slices of {args.slice_ms:g} ms, {os.cpu_count()} "
          f"cores; load average {start_load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    for mode, seconds in spent.items():
        print(f"  {mode}: {seconds / args.pairs:.1f} s a pair")
    for name, values in logs.items():  # the change (B against A) beside the spread: what a pair resolves
        print(f"  {name}: median {100 * math.expm1(statistics.median(values)):+.1f}%, {spread(values)}")


if __name__ == "__main__":
    main()
