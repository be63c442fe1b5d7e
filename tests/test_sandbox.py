"""A candidate cannot fake its own win: every build, bench and checks run is confined (issue 23, points 1-4).

Each test plays a hostile candidate through a real MCP client: its build or its program attacks the
scripts, the checks, the baseline, the runner's result channel, the environment, the session's files or
the machine, and must get no false winner, write nothing outside its own tree and leave nothing running.
Each has a control, a benign candidate of the same shape, that must still be measured as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.worker import channel, jobfile, sandbox
from conftest import balanced_noise, git, init_repo
from helpers import call, error, wait_final

pytestmark = pytest.mark.anyio

# The program under test prints a correctness answer and the metric (value.txt scaled by this run's noise);
# the candidate may change prog.sh and build.sh, never the session's scripts.
PROG = "echo ANSWER=42\nawk -v v=$(cat value.txt) -v n=${1:-1} 'BEGIN{printf \"METRIC score=%.5f\\n\", v*n}'\n"
CHECKS = "sh prog.sh 1 > .checked || exit 1\ngrep -qx ANSWER=42 .checked\n"


def hostile_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "target"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n  build) sh build.sh ;;\n"
        f"  bench) {balanced_noise()}sh prog.sh \"$n\" ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\n" + CHECKS)
    (repo / "prog.sh").write_text(PROG)
    (repo / "build.sh").write_text("true\n")
    (repo / "value.txt").write_text("100\n")
    return init_repo(repo)


async def start(c: Client, repo: Path, direction: str = "higher") -> dict[str, Any]:
    return await call(c, "start_session", repo=str(repo), metric="score", direction=direction, tag="t")


async def measure(c: Client, repo: Path, title: str, files: dict[str, str], repeats: int | str = 30,
                  timeout: float = 240.0) -> dict[str, Any]:
    """Launch the work tree with `files` written into it (then put back), and wait for the result."""
    for name, text in files.items():
        (repo / name).write_text(text)
    launched = await call(c, "launch_experiment", title=title, source="worktree", repeats=repeats)
    git(repo, "checkout", "-q", "--", ".")
    return await wait_final(c, launched["experiment_id"], timeout=timeout)


def won(result: dict[str, Any]) -> bool:
    return result["verdict"] == "improved" and result["status"] == "done" and bool(result["checks"]["passed"])


BETTER = {"value.txt": "110\n"}  # the control's real 10% improvement


def leftovers(tag: str) -> list[psutil.Process]:
    """Processes whose command line holds `tag` (what a candidate left running)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(tag in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


# --- 1. what a build writes after the snapshot never replaces the session's scripts --------------------------


@pytest.mark.as_user
@pytest.mark.slow
async def test_a_build_that_rewrites_the_benchmark_script_gets_no_false_winner(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)
    rewrite = "printf '#!/bin/sh\\necho METRIC score=1000\\n' > autoresearch.sh\n"
    async with Client(build_server()) as c:
        await start(c, repo)
        hostile = await measure(c, repo, "rewrite the bench", {"build.sh": rewrite})
        control = await measure(c, repo, "a real win", {**BETTER, "build.sh": "echo built > built.txt\n"})
    assert hostile["status"] == "failed" or not won(hostile)
    assert hostile["verdict"] != "improved"
    assert won(control)


@pytest.mark.slow
async def test_a_build_that_deletes_the_checks_script_fails_its_checks(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)
    wrong = PROG.replace("ANSWER=42", "ANSWER=41")
    async with Client(build_server()) as c:
        await start(c, repo)
        hostile = await measure(c, repo, "delete the checks", {
            **BETTER, "prog.sh": wrong, "build.sh": "rm -f autoresearch.checks.sh\ntrue\n"}, repeats="auto")
        control = await measure(c, repo, "correct", {**BETTER, "build.sh": "rm -f stale.o\n"}, repeats="auto")
    assert hostile["status"] == "checks_failed" and not hostile["checks"]["passed"]
    assert control["status"] == "done" and control["checks"]["passed"]


async def test_unconfined_too_a_deleted_checks_script_never_reads_as_no_checks(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)
    wrong = PROG.replace("ANSWER=42", "ANSWER=41")
    (repo / ".autoresearch").mkdir()
    (repo / ".autoresearch" / "config.json").write_text('{"sandbox": "off"}')  # the user's choice, before starting
    async with Client(build_server()) as c:
        await start(c, repo)  # nothing is bound over the tree: the runner puts the session's bytes back
        hostile = await measure(c, repo, "delete the checks", {
            **BETTER, "prog.sh": wrong, "build.sh": "rm -f autoresearch.checks.sh\n"}, repeats="auto")
        control = await measure(c, repo, "keep them", BETTER, repeats="auto")
    assert hostile["status"] == "checks_failed" and hostile["checks"]["ran"] and not hostile["checks"]["passed"]
    assert control["status"] == "done" and control["checks"]["passed"]


# --- the baseline's tree, the session, the checkout and the git directory are out of reach --------------------


@pytest.mark.slow
async def test_a_build_cannot_slow_the_baseline_down_by_writing_into_its_tree(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)
    spoil = ('for f in "${AUTORESEARCH_BASELINE_TREE:-/nonexistent}/value.txt" ../*/value.txt; do\n'
             '  [ -e "$f" ] && ! [ "$f" -ef value.txt ] && echo 50 > "$f" 2>/dev/null\ndone\ntrue\n')
    async with Client(build_server()) as c:
        await start(c, repo)
        hostile = await measure(c, repo, "spoil the baseline", {"build.sh": spoil})
        later = await measure(c, repo, "a later no-op", {"build.sh": "true # nothing\n"})
        control = await measure(c, repo, "a real win", BETTER)
    assert hostile["verdict"] != "improved" and later["verdict"] != "improved"
    assert won(control)


@pytest.mark.as_user
@pytest.mark.slow
async def test_a_candidate_writes_nothing_outside_its_own_tree(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)
    user_file = repo / "my-notes.txt"  # untracked (ignored): the user's own
    user_file.write_text("mine\n")
    with open(repo / ".git" / "info" / "exclude", "a") as fh:
        fh.write("my-notes.txt\n")
    elsewhere = tmp_path / "elsewhere.txt"
    attack = f"""\
top=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null)
top=${{top%/.git}}
echo '{{"alpha": 0.5, "min_effect": 0}}' > "$top/.autoresearch/config.json" 2>/dev/null
echo '{{"type": "forged"}}' >> "$top/.autoresearch/ledger.jsonl" 2>/dev/null
echo pwned > "$top/my-notes.txt" 2>/dev/null
printf '#!/bin/sh\\necho hooked\\n' > "$top/.git/hooks/post-checkout" 2>/dev/null
git update-ref refs/heads/autoresearch/t HEAD 2>/dev/null
echo pwned > {elsewhere} 2>/dev/null
echo mine > own-output.txt && echo scratch > /tmp/scratch.txt && cat own-output.txt /tmp/scratch.txt >/dev/null
"""
    config = (repo / ".autoresearch").exists()
    async with Client(build_server()) as c:
        await start(c, repo)
        before = {p: p.read_bytes() for p in (repo / ".autoresearch" / "config.json", repo / ".autoresearch" /
                                              "ledger.jsonl")}
        branch = git(repo, "rev-parse", "autoresearch/t")
        result = await measure(c, repo, "write everywhere", {**BETTER, "build.sh": attack}, repeats="auto")
    assert not config
    assert result["status"] == "done"  # the control: its own tree and its private /tmp were writable
    assert user_file.read_text() == "mine\n"
    assert not elsewhere.exists()
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    assert git(repo, "rev-parse", "autoresearch/t") == branch
    assert (repo / ".autoresearch" / "config.json").read_bytes() == before[repo / ".autoresearch" / "config.json"]
    ledger = (repo / ".autoresearch" / "ledger.jsonl").read_text()
    assert "forged" not in ledger



def cache_entries(cache: Path) -> set[str]:
    """What a compiler cache holds: its entries (results and manifests), not its counters or scratch."""
    return {str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file() and p.name != "stats"
            and "tmp" not in p.relative_to(cache).parts and not p.name.endswith(".lock")}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ccache") is None or shutil.which("cc") is None, reason="needs ccache and cc")
async def test_a_candidate_build_reads_the_compiler_cache_and_cannot_plant_entries_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An entry a candidate stores (or forges) for a source the baseline compiles later would slow that
    # baseline down; only the baseline's own build writes the cache, every candidate's reads it.
    cache = tmp_path / "ccache"
    monkeypatch.setenv("CCACHE_DIR", str(cache))
    repo = hostile_repo(tmp_path)
    compile_all = 'for f in a b; do $AUTORESEARCH_CCACHE cc -O1 -c $f.c -o $f.o || exit 1; done\n'
    (repo / "a.c").write_text("int a(int x) { return x + 1; }\n")
    (repo / "b.c").write_text("int b(int x) { return x + 2; }\n")
    (repo / "build.sh").write_text(compile_all)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "compiled")
    plant = (compile_all + f'echo planted > "$CCACHE_DIR/planted" 2>/dev/null\n'
             f'echo planted > {cache}/planted2 2>/dev/null\n'
             'CCACHE_READONLY= CCACHE_TEMPDIR=$PWD ccache cc -O1 -c b.c -o forced.o 2>/dev/null\ntrue\n')
    async with Client(build_server()) as c:
        await start(c, repo)
        after_start = cache_entries(cache)
        result = await measure(c, repo, "plant", {**BETTER, "b.c": "int b(int x) { return x + 3; }\n",
                                                  "build.sh": plant}, repeats="auto")
    assert after_start  # the baseline's build stored its objects
    assert result["status"] == "done"  # the control: a candidate still builds, from the cache where it can
    assert result["build"]["candidate"]["cache"]["hits"] >= 1 and result["build"]["candidate"]["cache"]["misses"] >= 1
    assert cache_entries(cache) == after_start  # ...and stored nothing, planted nothing


