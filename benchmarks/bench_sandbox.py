"""What confinement costs: per command, and per experiment of the llama.cpp recipe.

- per run: one benchmark command (`bash ./autoresearch.sh bench` printing a METRIC line) through the
  runner's `run_command`, confined (bubblewrap) and unconfined (`"sandbox": "off"`), interleaved;
  the difference of the medians is what confinement adds to every build, bench and checks command;
- protected files (`--protected N`): the same command with N protected files in one folder of the tree,
  confined, against none: before issue 32 each file was a bind of its own (6.5 s a command at 2,000), now
  the folder is one bind from the session's git objects;
- per experiment (`--llama`, on a real llama.cpp tree and a tiny generated model, as the recipe's
  tests use): one confined experiment of the recipe (a one-file change to ggml-cpu/ops.cpp, 14 pairs)
  through the MCP server, timed from launch to its result. Confinement adds the per-run cost to each of
  its commands, and its checks compute the baseline's KL-divergence reference in their private /tmp
  (a confined check cannot cache it in the baseline's tree), timed here directly; the sum is compared
  with the experiment's duration.

- the checkout (`--checkout`): the same command with the user's checkout hidden (issue 32.10), against
  the checkout in sight.

    python benchmarks/bench_sandbox.py [--runs 200] [--protected 2000] [--checkout] [--llama]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from autoresearch_mcp.worker import jobenv, jobfile, procs, sandbox


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def per_run(runs: int) -> float:
    """Median per-command cost of confinement, in seconds (printed with both medians)."""
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        script = Path(tmp) / "session-autoresearch.sh"
        script.write_text('#!/usr/bin/env bash\ncase "$1" in bench) echo "METRIC score=100" ;; esac\n')
        (tree / "autoresearch.sh").write_text(script.read_text())
        job = jobfile.Experiment(baseline_dir=str(tree), sandbox={"scripts": {"autoresearch.sh": str(script)}})
        env = jobenv.run_env(job, tree)
        times: dict[bool, list[float]] = {True: [], False: []}
        for i in range(2 * runs + 2):
            confined = i % 2 == 0
            c = sandbox.Confinement(str(tree), {"autoresearch.sh": str(script)}, (), off=not confined)
            t0 = time.perf_counter()
            res = procs.run_command(["bash", "./autoresearch.sh", "bench"], tree, 60, env=env, confine=c)
            elapsed = time.perf_counter() - t0
            assert res.ok and "METRIC score=100" in res.output, res.output
            if i >= 2:  # the first of each: caches (ccache's directory, page cache) warm up
                times[confined].append(elapsed)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    p90 = statistics.quantiles(times[True], n=10)[-1]
    print(f"per run ({runs} each, interleaved): confined median {on * 1000:.1f} ms (p90 {p90 * 1000:.1f} ms), "
          f"unconfined {off * 1000:.1f} ms: confinement adds {(on - off) * 1000:.1f} ms a command")
    return on - off


BENCH = '#!/usr/bin/env bash\ncase "$1" in bench) echo "METRIC score=100" ;; esac\n'


def interleaved(tree: Path, runs: int, timeout_s: float,
                job_of: Callable[[bool], jobfile.Job]) -> tuple[float, float]:
    """The median time of a confined bench command in `tree` with the job `job_of(True)` and with `job_of(False)`,
    `runs` each, alternated (after one warm-up each)."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(2 * runs + 2):
        on = i % 2 == 0
        job = job_of(on)
        c = sandbox.for_job(job, str(tree), "bench")
        t0 = time.perf_counter()
        res = procs.run_command(["bash", "./autoresearch.sh", "bench"], tree, timeout_s,
                                 env=jobenv.run_env(job, tree, "bench"), confine=c)
        elapsed = time.perf_counter() - t0
        assert res.ok, res.output
        if i >= 2:
            times[on].append(elapsed)
    return statistics.median(times[True]), statistics.median(times[False])


def protected_cost(files: int, runs: int) -> None:
    """Median cost of `files` protected files in one folder, per confined command (printed)."""
    from autoresearch_mcp.git import gitops
    from autoresearch_mcp.git.worktrees import Worktrees

    with tempfile.TemporaryDirectory(prefix="bench-sandbox-protected-") as tmp:
        repo = Path(tmp) / "repo"
        (repo / "harness").mkdir(parents=True)
        (repo / "autoresearch.sh").write_text(BENCH)
        for i in range(files):
            (repo / "harness" / f"f{i:05d}.txt").write_text(f"{i}\n")
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "tree")
        r = gitops.repo_at(repo)
        head = gitops.head_commit(r)
        trees = Worktrees(r, Path(tmp) / "cache")
        tree = trees.acquire(head)
        frozen = gitops.protected_files(r, head, ["harness/"])
        spec = jobfile.SandboxSpec(mode="confined", scripts=trees.scripts(head), frozen=frozen,
                                   frozen_from=trees.frozen_store(head, frozen))
        on, off = interleaved(tree, runs, 600, lambda with_files: jobfile.Experiment(
            baseline_dir=str(tree), sandbox=spec if with_files else {**spec, "frozen": []}))
    print(f"protected: {files} files in one folder ({len(frozen)} binds): {on * 1000:.1f} ms a command against "
          f"{off * 1000:.1f} ms with none: {(on - off) * 1000:.1f} ms more ({runs} each, interleaved)")


