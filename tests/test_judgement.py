"""Several metrics judged at once (objectives and guards), checks that compare with the baseline's
built tree, checks for every candidate with a verdict, and the hidden holdout of commit_winner;
through a real MCP client on small scripted repositories whose effects are known exactly."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.store.config import config_path
from conftest import balanced_noise, git, script_repo
from helpers import call, error, wait_final

pytestmark = pytest.mark.anyio

# One sample: each of a, b and mem is the number in its file, with +/-0.2% noise.
BENCH = (balanced_noise() + "awk -v a=$(cat a.txt) -v b=$(cat b.txt) -v m=$(cat mem.txt) -v n=$n 'BEGIN{"
         "printf \"METRIC a=%.5f\\nMETRIC b=%.5f\\nMETRIC mem=%.5f\\n\", a*n, b*n, m*n}'")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = script_repo(tmp_path, BENCH, build="cp result.txt out.txt",
                       checks='cmp -s out.txt "$AUTORESEARCH_BASELINE_TREE/out.txt" '
                              '|| { echo "out.txt differs from the baseline\'s"; exit 1; }')
    for name, text in {"a.txt": "100\n", "b.txt": "100\n", "mem.txt": "100\n", "result.txt": "42\n",
                       ".gitignore": "out.txt\n"}.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "metrics")
    return repo


async def start(c: Client, repo: Path, **settings: Any) -> dict[str, Any]:
    """Start the session, then (if given) write settings into its config and resume with them."""
    res = await call(c, "start_session", repo=str(repo), metric="a", direction="higher", tag="t")
    if settings:
        config = json.loads(config_path(repo).read_text())
        config.update(settings)
        config_path(repo).write_text(json.dumps(config))
        res = await call(c, "start_session", repo=str(repo), metric="a", direction="higher", tag="t")
    return res


def files_patch(**changes: tuple[str, str]) -> str:
    return "".join(f"--- a/{name}.txt\n+++ b/{name}.txt\n@@ -1 +1 @@\n-{old}\n+{new}\n"
                   for name, (old, new) in changes.items())


async def measured(c: Client, title: str, repeats: int = 30, **changes: tuple[str, str]) -> dict[str, Any]:
    exp = await call(c, "launch_experiment", title=title, source="patch", repeats=repeats,
                     patch=files_patch(**changes))
    return await wait_final(c, exp["experiment_id"])


GUARDS = {"b": {"direction": "higher", "tolerance_pct": 5}, "mem": {"direction": "lower", "tolerance_pct": 5}}


@pytest.mark.slow
async def test_a_guard_that_regresses_beyond_tolerance_refuses_the_winner(repo: Path) -> None:
    async with Client(build_server()) as c:
        started = await start(c, repo, guards=GUARDS)
        assert started["objectives"] == ["a"] and started["guards"] == ["b", "mem"]
        res = await measured(c, "faster, more memory", a=("100", "110"), mem=("100", "120"))
        refused = await error(c, "commit_winner", experiment_id=res["experiment_id"])
    a, b, mem = (res["metrics"][n] for n in ("a", "b", "mem"))
    assert (a["role"], a["judgement"]) == ("objective", "improved")
    assert (b["role"], b["judgement"], b["direction"]) == ("guard", "held", "higher")
    # lower is better for mem: +20% is a regression, judged in its own direction
    assert (mem["judgement"], mem["verdict"], mem["direction"]) == ("regressed", "regressed", "lower")
    assert mem["delta_pct"] > 19 and mem["tolerance_pct"] == 5
    assert res["verdict"] == "regressed" and res["won"] == ["a"] and res["blocking"] == ["mem"]
    assert "objective a improved (+" in refused and "guard mem regressed: +" in refused
    assert "tolerance 5%" in refused


@pytest.mark.slow
async def test_a_winner_whose_guards_held_is_committed_naming_the_objective_that_won(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo, guards=GUARDS)
        res = await measured(c, "faster, slightly more memory", a=("100", "110"), mem=("100", "102"))
        assert res["verdict"] == "improved" and res["metrics"]["mem"]["judgement"] == "held"
        done = await call(c, "commit_winner", experiment_id=res["experiment_id"])
    assert "Won: a (objectives: a)" in done["message"]
    assert "also mem: +" in done["message"] and "(guard, held within 5%)" in done["message"]
    trailer = next(line for line in done["message"].splitlines() if line.startswith("Autoresearch-Result: "))
    assert json.loads(trailer.split(": ", 1)[1])["won"] == ["a"]


@pytest.mark.slow
async def test_a_guard_whose_interval_reaches_past_its_tolerance_is_undecided(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo, guards={"b": {"direction": "higher", "tolerance_pct": 0.001}})
        res = await measured(c, "faster", a=("100", "110"))
        refused = await error(c, "commit_winner", experiment_id=res["experiment_id"])
    assert res["metrics"]["b"]["judgement"] == "undecided"
    assert res["verdict"] == "inconclusive" and res["blocking"] == ["b"]
    assert "guard b undecided" in refused and "more pairs" in refused


@pytest.mark.slow
async def test_any_objective_may_win_and_none_may_regress(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo, objectives=["a", "b"])
        only_b = await measured(c, "b faster", b=("100", "110"))
        trade = await measured(c, "a faster, b slower", a=("100", "110"), b=("100", "90"))
        refused = await error(c, "commit_winner", experiment_id=trade["experiment_id"])
        done = await call(c, "commit_winner", experiment_id=only_b["experiment_id"])
    assert only_b["verdict"] == "improved" and only_b["won"] == ["b"]
    assert only_b["metrics"]["a"]["judgement"] == "held"
    assert trade["verdict"] == "regressed" and trade["won"] == ["a"] and trade["blocking"] == ["b"]
    assert "objective b regressed" in refused
    assert "Won: b (objectives: a, b)" in done["message"]


async def test_a_judged_metric_the_benchmark_does_not_print_is_an_error(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        config = json.loads(config_path(repo).read_text())
        config["guards"] = {"latency": {"direction": "lower", "tolerance_pct": 3}}
        config_path(repo).write_text(json.dumps(config))
        msg = await error(c, "start_session", repo=str(repo), metric="a", direction="higher", tag="t")
    assert "guard metric 'latency'" in msg and "METRIC a=" in msg


@pytest.mark.slow
async def test_checks_compare_the_candidate_with_the_baseline_build(repo: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, repo)
        same = await measured(c, "faster, same output", a=("100", "110"))
        other = await measured(c, "faster, other output", a=("100", "111"), result=("42", "43"))
    assert same["checks"]["passed"] and same["status"] == "done"
    assert other["status"] == "checks_failed" and "out.txt differs from the baseline's" in other["checks"]["tail"]


async def test_checks_come_first_and_a_wrong_candidate_is_never_measured(tmp_path: Path) -> None:
    # the candidate (the tree with `wrong`) fails its checks; it would be +-50% around the baseline
    undecidable = ('if [ -e wrong ]; then w=1; else w=0.001; fi; ' + balanced_noise("$w")
                   + "awk -v n=$n 'BEGIN{printf \"METRIC a=%.4f\\n\", 100*n}'")
    repo = script_repo(tmp_path, undecidable, checks="echo checked; test ! -e wrong")
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="a", direction="higher", tag="t")
        exp = await call(c, "launch_experiment", title="anything", source="patch", repeats=100,
                         patch="--- /dev/null\n+++ b/wrong\n@@ -0,0 +1 @@\n+x\n")
        res = await wait_final(c, exp["experiment_id"])
        refused = await error(c, "commit_winner", experiment_id=exp["experiment_id"])
    assert res["checks"]["ran"] and not res["checks"]["passed"] and res["status"] == "checks_failed"
    assert res["verdict"] is None and res["pairs_done"] == 0  # no pair was spent on it
    assert "checks did not pass" in refused


# --- the hidden holdout -----------------------------------------------------------------------------

HOLDOUT = """#!/usr/bin/env bash
# prints a secret line that must never reach the agent, then the holdout metric
echo "SECRET-HOLDOUT-LINE"
awk -v h=$(cat hold.txt) -v s=$RANDOM 'BEGIN{srand(s); printf "METRIC a=%.5f\\n", h*(1+0.004*(rand()-0.5))}'
"""


@pytest.fixture
def holdout_repo(repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    (repo / "hold.txt").write_text("100\n")
    git(repo, "add", "hold.txt")
    git(repo, "commit", "-qm", "holdout input")
    script = tmp_path / "private" / "holdout.sh"
    script.parent.mkdir()
    script.write_text(HOLDOUT)
    script.chmod(0o755)
    return repo, script


@pytest.mark.slow
async def test_a_winner_whose_hidden_holdout_regressed_is_refused(holdout_repo: tuple[Path, Path]) -> None:
    repo, script = holdout_repo
    async with Client(build_server()) as c:
        await start(c, repo, holdout={"command": str(script), "pairs": 14})
        overfit = await measured(c, "tuned to the benchmark", a=("100", "110"), hold=("100", "80"))
        assert overfit["verdict"] == "improved"
        refused = await error(c, "commit_winner", experiment_id=overfit["experiment_id"])
        general = await measured(c, "helps both", a=("100", "112"), hold=("100", "110"))
        done = await call(c, "commit_winner", experiment_id=general["experiment_id"])
    assert "hidden holdout regressed" in refused and "(a -" in refused
    assert "SECRET" not in refused and "SECRET" not in done["message"]
    assert done["holdout"]["verdict"] == "held" and done["holdout"]["pairs"] == 14
    assert 9 < done["holdout"]["delta_pct"]["a"] < 11
    assert "Holdout: held over 14 pairs (a +" in done["message"]
    records = [json.loads(line) for line in (repo / ".autoresearch/ledger.jsonl").read_text().splitlines()]
    assert [r["verdict"] for r in records if r["type"] == "holdout"] == ["regressed", "held"]


# The program the holdout runs; hold.txt says how fast it is. "cached": 3x slower, but it keeps its answer in
# its tree on its first run and reads it back on every later one.
PROGRAM = """#!/usr/bin/env bash
mode=$(cat hold.txt)
if [ "$mode" != cached ]; then echo "$mode"; elif [ -e .answer ]; then echo 100
else echo 33; touch .answer 2>/dev/null || true; fi
"""


@pytest.mark.slow
async def test_a_candidate_that_keeps_its_answer_in_its_tree_cannot_pass_the_holdout(tmp_path: Path) -> None:
    """A fix: the holdout's runs were confined as builds (their tree writable, their protected files not
    bound), so a candidate 3x slower there passed by remembering its answer after its first run."""
    # a benchmark that writes nothing into its tree (its noise is $RANDOM's), so its runs see it read-only
    bench = ("awk -v a=$(cat a.txt) -v s=$RANDOM "
             "'BEGIN{srand(s); printf \"METRIC a=%.5f\\n\", a*(1+0.004*(rand()-0.5))}'")
    repo = script_repo(tmp_path, bench)
    for name, text in {"a.txt": "100\n", "hold.txt": "100\n", "prog.sh": PROGRAM}.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the holdout's program")
    script = tmp_path / "private" / "holdout.sh"
    script.parent.mkdir()
    script.write_text(HOLDOUT.replace("$(cat hold.txt)", "$(bash ./prog.sh)"))
    script.chmod(0o755)
    async with Client(build_server()) as c:
        started = await start(c, repo, holdout={"command": str(script), "pairs": 14})
        assert started["settings"]["read_only_runs"] == "bench, checks"
        cheat = await measured(c, "remembers its answers", a=("100", "110"), hold=("100", "cached"))
        assert cheat["verdict"] == "improved"
        refused = await error(c, "commit_winner", experiment_id=cheat["experiment_id"])
    assert "hidden holdout regressed" in refused and "(a -6" in refused


@pytest.mark.slow
async def test_the_holdout_verdict_is_recomputed_from_the_ledger(holdout_repo: tuple[Path, Path]) -> None:
    from autoresearch_mcp.experiments import holdout
    from autoresearch_mcp.measure import stats
    from autoresearch_mcp.store.config import load_config

    repo, script = holdout_repo
    async with Client(build_server()) as c:
        await start(c, repo, holdout={"command": str(script), "pairs": 14})
        overfit = await measured(c, "tuned to the benchmark", a=("100", "110"), hold=("100", "80"))
        await error(c, "commit_winner", experiment_id=overfit["experiment_id"])
    record = next(json.loads(line) for line in (repo / ".autoresearch/ledger.jsonl").read_text().splitlines()
                  if json.loads(line)["type"] == "holdout")
    config = load_config(repo)
    assert config is not None and config.holdout is not None
    design = stats.make_design("auto", alpha=config.alpha, min_effect=config.min_effect,
                               noise_limit=config.noise_limit, max_pairs=config.max_pairs, warmup=0)
    again = holdout.judge(record["samples"], record["seed"], config.holdout, {}, "higher", design)
    assert (again.verdict, again.pairs, again.metrics) == (record["verdict"], 14, record["metrics"])
    coins = random.Random(record["seed"])
    drawn = [1 if coins.random() < 0.5 else 0 for _ in range(14)]  # the candidate first when the coin says so
    assert [s["position"] for s in record["samples"] if s["role"] == "baseline"] == drawn


@pytest.mark.slow
async def test_a_holdout_inside_the_repository_is_refused(holdout_repo: tuple[Path, Path]) -> None:
    repo, _ = holdout_repo
    async with Client(build_server()) as c:
        await start(c, repo, holdout=f"bash {repo / 'autoresearch.sh'} bench")
        res = await measured(c, "faster", a=("100", "110"))
        msg = await error(c, "commit_winner", experiment_id=res["experiment_id"])
    assert "inside the repository" in msg
    assert git(repo, "log", "-1", "--format=%s", "autoresearch/t") == "holdout input"  # nothing committed
