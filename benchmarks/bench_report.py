"""Time `report` over a synthetic session of 1,000 experiments (target: under 3 s).

The ledger is written the way the server writes it (launch records with the design, status and result
records with 30 pairs of raw samples each and the analysis the manager makes of them; about 1 in 10
kept as a real commit on the session branch), then the whole report (ledger fold, every experiment
recomputed from its samples, git history, chart, HTML, TSV) is written from it.

Run: /work/venv/bin/python benchmarks/bench_report.py [--experiments N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autoresearch_mcp.measure import metrics, stats
from autoresearch_mcp.report import write_report
from autoresearch_mcp.store.config import SessionConfig, save_config
from autoresearch_mcp.store.ledger import Ledger
from autoresearch_mcp.worker import decide, outcomes

PAIRS = 30  # the first look where an improvement can be decided
ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
       "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, env=ENV, check=True, capture_output=True, text=True).stdout.strip()


def samples(rng: random.Random, effects: dict[str, float], noise: float) -> list[dict[str, Any]]:
    """PAIRS pairs of runs, each run measuring every metric, the way the runner reports them."""
    out = []
    for pair in range(PAIRS):
        base = {name: 100.0 * (1 + rng.gauss(0, noise)) for name in effects}
        cand = {name: value * (1 + effects[name] + rng.gauss(0, noise)) for name, value in base.items()}
        second = rng.random() < 0.5  # each pair's order a coin, as the runner draws it
        out += [{"pair": pair, "role": "baseline", "position": int(not second), "metrics": base},
                {"pair": pair, "role": "candidate", "position": int(second), "metrics": cand}]
    return out


def make_session(root: Path, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    root.mkdir(parents=True)
    (root / "README").write_text("bench\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    start = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "-b", "autoresearch/bench")
    (root / ".git" / "info" / "exclude").write_text(".autoresearch/\n")  # as start_session does
    save_config(root, SessionConfig(session_id="bench", tag="bench", branch="autoresearch/bench", repo=str(root),
                                    metric="tok_s", direction="higher", executor="local", start_commit=start,
                                    created_at="2026-01-01T00:00:00+00:00"))
    ledger = Ledger(root / ".autoresearch" / "ledger.jsonl")
    ledger.append({"type": "session", "session_id": "bench", "head": start, "metric": "tok_s",
                   "baseline": {"tok_s": [100.0, 100.4]}})
    head = start
    design = stats.make_design("auto")
    judging = decide.Spec("tok_s", "higher", 0.01)
    for i in range(n):
        exp_id = f"x{i:05d}"
        ts = 1_800_000_000.0 + 60 * i
        ledger.append({"type": "launch", "ts": ts, "experiment_id": exp_id, "session_id": "bench",
                       "title": f"idea {i}: <fuse> op {rng.randrange(50)}", "hypothesis": "fewer passes " * 8,
                       "sources": [f"https://arxiv.org/abs/2401.{i:05d}"], "base_commit": head,
                       "changed_files": [f"src/k{i % 40}.c"], "metric": "tok_s", "direction": "higher",
                       "design": design.record()})
        ledger.append({"type": "status", "ts": ts + 1, "experiment_id": exp_id, "status": "running"})
        failed = rng.random() < 0.08
        outcome: dict[str, Any] = {
            "status": "failed" if failed else "done",
            "samples": [] if failed else samples(rng, {"tok_s": rng.gauss(0.0, 0.02),
                                                       "ms_per_tok": rng.gauss(0.0, 0.02)}, 0.01),
            "checks": {"ran": not failed, "passed": not failed},
            "host": {"hostname": f"vm{i % 4}", "cpu_model": "EPYC", "cpus": 8}}
        analysis = metrics.analyze(outcomes.read(outcomes.Experiment, outcome), judging, design)
        verdict = analysis["verdict"]
        ledger.append({"type": "result", "ts": ts + 30, "experiment_id": exp_id, "status": outcome["status"],
                       "worker": f"sky-{i % 4}", "cost_usd": 0.012, "outcome": outcome, "analysis": analysis})
        if verdict == "improved" and rng.random() < 0.5:
            path = root / "src" / f"k{i % 40}.c"
            path.parent.mkdir(exist_ok=True)
            path.write_text(f"// change {i}\n")
            git(root, "add", "-A")
            git(root, "commit", "-q", "-m", f"idea {i}\n\nAutoresearch-Experiment: {exp_id}")
            parent, head = head, git(root, "rev-parse", "HEAD")
            ledger.append({"type": "commit", "ts": ts + 40, "experiment_id": exp_id, "commit": head,
                           "parent": parent, "branch": "autoresearch/bench", "title": f"idea {i}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--keep", type=Path, help="write the session here and keep it (to look at the report)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    root = args.keep or tmp / "repo"
    if args.keep and root.exists():
        shutil.rmtree(root)
    try:
        t0 = time.perf_counter()
        make_session(root, args.experiments)
        setup = time.perf_counter() - t0
        ledger_mb = (root / ".autoresearch" / "ledger.jsonl").stat().st_size / 1e6
        t0 = time.perf_counter()
        result = write_report(str(root))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        write_report(str(root), ["ms_per_tok"])
        second = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "autoresearch_mcp", "--log-level", "WARNING", "report", str(root)],
                       check=True, capture_output=True)
        cold = time.perf_counter() - t0
        page_kb = Path(result.html_path).stat().st_size / 1e3
        print(f"experiments: {result.experiments} ({result.kept} kept, {result.discarded} discarded, "
              f"{result.failed} failed); ledger {ledger_mb:.1f} MB; setup {setup:.1f} s")
        print(f"report: {first:.2f} s; {second:.2f} s with a secondary-metric panel; {cold:.2f} s as a fresh "
              f"`autoresearch-mcp report` process (imports included); page {page_kb:.0f} KB")
        print(f"target < 3 s: {'met' if max(first, second, cold) < 3 else 'MISSED'}")
        if args.keep:
            print(f"report written to {result.html_path}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
