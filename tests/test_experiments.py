"""launch_experiment, fetch_sky_logs, commit_winner, cancel_experiment and list_experiments on the
local executor, driven through a real MCP client against real git repositories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from conftest import balanced_noise, git, script_repo
from helpers import call, error, wait_final

pytestmark = pytest.mark.anyio

# One sample: the value in value.txt with +/-0.2% noise, so effects are known exactly.
NOISY_VALUE = (balanced_noise() + "awk -v v=$(cat value.txt) -v n=$n "
               "'BEGIN{printf \"METRIC score=%.5f\\nMETRIC other=1\\n\", v*n}'")


def value_patch(old: str, new: str) -> str:
    return f"--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-{old}\n+{new}\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return script_repo(tmp_path, NOISY_VALUE, checks="test ! -e wrong")


async def session(c: Client, repo: Path, **kw: Any) -> dict[str, Any]:
    return await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="t", **kw)


async def launch_value(c: Client, new: str, **kw: Any) -> dict[str, Any]:
    return await call(c, "launch_experiment", title=f"value {new}", hypothesis="bigger is better",
                      sources=["test"], source="patch", patch=value_patch("100", new), **kw)


@pytest.mark.slow
async def test_a_real_improvement_is_measured_and_committed_with_its_evidence(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await launch_value(c, "110", repeats=30)
        assert launched["status"] == "queued"
        assert git(repo, "rev-parse", f"refs/autoresearch/exp/{launched['experiment_id']}") == \
            launched["candidate_commit"]
        res = await wait_final(c, launched["experiment_id"])
        assert res["status"] == "done" and res["verdict"] == "improved"
        score = res["metrics"]["score"]
        assert score["n_pairs"] == 30 and 9.0 < score["delta_pct"] < 11.0
        assert score["ci_low_pct"] > 0 and score["baseline"]["samples"] == []  # raw samples only when asked
        asked = await call(c, "get_experiment", experiment_id=launched["experiment_id"], samples=True)
        assert len(asked["metrics"]["score"]["baseline"]["samples"]) == 30
        assert res["checks"]["passed"] is True
        committed = await call(c, "commit_winner", experiment_id=launched["experiment_id"])
    assert git(repo, "rev-parse", "autoresearch/t") == committed["commit"]
    assert (repo / "value.txt").read_text() == "110\n"  # the work tree followed the branch
    message = git(repo, "log", "-1", "--format=%B", "autoresearch/t")
    assert "Hypothesis: bigger is better" in message and "- test" in message
    assert f"Autoresearch-Experiment: {launched['experiment_id']}" in message
    trailer = next(line for line in message.splitlines() if line.startswith("Autoresearch-Result: "))
    result = json.loads(trailer.split(": ", 1)[1])
    assert result["verdict"] == "improved" and result["n_pairs"] == 30


@pytest.mark.slow
async def test_no_change_and_regression_are_refused_by_commit_winner(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        same = await call(c, "launch_experiment", title="comment", source="patch", repeats=30,
                          patch="--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+a note\n")
        worse = await launch_value(c, "90", repeats=30)
        assert (await wait_final(c, same["experiment_id"]))["verdict"] == "no_change"
        assert (await wait_final(c, worse["experiment_id"]))["verdict"] == "regressed"
        for exp in (same, worse):
            msg = await error(c, "commit_winner", experiment_id=exp["experiment_id"])
            assert "not 'improved'" in msg
        listing = await call(c, "list_experiments")
    assert listing["kept"] == 0 and listing["discarded"] == 2 and listing["best"] is None
    assert {e["verdict"] for e in listing["experiments"]} == {"no_change", "regressed"}


@pytest.mark.slow
async def test_auto_repeats_stop_early_on_a_clear_effect(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await launch_value(c, "150", repeats="auto")
        res = await wait_final(c, launched["experiment_id"])
    assert res["verdict"] == "improved"
    assert res["metrics"]["score"]["n_pairs"] == 30  # the first look where an improvement can be decided


@pytest.mark.slow
async def test_worktree_snapshot_leaves_index_head_and_files_alone(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        (repo / "value.txt").write_text("120\n")
        (repo / "untracked.txt").write_text("new file\n")
        head = git(repo, "rev-parse", "HEAD")
        launched = await call(c, "launch_experiment", title="edit", source="worktree", repeats="auto")
        assert git(repo, "rev-parse", "HEAD") == head
        assert git(repo, "diff", "--cached", "--name-only") == ""
        assert (repo / "value.txt").read_text() == "120\n" and (repo / "untracked.txt").exists()
        files = git(repo, "show", "--name-only", "--format=", launched["candidate_commit"]).split()
        assert set(files) == {"untracked.txt", "value.txt"}
        await wait_final(c, launched["experiment_id"])


@pytest.mark.slow
async def test_restore_worktree_resets_to_the_session_head(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        (repo / "value.txt").write_text("120\n")
        (repo / "scratch.c").write_text("int x;\n")
        launched = await call(c, "launch_experiment", title="edit", restore_worktree=True, repeats="auto")
        assert launched["worktree_restored"] is True
        assert git(repo, "status", "--porcelain") == ""
        assert (repo / "value.txt").read_text() == "100\n"
        assert (repo / ".autoresearch" / "ledger.jsonl").exists()  # state is never cleaned away
        await wait_final(c, launched["experiment_id"])


@pytest.mark.slow
async def test_refusals(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "gamed")
    with open(repo / "autoresearch.sh", "a") as fh:
        fh.write("echo METRIC score=1000000\n")
    git(repo, "commit", "-qam", "game the benchmark")
    git(repo, "checkout", "-q", "main")
    async with Client(build_server()) as c:
        assert "no session" in await error(c, "launch_experiment", title="x")
        await session(c, repo)
        assert "identical to the session head" in await error(c, "launch_experiment", title="nothing")
        assert "does not apply" in await error(c, "launch_experiment", title="bad", source="patch",
                                               patch=value_patch("999", "1"))
        assert "protected files ['autoresearch.sh']" in await error(
            c, "launch_experiment", title="game it", source="commit", commit="gamed")
        first = await launch_value(c, "105", repeats="auto")
        dup = await error(c, "launch_experiment", title="again", source="patch", patch=value_patch("100", "105"))
        assert first["experiment_id"] in dup
        assert "between 1 and max_pairs=100" in await error(c, "launch_experiment", title="x", source="patch",
                                                            patch=value_patch("100", "1"), repeats=101)
        assert "needs commit" in await error(c, "launch_experiment", title="x", source="commit")
        assert "no experiment" in await error(c, "fetch_sky_logs", experiment_id="nope")
        await wait_final(c, first["experiment_id"])


@pytest.mark.slow
async def test_commit_source_and_stale_base_is_refused(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "idea")
    (repo / "value.txt").write_text("130\n")
    git(repo, "commit", "-qam", "idea")
    git(repo, "checkout", "-q", "main")
    async with Client(build_server()) as c:
        await session(c, repo)
        a = await call(c, "launch_experiment", title="from branch", source="commit", commit="idea", repeats=30)
        b = await launch_value(c, "120", repeats=30)
        assert (await wait_final(c, a["experiment_id"]))["verdict"] == "improved"
        assert (await wait_final(c, b["experiment_id"]))["verdict"] == "improved"
        await call(c, "commit_winner", experiment_id=a["experiment_id"], title="Take the idea branch")
        msg = await error(c, "commit_winner", experiment_id=b["experiment_id"])
    assert "measure it again on the new head" in msg.lower()
    assert git(repo, "log", "-1", "--format=%s", "autoresearch/t") == "Take the idea branch"


async def test_failing_checks_are_never_committed(repo: Path) -> None:
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="fast but wrong", source="patch", repeats=30,
                              patch=value_patch("100", "200") + "--- /dev/null\n+++ b/wrong\n@@ -0,0 +1 @@\n+x\n")
        res = await wait_final(c, launched["experiment_id"])
        assert res["status"] == "checks_failed" and res["checks"]["passed"] is False
        assert "checks did not pass" in await error(c, "commit_winner", experiment_id=launched["experiment_id"])


@pytest.mark.parametrize(
    ("bench_patch", "status", "verdict", "words"),
    [
        ("exit 7", "failed", None, "exited with status 7"),
        ("echo nothing; exit 0", "done", "invalid", "missing"),
        ("sleep 60", "failed", None, "timed out"),
    ],
)
@pytest.mark.slow
async def test_a_broken_candidate_is_reported_not_measured(
    tmp_path: Path, bench_patch: str, status: str, verdict: str | None, words: str
) -> None:
    bench = f'if [ -e broken ]; then {bench_patch}; fi; {NOISY_VALUE}'
    repo = script_repo(tmp_path, bench)
    config = repo / ".autoresearch"
    async with Client(build_server()) as c:
        await session(c, repo)
        cfg = json.loads((config / "config.json").read_text())
        cfg["timeouts"]["bench"] = 2
        (config / "config.json").write_text(json.dumps(cfg))
        await session(c, repo)  # resume picks up the edited timeout
        launched = await call(c, "launch_experiment", title="broken", source="patch", repeats="auto",
                              patch="--- /dev/null\n+++ b/broken\n@@ -0,0 +1 @@\n+x\n")
        res = await wait_final(c, launched["experiment_id"])
    assert res["status"] == status and res["verdict"] == verdict
    assert words in (res["error"] or "")


@pytest.mark.slow
async def test_cancel_kills_a_running_experiment(tmp_path: Path) -> None:
    marker = tmp_path / "bench-finished"
    repo = script_repo(tmp_path, f'if [ -e slow ]; then sleep 30; touch {marker}; fi; {NOISY_VALUE}')
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="slow", source="patch", repeats="auto",
                              patch="--- /dev/null\n+++ b/slow\n@@ -0,0 +1 @@\n+x\n")
        exp_id = launched["experiment_id"]
        import anyio

        with anyio.fail_after(30):
            while (await call(c, "fetch_sky_logs", experiment_id=exp_id))["status"] != "running":
                await anyio.sleep(0.1)
        cancelled = await call(c, "cancel_experiment", experiment_id=exp_id)
        assert cancelled["status"] == "cancelled"
        again = await call(c, "cancel_experiment", experiment_id=exp_id)
        assert "already cancelled" in again["message"]
    await anyio.sleep(1)
    assert not marker.exists()


# --- re-measuring: one experiment, one design --------------------------------------------------------


# The candidate (value.txt 110) wobbles between 3% slower and 7% faster for its first 31 runs (a warm-up
# pair and 30 measured ones), then 10% faster: its first round cannot decide, and more pairs do.
LATE_WIN = ('c=.runs; i=$(cat "$c" 2>/dev/null || echo 0); echo $((i+1)) > "$c"; v=$(cat value.txt); '
            'if [ "$v" = 100 ]; then echo METRIC score=100.00; elif [ $i -lt 31 ]; then '
            'awk -v i=$i \'BEGIN{printf "METRIC score=%.2f\\n", (i%2 ? 107 : 97)}\'; else echo METRIC score=110.00; fi')


@pytest.mark.slow
async def test_more_pairs_continue_the_same_experiment_and_are_pooled(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, LATE_WIN)
    async with Client(build_server()) as c:
        await session(c, repo)
        first = await launch_value(c, "110", repeats=30)
        res = await wait_final(c, first["experiment_id"])
        assert res["verdict"] in ("inconclusive", "noisy") and res["metrics"]["score"]["n_pairs"] == 30
        assert "source='experiment'" in res["next_step"]
        dup = await error(c, "launch_experiment", title="again", source="patch", patch=value_patch("100", "110"))
        assert "fresh alpha" in dup and first["experiment_id"] in dup
        more = await call(c, "launch_experiment", title="ignored", source="experiment",
                          experiment_id=first["experiment_id"])
        assert more["experiment_id"] == first["experiment_id"] and more["prior_pairs"] == 30
        res = await wait_final(c, first["experiment_id"])
        listing = await call(c, "list_experiments")
        decided = await error(c, "launch_experiment", title="x", source="experiment",
                              experiment_id=first["experiment_id"])
    assert res["verdict"] == "improved" and res["metrics"]["score"]["n_pairs"] > 30
    assert res["pairs_done"] == res["metrics"]["score"]["n_pairs"] and len(listing["experiments"]) == 1
    samples = json.loads((repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()[-1])["outcome"]["samples"]
    assert sorted({s["pair"] for s in samples}) == list(range(res["pairs_done"]))
    # each pair's order is a coin of its own: both orders occur
    assert {s["position"] for s in samples if s["role"] == "candidate"} == {0, 1}
    assert "already a decision" in decided


@pytest.mark.slow
async def test_a_moved_head_gets_the_change_re_applied_as_a_new_experiment(tmp_path: Path) -> None:
    # the score is value x factor: a winner on factor.txt moves the head without touching value.txt
    repo = script_repo(tmp_path, balanced_noise() + "awk -v v=$(cat value.txt) -v f=$(cat factor.txt) -v n=$n "
                       "'BEGIN{printf \"METRIC score=%.5f\\nMETRIC other=1\\n\", v*f*n}'")
    (repo / "factor.txt").write_text("1\n")
    git(repo, "add", "factor.txt")
    git(repo, "commit", "-qm", "factor")
    async with Client(build_server()) as c:
        await session(c, repo)
        small = await launch_value(c, "105", repeats="auto")
        await wait_final(c, small["experiment_id"])
        factor = await call(c, "launch_experiment", title="factor", source="patch", repeats=30,
                            patch="--- a/factor.txt\n+++ b/factor.txt\n@@ -1 +1 @@\n-1\n+1.2\n")
        assert (await wait_final(c, factor["experiment_id"]))["verdict"] == "improved"
        await call(c, "commit_winner", experiment_id=factor["experiment_id"])  # the head moves
        again = await call(c, "launch_experiment", title="value 105 on the new head", source="experiment",
                           experiment_id=small["experiment_id"], repeats="auto")
        res = await wait_final(c, again["experiment_id"])
        bigger = await launch_value(c, "120", repeats=30)
        assert (await wait_final(c, bigger["experiment_id"]))["verdict"] == "improved"
        await call(c, "commit_winner", experiment_id=bigger["experiment_id"])  # now the line its change edits is gone
        refused = await error(c, "launch_experiment", title="x", source="experiment",
                              experiment_id=small["experiment_id"])
    assert again["experiment_id"] != small["experiment_id"] and again["reapplies"] == small["experiment_id"]
    assert again["base_commit"] == git(repo, "rev-parse", "HEAD~1")
    assert git(repo, "show", f"{again['candidate_commit']}:value.txt") == "105"
    assert git(repo, "show", f"{again['candidate_commit']}:factor.txt") == "1.2"
    assert res["status"] == "done" and res["title"] == "value 105 on the new head"
    assert "no longer applies" in refused and small["experiment_id"] in refused


PARAMS = "".join(f"{i}\n" for i in (1, 1, 1, 1, 1, 1, 1, 1))


def params_patch(line: int, new: str) -> str:
    """A change of line `line` (1-based) of params.txt, with three lines of context as git writes it."""
    lines = PARAMS.splitlines()
    start = max(0, line - 4)
    end = min(len(lines), line + 3)
    old = lines[start:end]
    changed = [new if i == line - 1 else x for i, x in enumerate(lines)][start:end]
    body = "".join(f" {x}\n" if x == y else f"-{x}\n+{y}\n" for x, y in zip(old, changed, strict=True))
    return f"--- a/params.txt\n+++ b/params.txt\n@@ -{start + 1},{len(old)} +{start + 1},{len(old)} @@\n{body}"


def params_repo(tmp_path: Path, more: dict[str, str] | None = None) -> Path:
    """A repository whose score is the product of params.txt's lines (and `more` files beside it)."""
    repo = script_repo(tmp_path, balanced_noise() + "awk -v n=$n '{p *= $1} BEGIN{p = 1} "
                       "END{printf \"METRIC score=%.5f\\n\", p * n * 100}' params.txt")
    for name, text in {"params.txt": PARAMS, **(more or {})}.items():
        (repo / name).write_text(text)
        git(repo, "add", name)
    git(repo, "commit", "-qm", "params")
    return repo


