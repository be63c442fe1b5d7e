"""The tasks we generate, read by the real SkyPilot; the helper process; errors of a real API server."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch_mcp.analysis import hotspots
from autoresearch_mcp.executors import sky_task
from autoresearch_mcp.executors.port import Job
from autoresearch_mcp.executors.sky_port import ClusterGone, NoCloudAccess
from autoresearch_mcp.executors.skypilot import SdkPort
from autoresearch_mcp.store.config import SkyConfig
from autoresearch_mcp.worker import jobfile
from conftest import git
from test_sky_executor import commit, job

sky = pytest.importorskip("sky")

CONFIGS = [
    SkyConfig(),
    SkyConfig(workers=4, cpus="8+", memory="16+", infra="aws", use_spot=True),
    SkyConfig(cpus="4", infra="k8s"),
    SkyConfig(cpus=None, infra="gcp", memory="32+"),
    # an instance type with fewer vCPUs than `cpus`, per-worker setup, a setup script and a file to mount
    SkyConfig(cpus="8+", instance_type="2CPU--8GB", infra="k8s", setup=["echo one", "echo two"],
              setup_script="autoresearch.checks.sh", file_mounts={"~/data/bench.sh": "autoresearch.sh"}),
]


def task_for(cfg: SkyConfig, repo: Path, tmp_path: Path) -> dict[str, object]:
    cand = commit(repo, "c", {"new.txt": "n\n"})
    staging = tmp_path / "stage"
    j = job(repo, "abc123", cand)
    sky_task.stage(repo, j, staging, retired=[], secret="s3cret")
    return sky_task.task_config(cfg, j, staging, repo)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "aws-spot", "k8s", "gcp", "k8s-type-setup-mounts"])
def test_every_generated_task_is_a_valid_skypilot_task(cfg: SkyConfig, example_repo: Path, tmp_path: Path) -> None:
    cfg_dict = task_for(cfg, example_repo, tmp_path)
    task = sky.Task.from_yaml_config(copy.deepcopy(cfg_dict))
    task.validate()
    again = task.to_yaml_config()
    assert again["run"] == cfg_dict["run"] and again["setup"] == cfg_dict["setup"]
    assert again["workdir"] == cfg_dict["workdir"]
    res = again.get("resources", {})
    assert res.get("cpus") == (None if cfg.instance_type else cfg.cpus) and res.get("use_spot", False) == cfg.use_spot
    assert again.get("file_mounts", {}) == cfg_dict.get("file_mounts", {})
    assert sky.Task.from_yaml_config(copy.deepcopy(again)).to_yaml_config() == again


def test_a_profile_job_with_the_perf_setup_the_error_suggests_is_a_valid_task(
        example_repo: Path, tmp_path: Path) -> None:
    head = git(example_repo, "rev-parse", "HEAD")
    j = Job("profile-0123456789", head, head, tmp_path / "p.log", spec=jobfile.Profile(profile_id="0123456789"))
    sky_task.stage(example_repo, j, tmp_path / "stage", retired=[], secret="s3cret")
    cfg = SkyConfig(setup=[*hotspots.WORKER_PERF_SETUP, hotspots.WORKER_PARANOID_SETUP])
    task = sky_task.task_config(cfg, j, tmp_path / "stage", example_repo)
    again = sky.Task.from_yaml_config(copy.deepcopy(task))
    again.validate()
    assert again.to_yaml_config()["setup"] == task["setup"]
    inbox = tmp_path / "stage" / "exp-profile-0123456789"
    run = (inbox / "run.sh").read_text()
    # the runner runs a profile as any other job (its kind names the handler), the worker shipped whole
    assert (inbox / sky_task.SHIPPED_AS / "profiler.py").is_file() and sky_task.RUN_WORKER in run
    for script in (task["setup"], run):
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # the shell reads it


def test_skypilot_rejects_cpus_beside_an_instance_type_with_fewer(example_repo: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not have enough vCPUs"):
        sky.Task.from_yaml_config({"run": "true", "resources": {"cpus": "8+", "instance_type": "2CPU--8GB",
                                                                 "infra": "k8s"}}).validate()
    ours = task_for(SkyConfig(cpus="8+", instance_type="2CPU--8GB", infra="k8s"), example_repo, tmp_path)
    assert ours["resources"] == {"infra": "k8s", "instance_type": "2CPU--8GB"}


@pytest.mark.slow
def test_the_helper_prices_what_the_catalog_knows(example_repo: Path, tmp_path: Path) -> None:
    port = SdkPort(tmp_path / "sdk.log", cwd=tmp_path)
    try:
        # SkyPilot prices Kubernetes at 0, with or without an instance type; a budget then never trips.
        assert port.price(task_for(SkyConfig(cpus="4+", infra="k8s"), example_repo, tmp_path / "a")) == 0.0
        assert port.price(task_for(SkyConfig(instance_type="2CPU--8GB", infra="k8s"), example_repo,
                                   tmp_path / "b")) == 0.0
    finally:
        port.close()


def test_region_and_infra_make_one_infra_string() -> None:
    assert sky_task.resources(SkyConfig(infra="aws", region="us-east-1"))["infra"] == "aws/us-east-1"
    assert sky_task.resources(SkyConfig(region="us-east-1"))["infra"] == "*/us-east-1"
    assert "infra" not in sky_task.resources(SkyConfig())


@pytest.mark.slow
def test_the_helper_process_reads_tasks_like_skypilot(example_repo: Path, tmp_path: Path) -> None:
    cfg_dict = task_for(SkyConfig(infra="k8s", cpus="4"), example_repo, tmp_path)
    port = SdkPort(tmp_path / "sdk.log", cwd=tmp_path)
    try:
        assert port.validate(cfg_dict) == sky.Task.from_yaml_config(copy.deepcopy(cfg_dict)).to_yaml_config()
    finally:
        port.close()
    assert port.stray == []


@pytest.mark.slow
def test_the_helper_writes_only_replies_on_its_stdout(example_repo: Path, tmp_path: Path) -> None:
    # SkyPilot prints and logs to stdout freely; in the helper all of that must land in the log.
    cfg_dict = task_for(SkyConfig(infra="k8s", cpus="4"), example_repo, tmp_path)
    bad = {**cfg_dict, "resources": {"cpus": "lots"}}
    requests = "".join(json.dumps({"id": i, "op": "validate", "args": {"task": t}}) + "\n"
                       for i, t in ((1, cfg_dict), (2, bad)))
    done = subprocess.run([sys.executable, "-m", "autoresearch_mcp.executors.skypilot"], input=requests,
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    replies = [json.loads(line) for line in done.stdout.splitlines()]  # fails on any line that is not JSON
    assert sorted(r["id"] for r in replies) == [1, 2]
    assert {r["id"]: r["ok"] for r in replies} == {1: True, 2: False}


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("AUTORESEARCH_SKY_SLOW") != "1", reason="set AUTORESEARCH_SKY_SLOW=1")
def test_a_real_api_server_maps_its_errors(example_repo: Path, tmp_path: Path, own_api_port: int) -> None:
    port = SdkPort(tmp_path / "sdk.log")
    cfg_dict = task_for(SkyConfig(cpus="2+"), example_repo, tmp_path)
    try:
        port.start_api_server()
        with pytest.raises(NoCloudAccess, match="sky check"):
            port.launch("ar-autoresearch-test-0", cfg_dict, 5)
        with pytest.raises(ClusterGone):
            port.exec("ar-autoresearch-test-0", cfg_dict)
        with pytest.raises(ClusterGone):
            port.job("ar-autoresearch-test-0", 1)
        assert port.clusters(["ar-autoresearch-test-0"]) == []
        port.down("ar-autoresearch-test-0")  # a cluster that does not exist is not an error
    finally:
        port.close()
        subprocess.run([sys.executable, "-c", "import sky; sky.api_stop()"], capture_output=True, timeout=120)
    assert port.stray == []  # SkyPilot's own output went to the helper's log, not the reply channel
    assert git(example_repo, "status", "--porcelain") == ""


@pytest.fixture
def own_api_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """A port of its own for the SkyPilot API server of a test (the helper inherits the environment),
    so a test never starts, uses or stops an API server something else on this machine runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    monkeypatch.setenv("SKYPILOT_API_SERVER_LOCAL_PORT", str(port))
    return port


