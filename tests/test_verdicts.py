"""Verdicts that hold on noise nobody named, through the real MCP client: a periodic disturbance, a
candidate with a slow tail of its own, round printed values, and two experiments sharing one machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from conftest import balanced_noise, script_repo
from helpers import call, error, wait_final

pytestmark = pytest.mark.anyio

# One tree's own runs, counted in the tree (the one place a confined run writes).
TREE_RUN = 'c=.runs; i=$(cat "$c" 2>/dev/null || echo 0); echo $((i+1)) > "$c"; '
# Time on the machine in milliseconds, for a disturbance both trees see.
CLOCK = "t=$(($(date +%s%N) / 1000000)); "


def patch(name: str, old: str, new: str) -> str:
    return f"--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


def comment() -> str:
    return "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+a comment\n"


async def session(c: Client, repo: Path) -> None:
    await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="t")


@pytest.mark.serial
async def test_a_no_op_under_a_periodic_disturbance_is_not_a_winner(tmp_path: Path) -> None:
    # the machine runs 0.4% faster and slower with a period of about 3.5 runs (0.1 s), whichever tree runs
    bench = CLOCK + "awk -v t=$t 'BEGIN{printf \"METRIC score=%.4f\\n\", 100*(1+0.004*sin(6.2831853*t/100))}'"
    repo = script_repo(tmp_path, bench)
    async with Client(build_server()) as c:
        await session(c, repo)
        exp = await call(c, "launch_experiment", title="a comment", source="patch", patch=comment())
        res = await wait_final(c, exp["experiment_id"])
        refused = await error(c, "commit_winner", experiment_id=exp["experiment_id"])
    assert res["verdict"] == "no_change" and res["metrics"]["score"]["n_pairs"] <= 10
    assert "not 'improved'" in refused


@pytest.mark.serial
async def test_a_candidate_with_a_slow_tail_of_its_own_is_refused_with_the_reason(tmp_path: Path) -> None:
    # the candidate (value.txt 105) is 5% faster, but every 5th of its runs is 30% slower: slower on average
    bench = (TREE_RUN + balanced_noise() + 'v=$(cat value.txt); awk -v v=$v -v i=$i -v n=$n '
             "'BEGIN{s=(v==100)?100:((i%5==2)?73.5:105); printf \"METRIC score=%.3f\\n\", s*n}'")
    repo = script_repo(tmp_path, bench)
    async with Client(build_server()) as c:
        await session(c, repo)
        exp = await call(c, "launch_experiment", title="fast path, slow tail", source="patch",
                         patch=patch("value.txt", "100", "105"))
        res = await wait_final(c, exp["experiment_id"], timeout=600)
        refused = await error(c, "commit_winner", experiment_id=exp["experiment_id"])
    score = res["metrics"]["score"]
    assert res["verdict"] != "improved"
    assert score["delta_pct"] > 3 and score["mean_pct"] < 0  # a faster typical run, a slower average one
    assert "candidate" in (res["noise_note"] or "")
    assert "not 'improved'" in refused and "average run" in refused


@pytest.mark.serial
async def test_a_no_op_printed_with_round_values_ends_no_change_early(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, "echo METRIC score=100.00")
    async with Client(build_server()) as c:
        await session(c, repo)
        exp = await call(c, "launch_experiment", title="a comment", source="patch", patch=comment())
        res = await wait_final(c, exp["experiment_id"])
    score = res["metrics"]["score"]
    assert res["verdict"] == "no_change" and score["n_pairs"] <= 10
    assert score["equivalence_pct"] is not None and score["equivalence_pct"] < 0.1


async def test_a_fixed_count_that_cannot_decide_is_refused_at_launch(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, "echo METRIC score=100.00")
    async with Client(build_server()) as c:
        await session(c, repo)
        refused = await error(c, "launch_experiment", title="x", source="patch", patch=comment(), repeats=8)
    assert "8 pairs cannot decide" in refused and "at least 30" in refused


@pytest.mark.serial
async def test_two_experiments_on_one_machine_take_turns_and_the_decisive_one_ends_first(tmp_path: Path) -> None:
    # value 110: a clear +10%. value 120: wobbles between 3% slower and 7% faster run after run, which
    # the budget cannot decide, so it measures all its pairs; they alternate on the machine by turns.
    bench = (TREE_RUN + 'v=$(cat value.txt); case "$v" in 110) echo METRIC score=110.00 ;; '
             '120) awk -v i=$i \'BEGIN{printf "METRIC score=%.2f\\n", (i%2 ? 107 : 97)}\' ;; '
             '*) echo METRIC score=100.00 ;; esac')
    repo = script_repo(tmp_path, bench)
    async with Client(build_server()) as c:
        await session(c, repo)
        slow = await call(c, "launch_experiment", title="undecidable", source="patch",
                          patch=patch("value.txt", "100", "120"))
        await anyio.sleep(0.5)  # it takes the machine first
        clear = await call(c, "launch_experiment", title="clear", source="patch",
                           patch=patch("value.txt", "100", "110"))
        decided = await wait_final(c, clear["experiment_id"], timeout=600)
        other: dict[str, Any] = await call(c, "fetch_sky_logs", experiment_id=slow["experiment_id"])
        await call(c, "cancel_experiment", experiment_id=slow["experiment_id"])
    assert decided["verdict"] == "improved" and decided["metrics"]["score"]["n_pairs"] == 30
    assert other["status"] == "running" and other["pairs_done"] < 100