@pytest.mark.slow
async def test_a_winner_beside_a_committed_one_in_the_same_file_is_replayed_on_the_moved_head(tmp_path: Path) -> None:
    # the score is the product of params.txt's lines: two wins on lines 3 and 6 of one file, each in the other's
    # context, so the second's patch no longer applies once the first is committed, and a three-way merge does
    repo = params_repo(tmp_path)
    async with Client(build_server()) as c:
        await session(c, repo)
        first = await call(c, "launch_experiment", title="line 3", source="patch", repeats=30,
                           patch=params_patch(3, "1.2"))
        second = await call(c, "launch_experiment", title="line 6", source="patch", repeats=30,
                            patch=params_patch(6, "1.1"))
        assert (await wait_final(c, first["experiment_id"]))["verdict"] == "improved"
        assert (await wait_final(c, second["experiment_id"]))["verdict"] == "improved"
        await call(c, "commit_winner", experiment_id=first["experiment_id"], title="line 3")
        again = await call(c, "launch_experiment", source="experiment", experiment_id=second["experiment_id"],
                           repeats=30)
        res = await wait_final(c, again["experiment_id"])
    assert again["reapplies"] == second["experiment_id"]
    assert git(repo, "show", f"{again['candidate_commit']}:params.txt").split() == ["1", "1", "1.2", "1", "1",
                                                                                  "1.1", "1", "1"]
    assert res["verdict"] == "improved", res["metrics"]["score"]


