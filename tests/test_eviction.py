"""A full disk never stops a session for good: before a launch is refused for want of space, the server evicts the
trees of its cache folder that no job holds or waits for, and never one in use (issue #51)."""

from __future__ import annotations

from pathlib import Path

from autoresearch_mcp.worker import builds
from autoresearch_mcp.worker.builds import BUILT_MARKER

FILL = "truncate -s 2G filler"


def test_a_failed_build_leaves_no_marker_even_one_it_wrote_itself(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "autoresearch.sh").write_text(f'echo "{{}}" > {BUILT_MARKER}; {FILL}; exit 1\n')
    with open(tmp_path / "build.log", "w") as log:
        res = builds.build_tree(str(tree), 60, log)
    assert not res.ok and not (tree / BUILT_MARKER).exists()
