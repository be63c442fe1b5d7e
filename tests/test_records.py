"""Typed, versioned ledger records: a ledger written before records had a `schema_version` (format
0, `tests/data/ledger_v0/`, made by its make.py) is read by today's code with the same answers, each
migration is a plain function of one record, and what this code cannot read is skipped with a warning."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.executors import skypilot
from autoresearch_mcp.executors.sky_pool import SkyPool
from autoresearch_mcp.measure import metrics, stats
from autoresearch_mcp.report import write_report
from autoresearch_mcp.store.config import SessionConfig, gate_changes
from autoresearch_mcp.store.ledger import Ledger, apply, fold
from autoresearch_mcp.store.records import (
    SCHEMA_VERSION,
    TYPES,
    Analysis,
    ResultRecord,
    StatusRecord,
    migrate,
    parse,
)
from autoresearch_mcp.worker import decide, outcomes
from conftest import git
from helpers import call
from sky_fake import FakeSky

pytestmark = pytest.mark.anyio

V0 = Path(__file__).parent / "data" / "ledger_v0"


@pytest.fixture
def v0_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The format-0 session as it was left: its repository (from the bundle), config and ledger; the
    working directory is the repository, so a server binds the session again from these files."""
    repo = tmp_path / "values"
    subprocess.run(["git", "init", "-q", "-b", "tmp", str(repo)], check=True)
    git(repo, "fetch", "-q", str(V0 / "repo.bundle"), "refs/*:refs/*")
    git(repo, "checkout", "-q", "autoresearch/v0")
    state = repo / ".autoresearch"
    state.mkdir()
    holdout = tmp_path / "private" / "holdout.sh"
    (state / "config.json").write_text(_placed((V0 / "config.json").read_text(), repo, holdout))
    shutil.copy(V0 / "ledger.jsonl", state / "ledger.jsonl")
    fake = FakeSky(tmp_path / "vms")
    pools: list[SkyPool] = []

    def executor(repo: Any, cfg: SessionConfig, settings: Any) -> SkyPool:
        pools.append(SkyPool(Path(repo.working_dir), cfg, fake, tmp_path / "staging", poll_s=0.02))
        return pools[-1]

    monkeypatch.setattr(skypilot, "SkyExecutor", executor)
    monkeypatch.chdir(repo)
    yield repo
    for pool in pools:
        pool.close()


def _placed(text: str, repo: Path, holdout: Path) -> str:
    return text.replace("$REPO", str(repo)).replace("$HOLDOUT", str(holdout))


def _expected(repo: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_placed((V0 / "expected.json").read_text(), repo, repo.parent / "private"
                                              / "holdout.sh"))
    return data


async def test_a_format_0_ledger_gives_the_same_list_and_fetch_answers(v0_repo: Path) -> None:
    expected = _expected(v0_repo)
    async with Client(build_server()) as c:
        listed = await call(c, "list_experiments")
        fetched = {i: await call(c, "fetch_sky_logs", experiment_id=i, tail_lines=0, samples=True)
                   for i in expected["fetch_sky_logs"]}
    assert_same_answer(listed, expected["list_experiments"])
    for exp_id, answer in fetched.items():
        assert_same_answer(answer, expected["fetch_sky_logs"][exp_id])
    assert (v0_repo / ".autoresearch" / "ledger.jsonl").read_bytes() == (V0 / "ledger.jsonl").read_bytes()


