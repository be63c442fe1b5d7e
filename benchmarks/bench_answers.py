"""What a client gets from the long calls (issue 33, items 4 and 8), through a real MCP client.

On a fresh copy of the bundled example: the progress notifications and log messages `start_session` sends a
client that asks for them, with the time of each, then one experiment (the example's fusion patch, 30 pairs)
followed with `get_experiment(wait_s=...)`, and the size of its final answer without and with the raw samples.
Run: python benchmarks/bench_answers.py [--iters 6]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from autoresearch_mcp import resources
from autoresearch_mcp.app import build_server

FINAL = {"done", "failed", "cancelled", "checks_failed"}


def example_repo(root: Path) -> Path:
    repo = root / "normsoft"
    shutil.copytree(resources.example_dir() / "normsoft", repo, ignore=shutil.ignore_patterns("normsoft", "patches"))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=bench", "-c", "user.email=b@x",
                                                                   "commit", "-q", "-m", "example"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


async def run(iters: int) -> None:
    os.environ["NORMSOFT_ITERS"] = str(iters)
    steps: list[tuple[float, str]] = []
    logs: list[str] = []
    t0 = time.perf_counter()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        steps.append((time.perf_counter() - t0, message or ""))

    async def on_log(params: Any) -> None:
        logs.append(str(params.data))

    with tempfile.TemporaryDirectory(prefix="bench-answers-") as tmp:
        repo = example_repo(Path(tmp))
        os.environ["AUTORESEARCH_CACHE_DIR"] = str(Path(tmp) / "cache")  # its trees and builds go with it
        async with Client(build_server(), mode="legacy", logging_callback=on_log) as c:
            await c.set_logging_level("info")
            res = await c.call_tool("start_session", {"repo": str(repo), "metric": "rows_per_s",
                                                      "direction": "higher", "tag": "answers"},
                                    progress_callback=on_progress)
            assert not res.is_error, res.content
            took = time.perf_counter() - t0
            print(f"start_session: {took:.1f} s, {len(steps)} progress notifications, {len(logs)} log messages")
            for at, message in steps:
                print(f"  {at:6.1f} s  {message}")
            patch = (resources.example_dir() / "normsoft" / "patches" / "fuse-rms-norm-mul.patch").read_text()
            launched = await c.call_tool("launch_experiment", {"title": "fuse", "source": "patch", "repeats": 30,
                                                               "patch": patch})
            assert not launched.is_error and launched.structured_content is not None, launched.content
            exp_id = launched.structured_content["experiment_id"]
            waits, told = 0, 0

            async def on_pair(done: float, total: float | None, message: str | None) -> None:
                nonlocal told
                told += 1

            while True:
                waits += 1
                got = await c.call_tool("get_experiment", {"experiment_id": exp_id, "wait_s": 60},
                                        progress_callback=on_pair)
                assert got.structured_content is not None, got.content
                if got.structured_content["status"] in FINAL:
                    break
            full = await c.call_tool("get_experiment", {"experiment_id": exp_id, "samples": True})
            assert full.structured_content is not None
            pairs = got.structured_content["metrics"]["rows_per_s"].get("n_pairs")
            print(f"experiment {exp_id}: {got.structured_content['status']} at {pairs} pairs, {waits} waiting "
                  f"call(s), {told} progress notifications")
            print(f"get_experiment answer: {len(json.dumps(got.structured_content))} bytes, "
                  f"{len(json.dumps(full.structured_content))} with samples=true (load {os.getloadavg()[0]:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iters", type=int, default=6, help="NORMSOFT_ITERS, the example's work per run")
    anyio.run(run, parser.parse_args().iters)


if __name__ == "__main__":
    main()