def test_only_the_baselines_own_build_may_write_the_compiler_cache(tmp_path: Path) -> None:
    base, cand = tmp_path / "base", tmp_path / "cand"
    base.mkdir()
    cand.mkdir()
    job = jobfile.Experiment(baseline_dir=str(base), sandbox={"mode": sandbox.CONFINED})
    assert sandbox.for_job(job, str(base)).cache and not sandbox.for_job(job, str(cand)).cache
    assert not sandbox.for_job(jobfile.Experiment(sandbox={"mode": sandbox.CONFINED}), str(base)).cache
    _, env, _ = sandbox.command(["true"], sandbox.for_job(job, str(cand)), {"PATH": os.environ["PATH"]})
    assert env["CCACHE_READONLY"] == "1"
    _, env, _ = sandbox.command(["true"], sandbox.for_job(job, str(base)), {"PATH": os.environ["PATH"]})
    assert "CCACHE_READONLY" not in env


class Listener:
    """A unix socket a service of the machine listens on (the system bus, docker, an ssh agent): every
    connection it accepts is recorded; one from a job would be a way out of its confinement."""

    def __init__(self, path: Path) -> None:
        self.path, self.accepted = path, 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        self.path.unlink(missing_ok=True)


@pytest.mark.as_user
@pytest.mark.slow
async def test_a_candidate_cannot_reach_the_machines_services_through_their_sockets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A unix socket on a read-only mount still takes connections; through the system bus's, a job could
    # have systemd start a unit outside any sandbox, through docker's mount /, through an agent's sign.
    (tmp_path / "runtime").mkdir()
    # named by the environment, as SSH_AUTH_SOCK names an agent's; in a folder it names, as XDG_RUNTIME_DIR
    # names the session bus's
    places = [tmp_path / "agent.sock", tmp_path / "runtime" / "bus"]
    if os.access("/run", os.W_OK):
        places.append(Path("/run") / f"autoresearch-test-{uuid.uuid4().hex[:8]}.sock")
    listeners = [Listener(p) for p in places]
    monkeypatch.setenv("SSH_AUTH_SOCK", str(places[0]))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(places[1].parent))
    reach = "".join(
        f"python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{p}\")' 2>/dev/null "
        "&& echo reached >> reached.txt\n" for p in places)
    repo = hostile_repo(tmp_path)
    try:
        async with Client(build_server()) as c:
            await start(c, repo)
            hostile = await measure(c, repo, "call a service", {**BETTER, "build.sh": reach + "true\n"},
                                    repeats="auto")
    finally:
        for listener in listeners:
            listener.close()
    assert [listener.accepted for listener in listeners] == [0] * len(listeners)
    assert won(hostile)  # the control: the build went on and its real win was measured