def _api_server_running() -> bool:
    code = "from sky.client import sdk; print(sdk._local_api_server_running())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return out.stdout.strip().endswith("True")


def _api(call: str) -> None:
    subprocess.run([sys.executable, "-c", f"import sky; sky.{call}()"], capture_output=True, timeout=300)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("AUTORESEARCH_SKY_SLOW") != "1", reason="set AUTORESEARCH_SKY_SLOW=1")
def test_the_api_server_a_session_started_is_stopped_when_it_ends(tmp_path: Path, own_api_port: int) -> None:
    assert not _api_server_running()
    port = SdkPort(tmp_path / "sdk.log")
    try:
        port.start_api_server()
        assert _api_server_running()
    finally:
        port.close()
    assert not _api_server_running()
    assert "stopped the local SkyPilot API server this session started" in (tmp_path / "sdk.log").read_text()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("AUTORESEARCH_SKY_SLOW") != "1", reason="set AUTORESEARCH_SKY_SLOW=1")
def test_an_api_server_the_user_started_keeps_running(tmp_path: Path, own_api_port: int) -> None:
    _api("api_start")
    try:
        port = SdkPort(tmp_path / "sdk.log")
        try:
            assert port.clusters(["ar-autoresearch-test-0"]) == []
        finally:
            port.close()
        assert _api_server_running()
    finally:
        _api("api_stop")


