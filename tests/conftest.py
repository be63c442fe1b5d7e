"""Shared fixtures: real git repositories in temporary directories, an isolated cache, MCP clients."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoresearch_mcp import resources, validation

EXAMPLE = resources.example_dir() / "normsoft"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A `serial` test is in the slow tier, and runs in one xdist group: `pytest -m serial` then runs them one at a
    time on one worker, never beside another test (scripts/test.sh runs them with `-n 0`)."""
    for item in items:
        if item.get_closest_marker("serial") is not None:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group("serial"))


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
    # the machine's other work (the suite's own, a neighbour's) would change the threads a session starts from;
    # a test that means it sets it (test_session.py)
    monkeypatch.setattr(validation, "busy_cpus", lambda *_args, **_kw: 0.0)


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


def balanced_noise(width: float | str = 0.004) -> str:
    """Shell that sets $n, this run's noise factor, to 1 +- width/2 without chance in it (`width` may
    be a shell expression, such as "$w", for noise that depends on the tree).

    Each tree counts its own runs (in a file in the tree, the one place a confined run can write); its runs
    2k and 2k+1 get +a_k and -a_k, with a_k from a golden-ratio sequence in the tree's own phase. The
    differences of the pairs are then symmetric around zero whatever order the pairs run in, so a test
    that expects "no change" (or one metric held) cannot see a false winner: $RANDOM noise would, as
    often as the design's own false-positive rate, one run in sixty."""
    return ('h=$(pwd | cksum | cut -d" " -f1); f=.autoresearch-noise; '
            'i=$(cat "$f" 2>/dev/null || echo 0); echo $((i+1)) > "$f"; '
            f"n=$(awk -v i=$i -v h=$h -v w={width} "
            "'BEGIN{g=(int(i/2)+1)*0.6180339887+h/4294967296; a=g-int(g); "
            "printf \"%.9f\", 1+((i%2==0)?1:-1)*w/2*a}'); ")


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


def slow_clock(rate: float) -> str:
    """C that, linked into a program, makes its clock_gettime run at `rate` of the real clock (a forged timer)."""
    return ("\n#include <sys/syscall.h>\n#include <time.h>\n#include <unistd.h>\n\n"
            "int clock_gettime(clockid_t id, struct timespec *ts) {\n"
            "    static double origin = -1.0;\n"
            "    struct timespec real;\n"
            "    long r = syscall(SYS_clock_gettime, id, &real);\n"
            "    double t = real.tv_sec + real.tv_nsec * 1e-9;\n"
            "    if (origin < 0) origin = t;\n"
            f"    t = origin + (t - origin) * {rate};\n"
            "    ts->tv_sec = (time_t)t;\n"
            "    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);\n"
            "    return (int)r;\n}\n")