@pytest.mark.slow
async def test_winners_kept_together_are_measured_once_and_committed_with_each_ones_evidence(
        tmp_path: Path) -> None:
    repo = params_repo(tmp_path)
    async with Client(build_server()) as c:
        await session(c, repo)
        first = await call(c, "launch_experiment", title="line 3", hypothesis="a bigger third factor",
                           sources=["paper 1"], source="patch", repeats=30, patch=params_patch(3, "1.2"))
        second = await call(c, "launch_experiment", title="line 6", source="patch", repeats=30,
                            patch=params_patch(6, "1.1"))
        flat = await call(c, "launch_experiment", title="line 8 as it is", source="patch", repeats="auto",
                          patch=params_patch(8, "1.0"))
        for exp in (first, second):
            assert (await wait_final(c, exp["experiment_id"]))["verdict"] == "improved"
        await wait_final(c, flat["experiment_id"])
        refused = await error(c, "launch_experiment", source="experiments",
                              experiment_ids=[first["experiment_id"], flat["experiment_id"]])
        both = await call(c, "launch_experiment", source="experiments",
                          experiment_ids=[first["experiment_id"], second["experiment_id"]], repeats=30)
        res = await wait_final(c, both["experiment_id"])
        assert res["verdict"] == "improved", res["metrics"]["score"]
        kept = await call(c, "commit_winner", experiment_id=both["experiment_id"])
        after = await call(c, "get_experiment", experiment_id=first["experiment_id"])
    assert "only winners" in refused and flat["experiment_id"] in refused
    assert git(repo, "show", "autoresearch/t:params.txt").split() == ["1", "1", "1.2", "1", "1", "1.1", "1", "1"]
    assert git(repo, "rev-list", "--count", "autoresearch/t") == str(int(git(repo, "rev-list", "--count",
                                                                             both["base_commit"])) + 1)
    text = kept["message"]
    assert text.startswith("line 3 + line 6") and "Kept together" in text
    assert f"(experiment {first['experiment_id']}, on" in text and f"(experiment {second['experiment_id']}, on" in text
    assert "Hypothesis: a bigger third factor" in text and "paper 1" in text
    assert "kept together" in after["next_step"] and both["experiment_id"] in after["next_step"]


