"""The package's layers hold: import-linter checks the contracts in pyproject.toml (the package's layers, the
rooms of experiments/, analysis never importing experiments, the session's storage below the port and the runner, the
worker importing nothing else of the server),
and no two subpackages import each other (a package-level cycle), whatever the contracts list."""

from __future__ import annotations

import ast
import graphlib
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "server" / "autoresearch_mcp"


def _package_graph() -> dict[str, set[str]]:
    """Top-level part of the package (a subpackage or a module) -> the parts it imports."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("autoresearch_mcp"):
                names = node.module.split(".")[1:2] or [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("autoresearch_mcp.")]
            else:
                continue
            edges[part].update(n for n in names if n != part and n != "__version__")
    return edges


def test_no_two_parts_of_the_package_import_each_other() -> None:
    graph = _package_graph()
    assert {"worker", "git", "store", "measure", "executors", "experiments"} <= set(graph)
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"package-level import cycle: {' -> '.join(exc.args[1])}")


def test_the_layer_contract_holds() -> None:
    # the interpreter's own environment first: the venv need not be on PATH (`.venv/bin/python -m pytest`)
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint is not None, "import-linter is a dev dependency: pip install -e '.[dev]'"
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT,  # reads pyproject.toml there
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 kept, 0 broken" in done.stdout


# --- one builder of jobs, one runner of them ----------------------------------------------------------

# A runner job's own fields: a dict literal (or a SandboxSpec call) naming one of them builds a job; so does a
# call of a job record (jobfile.Experiment(...), Validation(...)...).
JOB_KEYS = {"baseline_dir", "candidate_dir", "machine_lock", "judging", "timeouts", "frozen", "read_only",
            "runs", "shape_trial", "run_checks", "prior_samples", "a job record"}
RECORDS = {"Job", "Experiment", "Validation", "ChecksTrial", "HeadCheck", "Holdout", "Profile", "Counters"}
# Running a job's command: the runner's functions that build, bench or check a tree, or run a job.
RUNS_A_JOB = {"run_command", "build_tree", "run_checks", "run_validation", "run_experiment", "run_holdout",
              "profile", "run_profile", "run_counters", "run"}
BUILDER = {"executors/jobs.py", "worker/jobfile.py"}
RUNNER_SIDE = {"worker/runner.py", "worker/profiler.py"}  # the runner (and the profiler beside it) read their own job
# analyze_bounds measures this machine, with or without a session (no trees, no executor): its counters job runs
# in the server's process, through the runner's own handler and under the machine's turn
IN_PROCESS = {"analysis/counters.py": "runner.run"}


def _modules() -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _keys(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Dict):
        return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "SandboxSpec":
        return {k.arg for k in node.keywords if k.arg}
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RECORDS
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "jobfile"):
        return {"a job record"}
    return set()


def test_only_core_jobs_builds_a_job() -> None:
    builds = [f"{name}:{node.lineno} ({', '.join(sorted(_keys(node) & JOB_KEYS))})"
              for name, tree in _modules() if name not in BUILDER | RUNNER_SIDE
              for node in ast.walk(tree) if _keys(node) & JOB_KEYS]
    assert builds == [], "build the job with executors/jobs.py (JobMaker) instead: " + "; ".join(builds)


def test_only_the_runner_runs_a_job() -> None:
    """No build, bench or checks command runs outside the runner: the server's own jobs (validation, checks
    trials, platform checks, profiles, the holdout) go through an executor, which runs the worker."""
    runs = []
    for name, tree in _modules():
        if name in RUNNER_SIDE:
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("runner", "profiler")
                    and node.func.attr in RUNS_A_JOB
                    and IN_PROCESS.get(name) != f"{node.func.value.id}.{node.func.attr}"):
                runs.append(f"{name}:{node.lineno} {node.func.value.id}.{node.func.attr}")
    assert runs == [], "run it as a job through the executor port instead: " + "; ".join(runs)


# --- the worker ships whole ---------------------------------------------------------------------------------------

WORKER = PACKAGE / "worker"


def test_the_worker_imports_only_the_standard_library_and_its_own_modules() -> None:
    outside = []
    for path in sorted(WORKER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            stdlib = sys.stdlib_module_names
            outside += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] not in stdlib]
    assert outside == []


def test_the_worker_folder_runs_a_job_where_it_is_shipped_with_nothing_else(tmp_path: Path) -> None:
    """The folder alone, as the SkyPilot executor ships it (sky_task.RUN_WORKER), under an interpreter that sees no
    installed package (-I -S): a job it cannot run still ends with the result line that says why."""
    from autoresearch_mcp.executors import sky_task

    inbox = tmp_path / "inbox"
    shutil.copytree(WORKER, inbox / sky_task.SHIPPED_AS, ignore=shutil.ignore_patterns("__pycache__"))
    (inbox / "job.json").write_text('{"kind": "bake", "version": 1}')
    command = sky_task.RUN_WORKER.replace('"$py" -c', f"{sys.executable} -I -S -c").replace('"$inbox"', str(inbox))
    done = subprocess.run(f'printf "s\\n" | {command} {inbox / "job.json"}', shell=True, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "AUTORESEARCH_RESULT" in done.stdout and "a job of kind 'bake'" in done.stdout, done.stdout