def _unmet(requirement: str, seen: set[str] | None = None) -> list[str]:
    """What of `requirement` (and, recursively, of what it requires with its extras) this environment lacks."""
    from importlib import metadata

    from packaging.requirements import Requirement

    req = Requirement(requirement)
    seen = set() if seen is None else seen
    key = f"{req.name.lower()}[{','.join(sorted(req.extras))}]{req.specifier}"
    if key in seen:
        return []
    seen.add(key)
    try:
        dist = metadata.distribution(req.name)
    except metadata.PackageNotFoundError:
        return [f"{req} (not installed)"]
    if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
        return [f"{req} ({dist.version} installed)"]
    unmet: list[str] = []
    for sub in dist.requires or []:
        child = Requirement(sub)
        wanted = [{"extra": e} for e in req.extras] or [{"extra": ""}]
        if child.marker is None or any(child.marker.evaluate(w) for w in wanted):
            child.marker = None
            unmet += _unmet(str(child), seen)
    return unmet


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_sky_extra_brings_the_cloud_sdks(tmp_path: Path) -> None:
    """The `sky` extra as pyproject.toml pins it (which `scripts/setup.sh --dev` installs on a fresh machine) is met
    by this environment, every requirement of it down the tree, and `sky check aws` no longer says the AWS
    dependencies are missing (credentials may be; there are none here)."""
    import tomllib

    extra = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["sky"]
    assert [u for req in extra for u in _unmet(req)] == []
    home = tmp_path / "home"
    home.mkdir()
    with socket.socket() as sock:  # an API server of its own, whatever else runs on this machine
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "HOME": str(home), "SKYPILOT_API_SERVER_LOCAL_PORT": str(port)}
    imports = subprocess.run([sys.executable, "-c", "import boto3, googleapiclient, kubernetes"], capture_output=True,
                             text=True, timeout=300)
    assert imports.returncode == 0, imports.stderr[-2000:]
    sky_cli = Path(sys.executable).parent / "sky"
    try:
        for cloud in ("aws", "gcp"):
            check = subprocess.run([str(sky_cli), "check", cloud], capture_output=True, text=True,
                                   timeout=300, env=env, cwd=tmp_path)
            text = check.stdout + check.stderr
            assert cloud.upper() in text.upper(), text[-3000:]
            assert "dependencies are not installed" not in text and "skypilot[" not in text, text[-3000:]
    finally:
        subprocess.run([sys.executable, "-c", "import sky; sky.api_stop()"], capture_output=True, env=env, timeout=300)


