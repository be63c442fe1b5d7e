"""What one experiment sends to a SkyPilot worker: a staged workdir and the task that runs it.

SkyPilot rsyncs a task's workdir to `~/sky_workdir` without deleting files, and every job of a
cluster shares it. So nothing is ever built there: each request stages a fresh directory with
`base-<commit>.tar.gz` (a `git archive` of the base commit) and `exp-<id>/` (the candidate as the
files it changes plus the list of files it deletes, the runner, the job), and the run script
unpacks them on the VM into `~/autoresearch/work/`:

- `base-<commit>/` is unpacked and built once per base commit and reused by later experiments;
- `exp-<id>/` is a fresh unpack of the base plus the candidate's changed files, without the files
  it deletes; the compiler cache (ccache, installed by setup) turns its build into cache hits for
  everything the candidate did not change. It is removed when the job ends, so no experiment ever
  sees another one's files.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

from autoresearch_mcp import worker
from autoresearch_mcp.errors import StateError
from autoresearch_mcp.executors.port import Job
from autoresearch_mcp.executors.sky_meter import Pin
from autoresearch_mcp.git import gitops, worktrees
from autoresearch_mcp.store.config import SkyConfig
from autoresearch_mcp.worker import jobfile, sandbox

# The worker runtime, shipped whole (its folder, as the package SHIPPED_AS): the same bytes a local job runs.
WORKER = Path(worker.__file__).resolve().parent
SHIPPED_AS = "autoresearch_worker"
# How run.sh starts it: the package run as a module from the job's folder, which nothing else puts on a path
RUN_WORKER = ("\"$py\" -c 'import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
              f"runpy.run_module(\"{SHIPPED_AS}\", run_name=\"__main__\", alter_sys=True)' \"$inbox\"")
WORK = "~/autoresearch/work"
MACHINE_LOCK = "machine.lock"  # under WORK: every job of the worker takes its turns there
PROFILES = "~/autoresearch/profiles"  # raw perf.data of profile jobs: kept on the worker
# The runner is standard-library Python (3.8 or newer). bubblewrap confines every job (the runner refuses
# to measure without it unless the session turned confinement off), and a compiler cache is what keeps
# candidate builds cheap, so setup installs both where it can and says so where it cannot.
SETUP = """\
set -euo pipefail
mkdir -p ~/autoresearch/work
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))'; then
  echo "autoresearch: the runner needs python3 >= 3.8 on the worker; use an image with it" >&2
  exit 1
fi
command -v python3 > ~/autoresearch/python
missing=""
command -v bwrap >/dev/null || missing="$missing bubblewrap"
command -v ccache >/dev/null || missing="$missing ccache"
if [ -n "$missing" ] && command -v apt-get >/dev/null && sudo -n true 2>/dev/null; then
  { sudo -n apt-get update -qq && sudo -n apt-get install -y -qq $missing; } >/dev/null 2>&1 || true
fi
if ! command -v bwrap >/dev/null; then
  echo "autoresearch: no bubblewrap on this worker, so its jobs cannot be confined and will be refused;" \
       "add 'sudo apt-get install -y bubblewrap' (or your image's equivalent) to sky.setup" >&2
elif ! bwrap --ro-bind / / --unshare-pid --die-with-parent --new-session true 2>/dev/null; then
  echo "autoresearch: bubblewrap cannot run here (user namespaces disabled?), so jobs will be refused;" \
       "allow them (Ubuntu: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0) in sky.setup" >&2
fi
command -v ccache >/dev/null || echo "autoresearch: no ccache on this worker; every candidate builds cold" >&2
"""


def base_dir(commit: str) -> str:
    """The base commit's directory under WORK (and, with `.tar.gz`, its archive in the workdir)."""
    return f"base-{commit[:16]}"


def exp_dir(experiment_id: str) -> str:
    """The experiment's inbox in the workdir and its candidate tree under WORK."""
    return f"exp-{experiment_id}"


