"""The pairing is chosen by measurement (issues 40 and 52): a session whose config names no `pairing` pairs one after
the other where turns cannot measure each side (the sandbox off), cannot judge a metric, or would cut short runs;
elsewhere start_session runs pairs of the head both ways and keeps turns unless one after the other is clearly
steadier. The choice and why (both spreads) are in its settings and recorded in the config, and a config that names a
pairing keeps it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from autoresearch_mcp import validation
from autoresearch_mcp.app import build_server
from autoresearch_mcp.models import BenchRun
from autoresearch_mcp.store.config import SessionConfig, config_path
from autoresearch_mcp.worker import sandbox
from conftest import init_repo
from helpers import call

# about 0.35 s of CPU a run, timed on the CPU clock
BURN = """import time
t = time.process_time()
while time.process_time() - t < 0.35:
    pass
for name in "{name}".split(","):
    print("METRIC %s=%.1f" % (name, (time.process_time() - t) * 1000))
"""


def repo_printing(tmp_path: Path, name: str, config: dict[str, object] | None = None) -> Path:
    """A bench printing `name` (names, comma-separated) as its CPU time of about 0.35 s of work."""
    repo = tmp_path / f"bench-{name.replace('.', '-').replace(',', '-')}"
    repo.mkdir()
    (repo / "bench.py").write_text(BURN.format(name=name))
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\ncase \"$1\" in\n  build) true ;;\n  bench) python3 bench.py ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    init_repo(repo)
    (repo / ".autoresearch").mkdir()
    config_path(repo).write_text(json.dumps({"threads": 1, **(config or {})}) + "\n")
    return repo


async def started(repo: Path, metric: str) -> dict[str, object]:
    async with Client(build_server()) as c:
        return await call(c, "start_session", repo=str(repo), metric=metric, direction="lower", tag="p")


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_bench_timed_on_its_own_clock_pairs_one_after_the_other_where_turns_measure_it_worse(
        tmp_path: Path) -> None:
    # t_ms is the program's own (exact) CPU time of its loop; in turns it is judged over the run's own turns, whose
    # share of the run each side's stops blur: its pairs agree one after the other, not in turns
    repo = repo_printing(tmp_path, "t_ms")
    result = await started(repo, "t_ms")
    why = result["settings"]["pairing"]  # type: ignore[index]
    assert result["pairing"] == "sequential", why
    assert "measured steadier" in why and "one after the other and by" in why and "in turns" in why, why
    assert json.loads(config_path(repo).read_text())["pairing"] == "sequential"
    assert "t_ms.wall" not in result["baseline"]  # type: ignore[operator]


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_bench_that_prints_its_cpu_time_pairs_in_turns_and_its_baseline_is_measured_so(tmp_path: Path) -> None:
    repo = repo_printing(tmp_path, "t_ms,t_ms.cpu")
    result = await started(repo, "t_ms")
    why = result["settings"]["pairing"]  # type: ignore[index]
    assert result["pairing"] == "turns", why
    assert why.startswith("in turns") and "pairs of runs of the head" in why, why
    assert json.loads(config_path(repo).read_text())["pairing"] == "turns"
    # the baseline is measured as the pairs will be, in turns: t_ms from its CPU form, the printed figure kept
    assert {"t_ms", "t_ms.wall"} <= set(result["baseline"]), result["baseline"]  # type: ignore[arg-type]


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_metric_turns_cannot_judge_pairs_one_after_the_other_and_says_how_to_change_it(
        tmp_path: Path) -> None:
    repo = repo_printing(tmp_path, "score")
    result = await started(repo, "score")
    assert result["pairing"] == "sequential"
    why = result["settings"]["pairing"]  # type: ignore[index]
    assert "score.cpu" in why and '"pairing": "turns"' in why, why
    assert json.loads(config_path(repo).read_text())["pairing"] == "sequential"


@pytest.mark.serial
@pytest.mark.anyio
async def test_with_the_sandbox_off_pairs_run_one_after_the_other(tmp_path: Path) -> None:
    repo = repo_printing(tmp_path, "t_ms", {"sandbox": "off"})
    result = await started(repo, "t_ms")
    assert result["pairing"] == "sequential"
    assert "sandbox off" in result["settings"]["pairing"]  # type: ignore[index]


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_config_that_names_a_pairing_keeps_it(tmp_path: Path) -> None:
    repo = repo_printing(tmp_path, "t_ms", {"pairing": "sequential"})
    result = await started(repo, "t_ms")
    assert result["pairing"] == "sequential"
    assert json.loads(config_path(repo).read_text())["pairing"] == "sequential"


def runs_of(values: list[float], name: str = "t_ms") -> list[BenchRun]:
    return [BenchRun(index=i, exit_code=0, duration_s=0.5, timed_out=False, raw_metric_lines=[], parsed={name: v})
            for i, v in enumerate(values)]


def choice_for(sequential: list[float], in_turns: list[float], rounds: int = 3) -> validation.PairingChoice:
    """What choose_pairing decides when the validation's runs (the first pair of `sequential`) and its trial's pairs
    measure so: each call of the trial gives the next pair of its pairing."""
    config = SessionConfig(session_id="s", tag="t", branch="autoresearch/t", repo="/r", metric="t_ms",
                           direction="lower", executor="local", start_commit="0", created_at="now")
    given = {"sequential": iter(range(2, len(sequential), 2)), "turns": iter(range(0, len(in_turns), 2))}

    def measure(pairing: str) -> validation.Validation:
        i = next(given[pairing])
        values = sequential if pairing == "sequential" else in_turns
        return validation.Validation(runs_of(values[i:i + 2]), 0.0, [])

    return validation.choose_pairing(config, validation.Validation(runs_of(sequential[:2]), 0.0, []), measure)


def test_turns_are_kept_unless_one_after_the_other_is_clearly_steadier() -> None:
    cut_by_turns = choice_for([100, 100.4, 100, 99.7, 100.2, 100, 100, 100.3], [100, 113, 90, 101, 100, 114])
    burst_on_one_side = choice_for([100, 112, 100, 90, 101, 100, 100, 115], [100, 100.5, 100, 99.8, 100.1, 100])
    alike = choice_for([100, 102, 100, 98.5, 101, 100, 100, 101], [100, 101.5, 100, 98, 100, 101.5])
    assert cut_by_turns.pairing == "sequential" and cut_by_turns.turns is None, cut_by_turns.why
    assert "measured steadier" in cut_by_turns.why and "4 and 3 pairs" in cut_by_turns.why
    assert burst_on_one_side.pairing == "turns" and burst_on_one_side.turns is not None
    assert len(burst_on_one_side.turns.runs) == 2 and "measured steadier" in burst_on_one_side.why
    assert alike.pairing == "turns" and "within what these pairs can tell" in alike.why, alike.why
