"""Benchmarks as people write them (issue 44): a bench that runs for a fixed time and prints a rate is known as
such at start_session; its real win is committed when it prints the work it did (`METRIC ops=`), which the
harness's own time of each run is then held to per unit, and a forged clock is refused within a few pairs, the
answer saying that more pairs cannot change it."""

from __future__ import annotations

import difflib
import json
import random
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.measure import stats
from autoresearch_mcp.worker import decide, sandbox
from conftest import init_repo, slow_clock
from helpers import call, error, wait_final

# Runs until 0.3 s have passed on its clock; each item is COST rounds of a hash; prints its rate and its items.
BENCH_C = """#include <stdio.h>
#include <time.h>
#include "cost.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
volatile unsigned sink;
static unsigned item(unsigned x) { for (int i = 0; i < COST; i++) x = x * 1103515245u + 12345u; return x; }
int main(void) {
    double t0 = now(), dt; long n = 0; unsigned x = 1;
    while ((dt = now() - t0) < 0.3) { for (int k = 0; k < 100; k++) x = item(x); n += 100; }
    sink = x;
    printf("METRIC items_per_s=%.1f\\nMETRIC ops=%ld\\n", n / dt, n);
    return 0;
}
"""
# Linked in by a candidate: the program's clock runs at 0.85 of the real one, so it runs longer and claims more.
SLOW_CLOCK = slow_clock(0.85)


def fixed_time_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "fixedtime"
    repo.mkdir()
    (repo / "bench.c").write_text(BENCH_C)
    (repo / "cost.h").write_text("#define COST 400\n")
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n"
        "  build) cc -O2 -o bench bench.c ;;\n  bench) ./bench ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\n./bench >/dev/null\n")
    (repo / ".gitignore").write_text("bench\n")
    init_repo(repo)
    # both runs of a pair at once, in turns (a neighbour's load falls on both sides); one thread, as it runs
    (repo / ".autoresearch").mkdir()
    (repo / ".autoresearch" / "config.json").write_text(json.dumps({"pairing": "turns", "threads": 1}) + "\n")
    return repo


def edited(repo: Path, rel: str, old: str, new: str) -> str:
    before = (repo / rel).read_text()
    assert old in before
    after = before.replace(old, new)
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}", f"b/{rel}"))


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_fixed_time_benchs_real_win_is_committed_and_its_forged_clock_refused(tmp_path: Path) -> None:
    repo = fixed_time_repo(tmp_path)
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(repo), metric="items_per_s", direction="higher", tag="ft")
        assert started["settings"]["bench"].startswith("fixed time"), started["settings"]
        real = await call(c, "launch_experiment", title="cheaper items", source="patch", repeats="auto",
                          patch=edited(repo, "cost.h", "400", "360"))
        won = await wait_final(c, real["experiment_id"], timeout=900)
        assert won["verdict"] == "improved", (won["verdict"], won["metrics"]["items_per_s"])
        await call(c, "commit_winner", experiment_id=real["experiment_id"], title="cheaper items")
        forged = await call(c, "launch_experiment", title="a slower clock", source="patch", repeats="auto",
                            patch=edited(repo, "bench.c", '#include "cost.h"\n', '#include "cost.h"\n' + SLOW_CLOCK))
        out = await wait_final(c, forged["experiment_id"], timeout=900)
        refusal = await error(c, "commit_winner", experiment_id=forged["experiment_id"], title="a slower clock")
    assert out["metrics"]["items_per_s"]["delta_pct"] > 10  # what the program claims
    assert out["verdict"] == "invalid" and out["pairs_done"] <= 12, (out["verdict"], out["pairs_done"], out)
    assert "per op" in refusal or any("per op" in p for p in out.get("problems") or []), refusal
    assert decide.SETTLED in (out.get("next_step") or "") + refusal + str(out), out


# --- the rule: a refutation more pairs cannot change ends the experiment -------------------------------------

PLAN = stats.make_design("auto").plan()


def fixed_time_samples(n: int, ratio: float, ops: bool) -> list[dict[str, Any]]:
    """n pairs of a fixed-time bench: items_per_s `ratio` times the baseline's, each run 0.3 s of CPU and wall;
    with `ops`, the items done (which rise with the rate)."""
    rng = random.Random(3)
    out = []
    for i in range(n):
        second = rng.random() < 0.5  # each pair's order a coin
        for role, r in (("baseline", 1.0), ("candidate", ratio)):
            rate = 1e6 * r * (1 + rng.gauss(0, 0.003))
            cpu, wall = 0.3 * (1 + rng.gauss(0, 0.003)), 0.3 * (1 + rng.gauss(0, 0.002))
            m = {"items_per_s": rate, decide.HARNESS_WALL: wall, decide.HARNESS_CPU: cpu}
            if ops:
                m.update({"ops": rate * 0.3, decide.HARNESS_WALL + decide.PER_OP: wall / (rate * 0.3),
                          decide.HARNESS_CPU + decide.PER_OP: cpu / (rate * 0.3)})
            out.append({"pair": i, "role": role, "position": int(second == (role == "candidate")), "metrics": m})
    return out


def test_a_fixed_time_claim_the_outside_time_cannot_show_ends_at_ten_pairs_saying_why() -> None:
    d = decide.judge(fixed_time_samples(10, 1.10, ops=False), decide.Spec("items_per_s", "higher", 0.01), PLAN)
    assert d.verdict == "invalid" and d.final, d.verdict
    assert d.problems[0].startswith(decide.SETTLED) and any("METRIC ops=" in p for p in d.problems), d.problems


def test_with_the_work_it_did_a_fixed_time_benchs_real_win_is_improved() -> None:
    d = decide.judge(fixed_time_samples(30, 1.10, ops=True), decide.Spec("items_per_s", "higher", 0.01), PLAN)
    assert d.verdict == "improved", (d.verdict, d.problems)
