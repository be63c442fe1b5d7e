"""Issue 52 rehearsed on a library with no recipe: a small C checksum library whose bench tool has a fixed-time mode
(`chkbench -t SECONDS`, as many tools do) and a fixed-work one (`-n ITERATIONS`). The agent's way, by the brief and
the answers' texts:

1. `start_session` creates the templates; the bench is written around the fixed-time mode and committed (the set-up
   commit), and `start_session` again warns that the bench runs for a fixed time;
2. acting on the warning before the first launch, the bench is switched to fixed work, committed on the session
   branch (a set-up commit, which the reference-transaction hook lets through) and validated again; while
   start_session warns that two runs varied by over 5%, the runs are made longer the same way;
3. three real wins (leftover debug passes of 1, 2 and 3 of the digest's 28 passes removed: about 3.6%, 7.1% and
   10.7% less work) and four controls (a comment, a code move, one more pass: slower, a wrong constant: broken)
   launched at once, each measured further once while undecided; the winners kept together and committed
   (`source="experiments"`), then the session's total.

    python benchmarks/bench_set_up.py [--neighbour] [--keep DIR] [--json FILE]

Prints one line per step (the warning, the pairing start_session chose and why, each experiment's verdict and
pairs, what was committed), the load average (`os.getloadavg`) at each, and the counts: real wins committed,
controls committed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
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
from bench_noise import beside, call, load

LIB = """#include "chk.h"
#include <string.h>

volatile uint32_t chk_debug; /* what the debug passes left: read by nobody */

static uint32_t mix(uint32_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 16777619u;
    }
    return h;
}

