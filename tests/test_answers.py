"""What the tools answer, through real MCP clients: metrics nobody judges, samples on request, one noise note,
the get_experiment name and the size of its answer, progress and log messages of long calls, and a server that
ends with its client."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client
from pydantic import ValidationError

from autoresearch_mcp.app import build_server
from autoresearch_mcp.measure import metrics, stats
from autoresearch_mcp.store.config import SessionConfig
from autoresearch_mcp.worker import decide, outcomes
from conftest import init_repo, script_repo
from helpers import FINAL, call, error

pytestmark = pytest.mark.anyio


def _pairs(n: int, effect: float) -> list[dict[str, Any]]:
    """n pairs of samples printing score (judged) and ms (nobody judges it), the candidate `effect` faster."""
    rng = random.Random(7)
    samples = []
    for i in range(n):
        first = rng.random() < 0.5
        for role, factor in (("baseline", 1.0), ("candidate", 1.0 + effect)):
            score = round(100.0 * factor * (1 + rng.gauss(0, 0.01)), 2)
            samples.append({"pair": i, "role": role, "position": int(first) if role == "candidate" else int(not first),
                            "metrics": {"score": score, "ms": round(1000.0 / score, 3)}})
    return samples


def test_a_metric_nobody_judges_is_measured_without_a_verdict_or_a_direction() -> None:
    design = stats.make_design(30)
    analysis = metrics.analyze(outcomes.read(outcomes.Experiment, {"samples": _pairs(30, 0.3)}),
                               decide.Spec("score", "higher", 0.01), design)
    judged, measured = analysis["metrics"]["score"], analysis["metrics"]["ms"]
    assert (judged["verdict"], judged["direction"], judged["role"]) == ("improved", "higher", "objective")
    # ms fell by about a quarter: before, it read "direction": "higher", "verdict": "regressed"
    assert measured["verdict"] is None and measured["direction"] is None and measured["role"] is None
    assert measured["delta_pct"] < -15 and measured["ci_high_pct"] < 0
    assert measured["ci_level"] == pytest.approx(1 - design.alpha)  # the decision's level, said
    assert analysis["verdict"] == "improved"


def test_a_metric_nobody_judges_shows_the_direction_its_config_gives_and_still_no_verdict() -> None:
    spec = decide.Spec("score", "higher", 0.01, shown_directions={"ms": "lower"})
    analysis = metrics.analyze(outcomes.read(outcomes.Experiment, {"samples": _pairs(30, 0.3)}), spec,
                               stats.make_design(30))
    measured = analysis["metrics"]["ms"]
    assert measured["direction"] == "lower" and measured["verdict"] is None and measured["role"] is None
    assert measured["delta_pct"] < -15  # its own relative change, whichever way is better


def test_the_config_names_directions_of_measured_metrics_and_refuses_a_judged_one() -> None:
    base = {"session_id": "s", "tag": "t", "branch": "autoresearch/t", "repo": "/r", "metric": "score",
            "direction": "higher", "executor": "local", "start_commit": "0" * 40, "created_at": "now"}
    config = SessionConfig.model_validate({**base, "metric_directions": {"ms": "lower"}})
    assert config.metric_directions == {"ms": "lower"}
    with pytest.raises(ValidationError, match=r"metric_directions.*score.*judged"):
        SessionConfig.model_validate({**base, "metric_directions": {"score": "lower"}})
    with pytest.raises(ValidationError):
        SessionConfig.model_validate({**base, "metric_directions": {"ms": "faster"}})


async def _experiment(c: Client, patches: Path, repo: Path) -> str:
    await call(c, "start_session", repo=str(repo), metric="rows_per_s", direction="higher", tag="answers")
    launched = await call(c, "launch_experiment", title="fuse", source="patch", repeats=30,
                          patch=(patches / "fuse-rms-norm-mul.patch").read_text())
    return str(launched["experiment_id"])


@pytest.mark.slow
async def test_get_experiment_leaves_samples_out_unless_asked_and_fetch_sky_logs_answers_the_same(
        example_repo: Path, patches: Path) -> None:
    calls: list[list[tuple[float, float | None, str | None]]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        calls[-1].append((done, total, message))

    async with Client(build_server(), mode="legacy") as c:
        exp_id = await _experiment(c, patches, example_repo)
        with anyio.fail_after(300):
            while True:
                calls.append([])
                res = await c.call_tool("get_experiment", {"experiment_id": exp_id, "wait_s": 60},
                                        progress_callback=on_progress)
                assert not res.is_error and res.structured_content is not None
                if res.structured_content["status"] in FINAL:
                    break
        got = res.structured_content
        alias = await call(c, "fetch_sky_logs", experiment_id=exp_id)
        full = await call(c, "get_experiment", experiment_id=exp_id, samples=True)
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert got["status"] == "done"
    primary = got["metrics"]["rows_per_s"]
    assert primary["verdict"] and primary["direction"] == "higher" and primary["ci_level"]
    assert primary["baseline"]["samples"] == [] and primary["baseline"]["n"] == primary["n_pairs"]
    assert len(full["metrics"]["rows_per_s"]["baseline"]["samples"]) == primary["n_pairs"]
    assert len(json.dumps(full)) > len(json.dumps(got))
    # the bundled benchmark also prints ms_per_row, which nobody asked to judge
    assert "verdict" not in got["metrics"]["ms_per_row"] and "direction" not in got["metrics"]["ms_per_row"]
    assert {k: v for k, v in alias.items() if k != "log_tail"} == {k: v for k, v in got.items() if k != "log_tail"}
    assert tools["fetch_sky_logs"].output_schema == tools["get_experiment"].output_schema
    assert set(tools["fetch_sky_logs"].input_schema["properties"]) == set(tools["get_experiment"].input_schema[
        "properties"])
    # the waiting call told its client each pair as it came, numbered
    told = [p for told in calls for p in told if p[2] and "pairs" in p[2]]
    assert told and all(p[1] == 30 for p in told)
    for told in calls:  # within one call, progress only grows
        assert all(b[0] > a[0] for a, b in itertools.pairwise(told))


def _size(res: Any) -> int:
    """What a client gets of an answer: its structured content as JSON on the wire, and its text."""
    return len(json.dumps(res.structured_content, separators=(",", ":"))) + sum(
        len(getattr(block, "text", "")) for block in res.content)


@pytest.mark.slow
async def test_get_experiment_answers_within_4000_characters_at_30_pairs_and_the_samples_come_when_asked(
        example_repo: Path, patches: Path) -> None:
    async with Client(build_server(), mode="legacy") as c:
        exp_id = await _experiment(c, patches, example_repo)
        with anyio.fail_after(300):
            while (await call(c, "get_experiment", experiment_id=exp_id, wait_s=60))["status"] not in FINAL:
                pass
        res = await c.call_tool("get_experiment", {"experiment_id": exp_id})
        full = await c.call_tool("get_experiment", {"experiment_id": exp_id, "samples": True})
    got, whole = res.structured_content, full.structured_content
    assert got is not None and whole is not None and got["status"] == "done", got
    n = got["metrics"]["rows_per_s"]["n_pairs"]
    assert n == 30
    # five metrics (the objective, its CPU form, ms_per_row and the harness's wall and CPU time): was 15,841
    assert _size(res) < 4000, (_size(res), got)
    # every field the contract names is there, null or not
    assert {"status", "log_tail", "log_path", "metrics", "verdict", "checks", "worker", "cost_usd"} <= set(got)
    for m in got["metrics"].values():
        assert {"baseline", "candidate", "delta_pct", "ci_low_pct", "ci_high_pct", "p_value", "n_pairs"} <= set(m)
        assert set(m["candidate"]) == {"n", "mean", "median", "stddev", "cv", "samples"}
        assert m["baseline"]["samples"] == m["candidate"]["samples"] == []
    # the harness's own measures in one line; asked for, every metric in full with its samples
    assert not any(k.startswith("harness.") for k in got["metrics"]) and "harness.wall_s" in got["harness"]
    assert set(whole["metrics"]) == {*got["metrics"], "harness.wall_s", "harness.cpu_s"} and "harness" not in whole
    for m in whole["metrics"].values():
        assert len(m["baseline"]["samples"]) == len(m["candidate"]["samples"]) == n
    # the text says the same in short, not the fields a second time
    text = res.content[0].text  # type: ignore[union-attr]
    assert f"done, {got['verdict']}" in text and "rows_per_s: " in text and got["next_step"] in text
    assert not text.startswith("{")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_start_session_tells_a_client_that_asks_each_step_as_progress_and_log_messages(
        example_repo: Path, mode: str) -> None:
    progress: list[str] = []
    logs: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def on_log(params: Any) -> None:
        logs.append(str(params.data))

    extra: dict[str, Any] = {"log_level": "info"} if mode == "auto" else {}
    async with Client(build_server(), mode=mode, logging_callback=on_log, **extra) as c:  # type: ignore[arg-type]
        if mode == "legacy":  # 2025-11-25: the client asks once, for the connection
            await c.set_logging_level("info")
        res = await c.call_tool("start_session", {"repo": str(example_repo), "metric": "rows_per_s",
                                                  "direction": "higher", "tag": "steps"},
                                progress_callback=on_progress)
    assert not res.is_error
    text = "\n".join(progress)
    for step in ("validating the benchmark", "building", "bench run 1 of 2", "bench run 2 of 2", "threads",
                 "autoresearch.checks.sh"):
        assert step in text, (step, progress)
    assert logs == progress  # each step once as a log message too


async def test_a_client_that_asks_for_nothing_gets_no_log_messages(example_repo: Path) -> None:
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    async with Client(build_server(), mode="legacy", logging_callback=on_log) as c:
        await call(c, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher", tag="quiet")
    assert logs == []


# --- a server that ends with its client ------------------------------------------------------------

CLIENT = """
import json, os, sys
import anyio, psutil
from mcp import Client, StdioServerParameters