def _recording_sdk(monkeypatch: pytest.MonkeyPatch, busy: list[object]) -> list[tuple[str, ...]]:
    """SkyPilot's SDK calls that shutdown makes, recorded (the real calls need a cloud to matter)."""
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(sky, "api_cancel", lambda ids, silent=False: calls.append(("api_cancel", *ids)) or "c")
    monkeypatch.setattr(sky, "down", lambda cluster: calls.append(("down", cluster)) or f"down-{cluster}")
    monkeypatch.setattr(sky, "get", lambda request_id: None)
    monkeypatch.setattr(sky, "api_status", lambda: busy)
    monkeypatch.setattr(sky, "api_stop", lambda: calls.append(("api_stop",)))
    return calls


def test_shutdown_cancels_launches_in_flight_downs_their_clusters_and_stops_its_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from autoresearch_mcp.executors import skypilot

    calls = _recording_sdk(monkeypatch, busy=[])
    server = skypilot._Server()
    server.started = server.ours = True
    server.inflight = {"req-1": ("launch", "ar-s-0"), "req-2": ("exec", "ar-s-1")}
    server.shutdown()
    assert calls == [("api_cancel", "req-1", "req-2"), ("down", "ar-s-0"), ("api_stop",)]


def test_shutdown_leaves_a_busy_api_server_running(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from autoresearch_mcp.executors import skypilot

    other = SimpleNamespace(status="RUNNING", request_id="r9", name="sky.launch", cluster_name="ar-other-0")
    daemon = SimpleNamespace(status="RUNNING", request_id="skypilot-status-refresh-daemon", name="sky.refresh",
                             cluster_name=None)
    calls = _recording_sdk(monkeypatch, busy=[other, daemon])
    server = skypilot._Server()
    server.started = server.ours = True
    server.shutdown()
    assert calls == []  # another session's launch still runs on it
    calls = _recording_sdk(monkeypatch, busy=[daemon])
    server.shutdown()
    assert calls == [("api_stop",)]  # the server's own background work does not keep it


def test_skypilots_exceptions_map_to_what_the_pool_does_with_them() -> None:
    from sky import exceptions as ex
    from sky.utils import status_lib

    from autoresearch_mcp.executors.skypilot import _error

    init = ex.ClusterNotUpError("Getting job status: skipped for cluster 'c' (status: INIT).",
                                cluster_status=status_lib.ClusterStatus.INIT)
    stopped = ex.ClusterNotUpError("... (status: STOPPED).", cluster_status=status_lib.ClusterStatus.STOPPED)
    ssh = ex.CommandError(255, "ssh ...", "Failed to run command on the head node", None)
    rsync = ex.CommandError(12, "rsync ...", "Failed to rsync up: a -> b. Ensure that the network is stable, "
                            "then retry.", None)
    script = ex.CommandError(1, "bash run.sh", "Job submission failed", None)
    assert _error(init)[0] == "init" and _error(stopped)[0] == "gone"
    assert _error(ex.ClusterDoesNotExist("Cluster 'c' does not exist."))[0] == "gone"
    assert _error(ex.ResourcesMismatchError("Requested resources do not match the existing cluster."))[0] == "mismatch"
    assert _error(ssh)[0] == "transient" and _error(rsync)[0] == "transient" and _error(script)[0] == "error"
    assert _error(ex.NoCloudAccessError("no clouds"))[0] == "no_cloud"
