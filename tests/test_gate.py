"""The gate cannot be walked around: a candidate never touches the session, the user's files or the
evidence. Each test plays a hostile or careless agent through a real MCP client (issue 12)."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters

from autoresearch_mcp.app import build_server
from conftest import balanced_noise, git, init_repo, script_repo
from helpers import call, error, wait_final

pytestmark = pytest.mark.anyio

# One sample: the value in value.txt with +/-0.2% noise (as in test_experiments).
NOISY_VALUE = (balanced_noise() + "awk -v v=$(cat value.txt) -v n=$n "
               "'BEGIN{printf \"METRIC score=%.5f\\n\", v*n}'")


def add_file(path: str, content: str = "x") -> str:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{content}\n"


def value_patch(old: str = "100", new: str = "110") -> str:
    return f"--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-{old}\n+{new}\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return script_repo(tmp_path, NOISY_VALUE)


async def session(c: Client, repo: Path, **kw: Any) -> dict[str, Any]:
    return await call(c, "start_session", repo=str(repo), metric="score", direction="higher",
                      tag=kw.pop("tag", "t"), **kw)


def set_config(repo: Path, **values: Any) -> None:
    path = repo / ".autoresearch" / "config.json"
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))


def answer_bytes(result: Any) -> int:
    return len(result.model_dump_json(by_alias=True).encode())


# --- 1. the session folder and checkout-changing files are always protected ---------------------------


@pytest.mark.parametrize("path", [".autoresearch/config.json", ".autoresearch/ledger.jsonl", ".AutoResearch/x",
                                  ".gitattributes", "src/.gitattributes", ".gitmodules", "AUTORESEARCH.SH"])
async def test_a_candidate_never_writes_into_the_session_folder_or_checkout_rules(repo: Path, path: str) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        set_config(repo, protected=[])  # the config cannot unprotect them
        await session(c, repo)
        msg = await error(c, "launch_experiment", title="forge", source="patch",
                          patch=value_patch() + add_file(path, '{"protected": []}'))
    assert "protected files" in msg and path in msg
    assert json.loads((repo / ".autoresearch" / "config.json").read_text())["metric"] == "score"


async def test_a_file_where_a_protected_folder_was_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    (repo / "bench").mkdir(parents=True)
    (repo / "autoresearch.sh").write_text(f"#!/usr/bin/env bash\ncase $1 in bench) {NOISY_VALUE};; esac\n")
    (repo / "autoresearch.checks.sh").write_text("exit 0\n")
    (repo / "value.txt").write_text("100\n")
    (repo / "bench" / "data.txt").write_text("1\n")
    init_repo(repo)
    async with Client(build_server()) as c:
        await session(c, repo)
        set_config(repo, protected=["autoresearch.sh", "bench/data.txt"])
        await session(c, repo)
        patch = ("--- a/bench/data.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-1\n" + add_file("bench", "now a file"))
        msg = await error(c, "launch_experiment", title="swap", source="patch", patch=patch)
    assert "protected files" in msg and "'bench'" in msg


async def test_the_server_never_writes_its_files_through_a_link(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    async with Client(build_server()) as c:
        await session(c, repo)
        (repo / ".autoresearch" / "report").symlink_to(outside)
        msg = await error(c, "report", repo=str(repo))
        assert "symbolic link" in msg
        log = repo / ".autoresearch" / "logs" / "session-validation.log"
        log.unlink()
        log.symlink_to(victim)
        msg = await error(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="t")
        assert "symbolic link" in msg
    assert list(outside.iterdir()) == []
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("change", [["mv", "autoresearch.sh", "bench.sh"], ["rm", "-q", "autoresearch.checks.sh"],
                                    "mode", "symlink"])
async def test_what_held_protected_scripts_by_rename_delete_mode_or_link(repo: Path, change: Any) -> None:
    git(repo, "checkout", "-q", "-b", "gamed")
    if change == "symlink":
        (repo / "autoresearch.sh").unlink()
        (repo / "autoresearch.sh").symlink_to("value.txt")
        git(repo, "add", "autoresearch.sh")
    elif change == "mode":
        (repo / "autoresearch.sh").chmod((repo / "autoresearch.sh").stat().st_mode ^ 0o111)
        git(repo, "add", "autoresearch.sh")
    else:
        git(repo, *change)
    git(repo, "commit", "-qm", "game the benchmark")
    git(repo, "checkout", "-q", "main")
    async with Client(build_server()) as c:
        await session(c, repo)
        msg = await error(c, "launch_experiment", title="game", source="commit", commit="gamed")
    assert "protected files" in msg


async def test_what_held_an_option_like_commit_is_not_an_option(repo: Path, tmp_path: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        msg = await error(c, "launch_experiment", title="x", source="commit", commit=f"--output={tmp_path}/out")
    assert "does not name a commit" in msg and not (tmp_path / "out").exists()


# --- 2. commit_winner never overwrites the user's untracked or ignored files ---------------------------


@pytest.mark.slow
async def test_commit_winner_refuses_to_replace_an_ignored_file(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, NOISY_VALUE)
    (repo / ".gitignore").write_text("secrets.env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore secrets")
    (repo / "secrets.env").write_text("TOKEN=mine\n")
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="faster", source="patch", repeats=30,
                              patch=value_patch() + add_file("secrets.env", "TOKEN=theirs"))
        assert (await wait_final(c, launched["experiment_id"]))["verdict"] == "improved"
        head = git(repo, "rev-parse", "HEAD")
        msg = await error(c, "commit_winner", experiment_id=launched["experiment_id"])
    assert "secrets.env" in msg and "overwrite" in msg
    assert (repo / "secrets.env").read_text() == "TOKEN=mine\n"
    assert git(repo, "rev-parse", "autoresearch/t") == head


@pytest.mark.slow
async def test_commit_winner_names_ignored_files_in_a_folder_the_winner_replaces(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, NOISY_VALUE)
    (repo / "data").mkdir()
    (repo / "data" / "a.txt").write_text("1\n")
    (repo / ".gitignore").write_text("*.bin\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "data")
    (repo / "data" / "cache.bin").write_text("mine\n")
    async with Client(build_server()) as c:
        await session(c, repo)
        patch = value_patch() + "--- a/data/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-1\n" + add_file("data", "now a file")
        launched = await call(c, "launch_experiment", title="flatten", source="patch", repeats=30, patch=patch)
        assert (await wait_final(c, launched["experiment_id"]))["verdict"] == "improved"
        msg = await error(c, "commit_winner", experiment_id=launched["experiment_id"])
        assert "data/cache.bin" in msg and (repo / "data" / "cache.bin").read_text() == "mine\n"
        (repo / "data" / "cache.bin").unlink()  # moved away: now nothing of the user's is in the way
        await call(c, "commit_winner", experiment_id=launched["experiment_id"])
    assert (repo / "data").read_text() == "now a file\n"


# --- 3. the metric value rule --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e308", "5e-324", "-1e40"])
async def test_an_out_of_range_metric_makes_the_experiment_invalid_not_stuck(tmp_path: Path, value: str) -> None:
    repo = script_repo(tmp_path, f"if [ -e odd ]; then echo METRIC score={value}; else {NOISY_VALUE}; fi")
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="odd", source="patch", repeats="auto",
                              patch=add_file("odd"))
        res = await wait_final(c, launched["experiment_id"], timeout=60)
        listing = await call(c, "list_experiments")
    assert res["status"] == "done" and res["verdict"] == "invalid"
    assert "out of range" in (res["error"] or "")
    assert listing["running"] == 0


async def test_start_session_refuses_an_out_of_range_baseline(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, "echo METRIC score=1e308")
    async with Client(build_server()) as c:
        msg = await error(c, "start_session", repo=str(repo), metric="score", direction="higher")
    assert "out of range" in msg


@pytest.mark.slow
async def test_a_result_that_cannot_be_recorded_ends_the_experiment_failed(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, f"if [ -e slow ]; then sleep 2; fi; {NOISY_VALUE}")
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="slow", source="patch", repeats="auto",
                              patch=add_file("slow"))
        ledger = repo / ".autoresearch" / "ledger.jsonl"
        elsewhere = tmp_path / "elsewhere.jsonl"
        elsewhere.write_text("")
        ledger.rename(tmp_path / "kept.jsonl")
        ledger.symlink_to(elsewhere)  # every further write is refused
        res = await wait_final(c, launched["experiment_id"], timeout=60)
    assert res["status"] == "failed" and "could not be recorded" in (res["error"] or "")
    assert elsewhere.read_text() == ""


# --- 4. protected paths are compared as plain names -------------------------------------------------------


@pytest.mark.parametrize(("entry", "path"), [("./données.txt", "données.txt"), ("tab\there.txt", "tab\there.txt"),
                                             ("data/", "data/set.csv"), ("./data//*.csv", "data/set.csv")])
async def test_protected_entries_match_plain_names(repo: Path, entry: str, path: str) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        set_config(repo, protected=["autoresearch.sh", entry])
        await session(c, repo)
        header = '"b/tab\\there.txt"' if "\t" in path else f"b/{path}"  # git's quoted form for a tab
        patch = value_patch() + f"--- /dev/null\n+++ {header}\n@@ -0,0 +1 @@\n+x\n"
        msg = await error(c, "launch_experiment", title="edit", source="patch", patch=patch)
    assert "protected files" in msg and repr([path]).strip("[]") in msg


async def test_changed_files_show_plain_names(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="accent", source="patch", repeats="auto",
                              patch=add_file("données.txt"))
        await call(c, "cancel_experiment", experiment_id=launched["experiment_id"])
    assert launched["changed_files"] == ["données.txt"]


# --- 5. every answer and error is bounded -------------------------------------------------------------------


async def test_a_flood_of_metric_lines_gives_a_bounded_answer_with_counted_warnings(tmp_path: Path) -> None:
    bench = ("awk 'BEGIN{print \"METRIC score=100\"; for(i=0;i<100000;i++){print \"METRIC bad line \" i; "
             "print \"METRIC m\" i \"=1\"}}'")
    repo = script_repo(tmp_path, bench)
    async with Client(build_server()) as c:
        result = await c.call_tool("start_session", {"repo": str(repo), "metric": "score", "direction": "higher"})
    assert not result.is_error
    assert answer_bytes(result) <= 64 * 1024
    warnings = result.structured_content["warnings"]  # type: ignore[index]
    assert any("more malformed METRIC lines" in w for w in warnings)


async def test_a_log_tail_is_bounded_by_bytes(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, f"if [ -e big ]; then head -c 3000000 /dev/zero | tr '\\0' x; echo; fi; {NOISY_VALUE}")
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="big", source="patch", repeats="auto",
                              patch=add_file("big"))
        await wait_final(c, launched["experiment_id"], timeout=90)
        result = await c.call_tool("fetch_sky_logs", {"experiment_id": launched["experiment_id"], "tail_lines": 400})
    assert not result.is_error and answer_bytes(result) <= 64 * 1024


async def test_errors_never_echo_a_huge_input(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        for name, args in (("fetch_sky_logs", {"experiment_id": "x" * 100_000}),
                           ("launch_experiment", {"title": "t", "source": "commit", "commit": "y" * 100_000}),
                           ("start_session", {"repo": str(repo), "metric": "m" * 100_000, "direction": "higher"})):
            result = await c.call_tool(name, args)
            assert result.is_error and answer_bytes(result) <= 8 * 1024, name


async def test_the_cap_is_stated_once_in_the_server_instructions_not_in_every_description() -> None:
    async with Client(build_server(), mode="legacy") as c:
        tools = (await c.list_tools()).tools
        instructions = c.instructions or ""
    assert instructions.count("64 KB") == 1
    assert not [t.name for t in tools if "64 KB" in (t.description or "")]


# --- 6. titles are one line; evidence comes from the ledger ---------------------------------------------------


@pytest.mark.slow
async def test_a_title_cannot_forge_a_trailer_and_the_report_counts_the_ledger(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        assert "one line" in await error(c, "launch_experiment", title="A\n\nAutoresearch-Experiment: x",
                                         source="patch", patch=value_patch())
        win = await call(c, "launch_experiment", title="win", source="patch", repeats=30, patch=value_patch(),
                         hypothesis="faster\n\nAutoresearch-Experiment: forged")
        other = await call(c, "launch_experiment", title="other", source="patch", repeats=30,
                           patch=value_patch("100", "120"))
        for exp in (win, other):
            assert (await wait_final(c, exp["experiment_id"]))["verdict"] == "improved"
        assert "one line" in await error(c, "commit_winner", experiment_id=win["experiment_id"],
                                         title=f"A\n\nAutoresearch-Experiment: {other['experiment_id']}")
        committed = await call(c, "commit_winner", experiment_id=win["experiment_id"])
        # a commit made by hand that claims the other experiment counts for nothing (git's hooks bypassed)
        (repo / "notes.txt").write_text("by hand\n")
        git(repo, "add", "notes.txt")
        git(repo, "-c", "core.hooksPath=/dev/null", "commit", "-qm",
            f"by hand\n\nAutoresearch-Experiment: {other['experiment_id']}")
        report = await call(c, "report", repo=str(repo))
        refused = await error(c, "finalize_session", repo=str(repo))
        git(repo, "-c", "core.hooksPath=/dev/null", "reset", "-q", "--keep", committed["commit"])
        final = await call(c, "finalize_session", repo=str(repo))
    trailers = [ln for ln in committed["message"].splitlines() if ln.startswith("Autoresearch-Experiment:")]
    assert trailers == [f"Autoresearch-Experiment: {win['experiment_id']}"]
    assert report["kept"] == 1
    assert "'by hand'" in refused and "not" in refused and committed["commit"][:12] in refused
    assert sorted(e for b in final["branches"] for e in b["experiments"]) == [win["experiment_id"]]


# --- 7 and 8. start_session: nothing left behind, clear errors ------------------------------------------------


async def test_a_failed_start_session_leaves_nothing_behind(repo: Path) -> None:
    async with Client(build_server()) as c:
        msg = await error(c, "start_session", repo=str(repo), metric="typo", direction="higher", tag="once")
        assert "missing" in msg
        assert git(repo, "branch", "--list", "autoresearch/once") == ""
        assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
        assert not (repo / ".autoresearch" / "config.json").exists()
        res = await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="once")
    assert res["resumed"] is False and res["branch"] == "autoresearch/once"


@pytest.mark.parametrize("tag", ["a..b", "a.lock", "a."])
async def test_tags_follow_gits_own_rules(repo: Path, tag: str) -> None:
    async with Client(build_server()) as c:
        msg = await error(c, "start_session", repo=str(repo), metric="score", direction="higher", tag=tag)
    assert "check-ref-format" in msg and "Error executing tool start_session" in msg
    assert git(repo, "branch", "--list", "autoresearch/*") == ""


async def test_a_tracked_session_folder_is_a_clear_error(repo: Path) -> None:
    (repo / ".autoresearch").write_text("not a folder\n")
    git(repo, "add", "-f", ".autoresearch")
    git(repo, "commit", "-qm", "oops")
    async with Client(build_server()) as c:
        msg = await error(c, "start_session", repo=str(repo), metric="score", direction="higher")
    assert "git rm -r --cached .autoresearch" in msg


async def test_a_session_branch_checked_out_elsewhere_is_a_clear_error(repo: Path, tmp_path: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo, tag="w")
        git(repo, "checkout", "-q", "main")
        git(repo, "worktree", "add", "-q", str(tmp_path / "other"), "autoresearch/w")
        msg = await error(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="w")
    assert "checked out in another worktree" in msg and str(tmp_path / "other") in msg


# --- 11. smaller holes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_unknown_arguments_are_refused_naming_the_valid_ones(mode: str) -> None:
    async with Client(build_server(), mode=mode) as c:  # type: ignore[arg-type]
        result = await c.call_tool("fetch_sky_logs", {"experiment_id": "x", "tail": 5})
    assert result.is_error
    text = " ".join(getattr(x, "text", "") for x in result.content)
    assert "unknown argument(s) 'tail'" in text and "experiment_id, samples, tail_lines" in text


async def test_mixed_source_inputs_are_refused(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        msg = await error(c, "launch_experiment", title="x", source="commit", commit="HEAD", patch=value_patch())
        assert "patch is only read with source='patch'" in msg
        msg = await error(c, "launch_experiment", title="x", source="patch", patch=value_patch(),
                          restore_worktree=True)
        assert "restore_worktree" in msg


@pytest.mark.slow
async def test_concurrent_start_sessions_are_serialized(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    repos = [script_repo(tmp_path / name, f"sleep 1; {NOISY_VALUE}") for name in ("a", "b")]
    results: list[Any] = []
    async with Client(build_server()) as c:
        async def start(r: Path) -> None:
            results.append(await c.call_tool("start_session", {"repo": str(r), "metric": "score",
                                                               "direction": "higher"}))
        async with anyio.create_task_group() as tg:
            for r in repos:
                tg.start_soon(start, r)
        listing = await c.call_tool("list_experiments", {})
    assert sorted(r.is_error for r in results) == [False, True]
    refused = next(r for r in results if r.is_error)
    assert "another start_session" in refused.content[0].text
    assert not listing.is_error


async def test_cancel_says_what_happened_to_the_builds(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, f"if [ -e slow ]; then sleep 30; fi; {NOISY_VALUE}")
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="slow", source="patch", repeats="auto",
                              patch=add_file("slow"))
        with anyio.fail_after(30):
            while (await call(c, "fetch_sky_logs", experiment_id=launched["experiment_id"]))["status"] != "running":
                await anyio.sleep(0.1)
        res = await call(c, "cancel_experiment", experiment_id=launched["experiment_id"])
    assert res["status"] == "cancelled" and "stay cached" in res["message"] and "removed" not in res["message"]


async def test_diff_backends_reads_no_whole_file_system_and_only_other_git_work_trees(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    (plain / "backends" / "cuda").mkdir(parents=True)
    (plain / "backends" / "cuda" / "ops.c").write_text("int GGML_OP_ADD;\n")
    repo = init_repo_with_file(tmp_path / "repo")
    async with Client(build_server()) as c:
        assert "whole file system" in await error(c, "diff_backends", repo="/")
        msg = await error(c, "diff_backends", repo=str(repo), backends=["cpu=.", f"cuda={plain}:backends/cuda"])
    assert "not inside a git work tree" in msg


# --- 9. nothing an experiment started survives it ------------------------------------------------------------------


def sleep_tag() -> str:
    """A `sleep` duration no other process uses: what finds the process a job left, from outside its
    confinement (whose PID namespace gives it other pids, and where it cannot write a pid file)."""
    return f"300.{random.randrange(10**8):08d}"


def escaping_bench(tag: str, wait: str) -> str:
    """A benchmark that, once the candidate adds `escape`, starts `sleep <tag>` in a session of its own
    (out of the runner's process group), then waits `wait` seconds."""
    return (f"if [ -e escape ]; then setsid sh -c 'exec sleep {tag}' "
            f"</dev/null >/dev/null 2>&1 & sleep {wait}; fi; {NOISY_VALUE}")


def stdio_server(repo: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "autoresearch_mcp", "serve"], cwd=str(repo),
                                 env=dict(os.environ))