def cluster_name(session_id: str, index: int) -> str:
    """`ar-<session>-<i>`: lowercase, starts with a letter, short enough for every cloud."""
    return f"ar-{session_id[:12].lower()}-{index}"


def resources(cfg: SkyConfig, pin: Pin | None = None) -> dict[str, Any]:
    """The task's `resources:` section from the session's `sky` config and the session's pinned hardware.

    With an instance type (the config's, else the one the session's first worker got), `cpus` and
    `memory` are left out: SkyPilot rejects a `cpus` the instance type does not have
    (sky/resources.py, "... vCPUs, but ... is requested"), and the instance type says it all.
    """
    res: dict[str, Any] = {}
    instance_type = cfg.instance_type or (pin.instance_type if pin else None)
    cloud = cfg.infra or (pin.cloud if pin and not cfg.instance_type else None)
    if cloud or cfg.region:
        res["infra"] = (cloud or "*") + (f"/{cfg.region}" if cfg.region else "")
    if instance_type:
        res["instance_type"] = instance_type
    else:
        if cfg.cpus:
            res["cpus"] = cfg.cpus
        if cfg.memory:
            res["memory"] = cfg.memory
    if cfg.use_spot:
        res["use_spot"] = True
    return res


def setup_script(cfg: SkyConfig, repo_dir: Path, commit: str) -> str:
    """Our setup, then the session's own (`sky.setup` commands, then `sky.setup_script` as committed).

    SkyPilot runs setup once per VM, at launch (`sky exec` skips it: sky/execution.py, exec's stages
    are SYNC_WORKDIR and EXEC only), so whatever it installs or downloads serves every experiment on
    that worker.
    """
    parts = [SETUP]
    if cfg.setup:
        parts.append("# sky.setup from .autoresearch/config.json\n" + "\n".join(cfg.setup) + "\n")
    if cfg.setup_script:
        script = gitops.file_at(gitops.repo_at(repo_dir), commit, cfg.setup_script)
        if script is None:
            raise StateError(f"sky.setup_script {cfg.setup_script!r} is not in commit {commit[:12]}: commit it "
                             "(it runs on every new worker), or remove it from .autoresearch/config.json")
        text = script.decode("utf-8", "replace")
        end = "" if text.endswith("\n") else "\n"
        parts.append(f"# sky.setup_script {cfg.setup_script}\nbash <<'AUTORESEARCH_SETUP'\n{text}{end}"
                     "AUTORESEARCH_SETUP\n")
    return "\n".join(parts)


def file_mounts(cfg: SkyConfig, repo_dir: Path) -> dict[str, str]:
    """`sky.file_mounts` (path on the worker -> local path or bucket URL), local paths made absolute.

    SkyPilot copies them at launch only (exec never re-syncs them), so a large model is shipped
    once per worker and cached there for every experiment.
    """
    mounts: dict[str, str] = {}
    for remote, source in cfg.file_mounts.items():
        if "://" in source:
            mounts[remote] = source
            continue
        local = (repo_dir / Path(source).expanduser()).resolve()
        if not local.exists():
            raise StateError(f"sky.file_mounts[{remote!r}]: {local} does not exist; give an existing local "
                             "path (relative to the repository) or a bucket URL such as s3://bucket/path")
        mounts[remote] = str(local)
    return mounts


def task_config(cfg: SkyConfig, job: Job, workdir: Path, repo_dir: Path | None = None,
                pin: Pin | None = None) -> dict[str, Any]:
    """The SkyPilot task (YAML as a dict) that runs one experiment from its staged workdir.

    In SkyPilot 0.14 a CPU-only job asks the cluster for 0.5 CPU whatever the task says (only Slurm
    reads `cpus`), so the pool's one-job-per-cluster rule and the runner's machine lock are what
    keep two benchmarks off one VM; the task still asks for the node's CPUs, which is what it means.
    With `repo_dir`, the session's own setup and file mounts are added.
    """
    task: dict[str, Any] = {
        "name": f"ar-{job.experiment_id}",
        "workdir": str(workdir),
        "setup": setup_script(cfg, repo_dir, job.base_commit) if repo_dir is not None else SETUP,
        "run": f"bash {exp_dir(job.experiment_id)}/run.sh",
        "resources": resources(cfg, pin),
    }
    mounts = file_mounts(cfg, repo_dir) if repo_dir is not None else {}
    if mounts:
        task["file_mounts"] = mounts
    return task


