"""Shared fixtures: real git repositories in temporary directories, an isolated cache, MCP clients."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoresearch_mcp import resources

EXAMPLE = resources.example_dir() / "normsoft"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own cache directory, working directory and git identity: an in-process
    server never binds (and recovers) a session it finds in the developer's working directory."""
    monkeypatch.setenv("AUTORESEARCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    for var in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(var, "Test Person")
    for var in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(var, "test@example.com")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def example_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The bundled normsoft example as a fresh git repository, with a short benchmark."""
    repo = tmp_path / "normsoft"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("normsoft", "patches"))
    init_repo(repo)
    monkeypatch.setenv("NORMSOFT_ITERS", "6")
    yield repo


@pytest.fixture
def patches() -> Path:
    return EXAMPLE / "patches"


def script_repo(tmp_path: Path, bench: str, checks: str = "exit 0", build: str = "true") -> Path:
    """A repository whose benchmark is a few lines of shell (for failure modes)."""
    repo = tmp_path / "scripted"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n"
        f"  build) {build} ;;\n  bench) {bench} ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text(f"#!/usr/bin/env bash\n{checks}\n")
    (repo / "value.txt").write_text("100\n")
    return init_repo(repo)