@pytest.mark.slow
async def test_a_build_cannot_rewrite_a_protected_file_after_the_launch_checked_it(tmp_path: Path) -> None:
    # The launch refuses a change to a protected file; a build that makes the change itself, once the
    # launch has checked the snapshot, finds every protected file read-only.
    repo = hostile_repo(tmp_path)
    (repo / "harness").mkdir()
    (repo / "harness" / "scale.txt").write_text("1\n")
    (repo / "autoresearch.sh").write_text((repo / "autoresearch.sh").read_text().replace(
        'sh prog.sh "$n"', 'sh prog.sh "$(awk -v n="$n" -v s=$(cat harness/scale.txt) \'BEGIN{print n*s}\')"'))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a protected harness")
    (repo / ".autoresearch").mkdir()
    (repo / ".autoresearch" / "config.json").write_text(json.dumps({"protected": ["prog.sh", "harness/"]}))
    rewrite = ("sed -i 's/v\\*n/2*v*n/' prog.sh 2>/dev/null\n"
               "echo 2 > harness/scale.txt 2>/dev/null\ntrue\n")
    async with Client(build_server()) as c:
        await start(c, repo)
        assert "protected" in await error(c, "launch_experiment", title="direct", source="patch",
                                          patch=value_patch_for(repo, "harness/scale.txt", "1", "2"))
        hostile = await measure(c, repo, "rewrite the harness", {"build.sh": rewrite})
        control = await measure(c, repo, "a real win", BETTER)
    assert hostile["status"] == "done" and hostile["verdict"] != "improved"
    assert won(control)
    assert (repo / "prog.sh").read_text() == PROG


