"""Every platform on a real tree: llama.cpp's ggml (CPU backend) built for the host and, through the
aarch64-qemu preset's CMake toolchain file, for aarch64; a host winner then checked on aarch64.
Drives the real harness through an MCP client and reports:

- start_session: the host build and the aarch64 cross build of the session head (cold caches);
- one winner (a one-file change to ggml-cpu/ops.cpp): the host experiment, then the platform round
  (aarch64 candidate build with a warm compiler cache, and the checks under the emulator);
- the checks read the ELF header of libggml-cpu.so and run a small aarch64 program under qemu.

    python benchmarks/bench_platforms.py       (downloads the sdist once, about 75 MB; needs cmake,
                                                ccache, qemu-user and gcc/g++-aarch64-linux-gnu)
"""

from __future__ import annotations

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

# GGML_NATIVE only on the host: -march=native means nothing to a cross compiler. The value file lets
# the experiment be a winner on the host without timing anything (the build is what is measured here).
BENCH = """#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")"
native=$([ "$AUTORESEARCH_PLATFORM" = host ] && echo ON || echo OFF)
case "$1" in
  build)
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$native -DGGML_CCACHE=OFF \\
      -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null
    cmake --build build -j"$(nproc)" --target ggml-cpu >/dev/null ;;
  bench) echo "METRIC t=$(cat value.txt)" ;;
esac
"""
CHECKS = """#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")"
lib=$(find build -name 'libggml-cpu.so' | head -1)
machine=$(readelf -h "$lib" | awk -F: '/Machine/ {gsub(/^ +/, "", $2); print $2}')
echo "$AUTORESEARCH_PLATFORM: $lib is $machine"
case "$AUTORESEARCH_PLATFORM" in
  aarch64-qemu) [ "$machine" = AArch64 ] ;;
  *) [ "$machine" = "Advanced Micro Devices X86-64" ] ;;
esac
printf '#include <stdio.h>\\nint main(void){puts(sizeof(void*)==8?"ok":"no");return 0;}\\n' > /tmp/ar-probe-$$.c
${CC:-cc} -o /tmp/ar-probe-$$ /tmp/ar-probe-$$.c
[ "$($AUTORESEARCH_EMULATOR /tmp/ar-probe-$$)" = ok ]
rm -f /tmp/ar-probe-$$ /tmp/ar-probe-$$.c
"""


def make_repo(root: Path) -> Path:
    repo = root / "ggml"
    shutil.copytree(realtree.llama_cpp_tree(realtree.CURRENT) / "ggml", repo)
    (repo / "ggml.pc.in").write_text("")  # the sdist leaves out this install-only template
    (repo / "autoresearch.sh").write_text(BENCH)
    (repo / "autoresearch.checks.sh").write_text(CHECKS)
    (repo / "value.txt").write_text("100\n")
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"],
                ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "ggml"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    return repo


def winner(repo: Path) -> str:
    """A change to ggml-cpu/ops.cpp (really compiled) plus a better value, as a patch."""
    ops = repo / "src" / "ggml-cpu" / "ops.cpp"
    original = ops.read_text()
    ops.write_text(original + '\nextern "C" int ggml_autoresearch_probe(void) { return 1; }\n')
    (repo / "value.txt").write_text("90\n")
    patch = subprocess.run(["git", "diff"], cwd=repo, check=True, capture_output=True, text=True).stdout
    subprocess.run(["git", "checkout", "--", "."], cwd=repo, check=True)
    return patch


async def call(c: Client, name: str, **args: Any) -> dict[str, Any]:
    r = await c.call_tool(name, args)
    if r.is_error:
        sys.exit(f"{name} failed: {' '.join(getattr(x, 'text', '') for x in r.content)}")
    assert r.structured_content is not None
    return r.structured_content


async def main() -> None:
    for tool in ("cmake", "ccache", "qemu-aarch64", "aarch64-linux-gnu-g++", "readelf"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (scripts/setup.sh installs what is missing, as root)")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AUTORESEARCH_CACHE_DIR"] = str(Path(tmp) / "cache")
        os.environ["CCACHE_DIR"] = str(Path(tmp) / "ccache")  # an empty cache: the first builds are cold
        repo = make_repo(Path(tmp))
        async with Client(build_server()) as c:
            t0 = time.monotonic()
            started = await call(c, "start_session", repo=str(repo), metric="t", direction="lower", tag="bench",
                                 platforms=["host", "aarch64-qemu"])
            start_s = time.monotonic() - t0
            t1 = time.monotonic()
            exp = await call(c, "launch_experiment", title="probe", source="patch", patch=winner(repo), repeats=14)
            host_s = platforms_s = 0.0
            while True:
                res = await call(c, "fetch_sky_logs", experiment_id=exp["experiment_id"], tail_lines=0, wait_s=30)
                if res["status"] in ("done", "failed", "checks_failed") and not host_s:
                    host_s = time.monotonic() - t1
                if host_s and all(p["status"] not in ("queued", "building", "running", "checking")
                                  for p in res["platforms"]):
                    platforms_s = time.monotonic() - t1 - host_s
                    break
            log = (repo / ".autoresearch" / "logs" / f"{exp['experiment_id']}-aarch64-qemu.log").read_text()
            committed = await call(c, "commit_winner", experiment_id=exp["experiment_id"])
    [arm] = res["platforms"]
    print(f"tree: llama-cpp-python=={realtree.CURRENT} ggml, target ggml-cpu, {os.cpu_count()} cores")
    print(f"start_session (host build {started['build_duration_s']:.1f} s, then the aarch64 cross build and "
          f"checks): {start_s:.1f} s")
    for line in started["platforms"]:
        print(f"  {line}")
    print(f"host experiment (build, 14 pairs, checks): {host_s:.1f} s; verdict {res['verdict']}")
    print(f"aarch64-qemu round after it: {platforms_s:.1f} s; {arm['summary']}")
    print("  " + next(line for line in log.splitlines() if line.startswith("aarch64-qemu:")))
    print("commit message platforms: " + committed["message"].split("Platforms:\n")[1].split("\nFiles:")[0]
          .replace("\n", " | "))


if __name__ == "__main__":
    anyio.run(main)
