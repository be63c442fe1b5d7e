"""start_session: binding a repository, the session branch, and benchmark validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from conftest import git, init_repo, script_repo
from helpers import ToolFailed

pytestmark = pytest.mark.anyio


async def start(repo: Path, **kw: object) -> dict[str, Any]:
    args = {"repo": str(repo), "metric": kw.pop("metric", "rows_per_s"), "direction": kw.pop("direction", "higher"),
            **kw}
    async with Client(build_server()) as c:
        result = await c.call_tool("start_session", args)
    if result.is_error:
        raise ToolFailed(" ".join(getattr(x, "text", "") for x in result.content))
    assert result.structured_content is not None
    return result.structured_content


async def test_validates_the_benchmark_and_shows_raw_lines_beside_parsed_values(example_repo: Path) -> None:
    res = await start(example_repo, tag="t1")
    assert res["branch"] == "autoresearch/t1"
    assert git(example_repo, "rev-parse", "--abbrev-ref", "HEAD") == "autoresearch/t1"
    assert len(res["runs"]) == 2
    assert all(line.startswith("METRIC ") for line in res["raw_metric_lines"])
    rows = res["baseline"]["rows_per_s"]
    assert rows["n"] == 2 and rows["mean"] > 0 and len(rows["samples"]) == 2
    assert "ms_per_row" in res["baseline"]
    assert res["spread_pct"] is not None
    config = json.loads((example_repo / ".autoresearch" / "config.json").read_text())
    assert config["metric"] == "rows_per_s" and config["session_id"] == res["session_id"]
    assert ".autoresearch/" in (example_repo / ".git" / "info" / "exclude").read_text()
    assert git(example_repo, "status", "--porcelain") == ""


async def test_resuming_the_same_tag_keeps_the_session(example_repo: Path) -> None:
    first = await start(example_repo, tag="again")
    second = await start(example_repo, tag="again")
    assert second["resumed"] is True and second["session_id"] == first["session_id"]


async def test_an_existing_branch_of_another_session_is_refused(example_repo: Path) -> None:
    git(example_repo, "branch", "autoresearch/taken")
    with pytest.raises(ToolFailed, match="already exists"):
        await start(example_repo, tag="taken")


@pytest.mark.parametrize("kind", ["missing", "file", "not-git"])
async def test_repo_must_be_a_git_work_tree(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x"
    if kind == "file":
        path.write_text("hi")
    elif kind == "not-git":
        path.mkdir()
    expected = {"missing": "does not exist", "file": "is a file", "not-git": "not inside a git repository"}[kind]
    with pytest.raises(ToolFailed, match=expected):
        await start(path)


async def test_uncommitted_changes_are_refused_and_named(example_repo: Path) -> None:
    (example_repo / "Makefile").write_text("changed\n")
    (example_repo / "new.txt").write_text("new\n")
    with pytest.raises(ToolFailed, match=r"uncommitted changes \(.*Makefile.*new.txt"):
        await start(example_repo)


async def test_missing_scripts_are_created_from_templates(tmp_path: Path) -> None:
    repo = tmp_path / "bare"
    repo.mkdir()
    (repo / "main.c").write_text("int main(void){return 0;}\n")
    init_repo(repo)
    res = await start(repo, tag="tpl")
    assert set(res["templates_created"]) == {"autoresearch.sh", "autoresearch.checks.sh"}
    assert (repo / "autoresearch.sh").read_text().startswith("#!/usr/bin/env bash")
    assert any("start_session again" in s for s in res["next_steps"])
    assert res["runs"] == []


@pytest.mark.parametrize(
    ("bench", "expected"),
    [
        ("echo no metric here", "missing or not a finite number"),
        ("echo METRIC score=nan", "not finite"),
        ("echo METRIC score=1; exit 3", "exited with status 3"),
        ("echo METRIC score=1; echo METRIC score=2", "more than once"),
    ],
)
async def test_a_benchmark_that_cannot_be_trusted_is_an_error(tmp_path: Path, bench: str, expected: str) -> None:
    repo = script_repo(tmp_path, bench)
    with pytest.raises(ToolFailed, match=expected):
        await start(repo, metric="score")


async def test_a_hanging_benchmark_is_killed_with_its_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "child-alive"
    repo = script_repo(tmp_path, f"(sleep 30; touch {marker}) & sleep 30")
    config_dir = repo / ".autoresearch"
    config_dir.mkdir()
    # a tag resumes nothing here; set the timeout through the config kept across sessions
    (config_dir / "config.json").write_text(json.dumps({
        "session_id": "x", "tag": "old", "branch": "autoresearch/old", "repo": str(repo), "metric": "score",
        "direction": "higher", "executor": "local", "start_commit": "0", "created_at": "now",
        "timeouts": {"build": 60, "bench": 1, "checks": 60}}))
    with pytest.raises(ToolFailed, match="timed out after 1 s"):
        await start(repo, metric="score", tag="hang")
    import time

    time.sleep(0.5)
    assert not marker.exists()


async def test_secondary_metric_problems_are_warnings(tmp_path: Path) -> None:
    bench = 'echo METRIC score=100; if [ -e ran ]; then echo METRIC extra=3; fi; touch ran'
    res = await start(script_repo(tmp_path, bench), metric="score")
    assert any("'extra' is missing in run(s) [0]" in w for w in res["warnings"])