# params.txt with lines git tells apart (each a factor of 1): changes of lines side by side are one region to it
DISTINCT = "".join(f"1.{'0' * i}\n" for i in range(8))


def lines_patch(changes: dict[int, str]) -> str:
    """One hunk of DISTINCT's params.txt changing some of its lines (1-based line: new value)."""
    lines = DISTINCT.splitlines()
    body = "".join(f"-{x}\n+{changes[i + 1]}\n" if i + 1 in changes else f" {x}\n" for i, x in enumerate(lines))
    return f"--- a/params.txt\n+++ b/params.txt\n@@ -1,{len(lines)} +1,{len(lines)} @@\n{body}"


@pytest.mark.slow
async def test_winners_that_change_the_same_lines_are_kept_with_a_merge_and_none_is_lost(tmp_path: Path) -> None:
    # lines 3 and 4 of params.txt side by side: git's three-way merge takes neither over the other
    repo = params_repo(tmp_path, {"params.txt": DISTINCT})
    async with Client(build_server()) as c:
        await session(c, repo)
        third = await call(c, "launch_experiment", title="line 3", source="patch", repeats=30,
                           patch=lines_patch({3: "1.2"}))
        fourth = await call(c, "launch_experiment", title="line 4", source="patch", repeats=30,
                            patch=lines_patch({4: "1.1"}))
        eighth = await call(c, "launch_experiment", title="line 8", source="patch", repeats=30,
                            patch=lines_patch({8: "1.05"}))
        ids = [third["experiment_id"], fourth["experiment_id"], eighth["experiment_id"]]
        for exp_id in ids:
            assert (await wait_final(c, exp_id))["verdict"] == "improved"
        combined = await call(c, "launch_experiment", source="experiments", experiment_ids=ids, repeats=30)
        pair = await error(c, "launch_experiment", source="experiments", experiment_ids=ids[:2])
        unmerged = await error(c, "launch_experiment", source="patch", experiment_ids=ids,
                               patch=lines_patch({3: "1.2", 8: "1.05"}))
        merged = await call(c, "launch_experiment", source="patch", experiment_ids=ids, repeats=30,
                            patch=lines_patch({3: "1.2", 4: "1.1", 8: "1.05"}))
        await wait_final(c, combined["experiment_id"])
        res = await wait_final(c, merged["experiment_id"])
        assert res["verdict"] == "improved", res["metrics"]["score"]
        kept = await call(c, "commit_winner", experiment_id=merged["experiment_id"])
    # the combination keeps lines 3 and 8, and says which pair conflicts and how to keep the one left out
    assert len(combined["conflicts"]) == 1, combined["conflicts"]
    assert ids[1] in combined["conflicts"][0] and ids[0] in combined["conflicts"][0]
    assert "params.txt" in combined["conflicts"][0]
    assert "experiment_ids=" in combined["message"] and "git apply --3way" in combined["message"]
    assert "cannot be combined" in pair and "experiment_ids=[...the same ids]" in pair, pair
    assert ids[1] in unmerged and "git apply --3way" in unmerged and ids[0] not in unmerged, unmerged
    assert git(repo, "show", "autoresearch/t:params.txt").split() == ["1.", "1.0", "1.2", "1.1", "1.0000", "1.00000",
                                                                       "1.000000", "1.05"]
    text = kept["message"]
    assert "merged by hand" in text
    assert all(f"(experiment {i}, on" in text for i in ids), text


