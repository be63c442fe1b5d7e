"""The harness's own measure of every bench run (worker/runner.py): wall and CPU time taken from outside the
command, for its whole process tree (under bubblewrap, and with the sandbox off), recorded with every sample
as `harness.wall_s` and `harness.cpu_s`; a verdict the outside time of the same runs contradicts is refused
(worker/decide.py outside_refutes), so a candidate that defines `clock_gettime` for the protected harness
cannot fake its win (issue 32 item 11); and `processes_per_sample`, each sample the median of k processes."""

from __future__ import annotations

import difflib
import json
import math
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.measure import stats
from autoresearch_mcp.store.config import config_path
from autoresearch_mcp.worker import decide, sandbox
from conftest import script_repo, slow_clock
from helpers import call, wait_final

SERVER = Path(__file__).resolve().parents[1] / "server"
# a process that spends `s` seconds of CPU time, however loaded the machine is
BURN = "python3 -c 'import time\nt=time.process_time()\nwhile time.process_time()-t<{s}: pass'"
needs_bwrap = pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")


def measured(command: str, tree: Path, off: bool, subreaper: bool = True) -> dict[str, Any]:
    """run_command's outside measures of `command`, in a process of its own (as the runner runs it)."""
    code = ("import json, sys\nfrom autoresearch_mcp.worker import procs, sandbox\n"
            f"sub = procs.become_subreaper() if {subreaper} else False\n"
            f"r = procs.run_command(['bash', '-c', {command!r}], {str(tree)!r}, 120, "
            f"confine=sandbox.Confinement({str(tree)!r}, off={off}))\n"
            "print(json.dumps({'sub': sub, 'exit': r.exit_code, 'wall': r.wall_s, 'cpu': r.cpu_s, "
            "'out': r.output}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SERVER)})
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# A waited child, then an orphan (its parent exits at once) that the command waits for through a file:
# 0.3 s of CPU time each, with the sleeps in between spending next to none.
TREE = (f"rm -f orphan.done; {BURN.format(s=0.3)}; ( ({BURN.format(s=0.3)}; touch orphan.done) & ); "
        "while [ ! -e orphan.done ]; do sleep 0.05; done; echo ended")


@needs_bwrap
def test_the_cpu_time_of_a_whole_process_tree_is_taken_from_outside_under_bubblewrap(tmp_path: Path) -> None:
    # bubblewrap's outer process exits without reaping its PID namespace's init: only a subreaper sees it
    r = measured(TREE, tmp_path, off=False)
    assert r["sub"] and r["exit"] == 0 and "ended" in r["out"]
    assert 0.6 <= r["cpu"] < r["wall"] + 0.6, r  # the orphan's turn is counted too
    assert r["wall"] > 0


@pytest.mark.serial
def test_the_cpu_time_of_a_whole_process_tree_is_taken_with_the_sandbox_off(tmp_path: Path) -> None:
    r = measured(TREE, tmp_path, off=True)
    assert r["sub"] and r["exit"] == 0
    assert r["cpu"] >= 0.6, r


@needs_bwrap
def test_without_a_reaper_a_confined_command_has_its_every_processs_cpu_time(tmp_path: Path) -> None:
    # its cgroup counts its every process whoever reaps them, and so does its own init where no group can be made
    r = measured(TREE, tmp_path, off=False, subreaper=False)
    assert r["exit"] == 0 and 0.6 <= r["cpu"] < r["wall"] + 0.6, r


# --- the rule: an improvement the outside time of the same runs contradicts is not one --------------------

DESIGN = stats.make_design("auto")
PLAN = DESIGN.plan()


def pairs(n: int, metric: str, ratio: float, cpu_ratio: float, wall_ratio: float, seed: int = 5,
          sd: float = 0.03) -> list[dict[str, Any]]:
    """Samples of n pairs: `metric` (higher is better) `ratio` times the baseline's, the harness's CPU and wall
    time `cpu_ratio` and `wall_ratio` times, each value with its own noise; the order a coin per pair."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        second = rng.random() < 0.5
        for role, scale in (("baseline", (1.0, 1.0, 1.0)), ("candidate", (ratio, cpu_ratio, wall_ratio))):
            position = int(second) if role == "candidate" else int(not second)
            values = {metric: 10.0 * scale[0] * math.exp(rng.gauss(0, sd)),
                      decide.HARNESS_CPU: 2.0 * scale[1] * math.exp(rng.gauss(0, sd)),
                      decide.HARNESS_WALL: 3.0 * scale[2] * math.exp(rng.gauss(0, sd))}
            out.append({"pair": i, "role": role, "position": position, "metrics": values})
    return out


def judged(samples: list[dict[str, Any]], metric: str, **spec: Any) -> decide.Decision:
    return decide.judge(samples, decide.Spec(metric, "higher", 0.01, **spec), PLAN, n=30, final_n=30)


def test_a_rate_four_times_higher_whose_runs_took_as_long_from_outside_is_not_improved() -> None:
    d = judged(pairs(30, "rows_per_s", 4.0, 1.0, 1.0), "rows_per_s")
    assert d.verdict != "improved" and d.won == []
    why = d.metrics["rows_per_s"].reason or ""
    assert "rows_per_s claims" in why and "harness_share" in why and "CPU time" in why
    assert any("harness" in p for p in d.problems)


def test_a_real_speed_up_shows_outside_too_and_stays_improved() -> None:
    # the timed work is 80% of each run: a 2x rate makes the run 0.6 of its time, in CPU and wall time
    d = judged(pairs(30, "rows_per_s", 2.0, 0.6, 0.6), "rows_per_s")
    assert d.verdict == "improved" and d.won == ["rows_per_s"] and not d.problems


def test_more_threads_may_spend_more_cpu_time_when_the_wall_time_shows_the_change() -> None:
    d = judged(pairs(30, "rows_per_s", 1.8, 1.1, 0.6), "rows_per_s")
    assert d.verdict == "improved", d.metrics["rows_per_s"].reason


def test_a_rate_up_while_the_runs_got_clearly_slower_is_refused_naming_both() -> None:
    d = judged(pairs(30, "rows_per_s", 1.3, 1.2, 1.2), "rows_per_s")
    assert d.verdict != "improved"
    why = d.metrics["rows_per_s"].reason or ""
    assert "rows_per_s claims" in why and "wall time" in why and "moved the other way" in why


def test_a_metric_that_is_no_time_nor_rate_is_not_held_to_the_run_time() -> None:
    # a score (a compression ratio, an accuracy) may improve with the runs as long as before
    assert judged(pairs(30, "score", 1.3, 1.0, 1.0), "score").verdict == "improved"
    # ... unless the session says which share of the run it times
    assert judged(pairs(30, "score", 4.0, 1.0, 1.0), "score", harness_share={"score": 0.5}).verdict != "improved"
    # and a benchmark that runs for a fixed time says 0: the direction alone is checked
    assert judged(pairs(30, "rows_per_s", 4.0, 1.0, 1.0), "rows_per_s",
                  harness_share={"rows_per_s": 0.0}).verdict == "improved"


def test_samples_without_the_harness_measure_are_judged_as_before() -> None:
    samples = pairs(30, "rows_per_s", 4.0, 1.0, 1.0)
    for s in samples:
        del s["metrics"][decide.HARNESS_CPU], s["metrics"][decide.HARNESS_WALL]
    assert judged(samples, "rows_per_s").verdict == "improved"


# --- end to end: the bundled example, a candidate that defines clock_gettime, and a real speed-up ----------

# Linked into normsoft beside main.c, whose timer calls clock_gettime: the harness's own program then reads a
# clock that runs at a quarter of the real one, and reports the rows four times faster.
FAKE_CLOCK = slow_clock(0.25)
OPS_CPU = "backend/cpu/ops-cpu.c"


def appended(repo: Path, rel: str, text: str) -> str:
    before = (repo / rel).read_text()
    return "".join(difflib.unified_diff(before.splitlines(True), (before + text).splitlines(True), f"a/{rel}",
                                        f"b/{rel}"))


@pytest.mark.serial
@pytest.mark.anyio
async def test_a_candidate_that_fakes_the_harness_clock_is_refused_and_a_real_fusion_is_not(
    example_repo: Path, patches: Path
) -> None:
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher", tag="clock")
        fake = await call(c, "launch_experiment", title="a faster clock", source="patch", repeats=30,
                          patch=appended(example_repo, OPS_CPU, FAKE_CLOCK))
        real = await call(c, "launch_experiment", title="fused rms_norm and mul", source="patch", repeats="auto",
                          patch=(patches / "fuse-rms-norm-mul.patch").read_text())
        faked = await wait_final(c, fake["experiment_id"], timeout=900)
        assert faked["status"] == "done", (faked.get("error"), faked["log_tail"][-800:])
        await wait_final(c, real["experiment_id"], timeout=900)
        # every metric in full, the harness's own measures too
        faked = await call(c, "get_experiment", experiment_id=fake["experiment_id"], samples=True)
        fused = await call(c, "get_experiment", experiment_id=real["experiment_id"], samples=True)
    assert faked["checks"]["passed"]  # its rows are right: only the clock lies
    rows = faked["metrics"]["rows_per_s"]
    assert rows["delta_pct"] > 100  # the claim as the program printed it: about 4x
    assert faked["verdict"] != "improved"
    # why, when the harness's rule is what refuses it (the unit tests above pin the note's words)
    assert "timed from outside" in rows.get("note", "timed from outside") or rows["verdict"] != "improved", rows
    assert abs(faked["metrics"][decide.HARNESS_CPU]["delta_pct"]) < 40  # the runs did the same work
    # a real speed-up shows from outside too: never refused by the harness's measure (at a shared machine's
    # load the wall-clock metric itself may still need more pairs than the budget has)
    fused_rows = fused["metrics"]["rows_per_s"]
    assert "timed from outside" not in fused_rows.get("note", ""), fused_rows
    assert fused["metrics"][decide.HARNESS_CPU]["delta_pct"] < 0
    assert fused["verdict"] in ("improved", "noisy", "inconclusive"), fused_rows
    assert fused["verdict"] == "improved" or fused_rows["noise_pct"] > 5, fused_rows


# --- several processes per sample -------------------------------------------------------------------------

# Each run prints the next of 100, 300, 200 (a counter per tree): a sample of three processes is their median.
CYCLE = ('f=.autoresearch-count; i=$(cat "$f" 2>/dev/null || echo 0); echo $((i+1)) > "$f"; '
         'v=$(( i % 3 == 0 ? 100 : (i % 3 == 1 ? 300 : 200) )); echo "METRIC score=$v"')


@pytest.mark.serial
@pytest.mark.anyio
async def test_each_sample_is_the_median_of_processes_per_sample_runs(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, CYCLE)
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="k")
        config = json.loads(config_path(repo).read_text())
        config["processes_per_sample"] = 3
        config_path(repo).write_text(json.dumps(config))
        await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="k")
        exp = await call(c, "launch_experiment", title="a note", source="patch", repeats="auto",
                         patch="--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+a note\n")
        await wait_final(c, exp["experiment_id"], timeout=300)
        res = await call(c, "fetch_sky_logs", experiment_id=exp["experiment_id"], tail_lines=0, samples=True)
    assert res["status"] == "done", (res["error"], res["log_tail"])
    score = res["metrics"]["score"]
    # one process a sample would give 100, 300 and 200 in turn; three give their median every time
    n = score["n_pairs"]
    assert n >= 6 and score["baseline"]["samples"] == [200.0] * n and score["candidate"]["samples"] == [200.0] * n
    assert res["verdict"] == "no_change"
    log = (repo / ".autoresearch" / "logs" / f"{exp['experiment_id']}.log").read_text()
    assert "(process 3 of 3)" in log
    assert res["metrics"][decide.HARNESS_WALL]["n_pairs"] == n
    # each result says how each metric was measured
    assert score["measure"] == "as the bench printed it, median of 3 processes a sample"
    assert "taken by the harness from outside" in res["metrics"][decide.HARNESS_CPU]["measure"]


# --- a focus and the program that disagree -----------------------------------------------------------------


def focus_pairs(n: int, op_ratio: float, tg_ratio: float, seed: int = 9) -> list[dict[str, Any]]:
    """A focus experiment's samples: the op's time `op_ratio` times the baseline's, tg_tps `tg_ratio` times."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        second = rng.random() < 0.5
        for role, (op, tg) in (("baseline", (1.0, 1.0)), ("candidate", (op_ratio, tg_ratio))):
            position = int(second) if role == "candidate" else int(not second)
            out.append({"pair": i, "role": role, "position": position, "metrics": {
                "focus.FLASH_ATTN_EXT": 500.0 * op * math.exp(rng.gauss(0, 0.01)),
                "tg_tps": 40.0 * tg * math.exp(rng.gauss(0, 0.002))}})
    return out


FOCUS_SPEC = decide.Spec("tg_tps", "higher", 0.01, ["tg_tps"], focus=["FLASH_ATTN_EXT"],
                         objective_tolerance_pct={"tg_tps": 2.0})


def test_an_op_that_regressed_while_the_program_did_not_move_is_said_so() -> None:
    d = decide.judge(focus_pairs(30, 1.166, 1.0), FOCUS_SPEC, PLAN, n=30, final_n=30)
    assert d.verdict == "regressed"
    said = d.disagreement or ""
    assert "focus.FLASH_ATTN_EXT regressed +16.6%" in said and "tg_tps" in said and "did not move" in said


def test_a_program_that_moved_while_its_focus_did_not_is_said_so() -> None:
    d = decide.judge(focus_pairs(30, 1.0, 1.05), FOCUS_SPEC, PLAN, n=30, final_n=30)
    assert "tg_tps +5.0%" in (d.disagreement or "") and "beyond its focus" in (d.disagreement or "")


def test_an_op_win_the_program_also_shows_is_no_disagreement() -> None:
    d = decide.judge(focus_pairs(30, 0.8, 1.03), FOCUS_SPEC, PLAN, n=30, final_n=30)
    assert d.metrics["focus.FLASH_ATTN_EXT"].verdict == "improved" and d.disagreement is None


# --- the llama.cpp recipe's op benchmark: several processes a run, each metric their median ----------------

FAKE_OPBENCH = """#!/usr/bin/env bash
# prints the next of 100, 300, 200 (a counter beside it) as the focus' time, and a steady control
f="$(dirname "$0")/count"; i=$(cat "$f" 2>/dev/null || echo 0); echo $((i+1)) > "$f"
echo "METRIC focus.RMS_NORM=$(( i % 3 == 0 ? 100 : (i % 3 == 1 ? 300 : 200) ))"
echo "METRIC control.ADD=50"
"""
FAKE_LLAMA_BENCH = r"""#!/usr/bin/env bash
# the record of each test asked for: the prompt test's (-p N) and the generation test's (-n N) where N is not 0
while [ $# -gt 0 ]; do case "$1" in -p) p=$2 ;; -n) n=$2 ;; esac; shift; done
records=()
[ "$p" != 0 ] && records+=("{\"n_prompt\": $p, \"n_gen\": 0, \"avg_ts\": 900.5}")
[ "$n" != 0 ] && records+=("{\"n_prompt\": 0, \"n_gen\": $n, \"avg_ts\": 40.25}")
(IFS=,; echo "[${records[*]}]")
"""


@pytest.mark.parametrize(("processes", "focus"), [("1", "100.0000"), ("3", "200.0000")])
def test_the_recipes_op_benchmark_runs_in_several_processes_and_prints_their_median(
    tmp_path: Path, processes: str, focus: str
) -> None:
    from autoresearch_mcp import recipes

    tree = tmp_path / "llama"
    (tree / "build-autoresearch" / "bin").mkdir(parents=True)
    recipes.write(recipes.get("llama.cpp"), tree)
    for name, text in (("autoresearch-opbench", FAKE_OPBENCH), ("llama-bench", FAKE_LLAMA_BENCH)):
        (tree / "build-autoresearch" / "bin" / name).write_text(text)
        (tree / "build-autoresearch" / "bin" / name).chmod(0o755)
    (tmp_path / "m.gguf").write_text("not read by the fakes")
    env = {"PATH": "/usr/bin:/bin", "AUTORESEARCH_MODEL": str(tmp_path / "m.gguf"), "AUTORESEARCH_THREADS": "1",
           "AUTORESEARCH_FOCUS": "RMS_NORM", "LLAMA_OPBENCH_PROCESSES": processes}
    done = subprocess.run(["bash", "./autoresearch.sh", "bench"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # (a rate over CPU time differs from run to run)
    lines = [re.sub(r"\.cpu=\d+\.\d{4}$", ".cpu=<rate>", line) for line in done.stdout.splitlines()
             if line.startswith("METRIC ")]
    assert lines == [f"METRIC focus.RMS_NORM={focus}", "METRIC control.ADD=50.0000", "METRIC pp_tps=900.5",
                     "METRIC pp_tps.cpu=<rate>", "METRIC tg_tps=40.25", "METRIC tg_tps.cpu=<rate>"]