async def main(repo):
    params = StdioServerParameters(command=sys.executable, args=["-m", "autoresearch_mcp", "serve"], cwd=repo,
                                   env=dict(os.environ))
    async with Client(params) as c:
        server = next(p for p in psutil.Process().children() if "autoresearch_mcp" in " ".join(p.cmdline()))
        r = await c.call_tool("start_session", {"repo": repo, "metric": "score", "direction": "higher", "tag": "w"})
        assert not r.is_error, r.content
        r = await c.call_tool("launch_experiment", {"title": "slow", "source": "patch", "repeats": 30,
                              "patch": "--- /dev/null\\n+++ b/slow\\n@@ -0,0 +1 @@\\n+x\\n"})
        assert not r.is_error, r.content
        eid = r.structured_content["experiment_id"]
        while (await c.call_tool("get_experiment", {"experiment_id": eid})).structured_content["status"] != "running":
            await anyio.sleep(0.1)
        print(json.dumps({"server": server.pid}), flush=True)
        await c.call_tool("fetch_sky_logs", {"experiment_id": eid, "wait_s": 300})

anyio.run(main, sys.argv[1])
"""


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _waiting_session(tmp_path: Path) -> tuple[subprocess.Popen[str], psutil.Process, psutil.Process]:
    """A client process long-polling a running experiment of its stdio server: (client, server, runner)."""
    repo = script_repo(tmp_path, 'if [ -e slow ]; then sleep 60; fi; echo METRIC score=$((100 + RANDOM % 3))')
    (tmp_path / "client.py").write_text(CLIENT)
    client = subprocess.Popen([sys.executable, str(tmp_path / "client.py"), str(repo)], stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ))
    assert client.stdout is not None
    with anyio.fail_after(120):
        line = await anyio.to_thread.run_sync(client.stdout.readline)
    server = psutil.Process(json.loads(line)["server"])
    ledger = (repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()
    runner = psutil.Process(next(json.loads(r)["runtime"]["pid"] for r in ledger if '"pid"' in r))
    await anyio.sleep(0.5)  # the long poll is under way
    return client, server, runner


async def _ends(*procs: psutil.Process) -> None:
    # far less than the 300 s the call waits for, which is how long the server went on before
    with anyio.fail_after(60):
        while not all(_gone(p) for p in procs):
            await anyio.sleep(0.1)


@pytest.mark.slow
async def test_a_server_whose_client_goes_away_mid_wait_exits_and_ends_its_experiment(tmp_path: Path) -> None:
    client, server, runner = await _waiting_session(tmp_path)
    try:
        client.send_signal(signal.SIGTERM)  # the client ends: the server's stdin closes
        client.wait(30)
        await _ends(server, runner)
    finally:
        for p in (server, runner):
            if not _gone(p):
                p.kill()
        client.kill()


@pytest.mark.slow
async def test_a_server_given_sigterm_mid_wait_exits_and_ends_its_experiment(tmp_path: Path) -> None:
    client, server, runner = await _waiting_session(tmp_path)
    try:
        server.send_signal(signal.SIGTERM)
        await _ends(server, runner)
    finally:
        for p in (server, runner):
            if not _gone(p):
                p.kill()
        client.kill()
        client.wait(30)


# --- argument errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_wrong_argument_is_named_in_one_line_with_what_was_wrong_and_an_example(mode: str) -> None:
    async with Client(build_server(), mode=mode) as c:  # type: ignore[arg-type]
        wrong = await error(c, "start_session", repo="/nowhere", metric="score", direction="up")
        missing = await error(c, "start_session", repo="/nowhere", direction="higher")
        union = await error(c, "launch_experiment", title="t", repeats="lots")
        unknown = await error(c, "get_experiment", experiment_id="x", bogus=1)
    for text in (wrong, missing, union, unknown):
        assert "\n" not in text and "pydantic" not in text and "validation error for" not in text, text
    assert "argument 'direction' is not valid" in wrong and '(got "up")' in wrong and 'direction="higher"' in wrong
    assert "argument 'metric' is missing; e.g. metric=" in missing
    assert "'auto'" in union and union.count("argument 'repeats'") == 1 and 'repeats="auto"' in union
    assert "unknown argument(s) 'bogus'" in unknown and "samples" in unknown


async def test_start_session_again_on_the_unfilled_templates_says_the_next_step(tmp_path: Path) -> None:
    repo = tmp_path / "bare"
    repo.mkdir()
    (repo / "main.c").write_text("int main(void){return 0;}\n")
    init_repo(repo)
    async with Client(build_server(), mode="legacy") as c:
        first = await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="tpl")
        assert set(first["templates_created"]) == {"autoresearch.sh", "autoresearch.checks.sh"}
        again = await error(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="tpl")
        (repo / "autoresearch.sh").write_text("#!/usr/bin/env bash\necho METRIC score=1\n")
        filled = await error(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="tpl")
    assert "commit or stash" not in again
    assert "not committed yet: fill in autoresearch.sh and autoresearch.checks.sh" in again
    assert "git add autoresearch.sh autoresearch.checks.sh && git commit" in again
    assert "call start_session again with tag='tpl'" in again
    assert "fill in autoresearch.checks.sh (still the template" in filled and "git add" in filled
