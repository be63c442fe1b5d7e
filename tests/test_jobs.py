"""Runner jobs: what the runner prepares once per job, not once per run."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest

from autoresearch_mcp.core import decide, runner, sandbox
from autoresearch_mcp.measure import stats


def _tree(path: Path) -> str:
    path.mkdir()
    (path / "autoresearch.sh").write_text('#!/usr/bin/env bash\ncase "$1" in build) true ;; bench) '
                                          'echo "METRIC t=$((RANDOM % 10 + 100))" ;; esac\n')
    return str(path)


def test_the_bench_is_prepared_once_per_job_not_once_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A fix: every sample rebuilt its environment, its confinement and the judging spec while the machine's
    lock was held."""
    built: list[str] = []
    real = runner.run_env

    def counted(job: dict[str, Any], tree: str) -> dict[str, str]:
        built.append(str(tree))
        return real(job, tree)

    monkeypatch.setattr(runner, "run_env", counted)
    design = stats.make_design("auto", warmup=1)  # stopped by `stops` after 4 pairs
    job: dict[str, Any] = {
        "experiment_id": "x", "baseline_dir": _tree(tmp_path / "a"), "candidate_dir": _tree(tmp_path / "b"),
        "timeouts": {"build": 30, "bench": 30, "checks": 30}, "design": design.job(), "stops": [4], "seed": 1,
        "judging": dataclasses.asdict(decide.Spec("t", "lower", 0.01)), "run_checks": False,
        "sandbox": {"mode": sandbox.OFF}}
    out = runner.run_experiment(job, io.StringIO())
    capsys.readouterr()  # the runner's event lines
    assert out.status == "done" and len(out.samples) == 8 and len(out.warmup) == 2
    assert sorted(built) == sorted([job["baseline_dir"], job["candidate_dir"]] * 2)  # two builds, two benches prepared