def value_patch_for(repo: Path, name: str, old: str, new: str) -> str:
    """A unified diff that changes the line `old` of `name` to `new`."""
    path = repo / name
    before = path.read_text()
    path.write_text(before.replace(old, new, 1))
    try:
        return git(repo, "diff", "--", name)
    finally:
        path.write_text(before)


def quiet_repo(tmp_path: Path) -> Path:
    """A session whose bench and checks write nothing into their tree (a deterministic metric, the checks'
    output in the private /tmp), as most real benchmarks are."""
    repo = tmp_path / "target"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        "#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n  build) sh build.sh ;;\n  bench) sh prog.sh 1 ;;\nesac\n")
    (repo / "autoresearch.checks.sh").write_text(
        "#!/usr/bin/env bash\nsh prog.sh 1 > \"$TMPDIR/checked\" || exit 1\ngrep -qx ANSWER=42 \"$TMPDIR/checked\"\n")
    (repo / "prog.sh").write_text(PROG)
    (repo / "build.sh").write_text("true\n")
    (repo / "value.txt").write_text("100\n")
    return init_repo(repo)


# Remembers across runs: its first run (or the checks) leaves a note in the tree, and every later run is
# "twice as fast" and still right.
MEMO = ("echo ANSWER=42\nif [ -f .memo ]; then m=2; else m=1; touch .memo 2>/dev/null || true; fi\n"
        "awk -v v=$(cat value.txt) -v m=$m 'BEGIN{printf \"METRIC score=%.5f\\n\", v*m}'\n")


@pytest.mark.as_user
@pytest.mark.slow
async def test_a_candidate_cannot_keep_state_from_one_run_to_the_next(tmp_path: Path) -> None:
    repo = quiet_repo(tmp_path)
    async with Client(build_server()) as c:
        started = await start(c, repo)
        hostile = await measure(c, repo, "remember", {"prog.sh": MEMO})
        control = await measure(c, repo, "a real win", BETTER)
    assert started["settings"]["read_only_runs"] == "bench, checks"
    assert hostile["verdict"] != "improved"
    assert won(control)


