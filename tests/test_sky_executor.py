"""The sky executor's worker pool against a fake SkyPort that really runs the generated scripts."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import git as gitpython
import pytest

from autoresearch_mcp.errors import StateError
from autoresearch_mcp.executors import sky_task
from autoresearch_mcp.executors.port import Job
from autoresearch_mcp.executors.sky_pool import SkyPool
from autoresearch_mcp.executors.sky_port import ApiServerDown, ClusterInfo, SkyError
from autoresearch_mcp.executors.sky_scheduler import Pending, Scheduler
from autoresearch_mcp.executors.skypilot import SdkPort
from autoresearch_mcp.measure import stats
from autoresearch_mcp.store.config import SessionConfig, SkyConfig
from autoresearch_mcp.worker import channel, decide, jobfile, outcomes, runner, sandbox
from conftest import git, init_repo
from helpers import wait_final
from sky_fake import FakeSky

SESSION = "0123456789ab"


class Events:
    """A sink that remembers every event and lets a test wait for an experiment's final one."""

    def __init__(self) -> None:
        self.by_exp: dict[str, list[dict[str, Any]]] = {}
        self._cond = threading.Condition()

    def __call__(self, exp_id: str, event: dict[str, Any]) -> None:
        with self._cond:
            self.by_exp.setdefault(exp_id, []).append(event)
            self._cond.notify_all()

    def final(self, exp_id: str, timeout: float = 30.0) -> dict[str, Any]:
        with self._cond:
            ok = self._cond.wait_for(lambda: any(
                e["event"] in ("result", "lost", "cancelled") for e in self.by_exp.get(exp_id, [])), timeout)
        assert ok, f"no final event for {exp_id}: {self.by_exp.get(exp_id)}"
        return [e for e in self.by_exp[exp_id] if e["event"] in ("result", "lost", "cancelled")][-1]

    def wait(self, exp_id: str, status: str, timeout: float = 30.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: any(
                e.get("status") == status for e in self.by_exp.get(exp_id, [])), timeout)


def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def bench_repo(tmp_path: Path, bench: str, files: dict[str, str] | None = None) -> Path:
    repo = tmp_path / "target"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\nset -eu\ncd \"$(dirname \"$0\")\"\n"
        f"case \"$1\" in\n  build) echo built > build.out ;;\n  bench) {bench} ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    for name, text in (files or {}).items():
        (repo / name).write_text(text)
    return init_repo(repo)


def commit(repo: Path, message: str, write: dict[str, str] | None = None, delete: tuple[str, ...] = ()) -> str:
    """A candidate commit on top of HEAD, without moving HEAD."""
    base = git(repo, "rev-parse", "HEAD")
    for name, text in (write or {}).items():
        (repo / name).write_text(text)
    for name in delete:
        (repo / name).unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    sha = git(repo, "rev-parse", "HEAD")
    git(repo, "reset", "-q", "--hard", base)
    return sha


def config(tmp_path: Path, workers: int = 1, budget: float | None = None) -> SessionConfig:
    return SessionConfig(session_id=SESSION, tag="t", branch="autoresearch/t", repo=str(tmp_path), metric="t",
                         direction="lower", executor="sky", start_commit="0" * 40, created_at="now",
                         sky=SkyConfig(workers=workers, cpus="4+", infra="k8s"), budget_usd=budget)


def job(repo: Path, exp_id: str, candidate: str, pairs: int = 4, noise_limit: float = 0.1,
        metric: str = "t", direction: str = "lower") -> Job:
    design = stats.make_design("auto", noise_limit=noise_limit, warmup=0)
    judging = dataclasses.asdict(decide.Spec(metric, direction, 0.01))
    return Job(exp_id, git(repo, "rev-parse", "HEAD"), candidate, repo.parent / "logs" / f"{exp_id}.log",
               spec=jobfile.Experiment(metric=metric, design=design.job(), judging=judging, stops=[pairs],
                                       timeouts={"build": 60, "bench": 30, "checks": 30}, threads=1, seed=1))


MakePool = Callable[..., SkyPool]


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[MakePool]:
    """Makes pools on fakes: `pool(repo, fake, workers=.., budget=.. or cfg=..)`. At teardown the pools
    are closed and the fakes' VMs downed, so no job of a test outlives it."""
    made: list[tuple[SkyPool, FakeSky]] = []

    def make(repo: Path, fake: FakeSky, *, cfg: SessionConfig | None = None, **kw: Any) -> SkyPool:
        p = SkyPool(repo, cfg or config(tmp_path, **kw), fake, tmp_path / "staging", poll_s=0.02,
                    bench_poll_s=0.02, log_refresh_s=0.05, clock=fake.clock)
        made.append((p, fake))
        return p

    yield make
    for p, fake in made:
        p.close()
        fake.down_gate = None
        for name in list(fake.vms):
            fake.down(name)


def metric_of(outcome: dict[str, Any], role: str) -> set[float]:
    return {s["metrics"]["t"] for s in outcome["samples"] if s["role"] == role}


# --- running experiments ---------------------------------------------------------------------------


def test_an_experiment_runs_the_shared_runner_on_a_launched_worker(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=$(cat value.txt)", {"value.txt": "100\n"})
    cand = commit(repo, "faster", {"value.txt": "90\n"})
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", cand), events)
    final = events.final("e1")
    outcome = final["outcome"]
    assert outcome["status"] == "done"
    assert metric_of(outcome, "baseline") == {100.0} and metric_of(outcome, "candidate") == {90.0}
    assert outcome["host"]["instance_type"] == "fake.4xlarge" and outcome["host"]["region"] == "fake-region-1"
    assert outcome["host"]["cpu_model"] is not None
    assert final["worker"] == f"ar-{SESSION}-0" and final["cost_usd"] > 0
    assert fake.calls == [("launch", f"ar-{SESSION}-0")]
    log_text = (tmp_path / "logs" / "e1.log").read_text()
    assert channel.RESULT_PREFIX in log_text and "[autoresearch] bench candidate" in log_text
    assert next(e["status"] for e in events.by_exp["e1"] if e["event"] == "status") == "building"


def test_the_example_target_builds_and_benches_through_the_generated_scripts(
        tmp_path: Path, example_repo: Path, patches: Path, pool: MakePool) -> None:
    git(example_repo, "apply", str(patches / "fuse-rms-norm-mul.patch"))
    git(example_repo, "commit", "-q", "-am", "fuse")
    cand = git(example_repo, "rev-parse", "HEAD")
    git(example_repo, "reset", "-q", "--hard", "HEAD~1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    pool(example_repo, fake).submit(job(example_repo, "n1", cand, metric="rows_per_s", direction="higher"),
                                             events)
    outcome = events.final("n1", timeout=120)["outcome"]
    assert outcome["status"] == "done", outcome.get("error")
    assert outcome["checks"]["passed"] is True, outcome
    assert len(outcome["samples"]) == 8


def test_a_second_experiment_reuses_the_worker_and_the_baseline_build(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=$(cat value.txt)", {"value.txt": "100\n"})
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "a", {"value.txt": "90\n"})), events)
    events.final("e1")
    p.submit(job(repo, "e2", commit(repo, "b", {"value.txt": "80\n"})), events)
    outcome = events.final("e2")["outcome"]
    assert [op for op, _ in fake.calls] == ["launch", "exec"]
    assert outcome["build"]["baseline"]["reused"] is True
    assert metric_of(outcome, "candidate") == {80.0}


