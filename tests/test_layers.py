"""The package's layers hold: import-linter checks the contract in pyproject.toml, and no two
subpackages import each other (a package-level cycle), whatever the contract lists."""

from __future__ import annotations

import ast
import graphlib
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "server" / "autoresearch_mcp"


def _package_graph() -> dict[str, set[str]]:
    """Top-level part of the package (a subpackage or a module) -> the parts it imports."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("autoresearch_mcp"):
                names = node.module.split(".")[1:2] or [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("autoresearch_mcp.")]
            else:
                continue
            edges[part].update(n for n in names if n != part and n != "__version__")
    return edges


def test_no_two_parts_of_the_package_import_each_other() -> None:
    graph = _package_graph()
    assert {"core", "measure", "executors", "experiments"} <= set(graph)
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"package-level import cycle: {' -> '.join(exc.args[1])}")


def test_the_layer_contract_holds() -> None:
    # the interpreter's own environment first: the venv need not be on PATH (`.venv/bin/python -m pytest`)
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint is not None, "import-linter is a dev dependency: pip install -e '.[dev]'"
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT,  # reads pyproject.toml there
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout
