"""Pairs in turns (issue #30): both runs of a pair at once, each given the CPU in short turns while the other is
stopped, so that a neighbour's burst of work falls on both sides; each judged metric is then read from its
CPU-time form (`<name>.cpu`), since a stopped side's wall clock runs on."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from autoresearch_mcp.measure import metrics, stats
from autoresearch_mcp.worker import decide, jobfile, measuretrees, procs, runner, sandbox, turns

MODES = [pytest.param(sandbox.CONFINED, marks=pytest.mark.skipif(
    sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")), sandbox.OFF]

# Busy for 0.25 s of its own CPU time, noting the machine's monotonic clock at every step into stamps-<n>
# (in its tree); prints its wall and CPU seconds, the CPU time also as the metric's CPU form.
BUSY = r"""python3 - <<'PY'
import os, time
time.sleep({SLEEP})
t0, w0, stamps = time.process_time(), time.monotonic(), []
while time.process_time() - t0 < 0.25:
    stamps.append(time.monotonic())
n = len([f for f in os.listdir(".") if f.startswith("stamps-")])
with open(f"stamps-{n}", "w") as fh:
    fh.write("\n".join(f"{s:.6f}" for s in stamps))
print(f"METRIC t={time.monotonic() - w0:.6f}")
print(f"METRIC t.cpu={time.process_time() - t0:.6f}") if "{CPU}" == "yes" else None
PY
"""


def a_job(tmp_path: Path, mode: str, pairs: int, cpu: bool = True, sleep: float = 0.0) -> jobfile.Experiment:
    """Two trees whose bench is busy for the same CPU time; the candidate's sleeps `sleep` seconds first."""
    trees = {}
    for role in ("baseline", "candidate"):
        tree = trees[role] = tmp_path / role
        tree.mkdir()
        bench = BUSY.replace("{CPU}", "yes" if cpu else "no").replace("{SLEEP}", str(sleep if role == "candidate"
                                                                                     else 0.0))
        (tree / "autoresearch.sh").write_text(f'#!/usr/bin/env bash\ncase "$1" in\n  bench)\n{bench};;\nesac\n')
        (tree / "role").write_text(role)
    judging = dataclasses.asdict(decide.Spec("t", "lower", 0.01, pairing=decide.TURNS))
    return jobfile.Experiment(experiment_id="e1", baseline_dir=str(trees["baseline"]),
                              candidate_dir=str(trees["candidate"]), design=stats.make_design("auto", warmup=0).job(),
                              judging=judging, stops=[pairs], seed=3, threads=1, run_checks=False,
                              timeouts={"build": 60, "bench": 60, "checks": 60}, sandbox={"mode": mode})


def stamps(tree: Path) -> list[float]:
    return [float(x) for f in sorted(tree.glob("stamps-*")) for x in f.read_text().split()]


def measured_stamps(tmp_path: Path, role: str) -> list[float]:
    """The readings of `role`'s runs, in the copy of its tree it ran in (measuretrees; kept by the test)."""
    [own] = [t for t in tmp_path.glob(f"{measuretrees.PREFIX}*/*/tree") if (t / "role").read_text() == role]
    return stamps(own)


def switches(a: list[float], b: list[float]) -> int:
    """How often the merged clock readings of two runs pass from one run to the other."""
    merged = sorted([(t, 0) for t in a] + [(t, 1) for t in b])
    return sum(1 for x, y in itertools.pairwise(merged) if x[1] != y[1])


