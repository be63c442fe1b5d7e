"""Pairs in turns are the default wherever they measure well (issue 40): a session whose config names no
`pairing` gets turns when each side is confined, every judged metric can be judged in turns and a run is long
enough; otherwise one after the other, with the reason in its settings. The choice is recorded in the config, and
a config that names a pairing keeps it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.store.config import config_path
from autoresearch_mcp.worker import sandbox
from conftest import init_repo
from helpers import call

# about 0.35 s of CPU a run, timed on the CPU clock
BURN = """import time
t = time.process_time()
while time.process_time() - t < 0.35:
    pass
print("METRIC {name}=%.1f" % ((time.process_time() - t) * 1000))
"""


def repo_printing(tmp_path: Path, name: str, config: dict[str, object] | None = None) -> Path:
    repo = tmp_path / f"bench-{name.replace('.', '-')}"
    repo.mkdir()
    (repo / "bench.py").write_text(BURN.format(name=name))
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\ncase \"$1\" in\n  build) true ;;\n  bench) python3 bench.py ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    init_repo(repo)
    (repo / ".autoresearch").mkdir()
    config_path(repo).write_text(json.dumps({"threads": 1, **(config or {})}) + "\n")
    return repo


async def started(repo: Path, metric: str) -> dict[str, object]:
    async with Client(build_server()) as c:
        return await call(c, "start_session", repo=str(repo), metric=metric, direction="lower", tag="p")


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_bench_that_prints_a_time_pairs_in_turns_by_default_and_the_choice_is_recorded(tmp_path: Path) -> None:
    repo = repo_printing(tmp_path, "t_ms")
    result = await started(repo, "t_ms")
    assert result["pairing"] == "turns", result["settings"]
    assert "in turns" in result["settings"]["pairing"]  # type: ignore[index]
    assert json.loads(config_path(repo).read_text())["pairing"] == "turns"
    # the baseline is measured as the pairs will be, in turns: t_ms over its own turns, the printed figure kept
    assert {"t_ms", "t_ms.wall"} <= set(result["baseline"]), result["baseline"]  # type: ignore[arg-type]


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_metric_turns_cannot_judge_pairs_one_after_the_other_and_says_how_to_change_it(
        tmp_path: Path) -> None:
    repo = repo_printing(tmp_path, "score")
    result = await started(repo, "score")
    assert result["pairing"] == "sequential"
    why = result["settings"]["pairing"]  # type: ignore[index]
    assert "score.cpu" in why and '"pairing": "turns"' in why, why
    assert json.loads(config_path(repo).read_text())["pairing"] == "sequential"


@pytest.mark.serial
@pytest.mark.anyio
async def test_with_the_sandbox_off_pairs_run_one_after_the_other(tmp_path: Path) -> None:
    repo = repo_printing(tmp_path, "t_ms", {"sandbox": "off"})
    result = await started(repo, "t_ms")
    assert result["pairing"] == "sequential"
    assert "sandbox off" in result["settings"]["pairing"]  # type: ignore[index]


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_config_that_names_a_pairing_keeps_it(tmp_path: Path) -> None:
    repo = repo_printing(tmp_path, "t_ms", {"pairing": "sequential"})
    result = await started(repo, "t_ms")
    assert result["pairing"] == "sequential"
    assert json.loads(config_path(repo).read_text())["pairing"] == "sequential"