@pytest.mark.slow
async def test_a_winner_whose_lines_a_commit_changed_is_redone_by_hand_with_its_own_evidence(tmp_path: Path) -> None:
    repo = params_repo(tmp_path, {"params.txt": DISTINCT})
    async with Client(build_server()) as c:
        await session(c, repo)
        third = await call(c, "launch_experiment", title="line 3", source="patch", repeats=30,
                           patch=lines_patch({3: "1.2"}))
        fourth = await call(c, "launch_experiment", title="line 4", hypothesis="a bigger fourth factor",
                            source="patch", repeats=30, patch=lines_patch({4: "1.1"}))
        for exp in (third, fourth):
            assert (await wait_final(c, exp["experiment_id"]))["verdict"] == "improved"
        await call(c, "commit_winner", experiment_id=third["experiment_id"])
        moved = await error(c, "launch_experiment", source="experiment", experiment_id=fourth["experiment_id"])
        redone = await call(c, "launch_experiment", source="patch", experiment_ids=[fourth["experiment_id"]],
                            repeats=30, patch=lines_patch({3: "1.2", 4: "1.1"}).replace("-1.00\n+1.2", " 1.2"))
        assert (await wait_final(c, redone["experiment_id"]))["verdict"] == "improved"
        kept = await call(c, "commit_winner", experiment_id=redone["experiment_id"])
    assert f"experiment_ids=['{fourth['experiment_id']}']" in moved and "git apply --3way" in moved, moved
    assert git(repo, "show", "autoresearch/t:params.txt").split()[2:4] == ["1.2", "1.1"]
    assert kept["message"].startswith("line 4") and "a bigger fourth factor" in kept["message"]
    assert f"(experiment {fourth['experiment_id']}, on" in kept["message"], kept["message"]


