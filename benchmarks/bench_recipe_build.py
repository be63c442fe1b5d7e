"""Build times of the llama.cpp recipe on a real llama.cpp tree (llama-cpp-python's vendored copy):

- cold: `autoresearch.sh build` in a fresh worktree with an empty compiler cache;
- warm: a one-file change to ggml-cpu/ops.cpp in another fresh worktree, with the cache the cold
  build filled (what every candidate of a session costs), with its ccache hits and misses.

Both worktrees are set up the way the harness sets them up (CCACHE_BASEDIR at the worktree,
CCACHE_NOHASHDIR=1). The figures go to stdout.

    python benchmarks/bench_recipe_build.py      (downloads the sdist once, about 75 MB)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import realtree
from autoresearch_mcp import recipes


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def build(tree: Path, cache: Path) -> tuple[float, str]:
    env = {**os.environ, "CCACHE_DIR": str(cache), "CCACHE_BASEDIR": str(tree), "CCACHE_NOHASHDIR": "1"}
    subprocess.run(["ccache", "-z"], env=env, check=True, capture_output=True)
    t0 = time.monotonic()
    subprocess.run(["bash", "autoresearch.sh", "build"], cwd=tree, env=env, check=True, capture_output=True)
    elapsed = time.monotonic() - t0
    stats = subprocess.run(["ccache", "--print-stats"], env=env, check=True, capture_output=True, text=True).stdout
    counts = dict(line.split("\t") for line in stats.splitlines() if "\t" in line)
    hits = int(counts.get("direct_cache_hit", 0)) + int(counts.get("preprocessed_cache_hit", 0))
    return elapsed, f"{hits} hits, {counts.get('cache_miss', '?')} misses"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-recipe-") as tmp:
        root = Path(tmp)
        repo = root / "llama.cpp"
        shutil.copytree(realtree.llama_cpp_tree(realtree.CURRENT), repo)
        recipes.write(recipes.get("llama.cpp"), repo)
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "tree")
        cache = root / "ccache"
        base, cand = root / "base", root / "cand"
        git(repo, "worktree", "add", "-q", "--detach", str(base), "HEAD")
        git(repo, "worktree", "add", "-q", "--detach", str(cand), "HEAD")
        ops = cand / "ggml" / "src" / "ggml-cpu" / "ops.cpp"
        ops.write_text(ops.read_text() + '\nextern "C" int ggml_autoresearch_probe(void) { return 1; }\n')
        print(f"tree: llama-cpp-python=={realtree.CURRENT}, targets llama-bench llama-perplexity, "
              f"{os.cpu_count()} cores")
        cold, cold_cache = build(base, cache)
        print(f"cold build (empty ccache): {cold:.0f} s ({cold_cache})")
        warm, warm_cache = build(cand, cache)
        print(f"candidate, one file changed, fresh worktree, warm ccache: {warm:.0f} s ({warm_cache})")


if __name__ == "__main__":
    main()
