"""The agent's notes and fetch_sky_logs(wait_s): what the agent needs to keep its place."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from conftest import git, script_repo
from helpers import FINAL, call, error, wait_final

pytestmark = pytest.mark.anyio


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return script_repo(tmp_path, "sleep 0.2; echo METRIC score=$((1000 + RANDOM % 5))")


async def start(c: Client, repo: Path) -> None:
    await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="n")


@pytest.mark.slow
async def test_notes_survive_restore_worktree_and_a_restart_and_never_enter_a_candidate(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        first = await call(c, "add_note", text="analyze_bounds: memory_bound at 71% of triad bandwidth")
        await call(c, "add_note", text="idea: fuse norm+mul (source: ggml-cuda/ggml-cuda.cu:3100)\nsecond line")
        (repo / "value.txt").write_text("101\n")
        launched = await call(c, "launch_experiment", title="value 101", source="worktree", repeats="auto",
                              restore_worktree=True)
        await wait_final(c, launched["experiment_id"])
    path = repo / ".autoresearch" / "notes.md"
    assert first["notes_path"] == str(path) and first["entries"] == 1
    assert launched["worktree_restored"] and (repo / "value.txt").read_text() == "100\n"
    assert launched["changed_files"] == ["value.txt"]
    files = git(repo, "ls-tree", "-r", "--name-only", launched["candidate_commit"]).splitlines()
    assert not any(f.startswith(".autoresearch") for f in files)
    assert git(repo, "status", "--porcelain") == ""  # excluded from git: no untracked file to commit
    text = path.read_text()
    assert "memory_bound at 71%" in text and "  second line" in text

    monkeypatch.chdir(repo)  # a new server binds the session left in its working directory
    async with Client(build_server()) as c:
        listing = await call(c, "list_experiments")
    assert listing["notes_path"] == str(path)
    assert "memory_bound at 71%" in listing["notes"] and "fuse norm+mul" in listing["notes"]


async def test_the_report_shows_the_notes(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        await call(c, "add_note", text="tried <b>unrolling</b>: no_change")
        result = await call(c, "report", repo=str(repo))
    page = Path(result["html_path"]).read_text()
    assert '<section id="notes">' in page and "tried &lt;b&gt;unrolling&lt;/b&gt;: no_change" in page
    assert "Notes: 1 in .autoresearch/notes.md" in result["summary"]


async def test_a_note_must_say_something(repo: Path) -> None:
    async with Client(build_server()) as c:
        assert "call start_session" in await error(c, "add_note", text="before any session")
        await start(c, repo)
        assert "empty" in await error(c, "add_note", text="   \n ")
        assert "4000" in await error(c, "add_note", text="x" * 4001)


@pytest.mark.slow
async def test_fetch_with_wait_s_returns_on_each_change_of_status_instead_of_polling(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        launched = await call(c, "launch_experiment", title="value 102", source="patch", repeats="auto",
                              patch="--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+102\n")
        seen = ["queued"]
        with anyio.fail_after(120):
            while seen[-1] not in FINAL:
                res = await call(c, "fetch_sky_logs", experiment_id=launched["experiment_id"], wait_s=60)
                seen.append(res["status"])
            again = await call(c, "fetch_sky_logs", experiment_id=launched["experiment_id"], wait_s=600)
        assert "600" in await error(c, "fetch_sky_logs", experiment_id=launched["experiment_id"], wait_s=601)
    # queued -> building -> running -> checking -> done: one call per change at most, no spinning
    assert seen[-1] == "done" and len(seen) <= 5
    assert again["status"] == "done"  # a final experiment answers at once