@pytest.mark.slow
async def test_a_commit_offers_again_the_discards_whose_files_it_changed(tmp_path: Path) -> None:
    repo = params_repo(tmp_path, {"notes.txt": "notes\n"})
    async with Client(build_server()) as c:
        await session(c, repo)
        win = await call(c, "launch_experiment", title="line 3", source="patch", repeats=30,
                         patch=params_patch(3, "1.2"))
        same = await call(c, "launch_experiment", title="line 6 unchanged", source="patch", repeats="auto",
                          patch=params_patch(6, "1.0"))
        elsewhere = await call(c, "launch_experiment", title="notes", source="patch", repeats="auto",
                               patch="--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-notes\n+more notes\n")
        assert (await wait_final(c, win["experiment_id"]))["verdict"] == "improved"
        assert (await wait_final(c, same["experiment_id"]))["verdict"] in ("no_change", "inconclusive")
        assert (await wait_final(c, elsewhere["experiment_id"]))["verdict"] in ("no_change", "inconclusive")
        kept = await call(c, "commit_winner", experiment_id=win["experiment_id"], title="line 3")
    assert len(kept["revisit"]) == 1 and kept["revisit"][0].startswith(same["experiment_id"]), kept["revisit"]
    assert "params.txt" in kept["revisit"][0] and "source='experiment'" in kept["revisit"][0]