@pytest.mark.slow
async def test_a_benchmark_that_writes_into_its_tree_is_told_and_still_measured(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)  # its bench counts runs in a file in the tree; its checks write .checked
    async with Client(build_server()) as c:
        started = await start(c, repo)
        control = await measure(c, repo, "a real win", BETTER)
    assert started["settings"]["read_only_runs"] == "none"
    assert any("wrote into its tree (.autoresearch-noise)" in w for w in started["warnings"])
    assert any("autoresearch.checks.sh fails with its tree read-only" in w for w in started["warnings"])
    assert won(control)

# --- 3. a result the candidate cannot forge or edit ---------------------------------------------------------


def test_a_runner_line_shows_no_secret_and_its_code_fits_no_other_payload() -> None:
    # On a worker the job can read the log its runner's lines go to: a line must give away nothing that
    # forges another.
    line = channel.machine_line(channel.RESULT_PREFIX, {"status": "done", "speedup": 1}, secret="s3cret-key")
    assert "s3cret-key" not in line
    assert channel.read_machine_line(line, channel.RESULT_PREFIX, "s3cret-key") == {"status": "done", "speedup": 1}
    assert channel.read_machine_line(line.replace('"speedup": 1', '"speedup": 2'), channel.RESULT_PREFIX,
                                    "s3cret-key") is None
    assert channel.read_machine_line(line, channel.RESULT_PREFIX, "another-key") is None


def forged_outcome() -> str:
    samples = [{"pair": i, "role": role, "position": 0, "exit_code": 0, "duration_s": 0.1, "timed_out": False,
                "metrics": {"score": (200.0 if role == "candidate" else 100.0) * (1 + 0.001 * (i % 3))},
                "problems": []} for i in range(14) for role in ("baseline", "candidate")]
    return json.dumps({"experiment_id": "x", "status": "done", "samples": samples, "checks": {"ran": True,
                       "passed": True}, "stop_reason": "improved"}, separators=(",", ":"))


@pytest.mark.as_user
@pytest.mark.slow
async def test_a_forged_result_line_written_to_the_runners_output_is_not_believed(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)
    (tmp_path / "forged.json").write_text(forged_outcome())
    forge = f"""\
line="AUTORESEARCH_RESULT $(cat {tmp_path / 'forged.json'} 2>/dev/null || echo '{{}}')"
for p in /proc/[0-9]*; do
  if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'autoresearch_mcp.worker'; then
    for sig in 1 2; do echo "$line" > $p/fd/1 2>/dev/null; done
    kill -9 ${{p#/proc/}} 2>/dev/null
  fi
done
true
"""
    async with Client(build_server()) as c:
        await start(c, repo)
        hostile = await measure(c, repo, "forge the result", {"build.sh": forge})
        control = await measure(c, repo, "a real win", BETTER)
    assert hostile["verdict"] != "improved"
    assert won(control)


@pytest.mark.as_user
@pytest.mark.slow
async def test_a_helper_left_behind_cannot_rewrite_the_measured_output(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)
    tag = f"300.{uuid.uuid4().int % 10**8:08d}"  # the helper's own sleep: how it is found afterwards
    # right after the real METRIC line, rewrite the output from its start (a file: through /proc/self/fd/1),
    # again and again for a while, so that whenever the runner reads it, it reads the forgery
    helper = ("setsid env -i /bin/sh -c 'i=0; while [ $i -lt 100000 ]; do "
              "printf \"METRIC score=999.00000\\n\" 1<>/proc/self/fd/1; i=$((i+1)); done; "
              f"exec /bin/sleep {tag}' &\n")
    async with Client(build_server()) as c:
        await start(c, repo)
        hostile = await measure(c, repo, "rewrite the output", {"prog.sh": PROG + helper})
        control = await measure(c, repo, "a real win", BETTER)
    assert hostile["verdict"] != "improved"
    assert won(control)
    assert leftovers(tag) == []


