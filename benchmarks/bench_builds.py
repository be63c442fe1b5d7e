"""Build turnaround on a real C/C++ tree: llama.cpp's ggml (CPU backend), as vendored in the
llama-cpp-python sdist on PyPI. Drives the real harness through an MCP client and reports:

- cold build: the session's first build with an empty compiler cache;
- candidate in a fresh worktree with a warm cache (a one-file change to ggml-cpu/ops.cpp);
- incremental build: the same kind of change in a persistent slot (`incremental` mode);
- harness overhead: experiment wall time minus the build, bench and checks commands.

    python benchmarks/bench_builds.py          (downloads the sdist once, about 75 MB)
"""

from __future__ import annotations

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import realtree
from autoresearch_mcp.app import build_server

BENCH = """#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")"
case "$1" in
  build)
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CCACHE=OFF \
      -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null
    cmake --build build -j"$(nproc)" --target ggml-cpu >/dev/null ;;
  bench) echo "METRIC build_ok=1" ;;
esac
"""


def change(repo: Path, n: int) -> str:
    """A one-file change that really changes the compiled code of ggml-cpu/ops.cpp, as a patch."""
    ops = repo / "src" / "ggml-cpu" / "ops.cpp"
    original = ops.read_text()
    ops.write_text(original + f'\nextern "C" int ggml_autoresearch_probe_{n}(void) {{ return {n}; }}\n')
    patch = subprocess.run(["git", "diff"], cwd=repo, check=True, capture_output=True, text=True).stdout
    ops.write_text(original)
    return patch


def make_repo(root: Path) -> Path:
    repo = root / "ggml"
    shutil.copytree(realtree.llama_cpp_tree(realtree.CURRENT) / "ggml", repo)
    (repo / "ggml.pc.in").write_text("")  # the sdist leaves out this install-only template
    (repo / "autoresearch.sh").write_text(BENCH)
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"],
                ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "ggml"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    return repo


async def run(c: Client, title: str, patch: str) -> tuple[dict[str, Any], float]:
    t0 = time.monotonic()
    r = await c.call_tool("launch_experiment", {"title": title, "source": "patch", "patch": patch, "repeats": 3})
    exp_id = (r.structured_content or {})["experiment_id"]
    while True:
        s = (await c.call_tool("fetch_sky_logs", {"experiment_id": exp_id, "tail_lines": 0})).structured_content
        assert s is not None
        if s["status"] in ("done", "failed", "checks_failed"):
            return s, time.monotonic() - t0
        await anyio.sleep(0.2)


async def main() -> None:
    if shutil.which("ccache") is None:
        sys.exit("ccache is not installed (apt-get install ccache)")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AUTORESEARCH_CACHE_DIR"] = str(Path(tmp) / "cache")
        os.environ["CCACHE_DIR"] = str(Path(tmp) / "ccache")  # an empty cache: the first build is cold
        repo = make_repo(Path(tmp))
        async with Client(build_server()) as c:
            r = await c.call_tool("start_session", {"repo": str(repo), "metric": "build_ok", "direction": "higher",
                                                    "tag": "bench"})
            cold = (r.structured_content or {})["build_duration_s"]
            fresh, fresh_wall = await run(c, "fresh worktree", change(repo, 1))
            config = repo / ".autoresearch" / "config.json"
            config.write_text(json.dumps({**json.loads(config.read_text()), "incremental": True,
                                          "build_parallelism": 1}))
            await c.call_tool("start_session", {"repo": str(repo), "metric": "build_ok", "direction": "higher",
                                                "tag": "bench"})
            await run(c, "slot warm-up", change(repo, 2))
            inc, inc_wall = await run(c, "incremental", change(repo, 3))
    fb, ib = fresh["build"]["candidate"], inc["build"]["candidate"]
    print(f"tree: llama-cpp-python=={realtree.CURRENT} ggml, target ggml-cpu, {os.cpu_count()} cores")
    print(f"cold build (empty cache):                    {cold:7.1f} s")
    print(f"candidate, fresh worktree, warm cache:       {fb['duration_s']:7.1f} s  "
          f"({fb['duration_s'] / cold:.1%} of cold; ccache {fb['cache']})")
    print(f"candidate, incremental slot:                 {ib['duration_s']:7.1f} s  "
          f"({ib['duration_s'] / cold:.1%} of cold; ccache {ib['cache']})")
    for name, res, wall in (("fresh", fresh, fresh_wall), ("incremental", inc, inc_wall)):
        d = res["durations_s"]
        inside = d.get("build", 0) + d.get("bench", 0) + d.get("checks", 0)
        print(f"experiment ({name}): wall {wall:6.1f} s, build {d.get('build', 0):6.1f} s, bench "
              f"{d.get('bench', 0):5.1f} s, harness overhead {wall - inside:5.2f} s")


if __name__ == "__main__":
    anyio.run(main)