@pytest.mark.slow
async def test_the_brief_s_re_measure_call_needs_no_title_and_a_new_idea_still_does(tmp_path: Path) -> None:
    # LATE_WIN times value x factor: a winner on factor.txt moves the head without touching value.txt
    repo = script_repo(tmp_path, LATE_WIN.replace("score=100.00", "score=$((100 * $(cat factor.txt))).00"))
    (repo / "factor.txt").write_text("1\n")
    git(repo, "add", "factor.txt")
    git(repo, "commit", "-qm", "factor")
    async with Client(build_server()) as c:
        await session(c, repo)
        first = await launch_value(c, "110", repeats=30)
        await wait_final(c, first["experiment_id"])
        more = await call(c, "launch_experiment", source="experiment", experiment_id=first["experiment_id"])
        await wait_final(c, first["experiment_id"])
        factor = await call(c, "launch_experiment", title="factor", source="patch", repeats=30,
                            patch="--- a/factor.txt\n+++ b/factor.txt\n@@ -1 +1 @@\n-1\n+2\n")
        assert (await wait_final(c, factor["experiment_id"]))["verdict"] == "improved"
        await call(c, "commit_winner", experiment_id=factor["experiment_id"])  # the head moves: the call re-applies
        moved = await call(c, "launch_experiment", source="experiment", experiment_id=first["experiment_id"],
                           repeats=30)
        res = await wait_final(c, moved["experiment_id"])
        untitled = await error(c, "launch_experiment", source="patch", patch=value_patch("100", "120"))
    assert more["experiment_id"] == first["experiment_id"] and more["prior_pairs"] == 30
    assert moved["reapplies"] == first["experiment_id"] and res["title"] == "value 110"
    assert "title is missing" in untitled and "source='patch'" in untitled


@pytest.mark.slow
async def test_a_cancelled_experiment_runs_again_with_the_brief_s_call(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, '[ -e slow ] && sleep 0.3; echo METRIC score=100')
    async with Client(build_server()) as c:
        await session(c, repo)
        launched = await call(c, "launch_experiment", title="slow", source="patch", repeats="auto",
                              patch="--- /dev/null\n+++ b/slow\n@@ -0,0 +1 @@\n+x\n")
        exp_id = launched["experiment_id"]
        assert (await call(c, "cancel_experiment", experiment_id=exp_id))["status"] == "cancelled"
        again = await call(c, "launch_experiment", source="experiment", experiment_id=exp_id)  # as the brief writes it
        res = await wait_final(c, exp_id)
    assert again["experiment_id"] == exp_id and res["status"] == "done" and res["title"] == "slow"