def assert_same_answer(answer: Any, expected: Any, where: str = "answer") -> None:
    """Every field the answer had then is there with the same value (a figure to the digits get_experiment
    shows), unless it had nothing to say (get_experiment leaves those out); fields added since may be there too."""
    if isinstance(expected, dict):
        assert isinstance(answer, dict), where
        for key, value in expected.items():
            if key not in answer and value in (None, [], {}):
                continue
            assert key in answer, f"{where}.{key} is gone"
            assert_same_answer(answer[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(answer, list) and len(answer) == len(expected), where
        for i, (a, e) in enumerate(zip(answer, expected, strict=True)):
            assert_same_answer(a, e, f"{where}[{i}]")
    elif isinstance(expected, float):
        assert answer == pytest.approx(expected, rel=1e-3), f"{where}: {answer!r} != {expected!r}"
    else:
        assert answer == expected, f"{where}: {answer!r} != {expected!r}"


def test_a_format_0_ledger_gives_the_same_report_numbers(v0_repo: Path) -> None:
    report = write_report(str(v0_repo)).model_dump()
    assert {k: v for k, v in report.items() if not k.endswith("_path")} == _expected(v0_repo)["report"]


# --- migrations, one record at a time --------------------------------------------------------------


def test_a_version_0_record_migrates_to_the_current_version_dropping_its_null_runtime() -> None:
    v0 = {"ts": 1.0, "type": "status", "experiment_id": "e", "status": "running", "worker": None, "runtime": None}
    assert migrate(v0) == {"ts": 1.0, "type": "status", "experiment_id": "e", "status": "running", "worker": None,
                           "schema_version": SCHEMA_VERSION}
    queued = {"type": "platform", "experiment_id": "e", "platform": "arm", "status": "queued", "passed": None,
              "outcome": None, "analysis": None}
    assert migrate(queued) == {"type": "platform", "experiment_id": "e", "platform": "arm", "status": "queued",
                               "passed": None, "schema_version": 1}
    assert v0["runtime"] is None  # the record read is not changed


def test_a_current_record_is_read_as_written() -> None:
    record = StatusRecord(ts=2.0, experiment_id="e", status="lost", detail="gone")
    assert migrate(record.line()) == record.line()
    assert parse(record.line()) == record
    assert record.line() == {"ts": 2.0, "type": "status", "schema_version": SCHEMA_VERSION, "experiment_id": "e",
                             "status": "lost", "detail": "gone"}


def test_every_record_of_the_format_0_ledger_reads_into_its_model() -> None:
    lines = [json.loads(line) for line in (V0 / "ledger.jsonl").read_text().splitlines()]
    assert all("schema_version" not in raw for raw in lines)
    records = [parse(raw) for raw in lines]
    assert {r.type for r in records} == TYPES - {"profile"}  # profile records came with format 1
    assert all(r.schema_version == SCHEMA_VERSION for r in records)
    for raw, record in zip(lines, records, strict=True):
        assert {k: v for k, v in record.line().items() if k != "schema_version"} == {
            k: v for k, v in migrate(raw).items() if k != "schema_version"}, raw["type"]  # nothing lost


def test_every_field_of_an_analysis_is_declared_and_written_back_as_it_came() -> None:
    spec = decide.Spec("tg_tps", "higher", 0.01, ["tg_tps", "pp_tps"], {}, ["RMS_NORM"], "lower", 0.02,
                       {"tg_tps": 2.0, "pp_tps": 1.5}, 2.0, guard_ceiling_pct=5.0, adaptive_equivalence=True)
    rng = random.Random(3)
    samples = []
    for n in range(40):  # a focus 15% faster, the end-to-end metrics unchanged: claims on every guard
        for position, role in enumerate(("baseline", "candidate") if n % 2 else ("candidate", "baseline")):
            op = 0.85 if role == "candidate" else 1.0
            samples.append({"pair": n, "role": role, "position": position, "metrics": {
                "focus.RMS_NORM": round(100 * op * rng.gauss(1, 0.02), 3),
                "control.ROPE": round(100 * rng.gauss(1, 0.02), 3),
                "tg_tps": round(100 * rng.gauss(1, 0.01), 3), "pp_tps": round(100 * rng.gauss(1, 0.01), 3)}})
    raw = metrics.analyze(outcomes.read(outcomes.Experiment, {"samples": samples}), spec, stats.make_design("auto"))
    analysis = Analysis.model_validate(raw)
    assert analysis.model_extra == {} and all(m.model_extra == {} for m in analysis.metrics.values())
    assert analysis.claims and analysis.layout_pct is not None and analysis.metrics["tg_tps"].claim
    # the ledger line holds the keys analyze wrote, no more (a guard's claim fields only where it has a claim)
    written = ResultRecord(experiment_id="e", status="done", analysis=analysis).line()["analysis"]
    assert written == json.loads(json.dumps(raw))


def test_a_field_a_record_does_not_carry_leaves_the_folded_value() -> None:
    view = fold([parse({"type": "launch", "experiment_id": "e", "session_id": "s", "base_commit": "b"}),
                 parse({"type": "status", "experiment_id": "e", "status": "running", "worker": "w1"}),
                 parse({"type": "status", "experiment_id": "e", "status": "cancelled"})])
    assert view.experiments["e"].worker == "w1"  # a cancel does not say where it ran
    apply(view, parse({"type": "status", "experiment_id": "e", "status": "queued", "worker": None}))
    assert view.experiments["e"].worker is None  # requeued: on no worker


def test_the_branch_the_ledger_left_is_the_latest_validated_head_or_commit() -> None:
    # records of earlier versions carry no gate and no `reconciled`: they read as "not recorded" and False
    view = fold([parse({"type": "session", "session_id": "s", "head": "h0"}),
                 parse({"type": "launch", "experiment_id": "e", "session_id": "s", "base_commit": "h0"}),
                 parse({"type": "commit", "experiment_id": "e", "commit": "h1", "parent": "h0"})])
    assert view.heads == {"s": "h1"} and view.sessions[0].gate is None
    assert view.experiments["e"].commit is not None and view.experiments["e"].commit.reconciled is False
    apply(view, parse({"type": "session", "session_id": "s", "head": "h1", "gate": {"alpha": 0.02}}))
    assert view.heads == {"s": "h1"} and view.sessions[-1].gate == {"alpha": 0.02}


def test_a_gate_setting_the_record_lacks_counts_at_its_default() -> None:
    config = SessionConfig(session_id="s", tag="t", branch="autoresearch/t", repo="/r", metric="m",
                           direction="higher", executor="local", start_commit="h", created_at="now")
    recorded = {k: v for k, v in config.gate().items() if k != "warmup"}  # a setting a later version added
    assert gate_changes(config, recorded) == []
    assert gate_changes(config.model_copy(update={"warmup": 3}), recorded) == ["warmup: 1 -> 3"]
    assert gate_changes(config.model_copy(update={"alpha": 0.5}), config.gate()) == ["alpha: 0.02 -> 0.5"]


# --- what this code cannot read --------------------------------------------------------------------


def _ledger(tmp_path: Path, *lines: dict[str, Any] | str) -> Ledger:
    path = tmp_path / ".autoresearch" / "ledger.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return Ledger(path)


LAUNCH = {"type": "launch", "experiment_id": "e", "session_id": "s", "title": "t", "base_commit": "b",
          "metric": "m", "direction": "lower"}


def test_a_record_of_an_unknown_type_is_skipped_with_a_warning(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    ledger = _ledger(tmp_path, LAUNCH, {"type": "annotation", "experiment_id": "e", "text": "later feature"},
                     {"type": "status", "experiment_id": "e", "status": "running"})
    records, warnings = ledger.records()
    assert [r.type for r in records] == ["launch", "status"]
    assert warnings == ["ledger line 2 was skipped: its type 'annotation' is not one this server knows"]
    assert "annotation" in caplog.text
    assert ledger.view().experiments["e"].status == "running"


def test_a_record_of_a_newer_version_is_skipped_with_a_warning(tmp_path: Path) -> None:
    newer = {**LAUNCH, "experiment_id": "f", "schema_version": SCHEMA_VERSION + 1}
    view = _ledger(tmp_path, LAUNCH, newer, {"type": "status", "experiment_id": "f", "status": "running"}).view()
    assert list(view.experiments) == ["e"]
    assert view.warnings[0] == (f"ledger line 2 was skipped: it is of schema_version {SCHEMA_VERSION + 1}, newer "
                                f"than this server's {SCHEMA_VERSION}: update autoresearch-mcp to read it")
    assert view.warnings[1] == "record for unknown experiment f skipped"


def test_a_record_that_does_not_fit_its_model_is_skipped_with_a_warning(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, LAUNCH, {"type": "status", "experiment_id": "e"}, '{"type": "sta',
                     {"type": "result", "experiment_id": "e", "status": "done", "schema_version": "one"})
    records, warnings = ledger.records()
    assert [r.type for r in records] == ["launch"]
    assert warnings == ["ledger line 2 was skipped: its status does not fit a status record (Field required)",
                        "ledger line 3 is torn or corrupt and was skipped",
                        "ledger line 4 was skipped: its schema_version 'one' is not a version number"]


def test_append_writes_the_current_version_and_never_rewrites(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, LAUNCH)
    before = ledger.path.read_text()
    written = ledger.append(StatusRecord(experiment_id="e", status="running", worker="w1"))
    assert written.ts > 0
    text = ledger.path.read_text()
    assert text.startswith(before)
    assert json.loads(text.splitlines()[-1]) == {"ts": written.ts, "type": "status", "schema_version": SCHEMA_VERSION,
                                                 "experiment_id": "e", "status": "running", "worker": "w1"}
    records, warnings = ledger.records()
    assert warnings == [] and records[-1] == written
