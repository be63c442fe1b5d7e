"""A job knows its kind: every job file is one typed, versioned record, read back as it was written; a field no
kind declares, an unknown kind or a newer format is refused with a result line that says so; one reader says why
any job failed; and the counters job of analyze_bounds waits for the machine's turn as a bench does."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from autoresearch_mcp import worker
from autoresearch_mcp.analysis.counters import run_counted
from autoresearch_mcp.executors.jobs import JobMaker
from autoresearch_mcp.worker import channel, jobfile, machinelock, outcomes, runner


def placed(job: jobfile.Job, tmp_path: Path) -> jobfile.Job:
    return job.placed(experiment_id="e1", baseline_dir=str(tmp_path / "base"), candidate_dir=str(tmp_path / "cand"),
                      log_path=None, machine_lock=str(tmp_path / "machine.lock"), scripts={"autoresearch.sh": "s"})


@pytest.mark.parametrize("kind", sorted(jobfile.KINDS))
def test_every_kind_reads_back_as_the_record_it_was_written_from(kind: str, tmp_path: Path) -> None:
    job = placed(jobfile.KINDS[kind](threads=2, env={"A": "1"}, sandbox={"mode": "confined", "frozen": ["h.c"]}),
                 tmp_path)
    data = json.loads(json.dumps(job.to_dict()))
    assert data["kind"] == kind and data["version"] == jobfile.VERSION
    assert jobfile.read(data) == job
    assert job.sandbox["scripts"] == {"autoresearch.sh": "s"} and job.frozen == ["h.c"]


def test_a_field_no_kind_declares_is_refused_so_nothing_is_added_to_a_job_on_its_way(tmp_path: Path) -> None:
    data = placed(jobfile.Validation(), tmp_path).to_dict()
    with pytest.raises(jobfile.JobFileError, match="no field judging"):
        jobfile.read({**data, "judging": {"metric": "t"}})  # an experiment's field on a validation


@pytest.mark.parametrize("change, said", [({"kind": "bake"}, "a job of kind 'bake'"),
                                          ({"version": jobfile.VERSION + 1}, "of version"),
                                          ({"kind": None}, "a job of kind None")])
def test_a_job_this_runner_cannot_run_ends_with_a_result_line_that_says_why(
        tmp_path: Path, change: dict[str, Any], said: str) -> None:
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps({**jobfile.Experiment().to_dict(), **change}))
    done = subprocess.run([sys.executable, "-m", worker.__name__, str(job_file)], input="secret\n", capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result = channel.parse_result_line(done.stdout.strip().splitlines()[-1], "secret")
    assert result is not None and result["status"] == "failed" and said in result["error"]
    failed = outcomes.ended({"event": "result", "outcome": result}, outcomes.Experiment)
    assert failed.failure() == outcomes.Failure("runner", result["error"])


@pytest.mark.parametrize("kind", sorted(jobfile.KINDS))
def test_every_kind_has_an_outcome_that_reads_back_as_the_record_it_was_written_from(kind: str) -> None:
    record = outcomes.KINDS[kind]
    written = record("e1", host={"cpus": 2}, durations={"build": 1.5})
    if isinstance(written, outcomes.Measured):
        written.samples = [outcomes.Sample(0, "baseline", 1, 0, 0.1, False, {"t": 100.0}, steps={"t": 0.1})]
    data = json.loads(json.dumps(written.to_dict()))
    assert data["version"] == outcomes.VERSION
    assert outcomes.read(record, data) == written


def test_an_outcome_field_its_kind_does_not_declare_is_refused_as_is_a_newer_version() -> None:
    data = outcomes.Validation("e1", tree="/t").to_dict()
    with pytest.raises(outcomes.OutcomeError, match="no field samples"):
        outcomes.read(outcomes.Validation, {**data, "samples": []})  # an experiment's field on a validation
    with pytest.raises(outcomes.OutcomeError, match="of version"):
        outcomes.read(outcomes.Validation, {**data, "version": outcomes.VERSION + 1})
    with pytest.raises(outcomes.OutcomeError, match="no field cpu"):
        outcomes.read(outcomes.Experiment, {"samples": [{"pair": 0, "role": "baseline", "cpu": 1.0}]})


@pytest.mark.parametrize("final, kind, phase", [
    ({"event": "cancelled"}, jobfile.EXPERIMENT, "cancelled"),
    ({"event": "lost", "detail": "the VM was preempted"}, jobfile.VALIDATION, "lost"),
    ({"event": "result", "outcome": {"status": "failed", "phase": "build", "error": "cc: error"}}, jobfile.EXPERIMENT,
     "build"),
    ({"event": "result", "outcome": {"status": "failed", "problem": "no_perf", "detail": "no perf"}}, jobfile.PROFILE,
     "no_perf"),
    ({"event": "result", "outcome": {"status": "done", "judging": {}}}, jobfile.EXPERIMENT, "runner"),
    ({"event": "result", "outcome": {"status": "done", "version": outcomes.VERSION + 1}}, jobfile.HOLDOUT, "runner"),
])
def test_one_reader_says_why_any_job_failed(final: dict[str, Any], kind: str, phase: str) -> None:
    failure = outcomes.ended(final, outcomes.KINDS[kind]).failure()
    assert failure is not None and failure.phase == phase and failure.error


def test_a_result_that_holds_what_the_job_was_for_is_no_failure() -> None:
    done = outcomes.ended({"event": "result", "outcome": {"status": "done", "samples": []}}, outcomes.Experiment)
    assert done.failure() is None
    validated = outcomes.ended({"event": "result", "outcome": {"tree": "/t", "runs": [], "build_s": 1.0}},
                               outcomes.Validation)
    assert validated.failure() is None and validated.tree == "/t"


def test_the_runner_has_a_handler_for_every_kind() -> None:
    assert set(runner.HANDLERS) == set(jobfile.KINDS) == set(outcomes.KINDS)


def test_the_counters_job_of_analyze_bounds_waits_for_the_machines_turn(tmp_path: Path) -> None:
    """perf stat's command and the peak probe never load the CPU during a bench: while a bench holds the
    machine, the counted command has not started; it runs once the bench lets go."""
    lock, released = str(tmp_path / "machine.lock"), tmp_path / "released"
    holding, results = threading.Event(), []

    def bench() -> None:
        with machinelock.machine_turn(lock):
            holding.set()
            threading.Event().wait(1.0)  # a bench's pairs
            released.touch()

    holder = threading.Thread(target=bench)
    holder.start()
    assert holding.wait(30)
    # the job is one record, built by its builder, run by the runner's handler for its kind
    counted = threading.Thread(target=lambda: results.extend(
        run_counted([(["sh", "-c", f"test -e {released} && echo after the bench"], str(tmp_path), 60.0, False)],
                    lock)))
    counted.start()
    counted.join(60)
    holder.join(60)
    assert results and results[0].exit_code == 0 and "after the bench" in results[0].output
    assert JobMaker.counters([(["true"], "/", 1.0, True)]).commands == [
        {"argv": ["true"], "cwd": "/", "timeout_s": 1.0, "interrupt": True}]


def test_a_counters_job_runs_where_no_command_can_be_confined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """perf follows the user's own command: the counters job is not one of the confined kinds, and a machine
    without bubblewrap still counts."""
    from autoresearch_mcp.worker import sandbox

    monkeypatch.setattr(sandbox, "BWRAP", "autoresearch-no-such-bwrap")
    monkeypatch.setattr(sandbox, "_probed", {})
    job = dataclasses.replace(JobMaker.counters([(["echo", "counted"], str(tmp_path), 30.0, False)]),
                              machine_lock=str(tmp_path / "machine.lock"))
    assert runner.refusal(job) is None
    assert "counted" in runner.run(job, sys.stderr)["commands"][0]["output"]
    assert runner.refusal(jobfile.Experiment(sandbox={"mode": "confined"})) is not None
    assert os.path.exists(tmp_path / "machine.lock")