def changes(repo_dir: Path, base: str, candidate: str) -> tuple[list[str], list[str]]:
    """Paths the candidate adds or modifies, and paths it deletes, relative to the base commit."""
    changed: list[str] = []
    deleted: list[str] = []
    for change in gitops.changes(gitops.repo_at(repo_dir), base, candidate):
        (deleted if change.status == "D" else changed).append(change.path)
    return changed, deleted


def stage(repo_dir: Path, job: Job, staging: Path, retired: list[str], secret: str) -> None:
    """Fill the fresh directory `staging` with everything one experiment needs on the worker: the same
    runner, sandbox and profiler bytes as here, the session's scripts (the base commit's) to bind over
    the trees, and the job's `secret`, which run.sh hands the runner and deletes before anything runs."""
    exp = exp_dir(job.experiment_id)
    base = base_dir(job.base_commit)
    inbox = staging / exp
    inbox.mkdir(parents=True)
    repo = gitops.repo_at(repo_dir)
    try:
        gitops.archive(repo, job.base_commit, staging / f"{base}.tar.gz")
        changed, deleted = changes(repo_dir, job.base_commit, job.candidate_commit)
        if changed:
            gitops.archive(repo, job.candidate_commit, inbox / "changes.tar.gz", changed)
    except gitops.GitError as exc:
        raise StateError(f"could not archive {job.experiment_id}'s commits for the worker: "
                         f"{str(exc.stderr or exc).strip()[:400]}") from None
    (inbox / "deleted").write_bytes(b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in deleted))
    shutil.copytree(WORKER, inbox / SHIPPED_AS, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    scripts = {}
    (inbox / "scripts").mkdir()
    for name in sandbox.SCRIPTS:
        data = gitops.file_at(repo, job.base_commit, name)
        if data is not None:
            (inbox / "scripts" / name).write_bytes(data)
            scripts[name] = f"scripts/{name}"  # relative to the job file, where the runner finds them
    frozen_from = None
    if units := job.spec.frozen:  # the base commit's protected bytes, bound over each tree as the scripts are
        try:
            worktrees.write_protected(repo, job.base_commit, units, inbox / "protected")
        except gitops.GitError as exc:
            raise StateError(f"could not read {job.experiment_id}'s protected files for the worker: "
                             f"{str(exc.stderr or exc).strip()[:400]}") from None
        frozen_from = "protected"  # relative to the job file, like the scripts
    (inbox / "job.json").write_text(json.dumps(placed(job, scripts, frozen_from).to_dict()))
    (inbox / "secret").write_text(secret + "\n")
    (inbox / "run.sh").write_text(run_script(job, retired))


def profiled_dir(job: Job) -> str:
    """The tree a profile job profiles: the base build itself (the one experiments reuse), or a fresh
    copy of the candidate beside it, removed when the job ends."""
    return base_dir(job.base_commit) if job.candidate_commit == job.base_commit else exp_dir(job.experiment_id)


def placed(job: Job, scripts: dict[str, str], frozen_from: str | None = None) -> jobfile.Job:
    """The job's record where this worker keeps its trees: an experiment's in the base build and a fresh copy of
    the candidate; a profile's in the tree it profiles, its raw perf.data kept on the worker."""
    exp = exp_dir(job.experiment_id)
    if isinstance(job.spec, jobfile.Profile):
        spec = dataclasses.replace(job.spec, data=f"{PROFILES}/{job.spec.profile_id}.perf.data")
        return spec.placed(experiment_id=job.experiment_id, baseline_dir=profiled_dir(job), candidate_dir=None,
                           log_path=None, machine_lock=MACHINE_LOCK, scripts=scripts, frozen_from=frozen_from)
    return job.spec.placed(experiment_id=job.experiment_id, baseline_dir=base_dir(job.base_commit), candidate_dir=exp,
                           log_path=None, machine_lock=MACHINE_LOCK, scripts=scripts, frozen_from=frozen_from)


def run_script(job: Job, retired: list[str]) -> str:
    """The job's run command: unpack, prebuild the baseline, unpack the candidate beside it, run
    (for a validation job: build the base and bench it, `validation_part`)."""
    exp = exp_dir(job.experiment_id)
    base = base_dir(job.base_commit)
    old = " ".join(shlex.quote(base_dir(c)) for c in retired if c != job.base_commit)
    what = f"{job.spec.kind} {job.experiment_id}"
    prologue = f"""\
#!/usr/bin/env bash
# autoresearch: {what} on this worker (generated; runs in ~/sky_workdir)
set -euo pipefail
inbox="$PWD/{exp}"
tars="$PWD"
# the runner's secret: gone from disk before anything of the job runs, never exported
secret="$(cat "$inbox/secret")" && rm -f "$inbox/secret"
py="$(cat ~/autoresearch/python 2>/dev/null || echo python3)"
mkdir -p {WORK} && cd {WORK}
for old in {old}; do rm -rf "$old" "$old.build.lock" "$tars/$old.tar.gz"; done
if [ ! -e {base}/.autoresearch-unpacked ]; then
  rm -rf {base} && mkdir {base}
  tar -xzf "$tars/{base}.tar.gz" -C {base}
  touch {base}/.autoresearch-unpacked
fi
"""
    if isinstance(job.spec, jobfile.Validation):
        return prologue + VALIDATION_PART
    if isinstance(job.spec, jobfile.Profile):
        return prologue + profile_part(job)
    return prologue + f"""\
# Prebuild the baseline (once per base commit), so the compiler cache is warm for the candidate.
{RUN_WORKER} "$inbox/job.json" --prebuild </dev/null || true
# A fresh copy of the sources (a build directory cannot move: CMake records absolute paths); the
# compiler cache, keyed on paths relative to each tree, makes its build reuse the baseline's objects.
{unpack_candidate(job)}set +e
printf '%s\n' "$secret" | {RUN_WORKER} "$inbox/job.json"
rc=$?
rm -rf {exp} {exp}.build.lock "$inbox"
exit $rc
"""


def unpack_candidate(job: Job) -> str:
    """Shell lines that make `exp-<id>/` a fresh copy of the base with the candidate's changes."""
    exp = exp_dir(job.experiment_id)
    return f"""\
rm -rf {exp} {exp}.build.lock && mkdir {exp}
tar -xzf "$tars/{base_dir(job.base_commit)}.tar.gz" -C {exp}
if [ -e "$inbox/changes.tar.gz" ]; then tar -xzmf "$inbox/changes.tar.gz" -C {exp}; fi
(cd {exp} && xargs -0 -r rm -f -- < "$inbox/deleted")
"""


def profile_part(job: Job) -> str:
    """Profile the base build, or a fresh copy of the candidate (unpacked as an experiment's is):
    the runner builds it, records the benchmark under perf and prints one result line."""
    exp = exp_dir(job.experiment_id)
    unpack = "" if job.candidate_commit == job.base_commit else unpack_candidate(job)
    return unpack + f"""\
set +e
printf '%s\n' "$secret" | {RUN_WORKER} "$inbox/job.json"
rc=$?
rm -rf {exp} {exp}.build.lock "$inbox"
exit $rc
"""


# Build the base tree (the build later experiments reuse) and bench it `validate` times, as start_session
# does locally (runner.run_validation); one line with the raw results ends the log.
VALIDATION_PART = f"""\
set +e
printf '%s\\n' "$secret" | {RUN_WORKER} "$inbox/job.json"
rc=$?
rm -rf "$inbox"
exit $rc
"""