def escaped_pid(tag: str) -> int | None:
    """The pid (here) of the process running `sleep <tag>`, if one is alive."""
    for proc in psutil.process_iter(["cmdline"]):
        if tag in (proc.info["cmdline"] or []) and alive(proc.pid):
            return proc.pid
    return None


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
async def test_a_process_that_leaves_its_session_does_not_survive_the_experiment(tmp_path: Path) -> None:
    tag = sleep_tag()
    repo = script_repo(tmp_path, escaping_bench(tag, "0.2"))
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="escape", source="patch", repeats="auto",
                              patch=add_file("escape"))
        with anyio.fail_after(60):  # the escaped process does run, while the experiment does
            while escaped_pid(tag) is None:
                await anyio.sleep(0.05)
        await wait_final(c, launched["experiment_id"], timeout=60)
    with anyio.fail_after(5):
        while escaped_pid(tag) is not None:
            await anyio.sleep(0.1)


async def test_start_session_validation_leaves_no_process_behind(tmp_path: Path) -> None:
    tag = sleep_tag()
    repo = script_repo(tmp_path, f"setsid sh -c 'exec sleep {tag}' </dev/null >/dev/null 2>&1 & "
                                 f"sleep 0.2; {NOISY_VALUE}")
    async with Client(build_server()) as c:
        await session(c, repo)
    assert escaped_pid(tag) is None