def test_a_file_deleted_by_the_candidate_is_gone_on_the_worker(tmp_path: Path, pool: MakePool) -> None:
    bench = "if [ -e extra.txt ]; then echo METRIC t=200; else echo METRIC t=100; fi"
    repo = bench_repo(tmp_path, bench, {"extra.txt": "x\n"})
    fake, events = FakeSky(tmp_path / "vms"), Events()
    pool(repo, fake).submit(job(repo, "e1", commit(repo, "drop", delete=("extra.txt",))), events)
    outcome = events.final("e1")["outcome"]
    assert metric_of(outcome, "baseline") == {200.0} and metric_of(outcome, "candidate") == {100.0}


def test_an_experiment_never_sees_the_files_of_an_earlier_one(tmp_path: Path, pool: MakePool) -> None:
    bench = "if [ -e new.txt ]; then echo METRIC t=50; else echo METRIC t=100; fi"
    repo = bench_repo(tmp_path, bench, {"other.txt": "1\n"})
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "adds", commit(repo, "add new.txt", {"new.txt": "n\n"})), events)
    assert metric_of(events.final("adds")["outcome"], "candidate") == {50.0}
    p.submit(job(repo, "other", commit(repo, "touch other", {"other.txt": "2\n"})), events)
    outcome = events.final("other")["outcome"]
    assert metric_of(outcome, "candidate") == {100.0}
    assert not any("new.txt" in f for f in fake.synced[1])
    home = fake.vms[f"ar-{SESSION}-0"].home
    assert not list((home / "autoresearch" / "work").glob("exp-*"))  # candidates are removed after each job


def test_a_staged_workdir_is_fresh_and_the_task_is_one_experiment(tmp_path: Path) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1", {"a.txt": "a\n", "b.txt": "b\n"})
    base = git(repo, "rev-parse", "HEAD")
    cand = commit(repo, "change", {"a.txt": "A\n"}, delete=("b.txt",))
    staging = tmp_path / "stage"
    sky_task.stage(repo, job(repo, "x1", cand), staging, retired=[], secret="s3cret")
    names = sorted(str(p.relative_to(staging)) for p in staging.rglob("*"))
    shipped = sorted(f"exp-x1/{sky_task.SHIPPED_AS}/{p.name}" for p in sky_task.WORKER.glob("*.py"))
    assert names == sorted([f"base-{base[:16]}.tar.gz", "exp-x1", "exp-x1/changes.tar.gz", "exp-x1/deleted",
                            "exp-x1/job.json", "exp-x1/run.sh", "exp-x1/scripts", "exp-x1/secret",
                            "exp-x1/scripts/autoresearch.checks.sh", "exp-x1/scripts/autoresearch.sh",
                            f"exp-x1/{sky_task.SHIPPED_AS}", *shipped])
    assert "exp-x1/autoresearch_worker/runner.py" in shipped and "exp-x1/autoresearch_worker/__main__.py" in shipped
    assert (staging / "exp-x1" / sky_task.SHIPPED_AS / "runner.py").read_bytes() == \
        Path(runner.__file__).read_bytes()
    # the session's scripts, bound over the trees on the worker; the secret, which run.sh deletes at once
    assert (staging / "exp-x1" / "scripts" / "autoresearch.sh").read_bytes() == (repo / "autoresearch.sh").read_bytes()
    assert json.loads((staging / "exp-x1" / "job.json").read_text())["sandbox"]["scripts"]["autoresearch.sh"] == \
        "scripts/autoresearch.sh"
    assert "s3cret" not in (staging / "exp-x1" / "job.json").read_text()


def test_a_worker_binds_the_base_commits_protected_bytes_not_what_the_tree_holds(tmp_path: Path,
                                                                                   pool: MakePool) -> None:
    # A build that moves the folder of a protected file aside and writes its own: on a worker as here, each
    # command binds the session's bytes of the protected paths (staged from git's objects), whatever the tree
    # holds there by then. Bound from the tree as checked out, the worker measured the build's file.
    repo = tmp_path / "target"
    (repo / "harness").mkdir(parents=True)
    (repo / "harness" / "value.txt").write_text("100\n")
    (repo / "harness" / "notes.txt").write_text("not protected\n")
    (repo / "build.sh").write_text("true\n")
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\nset -eu\ncd \"$(dirname \"$0\")\"\n"
        "case \"$1\" in\n  build) bash build.sh ;;\n  bench) echo \"METRIC t=$(cat harness/value.txt)\" ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    init_repo(repo)
    swap = "mv harness harness.orig && mkdir harness && echo 50 > harness/value.txt\n"
    cand = commit(repo, "swap the harness", {"build.sh": swap})
    made = job(repo, "e1", cand)
    made.spec.sandbox = {"mode": "confined", "frozen": ["harness/value.txt"]}
    staging = tmp_path / "stage"
    sky_task.stage(repo, made, staging, retired=[], secret="s")
    assert (staging / "exp-e1" / "protected" / "harness" / "value.txt").read_text() == "100\n"
    staged = json.loads((staging / "exp-e1" / "job.json").read_text())
    assert staged["sandbox"]["frozen_from"] == "protected"  # relative to the job file, like the scripts
    sandbox.resolve(staged, str(staging / "exp-e1"))
    assert staged["sandbox"]["frozen_from"] == str(staging / "exp-e1" / "protected")
    if sandbox.unavailable():
        pytest.skip(f"bubblewrap cannot confine here: {sandbox.unavailable()}")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    pool(repo, fake).submit(made, events)
    outcome = events.final("e1")["outcome"]
    assert outcome["status"] == "done", outcome
    assert metric_of(outcome, "candidate") == {100.0}  # the session's harness, not the build's