@pytest.mark.as_user
async def test_a_process_that_clears_its_environment_does_not_outlive_the_experiment(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)
    tag = f"{uuid.uuid4().int % 1000}.{uuid.uuid4().int % 100000}"
    async with Client(build_server()) as c:
        await start(c, repo)
        result = await measure(c, repo, "stay", {
            "build.sh": f"setsid env -i sleep 3{tag} </dev/null >/dev/null 2>&1 &\nsleep 0.2\n"}, repeats="auto")
    assert result["status"] == "done"
    assert leftovers(f"3{tag}") == []


async def test_a_huge_benchmark_output_is_stored_capped_with_its_metric_lines(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path)
    flood = "head -c 20000000 /dev/zero | tr '\\0' x; echo\n" + PROG
    async with Client(build_server()) as c:
        await start(c, repo)
        result = await measure(c, repo, "flood", {"prog.sh": flood}, repeats="auto")
    assert result["status"] == "done" and result["verdict"] != "invalid"  # every METRIC line was still read
    assert Path(result["log_path"]).stat().st_size < 2_000_000


# --- 4. bench and checks see one environment ---------------------------------------------------------------


# Not among them: AUTORESEARCH_BASELINE_TREE, which only the checks get (they compare with the baseline's tree;
# a bench that saw it could tell whether it is the baseline, test_sandbox_shared). A program tells the checks
# from the bench by how it is called anyway (its arguments, its parent's command line): docs/guarantees.md.
@pytest.mark.as_user
@pytest.mark.slow
@pytest.mark.parametrize("tell", ['[ -n "${AUTORESEARCH_ROLE:-}" ]', '[ -n "${AUTORESEARCH_RUN:-}" ]'])
async def test_a_program_cannot_tell_the_bench_from_the_checks(tmp_path: Path, tell: str) -> None:
    repo = hostile_repo(tmp_path)
    # fast and wrong when measured, slow and right when checked
    two_faced = (f"if {tell}; then echo ANSWER=41; awk -v v=$(cat value.txt) -v n=${{1:-1}} "
                 "'BEGIN{printf \"METRIC score=%.5f\\n\", 2*v*n}'; else\n" + PROG + "fi\n")
    async with Client(build_server()) as c:
        await start(c, repo)
        hostile = await measure(c, repo, "two-faced", {"prog.sh": two_faced})
        control = await measure(c, repo, "a real win", BETTER)
    assert not won(hostile)
    assert won(control)


# --- 1. where no confinement can run, nothing is measured unless the user says so -----------------------------


async def test_without_confinement_nothing_is_measured_unless_the_user_turns_it_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = hostile_repo(tmp_path)
    monkeypatch.setattr(sandbox, "BWRAP", "autoresearch-no-such-bwrap")
    monkeypatch.setattr(sandbox, "_probed", {})
    async with Client(build_server()) as c:
        msg = await error(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="t")
        assert "bubblewrap" in msg and "apt-get install bubblewrap" in msg and '"sandbox": "off"' in msg
        (repo / ".autoresearch").mkdir(exist_ok=True)
        (repo / ".autoresearch" / "config.json").write_text(json.dumps({"sandbox": "off"}))
        await start(c, repo)
        result = await measure(c, repo, "unconfined", BETTER, repeats="auto")
        listed = await call(c, "list_experiments")
        report = await call(c, "report", repo=str(repo))
    assert any("sandbox" in w and "off" in w for w in result["warnings"])
    assert any("sandbox" in w and "off" in w for w in listed["warnings"])
    assert "sandbox off" in report["summary"].lower()
    assert "unconfined" in Path(report["html_path"]).read_text()


def test_the_confinement_probe_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "BWRAP", "autoresearch-no-such-bwrap")
    monkeypatch.setattr(sandbox, "_probed", {})
    why = sandbox.unavailable()
    assert why is not None and "bubblewrap" in why
    monkeypatch.undo()
    assert sandbox.unavailable() is None  # this machine has it: the tests above ran confined


def test_no_test_leaves_its_helpers_running() -> None:
    assert all(os.getpid() != p.pid for p in leftovers("exec sleep 300"))
