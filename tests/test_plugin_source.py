"""The marketplace ships plugin/, not the repository's root: Claude Code copies a plugin's source folder into its
cache, and a checkout's root holds a developer's .venv (1.2 GB) and build outputs. plugin/ holds what the plugin
needs and nothing else (scripts/check_plugin.sh installs it with Claude Code from a clone that has a .venv)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugin"


def test_the_marketplace_ships_the_plugin_folder() -> None:
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert [p["source"] for p in market["plugins"]] == ["./plugin"]
    for name in (".claude-plugin/plugin.json", ".mcp.json", "hooks/hooks.json", "skills/autoresearch/SKILL.md",
                 "agents/change-reviewer.md"):
        copy = PLUGIN / name
        assert not copy.is_symlink() and copy.read_bytes() == (ROOT / name).read_bytes(), name
    for name in ("bin", "hooks/run", "server", "pyproject.toml", "instructions.md", "examples",
                 "autoresearch.sh.template", "autoresearch.checks.sh.template"):
        assert (PLUGIN / name).is_symlink() and (PLUGIN / name).resolve() == (ROOT / name).resolve(), name


def test_a_copy_of_the_plugin_folder_builds_the_package(tmp_path: Path) -> None:
    """What the launcher installs from the cache's copy (links resolved, as Claude Code copies them)."""
    copy = tmp_path / "plugin"
    shutil.copytree(PLUGIN, copy, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    assert sum(f.stat().st_size for f in copy.rglob("*") if f.is_file()) < 20_000_000
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path / "wheel"), str(copy)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [wheel] = (tmp_path / "wheel").glob("autoresearch_mcp-*.whl")
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, text=True,
                           check=True).stdout
    assert "autoresearch_mcp/instructions.md" in names and "autoresearch_mcp/examples/normsoft" in names
