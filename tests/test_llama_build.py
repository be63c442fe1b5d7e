"""The llama.cpp recipe builds its three programs from a real llama.cpp tree (vendored in the llama-cpp-python
sdist), as the harness builds a tree. In the slow tier, which runs before the serial one: its cold build (about
4 minutes on 2 cores) fills the compiler cache that the serial tier's llama.cpp tests then read, so their
builds, which run with nothing beside them, are cache hits."""

from __future__ import annotations

from pathlib import Path

import pytest

import realtree
from test_llama_opbench import build, recipe_tree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]


def test_the_recipe_builds_llama_bench_llama_perplexity_and_the_op_benchmark(tmp_path: Path) -> None:
    try:
        source = realtree.llama_cpp_tree(realtree.CURRENT)
    except realtree.TreeUnavailable as exc:
        pytest.skip(f"no llama.cpp tree: {exc}")
    tree = recipe_tree(source, tmp_path / "llama.cpp")
    build(tree)
    for program in ("llama-bench", "llama-perplexity", "autoresearch-opbench"):
        assert (tree / "build-autoresearch" / "bin" / program).is_file(), program
