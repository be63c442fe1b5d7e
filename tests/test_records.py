"""Typed, versioned ledger records: a ledger written before records had a `schema_version` (format
0, `tests/data/ledger_v0/`, made by its make.py) is read by today's code with the same answers, each
migration is a plain function of one record, and what this code cannot read is skipped with a warning."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.core.config import SessionConfig
from autoresearch_mcp.executors import skypilot
from autoresearch_mcp.executors.sky_pool import SkyPool
from autoresearch_mcp.report import write_report
from conftest import git
from helpers import call
from sky_fake import FakeSky

pytestmark = pytest.mark.anyio

V0 = Path(__file__).parent / "data" / "ledger_v0"


@pytest.fixture
def v0_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The format-0 session as it was left: its repository (from the bundle), config and ledger; the
    working directory is the repository, so a server binds the session again from these files."""
    repo = tmp_path / "values"
    subprocess.run(["git", "init", "-q", "-b", "tmp", str(repo)], check=True)
    git(repo, "fetch", "-q", str(V0 / "repo.bundle"), "refs/*:refs/*")
    git(repo, "checkout", "-q", "autoresearch/v0")
    state = repo / ".autoresearch"
    state.mkdir()
    holdout = tmp_path / "private" / "holdout.sh"
    (state / "config.json").write_text(_placed((V0 / "config.json").read_text(), repo, holdout))
    shutil.copy(V0 / "ledger.jsonl", state / "ledger.jsonl")
    fake = FakeSky(tmp_path / "vms")
    pools: list[SkyPool] = []

    def executor(repo: Any, cfg: SessionConfig, settings: Any) -> SkyPool:
        pools.append(SkyPool(Path(repo.working_dir), cfg, fake, tmp_path / "staging", poll_s=0.02))
        return pools[-1]

    monkeypatch.setattr(skypilot, "SkyExecutor", executor)
    monkeypatch.chdir(repo)
    yield repo
    for pool in pools:
        pool.close()


def _placed(text: str, repo: Path, holdout: Path) -> str:
    return text.replace("$REPO", str(repo)).replace("$HOLDOUT", str(holdout))


def _expected(repo: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_placed((V0 / "expected.json").read_text(), repo, repo.parent / "private"
                                              / "holdout.sh"))
    return data


async def test_a_format_0_ledger_gives_the_same_list_and_fetch_answers(v0_repo: Path) -> None:
    expected = _expected(v0_repo)
    async with Client(build_server()) as c:
        listed = await call(c, "list_experiments")
        fetched = {i: await call(c, "fetch_sky_logs", experiment_id=i, tail_lines=0)
                   for i in expected["fetch_sky_logs"]}
    assert listed == expected["list_experiments"]
    for exp_id, answer in fetched.items():
        assert answer == expected["fetch_sky_logs"][exp_id], exp_id
    assert (v0_repo / ".autoresearch" / "ledger.jsonl").read_bytes() == (V0 / "ledger.jsonl").read_bytes()


def test_a_format_0_ledger_gives_the_same_report_numbers(v0_repo: Path) -> None:
    report = write_report(str(v0_repo)).model_dump()
    assert {k: v for k, v in report.items() if not k.endswith("_path")} == _expected(v0_repo)["report"]
