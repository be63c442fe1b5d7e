"""The local executor's queue: a candidate's build and checks never wait for experiments that are measuring
(issue 30: checks that fail in seconds were reported 113-213 s after launch, queued behind two experiments'
pairs). Driven through a real MCP client against a real git repository and the real runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from conftest import script_repo
from helpers import call, wait_final

pytestmark = pytest.mark.anyio

# A slow, steady bench (0.3 s a run) and checks that fail when the candidate holds a file named `wrong`.
SLOW = "sleep 0.3; echo METRIC score=$(cat value.txt)"


@pytest.mark.slow
async def test_a_candidate_whose_checks_fail_is_told_while_two_experiments_still_measure(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, SLOW, checks="test ! -e wrong")
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="q")
        measuring = []
        for i in range(2):  # the default two slots, both taken by experiments of 40 slow pairs each
            measuring.append(await call(c, "launch_experiment", title=f"note {i}", source="patch", repeats=40,
                                        patch=f"--- /dev/null\n+++ b/note{i}.txt\n@@ -0,0 +1 @@\n+{i}\n"))
        for exp in measuring:  # both measure before the broken candidate is launched
            while (await call(c, "fetch_sky_logs", experiment_id=exp["experiment_id"], wait_s=1))["status"] \
                    != "running":
                pass
        broken = await call(c, "launch_experiment", title="broken", source="patch",
                            patch="--- /dev/null\n+++ b/wrong\n@@ -0,0 +1 @@\n+x\n")
        told = await wait_final(c, broken["experiment_id"], timeout=300)
        still = [(await call(c, "fetch_sky_logs", experiment_id=e["experiment_id"]))["status"] for e in measuring]
        for exp in measuring:
            await call(c, "cancel_experiment", experiment_id=exp["experiment_id"])
    assert told["status"] == "checks_failed"
    assert still == ["running", "running"]  # before: it waited in the queue for one of them to end
