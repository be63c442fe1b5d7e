"""Fast turnaround: builds reused by content, compiler-cache settings, incremental mode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from conftest import git, script_repo
from helpers import call, error, wait_final

pytestmark = pytest.mark.anyio

VALUE = "echo METRIC score=$(cat value.txt)"


def value_patch(old: str, new: str) -> str:
    return f"--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-{old}\n+{new}\n"


# A build writes only its own tree (it is confined): each appends to a log there, and the test reads
# every tree's log, in the order the builds ran.
BUILD_LOG = "built.log"


@pytest.fixture
def logged(tmp_path: Path) -> tuple[Path, Path]:
    """A repository whose build logs the value it builds (and its cache settings) in its own tree."""
    build = (f'echo "$(date +%s%N) $(cat value.txt) ${{CCACHE_BASEDIR:-}} ${{CMAKE_CXX_COMPILER_LAUNCHER:-}} '
             f'$PWD" >> {BUILD_LOG}')
    return script_repo(tmp_path, VALUE, build=build), tmp_path / "cache"


def build_lines(cache: Path) -> list[list[str]]:
    """Every build's log line (value, cache settings, tree), oldest first."""
    lines = [line.split() for log in cache.glob(f"worktrees/*/*/{BUILD_LOG}") for line in log.read_text().splitlines()]
    return [fields[1:] for fields in sorted(lines, key=lambda fields: int(fields[0]))]


def built_values(cache: Path) -> list[str]:
    return [fields[0] for fields in build_lines(cache)]


async def start(c: Client, repo: Path) -> dict[str, Any]:
    return await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="b")


@pytest.mark.slow
async def test_the_next_baseline_reuses_the_committed_winners_build(logged: tuple[Path, Path]) -> None:
    repo, log = logged
    async with Client(build_server()) as c:
        await start(c, repo)
        first = await call(c, "launch_experiment", title="110", source="patch", patch=value_patch("100", "110"),
                           repeats=30)
        assert (await wait_final(c, first["experiment_id"]))["verdict"] == "improved"
        await call(c, "commit_winner", experiment_id=first["experiment_id"])
        second = await call(c, "launch_experiment", title="120", source="patch", patch=value_patch("110", "120"),
                            repeats="auto")
        res = await wait_final(c, second["experiment_id"])
        listing = await call(c, "list_experiments")
    assert res["build"]["baseline"]["mode"] == "reused"
    assert built_values(log) == ["100", "110", "120"]  # each content was built exactly once
    assert {"build", "bench", "checks"} <= set(listing["totals"])


@pytest.mark.slow
async def test_a_candidate_measured_again_reuses_its_build(tmp_path: Path) -> None:
    noisy = ("awk -v v=$(cat value.txt) -v s=$RANDOM "
             "'BEGIN{srand(s); printf \"METRIC score=%.3f\\n\", v*(1+0.6*rand())}'")
    repo = script_repo(tmp_path, noisy, build=f'echo "$(date +%s%N) $(cat value.txt)" >> {BUILD_LOG}')
    async with Client(build_server()) as c:
        await start(c, repo)
        patch = value_patch("100", "101")
        first = await call(c, "launch_experiment", title="small", source="patch", patch=patch, repeats=30)
        assert (await wait_final(c, first["experiment_id"]))["verdict"] in ("inconclusive", "noisy")
        again = await call(c, "launch_experiment", title="more pairs", source="experiment",
                           experiment_id=first["experiment_id"], repeats="auto")
        assert again["experiment_id"] == first["experiment_id"] and again["prior_pairs"] == 30
        res = await wait_final(c, again["experiment_id"])
    assert res["build"]["candidate"]["mode"] == "reused"
    assert built_values(tmp_path / "cache") == ["100", "101"]


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed (scripts/setup.sh installs it)")
async def test_builds_run_with_compiler_cache_settings_for_their_own_worktree(logged: tuple[Path, Path]) -> None:
    repo, log = logged
    async with Client(build_server()) as c:
        await start(c, repo)
    [[_value, basedir, launcher, cwd]] = build_lines(log)
    assert basedir == str(Path(cwd).resolve()) and launcher.endswith("ccache")
    assert not cwd.startswith(str(repo))  # built in a worktree in the cache, never in the user's tree


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed (scripts/setup.sh installs it)")
async def test_a_candidate_in_a_fresh_worktree_reuses_cached_objects(
    example_repo: Path, patches: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher", tag="cc")
        launched = await call(c, "launch_experiment", title="fuse", source="patch", repeats="auto",
                              patch=(patches / "fuse-rms-norm-mul.patch").read_text())
        res = await wait_final(c, launched["experiment_id"])
    cache = res["build"]["candidate"]["cache"]
    assert res["build"]["candidate"]["mode"] == "fresh"
    assert cache == {"hits": 2, "misses": 1}  # only the changed backend file is compiled again


@pytest.mark.slow
async def test_incremental_winners_must_be_confirmed_on_a_clean_build(logged: tuple[Path, Path]) -> None:
    repo, log = logged
    async with Client(build_server()) as c:
        await start(c, repo)
        config = repo / ".autoresearch" / "config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "incremental": True, "build_parallelism": 1}))
        await start(c, repo)  # resuming keeps the settings a person edited
        a = await call(c, "launch_experiment", title="105", source="patch", patch=value_patch("100", "105"),
                       repeats="auto")
        await wait_final(c, a["experiment_id"])
        b = await call(c, "launch_experiment", title="120", source="patch", patch=value_patch("100", "120"),
                       repeats=30)
        res = await wait_final(c, b["experiment_id"])
        assert res["verdict"] == "improved" and res["build"]["candidate"]["mode"] == "incremental"
        assert "incremental build" in await error(c, "commit_winner", experiment_id=b["experiment_id"])
        confirm = await call(c, "launch_experiment", title="120, clean", source="commit",
                             commit=b["candidate_commit"], clean_build=True, repeats=30)
        confirmed = await wait_final(c, confirm["experiment_id"])
        assert confirmed["build"]["candidate"]["mode"] == "fresh"
        await call(c, "commit_winner", experiment_id=confirm["experiment_id"])
    slot_builds = [fields for fields in build_lines(log) if "/slot-" in fields[-1]]
    assert [fields[0] for fields in slot_builds] == ["105", "120"]  # one persistent slot moved along
    assert git(repo, "show", "autoresearch/b:value.txt") == "120"
