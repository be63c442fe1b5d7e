"""A fifth round of attacks (issue #51), each through the real MCP client beside a control on the same checker: a side
cannot reach the other, the two trees tell nothing of which side runs, the turns count every moment a side held the
machine, and a claim cannot vouch for itself."""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.store.config import config_path
from autoresearch_mcp.worker import sandbox
from conftest import script_repo
from helpers import call, error, wait_final

confined = pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")


def edited(repo: Path, rel: str, old: str, new: str) -> str:
    before = (repo / rel).read_text()
    assert old in before
    after = before.replace(old, new)
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}", f"b/{rel}"))


def committed_bench(tmp_path: Path, files: dict[str, str], bench: str, pairing: str | None = "turns") -> Path:
    repo = script_repo(tmp_path, bench)
    for name, text in files.items():
        (repo / name).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "the bench"], cwd=repo, check=True)
    if pairing is not None:
        config_path(repo).parent.mkdir(exist_ok=True)
        config_path(repo).write_text(json.dumps({"pairing": pairing}) + "\n")
    return repo


# --- time the turns do not count: a long system call ------------------------------------------------------------

# The same bytes read through the kernel either in 64 KiB reads or in one read of 160 MiB each time (a sparse file in
# the private /tmp: no disk, every byte copied by the kernel), timed by the program's own wall clock. A stop cannot
# take effect inside one such read, so a side stopped mid-read goes on until it ends.
READS = """import os, time
chunk, rounds = (int(x) for x in open("reads.txt").read().split())
size = 160 << 20
with open("/tmp/data", "wb") as fh:
    fh.truncate(size)
buf = bytearray(size)
view = memoryview(buf)
t = time.perf_counter()
for _ in range(rounds):
    with open("/tmp/data", "rb", buffering=0) as fh:
        got = 0
        while got < size:
            got += fh.readinto(view[got:got + chunk])
print(f"METRIC t_ms={(time.perf_counter() - t) * 1e3:.3f}")
"""


@pytest.mark.serial
@confined
@pytest.mark.anyio
async def test_a_side_held_in_one_long_system_call_is_timed_for_it_in_its_own_turns(tmp_path: Path) -> None:
    """The same work in one read a time is no faster over the wall time of its own turns (it was -29.9%, committed:
    the stop waited for each read to end, and that time fell in neither side's turns); doing half the reads is."""
    repo = committed_bench(tmp_path, {"reads.py": READS, "reads.txt": "65536 6\n"}, "python3 reads.py")
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="reads")
        one_read = await call(c, "launch_experiment", title="one read a time", source="patch", repeats="auto",
                              patch=edited(repo, "reads.txt", "65536 6", "167772160 6"))
        fewer = await call(c, "launch_experiment", title="half the reads", source="patch", repeats="auto",
                           patch=edited(repo, "reads.txt", "65536 6", "65536 3"))
        same = await wait_final(c, one_read["experiment_id"], timeout=900)
        won = await wait_final(c, fewer["experiment_id"], timeout=900)
        refused = await error(c, "commit_winner", experiment_id=one_read["experiment_id"])
        await call(c, "commit_winner", experiment_id=fewer["experiment_id"])
    assert same["verdict"] != "improved", (same["verdict"], same["metrics"]["t_ms"])
    assert "not 'improved'" in refused
    assert won["verdict"] == "improved" and won["metrics"]["t_ms"]["delta_pct"] < -30, won["metrics"]["t_ms"]