def checkout_cost(runs: int) -> None:
    """Median cost of hiding the user's checkout (issue 32.10: an empty tmpfs over it, with a model file its
    environment names and a virtual environment its PATH names bound again), per confined bench command,
    against the same command with the checkout in sight (printed). The checkout lies under the home folder,
    where checkouts live (a private /tmp hides one under /tmp anyway)."""
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-checkout-", dir=Path.home()) as tmp:
        checkout, tree = Path(tmp) / "checkout", Path(tmp) / "tree"
        (checkout / ".venv" / "bin").mkdir(parents=True)
        (checkout / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
        (checkout / "model.bin").write_text("weights\n")
        tree.mkdir()
        (tree / "autoresearch.sh").write_text(BENCH)
        env_of = {"MODEL": str(checkout / "model.bin"), "PATH": f"{checkout}/.venv/bin:{os.environ['PATH']}"}
        on, off = interleaved(tree, runs, 60, lambda hidden: jobfile.Experiment(
            baseline_dir=str(tree), env=env_of,
            sandbox={"mode": "confined", "private": [str(checkout)] if hidden else []}))
    print(f"checkout hidden: {on * 1000:.1f} ms a command against {off * 1000:.1f} ms in sight: "
          f"{(on - off) * 1000:+.1f} ms ({runs} each, interleaved; load {os.getloadavg()[0]:.1f})")


async def llama_experiment(per_command: float) -> None:
    from mcp import Client

    import realtree
    import tinymodel
    from autoresearch_mcp.app import build_server
    from helpers import call, wait_final

    with tempfile.TemporaryDirectory(prefix="bench-sandbox-llama-") as tmp:
        root = Path(tmp)
        repo = root / "llama.cpp"
        shutil.copytree(realtree.llama_cpp_tree(realtree.CURRENT), repo)
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "tree")
        model = tinymodel.write_model(repo, root / "tiny.gguf")
        os.environ["AUTORESEARCH_CACHE_DIR"] = str(root / "cache")
        ops = "ggml/src/ggml-cpu/ops.cpp"
        async with Client(build_server()) as c:
            t0 = time.monotonic()
            await call(c, "start_session", repo=str(repo), metric="tg_tps", direction="higher", tag="bench",
                       recipe="llama.cpp", model=str(model))
            print(f"start_session (cold build, confined): {time.monotonic() - t0:.0f} s")
            patch = (f"--- a/{ops}\n+++ b/{ops}\n@@ -1,1 +1,2 @@\n+// autoresearch: confinement benchmark\n"
                     f" {(repo / ops).read_text().splitlines()[0]}\n")
            t0 = time.monotonic()
            launched = await call(c, "launch_experiment", title="one-file change", source="patch", patch=patch,
                                  repeats=14)
            result = await wait_final(c, launched["experiment_id"], timeout=3600)
            duration = time.monotonic() - t0
        commands = 2 + 2 * result["pairs_done"] + 2 + 1  # builds, pairs, warm-up pair, checks
        took = result['durations_s']
        print(f"experiment: {result['status']} {result['verdict']}, {result['pairs_done']} pairs, {duration:.1f} s "
              f"(build {took.get('build', 0):.1f} s, bench {took.get('bench', 0):.1f} s, "
              f"checks {took.get('checks', 0):.1f} s)")
        # the checks' extra work: the baseline's reference, computed per checks run (two settings)
        base = next(p for p in (root / "cache" / "worktrees").glob("*/tree-*") if (p / "build-autoresearch").is_dir())
        ppl = base / "build-autoresearch" / "bin" / "llama-perplexity"
        t0 = time.monotonic()
        for fa in ("1", "0"):
            subprocess.run([str(ppl), "-m", str(model), "-c", "128", "-ngl", "0", "-t", "1", "-b", "128", "-fa", fa,
                            "-f", str(repo / "autoresearch.checks.txt"), "--chunks", "7",
                            "--kl-divergence-base", str(root / f"base-{fa}.kld")], check=True, capture_output=True)
        reference = time.monotonic() - t0
        added = commands * per_command + reference
        print(f"confinement per experiment: {commands} commands x {per_command * 1000:.1f} ms = "
              f"{commands * per_command:.2f} s, plus the checks' baseline reference {reference:.2f} s: "
              f"{added:.2f} s, {100 * added / duration:.2f}% of the experiment")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--protected", type=int, default=0, help="also time N protected files in one folder")
    parser.add_argument("--llama", action="store_true", help="also time a llama.cpp recipe experiment (slow)")
    parser.add_argument("--checkout", action="store_true", help="also time hiding the user's checkout")
    args = parser.parse_args()
    why = sandbox.unavailable()
    if why:
        sys.exit(why)
    print(f"bubblewrap: {subprocess.run(['bwrap', '--version'], capture_output=True, text=True).stdout.strip()}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    cost = per_run(args.runs)
    if args.protected:
        protected_cost(args.protected, max(5, args.runs // 10))
    if args.checkout:
        checkout_cost(max(20, args.runs // 2))
    if args.llama:
        import anyio

        anyio.run(llama_experiment, cost)


if __name__ == "__main__":
    main()
