"""How `tests/data/ledger_v0/` was made: a session run by the code of before typed records (ledger
format 0, no `schema_version`), through a real MCP client, with every record type the ledger held:
two `session` records (a resume), `launch`, `status`, `result`, a `continue` that pooled a round of
2 pairs with 14 more, `platform` records of a measured cloud platform (the fake SkyPort, with costs),
a `holdout` and a `commit` of commit_winner, a failed and a cancelled experiment, and `workers` of
stop_workers. It saves the ledger, the session config, a git bundle of the repository, and what the
server answered once it was bound again from those files (list_experiments, fetch_sky_logs of each
experiment, report numbers): `test_records.py` checks that the current code gives the same answers.

It only makes format-0 files with the code of that time (commit c2c589f):
    git archive c2c589f server tests | tar -x -C /tmp/v0
    cd /tmp/v0 && PYTHONPATH=server:tests python tests/data/ledger_v0/make.py OUT_DIR
The report package that came next (8d5f63e, still format 0) computes the total's interval from
unrounded standard errors; rereport.py wrote its numbers into expected.json the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

import autoresearch_mcp
from autoresearch_mcp.app import build_server
from autoresearch_mcp.executors import skypilot
from autoresearch_mcp.executors.sky_pool import SkyPool
from autoresearch_mcp.report import write_report
from autoresearch_mcp.store.config import config_path
from helpers import call
from sky_fake import FakeSky

BENCH = """#!/usr/bin/env bash
set -eu
cd "$(dirname "$0")"
case "$1" in
  build) true ;;
  bench) awk -v v=$(cat value-$AUTORESEARCH_PLATFORM.txt) -v s=$RANDOM \\
           'BEGIN{srand(s); printf "METRIC t=%.5f\\nMETRIC mem=%.5f\\n", v*(1+0.002*(rand()-0.5)), 50}' ;;
