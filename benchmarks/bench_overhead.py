"""Harness overhead per experiment: wall time from launch_experiment to a final status, minus the
time spent inside the build, bench and checks commands themselves (trivial commands here).

    python benchmarks/bench_overhead.py [--experiments 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

from autoresearch_mcp.app import build_server


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        '#!/usr/bin/env bash\ncase "$1" in build) true ;; bench) echo "METRIC score=$(cat value.txt)" ;; esac\n')
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    (repo / "value.txt").write_text("100\n")
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"],
                ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    return repo


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AUTORESEARCH_CACHE_DIR"] = str(Path(tmp) / "cache")
        repo = make_repo(Path(tmp))
        overheads, launches = [], []
        async with Client(build_server()) as c:
            await c.call_tool("start_session", {"repo": str(repo), "metric": "score", "direction": "higher"})
            for i in range(n):
                patch = f"--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+{101 + i}\n"
                t0 = time.monotonic()
                r = await c.call_tool("launch_experiment", {"title": f"e{i}", "source": "patch", "patch": patch,
                                                            "repeats": 30})
                launches.append(time.monotonic() - t0)
                exp_id = r.structured_content["experiment_id"]  # type: ignore[index]
                while True:
                    f = (await c.call_tool("fetch_sky_logs", {"experiment_id": exp_id, "tail_lines": 0}))
                    s = f.structured_content or {}
                    if s["status"] in ("done", "failed", "checks_failed"):
                        break
                    await anyio.sleep(0.01)
                wall = time.monotonic() - t0
                d = s["durations_s"]
                inside = d.get("build", 0) + d.get("bench", 0) + d.get("checks", 0)
                overheads.append(wall - inside)
    print(f"experiments: {n} (30 pairs + 1 warm-up pair each, trivial build/bench/checks)")
    print(f"launch_experiment latency: median {statistics.median(launches) * 1e3:.0f} ms, "
          f"max {max(launches) * 1e3:.0f} ms")
    print(f"harness overhead per experiment (wall - build - bench - checks): "
          f"median {statistics.median(overheads):.3f} s, max {max(overheads):.3f} s")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--experiments", type=int, default=10)
    anyio.run(main, p.parse_args().experiments)
