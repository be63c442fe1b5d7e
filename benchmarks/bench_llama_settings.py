"""What llama-bench's own settings do to the noise of tg_tps and pp_tps: the per-pair spread (log-ratio of two
builds' interleaved runs, each first in half of the pairs) and the wall time of one run, for several
generated-token counts and repetitions, every setting interleaved with the others pair by pair so that all see
the same machine.

It times the binaries of trees built the harness's way; `bench_rehearsal.py --keep DIR` leaves them under
DIR/cache/worktrees/, with the model at DIR/rehearsal.gguf:

    python benchmarks/bench_llama_settings.py --model DIR/rehearsal.gguf --tree A --tree B [--pairs 24]
        [--settings n128r1,p512n128r1,p128x4n128r1] [--threads 1]

`nXrY` is `-n X -r Y` with the recipe's prompt of 128 tokens; `pPnXrY` prompts P tokens, and `pPxKnXrY` runs K
prompt tests of P tokens, their figure the tokens of all over the time of all (llama.cpp's own benchmarks
report pp512).
Both the sample standard deviation and the MAD (x1.4826, the robust spread) of the log-ratios are printed,
with the load average: these machines are shared.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import time
from pathlib import Path

SETTING = re.compile(r"^(?:p(\d+)(?:x(\d+))?)?n(\d+)r(\d+)$")


def run(tree: Path, model: Path, threads: int, setting: tuple[str, str, str, str]) -> tuple[dict[str, float], float]:
    """One llama-bench run as the recipe makes it (flash attention), with the setting's prompt tokens, prompt
    tests, generated tokens and repetitions. Several prompt tests are one figure: their tokens over their time."""
    prompt, tests, gen, reps = setting
    argv = [str(tree / "build-autoresearch/bin/llama-bench"), "-m", str(model), "-ngl", "0", "-t", str(threads),
            "-fa", "1", "-p", ",".join([prompt] * int(tests)), "-n", gen, "-r", reps, "-o", "json"]
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600).stdout
    spent = time.monotonic() - t0
    tokens = {"tg_tps": 0.0, "pp_tps": 0.0}
    seconds = {"tg_tps": 0.0, "pp_tps": 0.0}
    for record in json.loads(out):
        metric = "tg_tps" if record.get("n_gen") else "pp_tps"
        tokens[metric] += float(record["n_gen"] or record["n_prompt"])
        seconds[metric] += float(record["avg_ns"]) / 1e9
    if not (seconds["tg_tps"] and seconds["pp_tps"]):
        raise SystemExit(f"{argv}: expected a prompt and a generation record, got {out[:300]!r}")
    return {metric: tokens[metric] / seconds[metric] for metric in tokens}, spent


def spread(logs: list[float]) -> str:
    middle = statistics.median(logs)
    mad = 1.4826 * statistics.median(abs(x - middle) for x in logs)
    return f"sd {100 * statistics.stdev(logs):.1f}%, MAD {100 * mad:.1f}%"


def two_builds(doc: str | None, pairs: int) -> argparse.ArgumentParser:
    """The options of a benchmark of two built trees' pairs: the model, the trees, the pairs, the threads."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--tree", type=Path, action="append", required=True, help="a built tree (give two)")
    ap.add_argument("--pairs", type=int, default=pairs)
    ap.add_argument("--threads", type=int, default=1)
    return ap


def parsed(ap: argparse.ArgumentParser) -> argparse.Namespace:
    args = ap.parse_args()
    if len(args.tree) != 2:
        raise SystemExit("give --tree twice: the two builds of each pair")
    return args


def main() -> None:
    ap = two_builds(__doc__, 24)
    ap.add_argument("--settings", default="n128r1,n64r2,n32r3")
    args = parsed(ap)
    settings: dict[str, tuple[str, str, str, str]] = {}
    for name in args.settings.split(","):
        found = SETTING.match(name)
        if found is None:
            raise SystemExit(f"setting {name!r}: write it as [pP[xK]]nXrY (-p P, K times; -n X -r Y), e.g. n128r1")
        settings[name] = (found.group(1) or "128", found.group(2) or "1", found.group(3), found.group(4))
    a, b = args.tree
    logs: dict[str, dict[str, list[float]]] = {s: {"tg_tps": [], "pp_tps": []} for s in settings}
    walls: dict[str, list[float]] = {s: [] for s in settings}
    start_load = os.getloadavg()[0]
    for i in range(args.pairs):
        for name, setting in settings.items():
            runs = {}
            for tree in ([a, b] if i % 2 else [b, a]):
                runs[tree], spent = run(tree, args.model, args.threads, setting)
                walls[name].append(spent)
            for metric, values in logs[name].items():
                values.append(math.log(runs[b][metric] / runs[a][metric]))
    print(f"{args.pairs} pairs per setting, {args.threads} thread(s), {os.cpu_count()} cores; load average "
          f"{start_load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    for name in settings:
        print(f"  {name}: {statistics.mean(walls[name]):.2f} s a run; tg_tps {spread(logs[name]['tg_tps'])}; "
              f"pp_tps {spread(logs[name]['pp_tps'])}")


if __name__ == "__main__":
    main()