esac
"""
HOLDOUT = """#!/usr/bin/env bash
awk -v s=$RANDOM 'BEGIN{srand(s); printf "METRIC t=%.5f\\n", 100*(1+0.002*(rand()-0.5))}'
"""
GRAVITON = {"name": "graviton", "executor": "sky", "measure": True,
            "sky": {"instance_type": "m7g.xlarge", "cpus": None}}
FINAL = {"done", "failed", "checks_failed", "cancelled", "lost"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def values_patch(host: tuple[str, str], graviton: tuple[str, str] | None = None) -> str:
    changes = [("host", host)] + ([("graviton", graviton)] if graviton else [])
    return "".join(f"--- a/value-{name}.txt\n+++ b/value-{name}.txt\n@@ -1 +1 @@\n-{old}\n+{new}\n"
                   for name, (old, new) in changes)


async def settled(c: Client, exp_id: str) -> dict[str, Any]:
    with anyio.fail_after(300):
        while True:
            res = await call(c, "fetch_sky_logs", experiment_id=exp_id, tail_lines=0, wait_s=30)
            if res["status"] in FINAL and all(p["status"] in FINAL | {"not_run"} for p in res["platforms"]):
                return res


async def session(repo: Path, holdout: Path) -> list[str]:
    async with Client(build_server()) as c:
        args = {"repo": str(repo), "metric": "t", "direction": "lower", "tag": "v0", "platforms": ["host", GRAVITON]}
        await call(c, "start_session", **args)
        config = json.loads(config_path(repo).read_text())
        config.update(holdout={"command": str(holdout), "pairs": 14}, guards={
            "mem": {"direction": "lower", "tolerance_pct": 5}})
        config_path(repo).write_text(json.dumps(config))
        await call(c, "start_session", **args)  # resumed with the holdout and a guard: a second session record
        ids = []
        # a winner, confirmed on graviton, committed after its holdout
        a = await call(c, "launch_experiment", title="faster everywhere", hypothesis="less work",
                       sources=["https://example.org/paper"], source="patch", repeats=14,
                       patch=values_patch(("100", "90"), ("100", "95")))
        ids.append(a["experiment_id"])
        assert (await settled(c, a["experiment_id"]))["verdict"] == "improved"
        await call(c, "commit_winner", experiment_id=a["experiment_id"])
        # 2 pairs (undecided), continued with 14 more; regresses on graviton
        b = await call(c, "launch_experiment", title="a little faster", source="patch", repeats=2,
                       patch=values_patch(("90", "88"), ("95", "99")))
        ids.append(b["experiment_id"])
        assert (await settled(c, b["experiment_id"]))["verdict"] == "inconclusive"
        await call(c, "launch_experiment", title="", source="experiment", experiment_id=b["experiment_id"],
                   repeats=14)
        await settled(c, b["experiment_id"])
        # a benchmark that prints no number: failed
        bad = await call(c, "launch_experiment", title="broken value", source="patch", repeats=14,
                         patch=values_patch(("90", "abc")))
        ids.append(bad["experiment_id"])
        await settled(c, bad["experiment_id"])
        # cancelled while queued or running
        d = await call(c, "launch_experiment", title="cancelled one", source="patch", repeats=14,
                       patch=values_patch(("90", "91")))
        ids.append(d["experiment_id"])
        await call(c, "cancel_experiment", experiment_id=d["experiment_id"])
        await settled(c, d["experiment_id"])
        await call(c, "stop_workers", mode="down")
    return ids


async def answers(ids: list[str]) -> dict[str, Any]:
    """What a server bound again from the files answers (the working directory is the repository)."""
    async with Client(build_server()) as c:
        listed = await call(c, "list_experiments")
        fetched = {i: await call(c, "fetch_sky_logs", experiment_id=i, tail_lines=0) for i in ids}
    return {"list_experiments": listed, "fetch_sky_logs": fetched}


def main(out: Path) -> None:
    assert "/v0/" in autoresearch_mcp.__file__, autoresearch_mcp.__file__  # the code of before
    tmp = Path(tempfile.mkdtemp())
    os.environ["AUTORESEARCH_CACHE_DIR"] = str(tmp / "cache")
    for var, value in (("NAME", "Test Person"), ("EMAIL", "test@example.com")):
        os.environ[f"GIT_AUTHOR_{var}"] = os.environ[f"GIT_COMMITTER_{var}"] = value
    fake = FakeSky(tmp / "vms")
    skypilot.SkyExecutor = lambda repo, cfg, settings: SkyPool(  # type: ignore[misc,assignment]
        Path(repo.working_dir), cfg, fake, tmp / "staging", poll_s=0.02, log_refresh_s=0.05)
    repo = tmp / "values"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(BENCH)
    (repo / "autoresearch.checks.sh").write_text('#!/usr/bin/env bash\necho "checked on $AUTORESEARCH_PLATFORM"\n')
    for name in ("host", "graviton"):
        (repo / f"value-{name}.txt").write_text("100\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    holdout = tmp / "private" / "holdout.sh"
    holdout.parent.mkdir()
    holdout.write_text(HOLDOUT)
    holdout.chmod(0o755)
    os.chdir(repo)
    ids = anyio.run(session, repo, holdout)
    expected = anyio.run(answers, ids)
    report = write_report(str(repo)).model_dump()
    expected["report"] = {k: v for k, v in report.items() if not k.endswith("_path")}
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(repo / ".autoresearch" / "ledger.jsonl", out / "ledger.jsonl")
    shutil.copy(config_path(repo), out / "config.json")
    git(repo, "bundle", "create", str(out / "repo.bundle"), "--all")
    text = json.dumps(expected, indent=1, sort_keys=True).replace(str(repo), "$REPO").replace(str(holdout), "$HOLDOUT")
    (out / "expected.json").write_text(text + "\n")
    config = (out / "config.json").read_text().replace(str(repo), "$REPO").replace(str(holdout), "$HOLDOUT")
    (out / "config.json").write_text(config)
    print(f"wrote {out} ({len(ids)} experiments)", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