# --- 10. restore_worktree keeps everything recoverable, and refuses nested repositories --------------------------


@pytest.mark.slow
async def test_restore_worktree_saves_index_untracked_files_and_keeps_empty_folders(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        (repo / "value.txt").write_text("105\n")
        git(repo, "add", "value.txt")  # staged 105 ...
        (repo / "value.txt").write_text("110\n")  # ... and 110 in the work tree
        (repo / "new").mkdir()
        (repo / "new" / "file.c").write_text("int y;\n")
        (repo / "empty" / "deeper").mkdir(parents=True)
        launched = await call(c, "launch_experiment", title="edit", repeats="auto", restore_worktree=True)
        assert (repo / "value.txt").read_text() == "100\n" and not (repo / "new").exists()
        assert (repo / "empty" / "deeper").is_dir()  # untouched: it was in no snapshot
        git(repo, "stash", "apply", "--index")
        await wait_final(c, launched["experiment_id"])
    assert git(repo, "show", ":value.txt") == "105"
    assert (repo / "value.txt").read_text() == "110\n"
    assert (repo / "new" / "file.c").read_text() == "int y;\n"


async def test_a_nested_repository_is_refused(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        init_repo_with_file(repo / "vendor" / "lib")
        msg = await error(c, "launch_experiment", title="nested", repeats="auto")
    assert "vendor/lib is a nested git repository" in msg


def init_repo_with_file(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "lib.c").write_text("int z;\n")
    return init_repo(path)



async def test_what_a_killed_runner_started_does_not_survive_it(tmp_path: Path) -> None:
    tag = sleep_tag()
    repo = script_repo(tmp_path, f"if [ -e hang ]; then exec sleep {tag}; fi; {NOISY_VALUE}")
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="hang", source="patch", repeats="auto",
                              patch=add_file("hang"))
        with anyio.fail_after(60):
            while escaped_pid(tag) is None:
                await anyio.sleep(0.1)
        ledger = (repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()
        runner = next(json.loads(line)["runtime"]["pid"] for line in ledger if '"pid"' in line)
        psutil.Process(runner).kill()  # the runner dies without a word; its bench must not outlive it
        res = await wait_final(c, launched["experiment_id"], timeout=60)
    assert res["status"] == "failed"
    with anyio.fail_after(10):
        while escaped_pid(tag) is not None:
            await anyio.sleep(0.1)


@pytest.mark.as_user
@pytest.mark.slow
async def test_nothing_an_experiment_started_survives_the_server_exit(tmp_path: Path) -> None:
    tag = sleep_tag()
    repo = script_repo(tmp_path, escaping_bench(tag, "60"))
    params = stdio_server(repo)
    async with Client(params) as c:
        await session(c, repo)
        await call(c, "launch_experiment", title="escape", source="patch", repeats="auto",
                              patch=add_file("escape"))
        with anyio.fail_after(60):
            while (pid := escaped_pid(tag)) is None:
                await anyio.sleep(0.1)
    with anyio.fail_after(30):
        while alive(pid):
            await anyio.sleep(0.2)


@pytest.mark.slow
async def test_what_an_experiment_left_behind_is_killed_when_a_server_restarts(tmp_path: Path) -> None:
    tag = sleep_tag()
    repo = script_repo(tmp_path, escaping_bench(tag, "60"))
    params = stdio_server(repo)
    with pytest.raises(BaseException):  # noqa: B017 - the client loses its server mid-session, as intended
        async with Client(params) as c:
            await session(c, repo)
            await call(c, "launch_experiment", title="escape", source="patch", repeats="auto",
                              patch=add_file("escape"))
            with anyio.fail_after(60):
                while escaped_pid(tag) is None:
                    await anyio.sleep(0.1)
            server = next(p for p in psutil.Process().children() if "autoresearch_mcp" in " ".join(p.cmdline()))
            server.kill()  # kill -9: no chance to clean up
            server.wait(10)
            await call(c, "list_experiments")
    pid = escaped_pid(tag)
    assert pid is not None and alive(pid)
    async with Client(params) as c:  # the new server resumes the session and recovers the lost experiment
        listing = await call(c, "list_experiments")
    assert [e["status"] for e in listing["experiments"]] == ["lost"]
    assert not alive(pid)


async def test_a_big_answer_is_cut_keeping_every_field_and_says_so(tmp_path: Path) -> None:
    repo = tmp_path / "many"
    for b in ["cpu", *(f"b{i:02d}" for i in range(24))]:
        cases = "".join(f"        case GGML_OP_{b.upper()}_LONG_OPERATION_NAME_{j:03d}: return true;\n"
                        for j in range(0 if b == "cpu" else 30))
        (repo / "backends" / b).mkdir(parents=True)
        (repo / "backends" / b / "ops.c").write_text(
            f"int supports_op(int op) {{\n    switch (op) {{\n{cases}        case GGML_OP_ADD: return true;\n"
            "        default: return false;\n    }\n}\n")
    init_repo(repo)
    async with Client(build_server()) as c:
        result = await c.call_tool("diff_backends", {"repo": str(repo), "max_gaps": 200})
    assert not result.is_error and answer_bytes(result) <= 64 * 1024
    data = result.structured_content
    assert data is not None and 0 < len(data["gaps"]) < 200 and data["total_gaps"] >= 200
    assert "cut to fit 64 KB" in data["notes"][-1]