@pytest.mark.as_user
@pytest.mark.serial
@pytest.mark.parametrize("mode", MODES)
def test_a_pair_in_turns_runs_its_two_sides_at_once_yet_never_together(tmp_path: Path, mode: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    job = a_job(tmp_path, mode, pairs=2)
    monkeypatch.setattr(measuretrees, "remove_all", lambda: None)  # each side runs in a copy: kept to be read
    with (tmp_path / "log").open("w") as log:
        out = runner.run_experiment(job, log)
    assert out.status == "done" and out.error is None, out
    assert len(out.samples) == 4
    base, cand = measured_stamps(tmp_path, "baseline"), measured_stamps(tmp_path, "candidate")
    assert len(base) > 1000 and len(cand) > 1000
    # Together on this machine's cores the readings of the two would interleave at almost every step; in turns
    # of 20 ms they pass from one to the other about once a turn (0.25 s of CPU each: a few dozen turns a pair).
    passes = switches(base, cand)
    assert 8 <= passes <= 200, passes
    # both ran over the same stretch of time: each pair's first and last readings overlap the other side's
    assert min(base) < max(cand) and min(cand) < max(base)
    for s in out.samples:
        # judged on its CPU time: about 0.25 s, while its wall clock ran on through the other's turns
        assert 0.2 < s.metrics["t"] < 2.0 and s.metrics["t.wall"] > s.metrics["t"] * 1.5, s.metrics
        assert "t.cpu" not in s.metrics
        if mode == sandbox.CONFINED:
            # the harness's own CPU time of the side's every process (its group's, or its own init's where no group can
            # be made): at least what it timed of itself
            assert s.metrics[decide.HARNESS_CPU] >= s.metrics["t"] * 0.95, s.metrics
        else:
            assert decide.HARNESS_CPU not in s.metrics
        # the harness's outside wall time of the run is its own turns' only: less than the wall clock it printed
        assert 0.2 < s.metrics[decide.HARNESS_WALL] < s.metrics["t.wall"], s.metrics
    assert "in turns of 20 ms" in (tmp_path / "log").read_text()


@pytest.mark.parametrize("mode", MODES)
def test_in_turns_a_judged_metric_without_its_cpu_form_makes_the_experiment_invalid(tmp_path: Path,
                                                                                     mode: str) -> None:
    with (tmp_path / "log").open("w") as log:
        out = runner.run_experiment(a_job(tmp_path, mode, pairs=2, cpu=False), log)
    assert out.stop_reason == "invalid" and out.status == "done", out
    assert out.error is not None and "'t.cpu'" in out.error and "CPU time" in out.error


def test_in_turns_each_judged_metric_is_its_cpu_form_and_its_wall_clock_is_kept_unjudged() -> None:
    values = {"tg_tps": 90.0, "tg_tps.cpu": 85.0, "pp_tps": 400.0, "pp_tps.cpu": 380.0, "focus.RMS_NORM": 12.0,
              "rows": 7.0, "rows.cpu": 6.0}
    names, problems = decide.in_turns(values, ["tg_tps", "pp_tps", "focus.RMS_NORM"])
    assert problems == []
    assert {n: values[o] for n, o in names.items()} == {
        "tg_tps": 85.0, "tg_tps.wall": 90.0, "pp_tps": 380.0, "pp_tps.wall": 400.0, "focus.RMS_NORM": 12.0,
        "rows": 7.0, "rows.cpu": 6.0}  # a metric nobody judges is left as printed
    _, missing = decide.in_turns({"tg_tps": 90.0}, ["tg_tps"])
    assert len(missing) == 1 and "METRIC tg_tps.cpu=" in missing[0]
    spec = decide.Spec("tg_tps", "higher", 0.01, pairing=decide.TURNS)
    assert metrics.measure_of("tg_tps", spec).startswith("CPU time")
    assert "not judged" in metrics.measure_of("tg_tps.wall", spec)
    assert metrics.measure_of("tg_tps", decide.Spec("tg_tps", "higher", 0.01)).startswith("as the bench printed")


def test_stopping_a_tree_stops_every_process_in_it_and_continuing_resumes_them(tmp_path: Path) -> None:
    import subprocess
    import time

    proc = subprocess.Popen(["bash", "-c", "sleep 30 & sleep 30 & wait"], start_new_session=True)
    try:
        time.sleep(0.3)
        tree = procs.tree(proc.pid)
        assert len(tree) >= 3
        assert turns.hold(proc.pid, stop=True)
        assert all(turns._stopped(p) for p in procs.tree(proc.pid))
        assert turns.hold(proc.pid, stop=False)
        time.sleep(0.05)
        assert not any(turns._stopped(p) for p in procs.tree(proc.pid))
    finally:
        procs.kill_group(proc.pid, grace_s=0.5)
        proc.wait()


def test_a_tree_is_found_from_each_processs_parent_where_the_kernel_lists_no_children(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import time

    proc = subprocess.Popen(["bash", "-c", "sleep 30 & sleep 30 & wait"], start_new_session=True)
    try:
        time.sleep(0.3)
        listed = sorted(procs.tree(proc.pid))
        monkeypatch.setattr(procs, "_HAS_CHILDREN", False)
        assert sorted(procs.tree(proc.pid)) == listed and len(listed) == 3
    finally:
        procs.kill_group(proc.pid, grace_s=0.5)
        proc.wait()


@pytest.mark.serial
@pytest.mark.parametrize("mode", MODES)
def test_in_turns_a_candidate_that_waits_regresses_though_its_cpu_time_did_not_move(tmp_path: Path,
                                                                                     mode: str) -> None:
    """A sleep is no CPU time: the judged metric does not see it, the runs' own wall time (their turns) does (a side
    that waits keeps its turn where its group counts its CPU time; elsewhere part of a sleep passes in the other
    side's turns, its timers running on while it is stopped)."""
    with (tmp_path / "log").open("w") as log:
        out = runner.run_experiment(a_job(tmp_path, mode, pairs=10, sleep=1.0), log)
    assert out.status == "done" and out.stop_reason == "regressed", out
    base = [s.metrics["t"] for s in out.samples if s.role == "baseline"]
    cand = [s.metrics["t"] for s in out.samples if s.role == "candidate"]
    assert abs(sum(cand) / sum(base) - 1) < 0.25  # the same CPU time, give or take the machine's noise
    decision = decide.judge([dataclasses.asdict(s) for s in out.samples],
                            decide.Spec("t", "lower", 0.01, pairing=decide.TURNS),
                            decide.Plan.from_dict(stats.make_design("auto", warmup=0).job()), n=10)
    assert decision.verdict == "regressed" and decide.HARNESS_WALL in decision.blocking
    assert any("time no CPU-time metric counts" in p for p in decision.problems)
    # the same samples judged as pairs one after the other would not look at the runs' own wall time
    plain = decide.judge([dataclasses.asdict(s) for s in out.samples], decide.Spec("t", "lower", 0.01),
                         decide.Plan.from_dict(stats.make_design("auto", warmup=0).job()), n=10)
    assert decide.HARNESS_WALL not in plain.blocking


# Waits in small pieces between short bursts of work: 12 times 4 ms of CPU, then 25 ms asleep.
WAITER = r"""python3 - <<'PY'
import time
for _ in range(12):
    t = time.process_time()
    while time.process_time() - t < 0.004:
        pass
    time.sleep(0.025)
print("METRIC t_ms=1")
PY
"""


@pytest.mark.skipif(sandbox.unavailable() is not None or sandbox.group() is None,
                    reason="no cgroup of its own for a confined command here")
@pytest.mark.as_user
@pytest.mark.serial
def test_in_turns_a_side_that_waits_keeps_its_turn_so_its_waits_count_in_its_own_wall_time(tmp_path: Path) -> None:
    """A wait is no CPU time: a side keeps its turn until it has had its turn's CPU time, so a wait placed where a
    turn would end on the clock passes in its own turn, not hidden in the other side's (issue 40)."""
    from autoresearch_mcp.worker import jobenv

    (tmp_path / "waits").mkdir()
    (tmp_path / "works").mkdir()
    job = jobfile.Experiment(baseline_dir=str(tmp_path / "waits"), candidate_dir=str(tmp_path / "works"),
                             sandbox={"mode": sandbox.CONFINED})
    waits, works = (jobenv.Prepared.of(job, str(tmp_path / n), "bench") for n in ("waits", "works"))
    busy = ["python3", "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t<0.6: pass"]
    with (tmp_path / "log").open("w") as log:
        alone = waits.run(["bash", "-c", WAITER], 60, log)
        waited, worked = turns.run_in_turns([(waits, ["bash", "-c", WAITER]), (works, busy)], 60, log)
    assert alone.ok and waited.ok and worked.ok, (waited.output, worked.output)
    assert alone.wall_s is not None and waited.wall_s is not None
    # its 12 waits of 25 ms and its 48 ms of work in its own turns, as long as it takes alone (a stopped side's
    # timers run on: before, a third of its waits passed in the other side's turns)
    assert waited.wall_s >= 0.85 * alone.wall_s, (waited.wall_s, alone.wall_s)


def test_a_pair_whose_stop_failed_is_run_again_a_few_times_a_round_then_fails_the_experiment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop that fails once in a while (a busy multi-threaded program) loses no experiment: that run of the pair
    is run again; a candidate whose stops keep failing has no more than runner.STOP_RETRIES runs left out."""
    real, fail_at = turns.run_in_turns, {3, 5}
    calls = {"n": 0}

    def flaky(runs: list[tuple[object, list[str]]], timeout_s: float, log: object,
              duty: float | None = None) -> list[procs.CommandResult]:
        calls["n"] += 1
        results = real(runs, timeout_s, log, duty)  # type: ignore[arg-type]
        if calls["n"] in fail_at:
            for r in results:
                r.problem = f"{turns.STOP_FAILED}: not every process of a side could be stopped in time"
        return results

    monkeypatch.setattr(turns, "run_in_turns", flaky)
    with (tmp_path / "log").open("w") as log:
        out = runner.run_experiment(a_job(tmp_path, sandbox.OFF, pairs=4), log)
    assert out.status == "done" and out.error is None and len(out.samples) == 8, out
    assert calls["n"] == 6 and "run again (2 of at most 3" in (tmp_path / "log").read_text()

    calls["n"], fail_at = 0, set(range(1, 100))  # every stop fails: three runs again, then the experiment fails
    (tmp_path / "again").mkdir()
    with (tmp_path / "log2").open("w") as log:
        out = runner.run_experiment(a_job(tmp_path / "again", sandbox.OFF, pairs=4), log)
    assert out.status == "done" and out.stop_reason == "invalid" and calls["n"] == runner.STOP_RETRIES + 1
    assert out.error is not None and turns.STOP_FAILED in out.error
