"""`autoresearch-mcp demo`: the whole loop on the bundled example, through a real MCP client over stdio.

It copies examples/normsoft into a temporary git repository, starts `autoresearch-mcp serve` as a
subprocess, and drives start_session, diff_backends, three experiments (a real fusion, a no-op and
a slower change), polling, and commit_winner, which commits the winner and refuses the others.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from autoresearch_mcp import resources
from autoresearch_mcp.git import gitops
from autoresearch_mcp.store.config import config_path

DEADLINE_S = 1200
# The refusals the demo exists to show are logged by the MCP SDK at INFO ("Tool 'commit_winner' failed"):
# its server logs warnings and errors only, and the demo prints each refusal itself.
DEMO_LOG = ["--log-level", "WARNING"]
CANDIDATES = [
    ("Fuse RMS_NORM and MUL in the CPU backend", "fuse-rms-norm-mul",
     "The accel backend fuses RMS_NORM+MUL; doing the same on the CPU removes a pass over memory.",
     ["diff_backends gap: fusion RMS_NORM,MUL (backend/accel/ops-accel.c)"]),
    ("Reword a comment", "comment-only", "A comment cannot change speed (an A/A control).", ["control"]),
    ("Exponentials in double precision", "double-exp", "Double precision exp for accuracy; likely slower.",
     ["reviewer suggestion"]),
]
# One line per verdict the demo shows, so a reader of its output need not look them up.
LEGEND = {
    "improved": "improved: better beyond the minimum effect, shown with the pairs' confidence interval",
    "regressed": "regressed: worse beyond the minimum effect (never committed)",
    "no_change": "no_change: shown equal within the minimum effect (nothing to commit)",
    "inconclusive": "inconclusive: not decided yet at this pair count; can be continued with more pairs",
    "noisy": "noisy: this machine's noise is too large to decide at any affordable pair count",
    "invalid": "invalid: a metric was missing or unparsable in a run (never read as 0)",
}


def _say(text: str) -> None:
    print(text, flush=True)


def prepare(workdir: Path) -> Path:
    repo = workdir / "normsoft"
    shutil.copytree(resources.example_dir() / "normsoft", repo,
                    ignore=shutil.ignore_patterns("normsoft", "patches", "*.o"))
    gitops.commit_all(gitops.init_repo(repo, "main"), "normsoft: initial import", "autoresearch demo",
                      "demo@localhost")
    # A setting for the session to come, as a person writes one: each pair's two runs at once in turns of the
    # CPU, judged on CPU time (the example prints rows_per_s.cpu), so a neighbour's burst falls on both.
    config_path(repo).parent.mkdir()
    config_path(repo).write_text(json.dumps({"pairing": "turns"}) + "\n")
    return repo


async def _call(client: Client, name: str, **args: Any) -> tuple[bool, dict[str, Any] | str]:
    result = await client.call_tool(name, args)
    if result.is_error:
        return False, " ".join(getattr(c, "text", "") for c in result.content)
    return True, result.structured_content or {}


async def run_demo(workdir: Path) -> int:
    repo = prepare(workdir)
    _say(f"demo repository: {repo}")
    # The demo's worktrees and caches live in its own temporary directory, removed at the end.
    env = {**os.environ, "AUTORESEARCH_CACHE_DIR": str(workdir / "cache")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "autoresearch_mcp", *DEMO_LOG, "serve"],
                                   cwd=str(repo), env=env)
    t0 = time.monotonic()
    async with Client(params) as client:
        tools = [t.name for t in (await client.list_tools()).tools]
        _say(f"connected over stdio; {len(tools)} tools: {', '.join(tools)}")
        if not await _start(client, repo):
            return 1
        if "diff_backends" in tools:
            ok, gaps = await _call(client, "diff_backends", repo=str(repo))
            if ok and isinstance(gaps, dict):
                for g in gaps.get("gaps", [])[:3]:
                    _say(f"  gap: {g['kind']} {g['item']} in {g['present_in']}, missing in {g['missing_in']}")
        ids = await _launch_all(client)
        if ids is None:
            return 1
        results = await _wait_all(client, ids)
        if results is None:
            return 1
        _say("")
        for title, res in results.items():
            await _judge(client, title, ids[title], res)
        _say("")
        _say("what the verdicts mean:")
        for verdict in dict.fromkeys(str(res["verdict"]) for res in results.values() if res["verdict"]):
            _say(f"  {LEGEND.get(verdict, verdict)}")
        ok, listing = await _call(client, "list_experiments")
        assert ok and isinstance(listing, dict)
        ok, report = await _call(client, "report", repo=str(repo))
    _say("")
    _say(f"summary: {len(ids)} experiments, {listing['kept']} kept, {listing['discarded']} discarded, "
         f"{time.monotonic() - t0:.0f} s")
    for commit in gitops.log(gitops.repo_at(repo), "autoresearch/demo", limit=3):
        _say(f"{commit.sha[:12]} {commit.subject}")
    if ok and isinstance(report, dict):
        # the report's own lines: the figure at the head says how it was obtained, the total names its interval's level
        for line in report["summary"].splitlines():
            if line.startswith(("At the head:", "Total ")):
                _say(line)
        _say(f"report: {report['html_path']}")
    else:
        _say(f"report: not written ({report})")
    return 0


async def _start(client: Client, repo: Path) -> bool:
    """start_session, and what its baseline and warnings say; False if it failed."""
    ok, res = await _call(client, "start_session", repo=str(repo), metric="rows_per_s", direction="higher",
                          tag="demo")
    if not ok or not isinstance(res, dict):
        _say(f"start_session failed: {res}")
        return False
    base = res["baseline"]["rows_per_s"]
    turns = res.get("pairing") == "turns"
    printed = "METRIC rows_per_s.cpu=" if turns else "METRIC rows_per_s="
    raw = next((line for line in res["raw_metric_lines"] if line.startswith(printed)), "")
    _say(f"session on {res['branch']}: baseline rows_per_s {base['mean']:.1f} (the mean of start_session's "
         f"{base['n']} validation runs, noise {100 * (base['cv'] or 0):.1f}%; raw: {raw})")
    if turns:
        _say("  each pair's two runs share the machine in turns of the CPU, so rows_per_s is judged on CPU "
             "time (rows_per_s.cpu); the wall-clock rate is kept as rows_per_s.wall")
    for w in res["warnings"]:
        _say(f"  warning: {w}")
    return True


async def _launch_all(client: Client) -> dict[str, str] | None:
    """Launch every candidate from its patch: title -> experiment id; None if a launch failed."""
    patches = resources.example_dir() / "normsoft" / "patches"
    ids: dict[str, str] = {}
    for title, patch, hypothesis, sources in CANDIDATES:
        ok, launched = await _call(client, "launch_experiment", title=title, hypothesis=hypothesis,
                                   sources=sources, source="patch", patch=(patches / f"{patch}.patch").read_text(),
                                   repeats="auto")
        if not ok or not isinstance(launched, dict):
            _say(f"launch of {title!r} failed: {launched}")
            return None
        ids[title] = launched["experiment_id"]
        _say(f"launched {launched['experiment_id']}: {title}")
    return ids


async def _wait_all(client: Client, ids: dict[str, str]) -> dict[str, dict[str, Any]] | None:
    """Poll every experiment until it ends, saying each change of status: title -> its last answer; None if
    they did not all end within DEADLINE_S."""
    results: dict[str, dict[str, Any]] = {}
    seen: dict[str, str] = {}  # each experiment's last status: a line per change, not per poll
    deadline = time.monotonic() + DEADLINE_S
    while len(results) < len(ids):
        if time.monotonic() > deadline:
            _say(f"the experiments did not finish within {DEADLINE_S // 60} minutes; giving up")
            return None
        await anyio.sleep(1.0)
        for title, exp_id in ids.items():
            if title in results:
                continue
            ok, res = await _call(client, "fetch_sky_logs", experiment_id=exp_id, tail_lines=0)
            assert ok and isinstance(res, dict)
            if seen.get(exp_id) != res["status"]:
                seen[exp_id] = res["status"]
                _say(f"  {exp_id} {res['status']} ({res['pairs_done']} pairs): {title}")
            if res["status"] in ("done", "failed", "checks_failed", "cancelled", "lost"):
                results[title] = res
    return results


async def _judge(client: Client, title: str, experiment_id: str, res: dict[str, Any]) -> None:
    """One experiment's verdict and figures, then commit_winner on it: the winner is committed, the rest refused."""
    m = res["metrics"].get("rows_per_s") or {}
    has_ci = m.get("ci_low_pct") is not None
    level = f"{m['ci_level']:.0%} CI " if m.get("ci_level") else "CI "
    ci = f"{level}[{m['ci_low_pct']:+.1f}%, {m['ci_high_pct']:+.1f}%]" if has_ci else ""
    delta = f"{m['delta_pct']:+.1f}%" if m.get("delta_pct") is not None else "n/a"
    _say(f"{title}: {res['status']}, verdict {res['verdict']}, {delta} {ci}, {m.get('n_pairs', 0)} pairs")
    ok, out = await _call(client, "commit_winner", experiment_id=experiment_id)
    if ok and isinstance(out, dict):
        _say(f"  committed {out['commit'][:12]} on {out['branch']}")
    else:
        _say(f"  commit_winner refused: {str(out).removeprefix('Error executing tool commit_winner: ')}")


def main(delete: bool = False) -> int:
    """Run the demo; its repository (session branch, .autoresearch/, report) is kept unless `delete`."""
    workdir = Path(tempfile.mkdtemp(prefix="autoresearch-demo-"))
    try:
        return anyio.run(run_demo, workdir)
    finally:
        if delete:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            _say(f"kept {workdir / 'normsoft'} (the session branch autoresearch/demo, .autoresearch/ and the "
                 f"report; caches in {workdir / 'cache'}); `autoresearch-mcp demo --delete` removes it at the end")