def test_on_a_worker_a_job_sees_neither_its_job_file_nor_the_machine_lock(tmp_path: Path, pool: MakePool) -> None:
    # The job file holds the pair-order seed, and the machine lock tells a bench (taken exclusively) from the
    # checks (shared): hidden from every command on a worker, as they are here. Before, both were in sight.
    bench = ('seen=0; for f in "$HOME"/sky_workdir/exp-*/job.json "$HOME"/autoresearch/work/machine.lock; do '
             '[ -e "$f" ] && seen=$((seen + 1)); done; echo "METRIC t=$((100 + seen))"')
    repo = bench_repo(tmp_path, bench, {"value.txt": "1\n"})
    cand = commit(repo, "a change", {"value.txt": "2\n"})
    if sandbox.unavailable():
        pytest.skip(f"bubblewrap cannot confine here: {sandbox.unavailable()}")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    pool(repo, fake).submit(job(repo, "e1", cand), events)
    outcome = events.final("e1")["outcome"]
    assert outcome["status"] == "done", outcome
    assert metric_of(outcome, "baseline") == {100.0} and metric_of(outcome, "candidate") == {100.0}


# --- scheduling --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_one_job_at_a_time_runs_on_each_worker(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "sleep 0.05; echo METRIC t=$(cat value.txt)", {"value.txt": "100\n"})
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake, workers=2)
    ids = [f"e{i}" for i in range(5)]
    for i, exp_id in enumerate(ids):
        p.submit(job(repo, exp_id, commit(repo, exp_id, {"value.txt": f"{90 - i}\n"})), events)
    assert all(events.final(e, timeout=60)["outcome"]["status"] == "done" for e in ids)
    assert fake.overlaps == 0
    assert sorted(op for op, _ in fake.calls) == ["exec"] * 3 + ["launch"] * 2


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_a_profile_waits_for_the_running_experiment_and_goes_before_the_queued_ones(
        tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake, workers=1)
    cand = commit(repo, "c", {"x.txt": "x"})
    p.submit(job(repo, "running", cand, pairs=2), events)
    events.wait("running", "building")
    p.submit(job(repo, "queued", cand, pairs=2), events)
    head, tree = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD^{tree}")
    final = p.run_first(Job("profile-p1", head, head, tmp_path / "logs" / "profile.log", spec=jobfile.Profile(
        profile_id="p1", timeouts={"build": 60, "bench": 60, "checks": 60}, baseline_tree=tree)))
    assert final["event"] == "result" and final["outcome"]["status"] == "done", final
    assert final["outcome"]["functions"] and final["cost_usd"] > 0
    assert events.final("queued")["outcome"]["status"] == "done"
    # one job at a time on the one worker: the running experiment, then the profile, then the queued one
    assert [t["name"] for t in fake.tasks] == ["ar-running", "ar-profile-p1", "ar-queued"] and fake.overlaps == 0
    assert (fake.vms[p.names[0]].home / "autoresearch" / "profiles" / "p1.perf.data").stat().st_size > 0


def test_the_scheduler_prefers_a_worker_that_is_already_up() -> None:
    s = Scheduler(["w0", "w1"])
    for exp_id in ("a", "b", "c"):
        s.enqueue(Pending(Job(exp_id, "base", "cand", Path("log")), lambda *_: None))
    first, second = s.next(), s.next()
    assert first is not None and second is not None and s.next() is None  # both workers busy
    cold, warm = first[0], second[0]
    warm.info = ClusterInfo(warm.name, "UP")
    s.free(cold)
    s.free(warm)
    third = s.next()
    assert third is not None and third[0] is warm and third[1].job.experiment_id == "c"