uint32_t chk_digest(const uint8_t *p, size_t n) {
    uint32_t h = 2166136261u;
    for (int r = 0; r < 22; r++) {
        h = mix(h + (uint32_t) r, p, n);
    }
    /* debug: a checksum of the input alone */
    chk_debug = mix(1u, p, n);
    /* debug: the digest's first rounds again */
    for (int r = 0; r < 2; r++) {
        chk_debug ^= mix(7u + (uint32_t) r, p, n);
    }
    /* debug: the last rounds again */
    for (int r = 0; r < 3; r++) {
        chk_debug += mix(11u * (uint32_t) r, p, n);
    }
    return h;
}
"""
HEADER = "#include <stddef.h>\n#include <stdint.h>\nuint32_t chk_digest(const uint8_t *p, size_t n);\n"
BENCH = """#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "chk.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    /* chkbench -t SECONDS: as many digests as fit; chkbench -n ITERATIONS: that many */
    static uint8_t buf[1 << 16];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t) (i * 2654435761u >> 13);
    double limit = argc > 2 && !strcmp(argv[1], "-t") ? atof(argv[2]) : 0;
    long iters = argc > 2 && !strcmp(argv[1], "-n") ? atol(argv[2]) : 0, n = 0;
    uint32_t h = 0;
    double t0 = now(), dt;
    while ((dt = now() - t0) < limit || n < iters) { h ^= chk_digest(buf, sizeof buf); n++; }
    printf("digest %08x\\nMETRIC mb_per_s=%.2f\\n", h, n * (double) sizeof buf / dt / 1e6);
    return 0;
}
"""
TEST = """#include <stdio.h>
#include "chk.h"
int main(void) {
    static uint8_t buf[4096];
    for (int i = 0; i < 4096; i++) buf[i] = (uint8_t) (i * 31 + 7);
    uint32_t h = chk_digest(buf, sizeof buf);
    printf("%08x\\n", h);
    return h == EXPECTED ? 0 : 1;
}
"""
BUILD = "cc -O2 -o chkbench bench.c chk.c && cc -O2 -DEXPECTED=$(cat expected.txt) -o chktest test.c chk.c"
FIXED_TIME = "./chkbench -t 0.4"  # the tool's own benchmark mode, as a bench is first written
FIXED_WORK = "./chkbench -n {n}"  # switched once start_session warns; n grows while it warns of a spread
ITERATIONS, LONGER = 100, 4

DEBUG_1 = "    /* debug: a checksum of the input alone */\n    chk_debug = mix(1u, p, n);\n"
DEBUG_2 = ("    /* debug: the digest's first rounds again */\n    for (int r = 0; r < 2; r++) {\n"
           "        chk_debug ^= mix(7u + (uint32_t) r, p, n);\n    }\n")
DEBUG_3 = ("    /* debug: the last rounds again */\n    for (int r = 0; r < 3; r++) {\n"
           "        chk_debug += mix(11u * (uint32_t) r, p, n);\n    }\n")
ROUNDS = "    for (int r = 0; r < 22; r++) {\n"
STATIC_MIX = "static uint32_t mix(uint32_t h, const uint8_t *p, size_t n) {"
CANDIDATES: dict[str, tuple[str, str, str, bool]] = {  # name: (title, old, new, a real win)
    "debug1": ("drop the input-alone debug checksum", DEBUG_1, "", True),
    "debug2": ("drop the first rounds' debug pass", DEBUG_2, "", True),
    "debug3": ("drop the last rounds' debug pass", DEBUG_3, "", True),
    "comment": ("a comment on the rounds (control)", ROUNDS, "    /* the digest's rounds */\n" + ROUNDS, False),
    "move": ("mix() declared with its own comment line (control: layout)", STATIC_MIX,
             "/* one round over the buffer */\n" + STATIC_MIX, False),
    "slower": ("one more debug pass (control: slower)", DEBUG_1, DEBUG_1 + "    chk_debug |= mix(3u, p, n);\n", False),
    "broken": ("21 rounds (control: a wrong digest)", ROUNDS, ROUNDS.replace("22", "21"), False),
}
FINAL = ("done", "failed", "checks_failed", "cancelled", "lost")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def library(root: Path) -> Path:
    """The library as a fresh repository, without benchmark scripts; its expected digest computed once here."""
    repo = root / "chk"
    repo.mkdir(parents=True)
    for name, text in {"chk.c": LIB, "chk.h": HEADER, "bench.c": BENCH, "test.c": TEST}.items():
        (repo / name).write_text(text)
    scratch = root / "expected"
    subprocess.run(["cc", "-O2", "-DEXPECTED=0", "-o", scratch, "test.c", "chk.c"], cwd=repo, check=True)
    digest = subprocess.run([scratch], capture_output=True, text=True).stdout.strip()
    (repo / "expected.txt").write_text(f"0x{digest}u\n")
    (repo / ".gitignore").write_text("chkbench\nchktest\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=Bench", "-c", "user.email=bench@example.com", "commit", "-qm", "chk: a checksum library")
    return repo


def write_scripts(repo: Path, bench: str) -> None:
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n"
        f"  build) {BUILD} ;;\n  bench) {bench} | grep '^METRIC' ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nset -eu\n./chktest\n")


def commit_scripts(repo: Path, message: str) -> str:
    """The set-up commit as the agent makes it (git with the repository's hooks: the reference-transaction hook
    start_session installed decides)."""
    done = subprocess.run(f"git add autoresearch.sh autoresearch.checks.sh && git -c user.name=Agent -c "
                          f"user.email=agent@example.com commit -qm '{message}'", shell=True, cwd=repo,
                          capture_output=True, text=True)
    return "committed" if done.returncode == 0 else f"refused: {done.stderr.strip()[:300]}"


def patch(repo: Path, old: str, new: str) -> str:
    before = (repo / "chk.c").read_text()
    assert old in before, old
    after = before.replace(old, new, 1)
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "a/chk.c", "b/chk.c"))


def brief(res: dict[str, Any]) -> dict[str, Any]:
    m = (res.get("metrics") or {}).get("mb_per_s") or {}
    return {"status": res.get("status"), "verdict": res.get("verdict"), "delta_pct": m.get("delta_pct"),
            "ci": [m.get("ci_low_pct"), m.get("ci_high_pct")], "pairs": m.get("n_pairs"),
            "noise_pct": m.get("noise_pct")}


async def final(c: Client, exp: str) -> dict[str, Any]:
    while True:
        res = await call(c, "get_experiment", experiment_id=exp, tail_lines=0, wait_s=60)
        if res["status"] in FINAL:
            return res


async def rehearse(root: Path, out: list[dict[str, Any]]) -> None:
    def step(row: dict[str, Any]) -> None:
        row.setdefault("load", load())
        out.append(row)
        print(json.dumps(row), flush=True)

    t0 = time.monotonic()
    repo = library(root)
    async with Client(build_server()) as c:
        async def start() -> dict[str, Any]:
            return await call(c, "start_session", repo=str(repo), metric="mb_per_s", direction="higher", tag="chk")

        first = await start()
        step({"step": "templates", "created": first["templates_created"]})
        write_scripts(repo, FIXED_TIME)
        step({"step": "bench around the fixed-time mode", "commit": commit_scripts(repo, "autoresearch: bench")})
        warned = await start()
        step({"step": "validated", "bench": warned["settings"].get("bench"), "warnings": warned["warnings"],
              "pairing": warned["settings"].get("pairing")})
        n = ITERATIONS
        for _ in range(3):  # every warning acted on before the first launch: a spread over 5% wants longer runs
            write_scripts(repo, FIXED_WORK.format(n=n))
            step({"step": f"bench of fixed work, {n} iterations", "commit": commit_scripts(repo, f"autoresearch: {n}")})
            fixed = await start()
            step({"step": "validated again", "bench": fixed["settings"].get("bench"), "warnings": fixed["warnings"],
                  "pairing": fixed["settings"].get("pairing"), "spread_pct": fixed.get("spread_pct")})
            if not any("varied by" in w for w in fixed["warnings"]):
                break
            n *= LONGER
        t1 = time.monotonic()
        launched = {}
        for name, (title, old, new, real) in CANDIDATES.items():
            exp = await call(c, "launch_experiment", title=title, source="patch", patch=patch(repo, old, new),
                             repeats="auto")
            launched[name] = (exp["experiment_id"], real)
        finals: dict[str, dict[str, Any]] = {}

        async def follow(name: str) -> None:
            exp_id, real = launched[name]
            res = await final(c, exp_id)
            rounds = [brief(res)]
            if res.get("verdict") in ("noisy", "inconclusive"):
                await call(c, "launch_experiment", source="experiment", experiment_id=exp_id, repeats="auto")
                res = await final(c, exp_id)
                rounds.append(brief(res))
            finals[name] = res
            step({"candidate": name, "real": real, "experiment": exp_id, "rounds": rounds, "committed": False})

        async with anyio.create_task_group() as tg:
            for name in launched:
                tg.start_soon(follow, name)
        step({"step": "experiments", "s": round(time.monotonic() - t1, 1)})
        won = [n for n in launched if finals[n].get("verdict") == "improved"]
        winners = [launched[n][0] for n in won]
        kept: list[str] = []
        if len(winners) >= 2:
            tries: list[tuple[str, list[str]]] = []
            try:
                together = await call(c, "launch_experiment", source="experiments", experiment_ids=winners,
                                      repeats="auto")
                clash = together.get("conflicts")
                tries.append((together["experiment_id"], [w for w in winners
                                                          if not any(x.startswith(w) for x in clash or [])]))
            except RuntimeError as exc:  # fewer than two apply together: the answer says how to keep them
                clash = [str(exc)[:300]]
            step({"step": "combined on the head", "of": winners, "conflicts": clash})
            if clash:  # the agent's merge of them all: every winner's edit applied to the head's text
                text = (repo / "chk.c").read_text()
                for name in won:
                    text = text.replace(CANDIDATES[name][1], CANDIDATES[name][2], 1)
                merge = "".join(difflib.unified_diff((repo / "chk.c").read_text().splitlines(True),
                                                     text.splitlines(True), "a/chk.c", "b/chk.c"))
                merged = await call(c, "launch_experiment", source="patch", patch=merge, experiment_ids=winners,
                                    repeats="auto")
                tries.append((merged["experiment_id"], winners))
            for exp_id, members in reversed(tries):  # the merge of them all first
                res = await final(c, exp_id)
                step({"step": "kept together", "experiment": exp_id, "of": members, **brief(res)})
                if res.get("verdict") == "improved" and not kept:
                    await call(c, "commit_winner", experiment_id=exp_id)
                    kept = members
        if not kept and winners:
            await call(c, "commit_winner", experiment_id=winners[0])
            kept = winners[:1]
        for row in out:
            if row.get("experiment") in kept:
                row["committed"] = True
        step({"step": "committed", "kept": kept})
        if kept:
            total = await call(c, "launch_experiment", title="session total", source="session")
            step({"step": "session total", **brief(await final(c, total["experiment_id"]))})
    step({"step": "whole run", "s": round(time.monotonic() - t0, 1)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--neighbour", action="store_true", help="one process of bursty memory-bound work beside it")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    ap.add_argument("--json", type=Path, help="write every row here too")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="set-up-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("AUTORESEARCH_CACHE_DIR", str(root / "cache"))
    print(f"bench_set_up: {root} neighbour={args.neighbour} load={load()}", flush=True)
    rows: list[dict[str, Any]] = []
    try:
        with beside("neighbour" if args.neighbour else "quiet"):
            anyio.run(rehearse, root, rows)
    finally:
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    wins = sum(1 for r in rows if r.get("real") and r.get("committed"))
    bad = sum(1 for r in rows if r.get("real") is False and r.get("committed"))
    print(f"real wins committed: {wins} of {sum(1 for v in CANDIDATES.values() if v[3])}; controls committed: {bad}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
