"""The tasks we generate, read by the real SkyPilot; the helper process; errors of a real API server."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch_mcp.executors import sky_task
from autoresearch_mcp.executors.sky_port import ClusterGone, NoCloudAccess
from autoresearch_mcp.executors.skypilot import SdkPort
from autoresearch_mcp.session import SkyConfig
from conftest import git
from test_sky_executor import commit, job

sky = pytest.importorskip("sky")

CONFIGS = [
    SkyConfig(),
    SkyConfig(workers=4, cpus="8+", memory="16+", infra="aws", use_spot=True),
    SkyConfig(cpus="4", infra="k8s"),
    SkyConfig(cpus=None, infra="gcp", memory="32+"),
]


def task_for(cfg: SkyConfig, repo: Path, tmp_path: Path) -> dict[str, object]:
    cand = commit(repo, "c", {"new.txt": "n\n"})
    staging = tmp_path / "stage"
    j = job(repo, "abc123", cand)
    sky_task.stage(repo, j, staging, retired=[])
    return sky_task.task_config(cfg, j, staging)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "aws-spot", "k8s", "gcp"])
def test_every_generated_task_is_a_valid_skypilot_task(cfg: SkyConfig, example_repo: Path, tmp_path: Path) -> None:
    cfg_dict = task_for(cfg, example_repo, tmp_path)
    task = sky.Task.from_yaml_config(copy.deepcopy(cfg_dict))
    task.validate()
    again = task.to_yaml_config()
    assert again["run"] == cfg_dict["run"] and again["setup"] == cfg_dict["setup"]
    assert again["workdir"] == cfg_dict["workdir"]
    res = again.get("resources", {})
    assert res.get("cpus") == cfg.cpus and res.get("use_spot", False) == cfg.use_spot
    assert sky.Task.from_yaml_config(copy.deepcopy(again)).to_yaml_config() == again


def test_region_and_infra_make_one_infra_string() -> None:
    assert sky_task.resources(SkyConfig(infra="aws", region="us-east-1"))["infra"] == "aws/us-east-1"
    assert sky_task.resources(SkyConfig(region="us-east-1"))["infra"] == "*/us-east-1"
    assert "infra" not in sky_task.resources(SkyConfig())


def test_the_helper_process_reads_tasks_like_skypilot(example_repo: Path, tmp_path: Path) -> None:
    cfg_dict = task_for(SkyConfig(infra="k8s", cpus="4"), example_repo, tmp_path)
    port = SdkPort(tmp_path / "sdk.log", cwd=tmp_path)
    try:
        assert port.validate(cfg_dict) == sky.Task.from_yaml_config(copy.deepcopy(cfg_dict)).to_yaml_config()
    finally:
        port.close()
    assert port.stray == []


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
def test_a_real_api_server_maps_its_errors(example_repo: Path, tmp_path: Path) -> None:
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