def test_cancelling_a_queued_experiment_never_runs_it(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "sleep 0.2; echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake)
    cand = commit(repo, "c", {"x.txt": "x"})
    p.submit(job(repo, "first", cand), events)
    p.submit(job(repo, "second", cand), events)
    assert p.cancel("second") is True
    assert events.final("second")["event"] == "cancelled"
    events.final("first")
    assert len(fake.tasks) == 1


def test_cancelling_a_running_experiment_cancels_its_job_and_keeps_its_log(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "sleep 20; echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    events.wait("e1", "running")  # passed on from the runner's events in the job log
    # "running" comes before the checks end: cancel once the bench is under way (a loaded machine's checks once
    # outlasted the cancel, and the log then rightly ended at the checks)
    log = tmp_path / "logs" / "e1.log"
    until(lambda: log.exists() and "[autoresearch] bench" in log.read_text())
    assert p.cancel("e1") is True
    assert events.final("e1")["event"] == "cancelled"
    assert ("cancel", f"ar-{SESSION}-0") in fake.calls and fake.running_jobs() == 0
    assert "[autoresearch] bench" in log.read_text()  # the log as it was, kept


# --- failures ----------------------------------------------------------------------------------------


def test_a_noisy_worker_is_replaced_and_its_experiment_measured_again(tmp_path: Path, pool: MakePool) -> None:
    # On a noisy VM every run lands anywhere in 100-300, so the pairs differ widely; on a quiet one
    # every run gives 100.
    bench = ('if [ -n "${FAKE_SKY_NOISY:-}" ]; then echo METRIC t=$((100 + RANDOM % 200)); '
             "else echo METRIC t=100; fi")
    repo = bench_repo(tmp_path, bench)
    fake, events = FakeSky(tmp_path / "vms"), Events()
    fake.noisy.add((f"ar-{SESSION}-0", 1))
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"}), pairs=14), events)
    final = events.final("e1")
    assert metric_of(final["outcome"], "baseline") == {100.0}
    assert [op for op, _ in fake.calls] == ["launch", "down", "launch"]
    assert fake.incarnations[f"ar-{SESSION}-0"] == 2
    requeued = [e for e in events.by_exp["e1"] if e.get("status") == "queued"]
    assert requeued and "noisy" in requeued[0]["runtime"]["requeued"]
    assert p.noisy_workers[0]["instance_type"] == "fake.4xlarge"
    assert final["cost_usd"] > 0


FIRST_VM_HANGS = 'if [ "$FAKE_SKY_INCARNATION" = 1 ]; then sleep 60; fi; echo METRIC t=1'


def test_a_preempted_worker_loses_its_job_which_runs_again_once(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, FIRST_VM_HANGS)  # finishes only on the second VM
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    events.wait("e1", "running")  # forwarded from the job's log, which is saved as it comes
    fake.preempt(f"ar-{SESSION}-0")
    final = events.final("e1")
    assert final["event"] == "result" and final["outcome"]["status"] == "done"
    assert [op for op, _ in fake.calls].count("launch") == 2
    first_vm, lost, second_vm = (tmp_path / "logs" / "e1.log").read_text().partition(f"worker ar-{SESSION}-0 lost:")
    assert lost and '"status": "running"' in first_vm  # the first VM's log survives its loss
    assert channel.RESULT_PREFIX in second_vm


def test_a_cancel_while_a_lost_worker_is_replaced_ends_the_experiment(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, FIRST_VM_HANGS)
    fake, events = FakeSky(tmp_path / "vms"), Events()
    fake.down_gate = threading.Event()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    events.wait("e1", "running")
    fake.preempt(f"ar-{SESSION}-0")
    assert fake.downing.wait(30)  # the pool is replacing the lost worker
    assert p.cancel("e1") is True
    fake.down_gate.set()
    assert events.final("e1")["event"] == "cancelled"
    p.close()
    assert [op for op, _ in fake.calls].count("launch") == 1 and fake.running_jobs() == 0


def test_an_experiment_lost_twice_is_reported_lost(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "sleep 60; echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake)
    name = f"ar-{SESSION}-0"
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    for incarnation in (1, 2):
        until(lambda: fake.incarnations.get(name) == incarnation and fake.running_jobs() == 1)  # noqa: B023
        fake.preempt(name)
    final = events.final("e1")
    assert final["event"] == "lost" and "lost twice" in final["detail"]


def test_no_cloud_access_fails_the_experiments_with_a_sky_check_hint(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    fake.no_cloud = True
    p = pool(repo, fake)
    cand = commit(repo, "c", {"x.txt": "x"})
    p.submit(job(repo, "e1", cand), events)
    outcome = events.final("e1")["outcome"]
    assert outcome["status"] == "failed" and outcome["phase"] == "launch" and "sky check" in outcome["error"]


def test_a_failed_setup_is_reported_and_the_worker_replaced(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    fake.fail_setup = True
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    outcome = events.final("e1")["outcome"]
    assert outcome["phase"] == "setup" and "setup failed (fake)" in outcome["error"]
    assert fake.calls[-1] == ("down", f"ar-{SESSION}-0")


# --- the helper process of the real port ---------------------------------------------------------

# A stand-in for the SkyPilot helper: `clusters` answers, `job` never does, `exit` ends the process.
FAKE_HELPER = """
import json, os, sys
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "exit":
        os._exit(3)
    if req["op"] == "clusters":
        print(json.dumps({"id": req["id"], "ok": True, "value": [{"name": str(os.getpid()), "status": "UP"}]}),
              flush=True)
"""


def helper_port(tmp_path: Path) -> SdkPort:
    return SdkPort(tmp_path / "sdk.log", tmp_path, command=[sys.executable, "-c", FAKE_HELPER], short_timeout_s=0.5)


def test_a_helper_that_exits_fails_its_calls_and_the_next_call_starts_a_new_one(tmp_path: Path) -> None:
    port = helper_port(tmp_path)
    try:
        first = port.clusters(["x"])[0].name
        with pytest.raises(ApiServerDown, match="exited with status 3"):
            port.call("exit")
        assert port.clusters(["x"])[0].name != first  # a fresh helper, answering as usual
    finally:
        port.close()


def test_a_short_request_that_gets_no_answer_times_out(tmp_path: Path) -> None:
    port = helper_port(tmp_path)
    try:
        with pytest.raises(ApiServerDown, match="did not answer `job` for c1"):
            port.job("c1", 1)
    finally:
        port.close()


def test_a_closed_port_starts_no_helper(tmp_path: Path) -> None:
    port = helper_port(tmp_path)
    port.clusters([])
    port.close()
    with pytest.raises(ApiServerDown, match="closed"):
        port.clusters([])


# --- cost, budget, release ---------------------------------------------------------------------------


def canned_result(cluster: str, task: dict[str, Any]) -> tuple[str, float]:
    """A finished run that took half an hour of job time."""
    exp_id = task["name"].removeprefix("ar-")
    rng = random.Random(exp_id)
    samples = [outcomes.Sample(i, role, 0, 0, 1.0, False, {"t": 100.0 + rng.random()})
               for i in range(3) for role in ("baseline", "candidate")]
    secret = (Path(task["workdir"]) / f"exp-{exp_id}" / "secret").read_text().strip()  # what run.sh hands the runner
    line = channel.machine_line(channel.RESULT_PREFIX, outcomes.Experiment(exp_id, samples=samples).to_dict(),
                                secret, compact=True)
    return "some output\n" + line + "\n", 1800.0


def test_each_experiment_costs_its_job_time_at_the_workers_price(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", hourly_usd=0.8, canned=canned_result), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    assert events.final("e1")["cost_usd"] == pytest.approx(0.4, abs=1e-3)
    assert p.spent_usd == pytest.approx(0.4, abs=1e-3)


def test_the_budget_stops_new_launches_once_it_is_spent(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", hourly_usd=0.8, canned=canned_result), Events()
    p = pool(repo, fake, budget=1.1)  # each job 0.4, and a warm worker's 30 idle minutes 0.4 more
    cand = commit(repo, "c", {"x.txt": "x"})
    for exp_id in ("e1", "e2", "e3"):
        p.submit(job(repo, exp_id, cand), events)
        events.final(exp_id)
    assert [events.final(e)["outcome"]["status"] for e in ("e1", "e2", "e3")] == ["done", "done", "failed"]
    third = events.final("e3")["outcome"]
    assert third["phase"] == "budget" and "budget_usd" in third["error"]
    assert len(fake.tasks) == 2


def test_a_profile_job_is_charged_like_an_experiment_and_counts_against_the_budget(
        tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", hourly_usd=0.8, canned=canned_result), Events()
    p = pool(repo, fake, budget=1.1)  # each job 0.4, and a warm worker's 30 idle minutes 0.4 more
    head = git(repo, "rev-parse", "HEAD")
    profile = Job("profile-p1", head, head, tmp_path / "logs" / "p1.log", spec=jobfile.Profile(profile_id="p1"))
    assert p.run_first(profile)["cost_usd"] == pytest.approx(0.4, abs=1e-3)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    assert events.final("e1")["outcome"]["status"] == "done"
    again = p.run_first(Job("profile-p2", head, head, tmp_path / "logs" / "p2.log", spec={"profile": "p2"}))
    assert again["outcome"]["phase"] == "budget" and "budget_usd" in again["outcome"]["error"]
    assert len(fake.tasks) == 2 and p.spent_usd == pytest.approx(0.8, abs=1e-3)


def test_release_downs_every_cluster_of_the_session(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    p = pool(repo, fake, workers=2)
    cand = commit(repo, "c", {"x.txt": "x"})
    for exp_id in ("e1", "e2"):
        p.submit(job(repo, exp_id, cand), events)
    events.final("e1"), events.final("e2")
    assert p.release("down").names == [f"ar-{SESSION}-0", f"ar-{SESSION}-1"]
    assert fake.vms == {}
    p.submit(job(repo, "e3", cand), events)
    events.final("e3")
    assert fake.calls[-1][0] == "launch"  # a released worker is launched again, never exec'd


def test_release_with_stop_keeps_the_clusters_stopped(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    events.final("e1")
    assert p.release("stop").names == [f"ar-{SESSION}-0"]
    assert fake.vms[f"ar-{SESSION}-0"].status == "STOPPED"


def test_the_manager_records_each_experiments_cost_and_sums_it(tmp_path: Path, pool: MakePool) -> None:
    from autoresearch_mcp.experiments import launching, readouts
    from autoresearch_mcp.experiments.manager import ExperimentManager
    from autoresearch_mcp.store.config import state_dir
    from autoresearch_mcp.store.ledger import Ledger

    repo = bench_repo(tmp_path, "echo METRIC t=$(cat value.txt)", {"value.txt": "100\n"})
    git(repo, "checkout", "-q", "-b", "autoresearch/t")
    cfg = config(tmp_path).model_copy(update={"repo": str(repo)})
    fake = FakeSky(tmp_path / "vms", hourly_usd=3.6)
    p = pool(repo, fake, cfg=cfg)
    manager = ExperimentManager(gitpython.Repo(repo), cfg, Ledger(state_dir(repo) / "ledger.jsonl"), p)
    launched = launching.launch(manager, launching.LaunchRequest(
        "faster", "less work", ["test"], "patch", patch="--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+90\n",
        repeats="auto"))
    until(lambda: manager.view.experiments[launched.experiment_id].status == "done")
    fetched = readouts.fetch(manager, launched.experiment_id, 5)
    assert fetched.cost_usd is not None and fetched.cost_usd > 0
    assert fetched.host["instance_type"] == "fake.4xlarge" and fetched.worker == f"ar-{SESSION}-0"
    assert readouts.list_experiments(manager, None).cost_usd == pytest.approx(fetched.cost_usd, abs=1e-4)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_sky_session_runs_through_the_mcp_tools_and_releases_its_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: MakePool) -> None:
    from mcp import Client

    from autoresearch_mcp import hooks
    from autoresearch_mcp.app import build_server
    from autoresearch_mcp.executors import skypilot

    fake = FakeSky(tmp_path / "vms")

    def fake_executor(repo: Any, cfg: SessionConfig, settings: Any) -> SkyPool:
        return pool(Path(repo.working_dir), fake, cfg=cfg)

    monkeypatch.setattr(skypilot, "SkyExecutor", fake_executor)
    repo = bench_repo(tmp_path, "echo METRIC t=$(cat value.txt)", {"value.txt": "100\n"})
    async with Client(build_server()) as c:
        r = await c.call_tool("start_session", {"repo": str(repo), "metric": "t", "direction": "lower",
                                                "executor": "sky", "tag": "sky1"})
        assert not r.is_error, r
        r = await c.call_tool("launch_experiment", {
            "title": "faster", "source": "patch", "repeats": "auto",
            "patch": "--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+90\n"})
        assert not r.is_error, r
        exp_id = r.structured_content["experiment_id"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = await c.call_tool("fetch_sky_logs", {"experiment_id": exp_id})
            if r.structured_content["status"] in ("done", "failed", "lost"):
                break
            await anyio.sleep(0.02)
        assert r.structured_content["status"] == "done", r.structured_content
        assert r.structured_content["worker"].startswith("ar-") and r.structured_content["cost_usd"] > 0
        r = await c.call_tool("list_experiments", {})
        assert r.structured_content["cost_usd"] > 0
        reminder = hooks.stop({"hook_event_name": "Stop", "cwd": str(repo), "stop_hook_active": False})
        assert reminder and "cloud workers may still be up" in reminder["reason"]
        r = await c.call_tool("stop_workers", {"mode": "down"})
        assert len(r.structured_content["released"]) == 1 and fake.vms == {}
    # the Stop hook reminded of the worker until stop_workers released it
    assert r.structured_content["released"][0] in reminder["reason"]
    assert hooks.stop({"hook_event_name": "Stop", "cwd": str(repo), "stop_hook_active": False}) is None


# --- what the clusters cost: launch to down ------------------------------------------------------------


def test_provisioning_and_idle_time_are_charged_from_launch_to_down(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", hourly_usd=0.8, canned=canned_result), Events()
    fake.provision_s = 900.0  # a quarter of an hour to provision and set up: $0.20
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    assert events.final("e1")["cost_usd"] == pytest.approx(0.6, abs=1e-3)  # the experiment's launch and job
    fake.clock.advance(600.0)  # the worker idles, waiting for the next experiment: still billed
    assert p.spent_usd == pytest.approx(0.6 + 600 / 3600 * 0.8, abs=1e-3)
    assert p.meter.committed() == pytest.approx(p.spent_usd + 0.4, abs=1e-3)  # its 30 idle minutes to come
    released = p.release("down")
    fake.clock.advance(3600.0)  # nothing is billed after the down
    assert released.cost_usd == pytest.approx(0.6 + 600 / 3600 * 0.8, abs=1e-3)
    assert p.spent_usd == pytest.approx(released.cost_usd, abs=1e-3)


def test_a_budget_refuses_a_launch_whose_price_is_unknown(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    fake.unpriced = True  # no catalog: neither before the launch nor for what it launched
    p = pool(repo, fake, budget=5.0)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    outcome = events.final("e1")["outcome"]
    assert outcome["status"] == "failed" and outcome["phase"] == "launch"
    assert "price" in outcome["error"] and "budget_usd" in outcome["error"]
    assert fake.calls == [] and fake.vms == {}


def test_without_a_budget_an_unknown_price_still_launches(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    fake.unpriced = True
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    assert events.final("e1")["outcome"]["status"] == "done"


def test_the_spend_and_the_pinned_hardware_survive_a_restart(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", hourly_usd=0.8, canned=canned_result), Events()
    state = tmp_path / "sky-state.json"
    cfg = config(tmp_path)
    first = SkyPool(repo, cfg, fake, tmp_path / "staging", poll_s=0.02, bench_poll_s=0.02, state_path=state,
                    clock=fake.clock)
    first.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    events.final("e1")
    first.close()  # the server exits; the worker is left up for autostop
    fake.preempt(f"ar-{SESSION}-0")  # ...which downs it after its idle minutes, while no server runs
    fake.clock.advance(24 * 3600.0)
    second = SkyPool(repo, cfg, fake, tmp_path / "staging", poll_s=0.02, bench_poll_s=0.02, state_path=state,
                     clock=fake.clock)
    second.recover([])
    second._ready.wait(30)
    # 30 min of job, then 30 idle minutes and the few minutes autostop takes to down it: not a whole day
    assert second.spent_usd == pytest.approx(0.4 + 0.4 + 300 / 3600 * 0.8, abs=1e-3)
    assert second.meter.pin is not None and second.meter.pin.instance_type == "fake.4xlarge"
    second.close()


def test_skypilots_cost_report_is_taken_when_it_says_more(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", hourly_usd=0.8, canned=canned_result), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    events.final("e1")
    start = p.meter.first_start()
    assert start is not None
    fake.billed.append((f"ar-{SESSION}-0", start + 1, start + 3600 * 10, 0.8))  # an incarnation we never saw
    assert p.release("down").cost_usd == pytest.approx(8.4, abs=1e-2)


# --- polling ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_init_answer_is_checked_again_before_the_worker_is_called_lost(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "sleep 0.5; echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    fake.init_answers[f"ar-{SESSION}-0"] = 2  # a status refresh failed under load, twice
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    assert events.final("e1")["outcome"]["status"] == "done"
    assert [op for op, _ in fake.calls] == ["launch"]  # never downed, never relaunched


@pytest.mark.slow
def test_a_cluster_that_stays_init_is_lost_after_a_refreshed_look(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "sleep 0.5; echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    fake.stuck_init.add((f"ar-{SESSION}-0", 1))  # the first VM is broken; its replacement is healthy
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    final = events.final("e1")
    assert final["event"] == "result" and final["outcome"]["status"] == "done"
    assert fake.refreshes >= 1
    assert "stayed INIT" in (tmp_path / "logs" / "e1.log").read_text()
    assert [op for op, _ in fake.calls if op != "cancel"] == ["launch", "down", "launch"]


@pytest.mark.slow
def test_the_job_is_not_polled_while_its_pairs_are_measured(tmp_path: Path) -> None:
    repo = bench_repo(tmp_path, "sleep 0.3; echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = SkyPool(repo, config(tmp_path), fake, tmp_path / "staging", poll_s=0.01, bench_poll_s=3600.0,
                log_refresh_s=0.01, clock=fake.clock)
    try:
        p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
        events.wait("e1", "running")
        polls = fake.polls
        until(lambda: fake.exited_jobs() == 1)  # the pairs ran and the job ended, with nobody looking
        assert fake.polls == polls
    finally:
        p.close()
        for name in list(fake.vms):
            fake.down(name)


@pytest.mark.slow
def test_while_pairs_run_one_request_a_tick_and_the_status_only_now_and_then(tmp_path: Path) -> None:
    from autoresearch_mcp.executors.sky_pool import STATUS_EVERY

    repo = bench_repo(tmp_path, "sleep 0.05; echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = SkyPool(repo, config(tmp_path), fake, tmp_path / "staging", poll_s=0.01, bench_poll_s=0.01,
                log_refresh_s=0.01, clock=fake.clock)
    try:
        p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"}), pairs=30), events)
        events.wait("e1", "running")
        polls, fetches = fake.polls, len(fake.log_tails)
        assert events.final("e1")["outcome"]["status"] == "done"  # the checks ran first, then the pairs
        polls, fetches = fake.polls - polls, len(fake.log_tails) - fetches
        assert fetches >= 2 * STATUS_EVERY  # the pairs took many ticks...
        assert polls <= fetches // (STATUS_EVERY - 1) + 2  # ...and the status was asked in few of them
    finally:
        p.close()
        for name in list(fake.vms):
            fake.down(name)


def test_the_log_is_fetched_by_tail_and_saved_whole(tmp_path: Path, pool: MakePool) -> None:
    bench = 'for i in $(seq 40); do echo "bench line $i"; done; sleep 0.05; echo METRIC t=1'
    repo = bench_repo(tmp_path, bench)
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"}), pairs=8), events)
    assert events.final("e1")["outcome"]["status"] == "done"
    job_log = next((tmp_path / "vms").glob("*/job-*.log")).read_text()
    saved = (tmp_path / "logs" / "e1.log").read_text()
    assert saved.split("\n", 1)[1] == job_log  # after our header line: every line, once, in order
    assert fake.log_tails.count(0) <= 1 and len(fake.log_tails) >= 3


def test_a_tail_continues_what_was_fetched_only_from_a_unique_anchor() -> None:
    from autoresearch_mcp.executors.sky_joblog import merge_tail

    old = "".join(f"line {i}\n" for i in range(20)) + "partial"
    tail = "".join(f"line {i}\n" for i in range(10, 30))  # reaches back past the anchor (old's last 8 lines)
    assert merge_tail(old, tail) == "".join(f"line {i}\n" for i in range(30))
    assert merge_tail(old, "".join(f"line {i}\n" for i in range(25, 30))) is None  # too short a tail
    repeated = "same\n" * 20
    assert merge_tail(repeated, repeated + "new\n") is None  # the anchor is ambiguous: fetch it whole


# --- releasing ----------------------------------------------------------------------------------------------


def test_release_downs_the_clusters_in_parallel_and_again_until_none_is_left(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    p = pool(repo, fake, workers=2)
    cand = commit(repo, "c", {"x.txt": "x"})
    for exp_id in ("e1", "e2"):
        p.submit(job(repo, exp_id, cand), events)
    events.final("e1"), events.final("e2")
    fake.down_s = 0.3
    fake.down_keeps.add(f"ar-{SESSION}-1")  # its first down answers, but the VM is still there
    released = p.release("down")
    assert released.names == [f"ar-{SESSION}-0", f"ar-{SESSION}-1"] and fake.vms == {}
    assert fake.downs_at_once == 2 and fake.refreshes >= 1
    assert [c for op, c in fake.calls if op == "down"].count(f"ar-{SESSION}-1") == 2


def test_a_cluster_that_cannot_be_downed_is_named_and_still_counted(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", hourly_usd=0.8, canned=canned_result), Events()
    p = pool(repo, fake, workers=2)
    cand = commit(repo, "c", {"x.txt": "x"})
    for exp_id in ("e1", "e2"):
        p.submit(job(repo, exp_id, cand), events)
    events.final("e1"), events.final("e2")
    fake.down_fails.add(f"ar-{SESSION}-1")
    with pytest.raises(SkyError, match=f"released ar-{SESSION}-0; could not down 1 worker.*ar-{SESSION}-1"):
        p.release("down")
    spent = p.spent_usd
    fake.clock.advance(3600.0)
    assert p.spent_usd == pytest.approx(spent + 0.8, abs=1e-3)  # the one still up is still billed
    fake.down_fails.clear()


def test_stop_mode_downs_spot_clusters_and_says_so(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    cfg = config(tmp_path)
    cfg.sky.use_spot = True
    p = pool(repo, fake, cfg=cfg)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    events.final("e1")
    released = p.release("stop")
    assert released.names == [f"ar-{SESSION}-0"] and fake.vms == {}
    assert any("spot" in n and "downed" in n for n in released.notes)


def test_stop_mode_warns_that_stopped_disks_are_billed(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    events.final("e1")
    notes = p.release("stop").notes
    assert any("disks" in n and "never autodown" in n for n in notes)


# --- launching and reusing workers ----------------------------------------------------------------------


def test_a_warm_worker_whose_resources_no_longer_match_is_downed_and_relaunched(
        tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "a", {"x.txt": "a"})), events)
    events.final("e1")
    p.config.sky.instance_type = "fake.8xlarge"  # the user edited the config meanwhile
    p.submit(job(repo, "e2", commit(repo, "b", {"x.txt": "b"})), events)
    assert events.final("e2")["outcome"]["status"] == "done"
    assert [op for op, _ in fake.calls] == ["launch", "exec", "down", "launch"]
    assert fake.vms[f"ar-{SESSION}-0"].resources["instance_type"] == "fake.8xlarge"


def test_a_transient_ssh_or_rsync_failure_is_retried_once(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "a", {"x.txt": "a"})), events)
    events.final("e1")
    fake.transient["exec"] = 1
    p.submit(job(repo, "e2", commit(repo, "b", {"x.txt": "b"})), events)
    assert events.final("e2")["outcome"]["status"] == "done"
    fake.transient["exec"] = 2  # twice in a row is not a hiccup
    p.submit(job(repo, "e3", commit(repo, "c", {"x.txt": "c"})), events)
    outcome = events.final("e3")["outcome"]
    assert outcome["status"] == "failed" and "Failed to rsync" in outcome["error"]


def test_a_launch_that_fails_after_provisioning_leaves_no_vm(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    fake.fail_after_provision = True
    fake.provision_s = 300.0
    p = pool(repo, fake)
    p.submit(job(repo, "e1", commit(repo, "a", {"x.txt": "a"})), events)
    final = events.final("e1")
    assert final["outcome"]["phase"] == "launch" and "after provisioning" in final["outcome"]["error"]
    assert fake.calls == [("launch", f"ar-{SESSION}-0"), ("down", f"ar-{SESSION}-0")] and fake.vms == {}
    assert final["cost_usd"] > 0 and p.spent_usd == pytest.approx(300 / 3600 * 0.8, abs=1e-3)  # billed all the same


def test_every_worker_gets_the_instance_type_the_first_one_got(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    p = pool(repo, fake, workers=2)
    cand = commit(repo, "c", {"x.txt": "x"})
    for exp_id in ("e1", "e2"):  # both start at once, on two cold workers
        p.submit(job(repo, exp_id, cand), events)
    events.final("e1"), events.final("e2")
    first, second = (t["resources"] for t in fake.tasks)
    assert first == {"infra": "k8s", "cpus": "4+"}
    assert second == {"infra": "k8s", "instance_type": "fake.4xlarge"}  # no cpus beside an instance type


def test_an_instance_type_in_the_config_leaves_cpus_and_memory_out() -> None:
    res = sky_task.resources(SkyConfig(cpus="8+", memory="32+", instance_type="c6i.2xlarge", infra="aws"))
    assert res == {"infra": "aws", "instance_type": "c6i.2xlarge"}


def test_per_worker_setup_and_file_mounts_run_once_per_worker(tmp_path: Path, pool: MakePool) -> None:
    bench = "echo METRIC t=$(cat ~/models/tiny.gguf) ; test -e ~/setup-ran"
    repo = bench_repo(tmp_path, bench, {"provision.sh": "echo script >> ~/setup-ran\n"})
    model = tmp_path / "tiny.gguf"
    model.write_text("42\n")
    cfg = config(tmp_path)
    cfg.sky.setup = ["echo command >> ~/setup-ran"]
    cfg.sky.setup_script = "provision.sh"
    cfg.sky.file_mounts = {"~/models/tiny.gguf": str(model)}
    fake, events = FakeSky(tmp_path / "vms"), Events()
    p = pool(repo, fake, cfg=cfg)
    for exp_id in ("e1", "e2"):
        p.submit(job(repo, exp_id, commit(repo, exp_id, {"x.txt": exp_id})), events)
        outcome = events.final(exp_id)["outcome"]
        assert outcome["status"] == "done" and metric_of(outcome, "candidate") == {42.0}
    home = fake.vms[f"ar-{SESSION}-0"].home
    assert (home / "setup-ran").read_text() == "command\nscript\n"  # once, for both experiments
    assert fake.mounted == [(f"ar-{SESSION}-0", "~/models/tiny.gguf")]


def test_a_missing_file_mount_fails_the_launch_with_what_to_fix(tmp_path: Path, pool: MakePool) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    cfg = config(tmp_path)
    cfg.sky.file_mounts = {"~/model.gguf": "models/missing.gguf"}
    fake, events = FakeSky(tmp_path / "vms"), Events()
    pool(repo, fake, cfg=cfg).submit(job(repo, "e1", commit(repo, "c", {"x.txt": "x"})), events)
    outcome = events.final("e1")["outcome"]
    assert outcome["status"] == "failed" and "sky.file_mounts" in outcome["error"] and fake.calls == []


# --- start_session on a worker --------------------------------------------------------------------------

ON_A_WORKER = 'if [ -n "${FAKE_SKY_INCARNATION:-}" ]; then echo METRIC t=7; else echo METRIC t=100; fi'


@pytest.mark.anyio
async def test_a_sky_session_validates_its_benchmark_on_a_worker_it_then_reuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: MakePool) -> None:
    from mcp import Client

    from autoresearch_mcp.app import build_server
    from autoresearch_mcp.executors import skypilot

    fake = FakeSky(tmp_path / "vms")
    monkeypatch.setattr(skypilot, "SkyExecutor", lambda repo, cfg, _s: pool(Path(repo.working_dir), fake, cfg=cfg))
    repo = bench_repo(tmp_path, ON_A_WORKER, {"value.txt": "1\n"})
    async with Client(build_server()) as c:
        r = await c.call_tool("start_session", {"repo": str(repo), "metric": "t", "direction": "lower",
                                                "executor": "sky", "tag": "onvm"})
        assert not r.is_error, r
        start = r.structured_content
        assert start["baseline"]["t"]["samples"] == [7.0, 7.0]  # measured on the VM, not here
        assert start["raw_metric_lines"] == ["METRIC t=7", "METRIC t=7"]
        assert "fake.8xlarge" in start["worker"] and "every worker" in start["worker"]  # the default 8+ cpus
        assert start["settings"]["read_only_runs"] == "bench"  # it wrote nothing; the checks are not tried there
        r = await c.call_tool("launch_experiment", {
            "title": "x", "source": "patch", "repeats": "auto",
            "patch": "--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-1\n+2\n"})
        assert not r.is_error, r
        res = await wait_final(c, r.structured_content["experiment_id"])
        assert res["status"] == "done", res
        assert [op for op, _ in fake.calls] == ["launch", "exec"]  # the validating worker runs the experiment
    assert "METRIC t=7" in (repo / ".autoresearch" / "logs" / "session-validation.log").read_text()


@pytest.mark.anyio
async def test_a_benchmark_that_fails_on_the_worker_fails_start_session_and_downs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: MakePool) -> None:
    from mcp import Client

    from autoresearch_mcp.app import build_server
    from autoresearch_mcp.executors import skypilot

    fake = FakeSky(tmp_path / "vms")
    monkeypatch.setattr(skypilot, "SkyExecutor", lambda repo, cfg, _s: pool(Path(repo.working_dir), fake, cfg=cfg))
    on_vm_only = 'if [ -n "${FAKE_SKY_INCARNATION:-}" ]; then echo no metric here; else echo METRIC t=1; fi'
    repo = bench_repo(tmp_path, on_vm_only)
    async with Client(build_server()) as c:
        r = await c.call_tool("start_session", {"repo": str(repo), "metric": "t", "direction": "lower",
                                                "executor": "sky", "tag": "onvm"})
        assert r.is_error and "missing" in str(r.content[0]) and "no METRIC line" in str(r.content[0])
    assert fake.vms == {} and [op for op, _ in fake.calls] == ["launch", "down"]


def test_the_cost_record_is_never_read_or_written_through_a_link(tmp_path: Path) -> None:
    repo = bench_repo(tmp_path, "echo METRIC t=1")
    cand = commit(repo, "c", {"x.txt": "x"})
    outside = tmp_path / "outside.json"
    outside.write_text("not yours\n")
    state = repo / ".autoresearch" / f"sky-{SESSION}.json"
    state.parent.mkdir()
    state.symlink_to(outside)  # planted by a candidate, or by hand
    with pytest.raises(StateError, match="is a link"):
        SkyPool(repo, config(tmp_path), FakeSky(tmp_path / "vms"), tmp_path / "staging", state_path=state)
    state.unlink()
    (repo / ".autoresearch").rename(tmp_path / "elsewhere")
    (repo / ".autoresearch").symlink_to(tmp_path / "elsewhere")  # the whole session folder a link
    fake, events = FakeSky(tmp_path / "vms", canned=canned_result), Events()
    p = SkyPool(repo, config(tmp_path), fake, tmp_path / "staging", poll_s=0.02, state_path=state, clock=fake.clock)
    try:
        p.submit(job(repo, "e1", cand), events)
        outcome = events.final("e1")["outcome"]
        assert outcome["status"] == "failed" and "link" in outcome["error"]
    finally:
        p.close()
        for name in list(fake.vms):
            fake.down(name)
    assert outside.read_text() == "not yours\n" and not list((tmp_path / "elsewhere").iterdir())


@pytest.mark.anyio
async def test_a_session_with_the_sandbox_off_validates_unconfined_on_its_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: MakePool) -> None:
    from mcp import Client

    from autoresearch_mcp.app import build_server
    from autoresearch_mcp.executors import skypilot

    fake = FakeSky(tmp_path / "vms")
    monkeypatch.setattr(skypilot, "SkyExecutor", lambda repo, cfg, _s: pool(Path(repo.working_dir), fake, cfg=cfg))
    # confined, the worker's home is read-only to the job; unconfined (the user's choice), it is not
    repo = bench_repo(tmp_path, 'touch "$HOME/unconfined" 2>/dev/null; echo METRIC t=7')
    (repo / ".autoresearch").mkdir()
    (repo / ".autoresearch" / "config.json").write_text(json.dumps({"sandbox": "off"}))
    async with Client(build_server()) as c:
        r = await c.call_tool("start_session", {"repo": str(repo), "metric": "t", "direction": "lower",
                                                "executor": "sky", "tag": "off"})
        assert not r.is_error, r
    assert [vm.name for vm in fake.vms.values() if (vm.home / "unconfined").exists()] == list(fake.vms)
