"""The sky executor's worker pool against a fake SkyPort that really runs the generated scripts."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import git as gitpython
import pytest

from autoresearch_mcp.executors import sky_task
from autoresearch_mcp.executors.base import Job
from autoresearch_mcp.executors.sky_pool import Pending, Scheduler, SkyPool
from autoresearch_mcp.executors.sky_port import ApiServerDown, ClusterInfo
from autoresearch_mcp.executors.skypilot import SdkPort
from autoresearch_mcp.experiments import runner, stats
from autoresearch_mcp.session import SessionConfig, SkyConfig
from conftest import git, init_repo
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
    design = stats.make_design(pairs, noise_limit=noise_limit, warmup=0)
    return Job(exp_id, git(repo, "rev-parse", "HEAD"), candidate, repo.parent / "logs" / f"{exp_id}.log", spec={
        "metric": metric, "direction": direction, "design": design.job(),
        "timeouts": {"build": 60, "bench": 30, "checks": 30}, "threads": 1, "seed": 1, "run_checks": True})


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
    assert runner.RESULT_PREFIX in log_text and "[autoresearch] bench candidate" in log_text
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
    sky_task.stage(repo, job(repo, "x1", cand), staging, retired=[])
    names = sorted(str(p.relative_to(staging)) for p in staging.rglob("*"))
    assert names == [f"base-{base[:16]}.tar.gz", "exp-x1", "exp-x1/changes.tar.gz", "exp-x1/deleted",
                     "exp-x1/job.json", "exp-x1/run.sh", "exp-x1/runner.py"]
    assert (staging / "exp-x1" / "deleted").read_bytes() == b"b.txt\0"
    assert (staging / "exp-x1" / "runner.py").read_bytes() == Path(runner.__file__).read_bytes()


# --- scheduling --------------------------------------------------------------------------------------


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
    assert p.cancel("e1") is True
    assert events.final("e1")["event"] == "cancelled"
    assert ("cancel", f"ar-{SESSION}-0") in fake.calls and fake.running_jobs() == 0
    assert "[autoresearch] bench" in (tmp_path / "logs" / "e1.log").read_text()


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
    assert runner.RESULT_PREFIX in second_vm


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
    samples = [runner.Sample(i, role, 0, 0, 1.0, False, {"t": 100.0 + rng.random()})
               for i in range(3) for role in ("baseline", "candidate")]
    return "some output\n" + runner.result_line(runner.Outcome(exp_id, samples=samples)) + "\n", 1800.0


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
    from autoresearch_mcp.experiments.ledger import Ledger
    from autoresearch_mcp.experiments.scheduler import ExperimentManager
    from autoresearch_mcp.session import state_dir

    repo = bench_repo(tmp_path, "echo METRIC t=$(cat value.txt)", {"value.txt": "100\n"})
    git(repo, "checkout", "-q", "-b", "autoresearch/t")
    cfg = config(tmp_path).model_copy(update={"repo": str(repo)})
    fake = FakeSky(tmp_path / "vms", hourly_usd=3.6)
    p = pool(repo, fake, cfg=cfg)
    manager = ExperimentManager(gitpython.Repo(repo), cfg, Ledger(state_dir(repo) / "ledger.jsonl"), p)
    launched = manager.launch("faster", "less work", ["test"], "patch", None,
                              "--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+90\n", 3, False)
    until(lambda: manager.view.experiments[launched.experiment_id].status == "done")
    fetched = manager.fetch(launched.experiment_id, 5)
    assert fetched.cost_usd is not None and fetched.cost_usd > 0
    assert fetched.host["instance_type"] == "fake.4xlarge" and fetched.worker == f"ar-{SESSION}-0"
    assert manager.list(None).cost_usd == pytest.approx(fetched.cost_usd, abs=1e-4)


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
            "title": "faster", "source": "patch", "repeats": 3,
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
