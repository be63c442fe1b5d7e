"""Time to the first verdict when experiments share one machine: a clear one launched right after one the
budget cannot decide, through the real MCP server (local executor). Experiments take the machine in turns
of a few pairs, so the clear one's verdict does not wait for its neighbour's whole budget.

    python benchmarks/bench_turns.py [--run-ms 50]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from autoresearch_mcp.app import build_server

FINAL = {"done", "failed", "checks_failed", "cancelled", "lost"}


def repo_with(root: Path, run_ms: int) -> Path:
    """value.txt 110: a clear +10%; 120: wobbles 3% down and 7% up run after run (undecidable)."""
    repo = root / "repo"
    repo.mkdir()
    counter = ('c="$AUTORESEARCH_CACHE_DIR/runs-$(pwd | cksum | cut -d" " -f1)"; i=$(cat "$c" 2>/dev/null || '
               'echo 0); echo $((i+1)) > "$c"; ')
    bench = (counter + f"sleep {run_ms / 1000:.3f}; " + 'v=$(cat value.txt); case "$v" in '
             "110) echo METRIC score=110.00 ;; 120) awk -v i=$i 'BEGIN{printf \"METRIC score=%.2f\\n\", "
             "(i%2 ? 107 : 97)}' ;; *) echo METRIC score=100.00 ;; esac")
    (repo / "autoresearch.sh").write_text(f'#!/usr/bin/env bash\ncase "$1" in\n  build) true ;;\n  bench) {bench} ;;\n'
                                          "esac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    (repo / "value.txt").write_text("100\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@example.com"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "bench"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def patch(new: str) -> str:
    return f"--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+{new}\n"


async def final(c: Client, exp_id: str) -> dict[str, Any]:
    while True:
        res = (await c.call_tool("fetch_sky_logs", {"experiment_id": exp_id, "tail_lines": 0})).structured_content
        assert res is not None
        if res["status"] in FINAL:
            return res
        await anyio.sleep(0.05)


async def measure(run_ms: int, with_neighbour: bool) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AUTORESEARCH_CACHE_DIR"] = str(Path(tmp) / "cache")
        repo = repo_with(Path(tmp), run_ms)
        async with Client(build_server()) as c:
            await c.call_tool("start_session", {"repo": str(repo), "metric": "score", "direction": "higher",
                                                "tag": "t"})
            slow = None
            if with_neighbour:
                slow = (await c.call_tool("launch_experiment", {"title": "undecidable", "source": "patch",
                                                                "patch": patch("120")})).structured_content
                await anyio.sleep(0.5)
            t0 = time.monotonic()
            clear = (await c.call_tool("launch_experiment", {"title": "clear", "source": "patch",
                                                             "patch": patch("110")})).structured_content
            assert clear is not None
            res = await final(c, clear["experiment_id"])
            took = time.monotonic() - t0
            if slow is not None:
                await c.call_tool("cancel_experiment", {"experiment_id": slow["experiment_id"]})
            return took, res["metrics"]["score"]["n_pairs"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-ms", type=int, default=50, help="how long one bench run takes")
    args = parser.parse_args()
    alone, pairs = anyio.run(measure, args.run_ms, False)
    shared, shared_pairs = anyio.run(measure, args.run_ms, True)
    print(f"bench run {args.run_ms} ms: the clear experiment's verdict after {alone:.1f} s alone ({pairs} pairs), "
          f"{shared:.1f} s beside an undecidable one ({shared_pairs} pairs; the neighbour alone would hold the machine "
          f"for its whole budget of 100 pairs, about {200 * args.run_ms / 1000:.0f} s of runs)")


if __name__ == "__main__":
    main()
