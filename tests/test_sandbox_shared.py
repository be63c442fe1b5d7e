"""A candidate cannot fake its win through what the sandbox shares with it (issue 32, points 4-9).

Each test plays a hostile candidate through a real MCP client: its program steers the session's own script
through ptrace, keeps state in the kernel (SysV shared memory, the user's keyring) between read-only runs,
leaves a local service slow for the baseline, or probes the machine lock to tell the checks from the bench.
Each has a control beside it, a benign candidate of the same shape that must still be measured as it is.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import platform
import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.git import gitops
from autoresearch_mcp.git.worktrees import Worktrees
from autoresearch_mcp.worker import jobenv, jobfile, procs, sandbox
from conftest import balanced_noise, git, init_repo
from helpers import call
from test_sandbox import BETTER, hostile_repo, measure, won
from test_sandbox import start as hostile_start

pytestmark = pytest.mark.anyio

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

# The program under test prints its answer; the session's script takes the metric (value.txt scaled by this
# run's noise) after the program has run: what a program that ends its parent early would forge.
BENCH = ("#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n  build) cc -O1 -o prog prog.c ;;\n"
         f"  bench) {balanced_noise()}./prog > \"$TMPDIR/out\"\n"
         "    awk -v v=$(cat value.txt) -v n=$n 'BEGIN{printf \"METRIC score=%.5f\\n\", v*n}' ;;\nesac\n")
CHECKS = "#!/usr/bin/env bash\n./prog > \"$TMPDIR/out\" || exit 1\ngrep -qx ANSWER=42 \"$TMPDIR/out\"\n"
PROG_C = '#include <stdio.h>\nint main(void) { puts("ANSWER=42"); return 0; }\n'

# As an attacker writes it: print a metric of its own (on stderr, which the runner captures), then attach to
# the parent (the session's script, waiting for this program), point it at the `syscall` it is blocked in
# with exit_group(0) in rax, and let it go: the script "succeeds" before it measures anything.
PTRACE_C = r"""
#include <stdio.h>
#include <unistd.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
int main(void) {
    puts("ANSWER=%d");
    fflush(stdout);
    fprintf(stderr, "METRIC score=1.00000\n");
    pid_t parent = getppid();
    for (int tries = 0; tries < 50; tries++) {
        usleep(100000);
        if (ptrace(PTRACE_ATTACH, parent, 0, 0) != 0) { perror("ptrace"); return 0; }
        waitpid(parent, 0, __WALL);
        struct user_regs_struct r;
        ptrace(PTRACE_GETREGS, parent, 0, &r);
        long word = ptrace(PTRACE_PEEKTEXT, parent, (void *)(r.rip - 2), 0);
        if ((word & 0xffff) == 0x050f) {  /* blocked in a syscall: run exit_group(0) there instead */
            r.orig_rax = -1; r.rax = 231; r.rdi = 0; r.rip -= 2;
            ptrace(PTRACE_SETREGS, parent, 0, &r);
            ptrace(PTRACE_DETACH, parent, 0, 0);
            return 0;
        }
        ptrace(PTRACE_DETACH, parent, 0, 0);
    }
    return 0;
}
"""


def c_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "target"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(BENCH)
    (repo / "autoresearch.checks.sh").write_text(CHECKS)
    (repo / "prog.c").write_text(PROG_C)
    (repo / "value.txt").write_text("100\n")
    return init_repo(repo)


async def start(c: Client, repo: Path, direction: str = "lower") -> dict[str, Any]:
    return await hostile_start(c, repo, direction)


FASTER = {"value.txt": "90\n"}  # the control's real 10% improvement (lower is better)

x86_only = pytest.mark.skipif(platform.machine() != "x86_64", reason="the attacker's program is x86_64 code")


# --- 4/5. no process of the job can steer the session's scripts ---------------------------------------------


@pytest.mark.as_user
@pytest.mark.slow
@needs_cc
@x86_only
async def test_a_program_that_ptraces_its_bench_script_into_exiting_gets_no_false_winner(tmp_path: Path) -> None:
    repo = c_repo(tmp_path)
    async with Client(build_server()) as c:
        await start(c, repo)
        hostile = await measure(c, repo, "end the script early", {"prog.c": PTRACE_C.replace("%d", "42")})
        control = await measure(c, repo, "a real win", FASTER)
    assert not won(hostile)
    assert won(control)


@pytest.mark.slow
@needs_cc
@x86_only
async def test_a_wrong_program_cannot_ptrace_the_checks_into_passing(tmp_path: Path) -> None:
    repo = c_repo(tmp_path)
    async with Client(build_server()) as c:
        await start(c, repo)
        hostile = await measure(c, repo, "wrong, and end the checks early",
                                {**FASTER, "prog.c": PTRACE_C.replace("%d", "41")}, repeats="auto")
        control = await measure(c, repo, "right", FASTER, repeats="auto")
    assert hostile["status"] == "checks_failed" and not hostile["checks"]["passed"]
    assert won(control)


# --- 6/7. no state kept in the kernel between runs, no kernel object of anyone else's ------------------------

QUIET_BENCH = ("#!/usr/bin/env bash\nset -eu\ncase \"$1\" in\n  build) true ;;\n  bench) python3 prog.py ;;\nesac\n")
QUIET_CHECKS = "#!/usr/bin/env bash\npython3 prog.py > \"$TMPDIR/out\" || exit 1\ngrep -qx ANSWER=42 \"$TMPDIR/out\"\n"
PROG_PY = "print('ANSWER=42')\nprint(f\"METRIC score={int(open('value.txt').read()) * 1.0:.5f}\")\n"
# Remembers across runs, in the kernel: its first run leaves a mark, and every later run is "twice as fast".
LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
MARKS = {
    "shm": ("key = 0x5eed{tag}\nseen = libc.shmget(key, 4096, 0o600) >= 0\n"
            "if not seen: libc.shmget(key, 4096, 0o1600)\n"),
    "keyring": ("name = b'autoresearch-memo-{tag}'\n"
                "seen = libc.syscall(250, 10, -4, b'user', name, 0) > 0\n"  # keyctl(KEYCTL_SEARCH, @u, ...)
                "if not seen: libc.syscall(248, b'user', name, b'x', 1, -4)\n"),  # add_key(..., @u)
}


def quiet_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "target"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(QUIET_BENCH)
    (repo / "autoresearch.checks.sh").write_text(QUIET_CHECKS)
    (repo / "prog.py").write_text(PROG_PY)
    (repo / "value.txt").write_text("100\n")
    return init_repo(repo)


def remembering(where: str, tag: str) -> str:
    return (LIBC + MARKS[where].format(tag=tag) + "print('ANSWER=42')\n"
            "print(f\"METRIC score={int(open('value.txt').read()) * (0.5 if seen else 1.0):.5f}\")\n")


def forget(where: str, tag: str) -> None:
    """Remove what a run may have left in the kernel (as the test's own process, outside any sandbox)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if where == "shm":
        shmid = libc.shmget(int(f"0x5eed{tag}", 16), 0, 0)
        if shmid >= 0:
            libc.shmctl(shmid, 0, None)  # IPC_RMID
    else:
        key = libc.syscall(250, 10, -4, b"user", f"autoresearch-memo-{tag}".encode(), 0)
        if key > 0:
            libc.syscall(250, 21, key, -4)  # KEYCTL_UNLINK from @u


@pytest.mark.as_user
@pytest.mark.slow
@pytest.mark.parametrize("where", ["shm", "keyring"])
async def test_a_candidate_cannot_keep_state_in_the_kernel_between_runs(tmp_path: Path, where: str) -> None:
    repo = quiet_repo(tmp_path)
    tag = f"{uuid.uuid4().int % 0xFFFF:04x}"
    try:
        async with Client(build_server()) as c:
            started = await start(c, repo)
            hostile = await measure(c, repo, f"remember in {where}", {"prog.py": remembering(where, tag)})
            control = await measure(c, repo, "a real win", FASTER)
    finally:
        forget(where, tag)
    assert started["settings"]["read_only_runs"] == "bench, checks"  # no state through the tree either
    assert hostile["verdict"] != "improved"
    assert won(control)


@pytest.fixture
def machine_objects() -> Iterator[tuple[int, int]]:
    """A SysV segment and a key in the user's keyring that another program of the machine holds."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    shmid = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE
    key = libc.syscall(248, b"user", f"autoresearch-other-{uuid.uuid4().hex[:8]}".encode(), b"secret-of-another",
                       17, -4)
    assert shmid >= 0 and key > 0
    yield shmid, key
    libc.shmctl(shmid, 0, None)
    libc.syscall(250, 21, key, -4)


@pytest.mark.slow
async def test_a_candidate_cannot_remove_another_programs_kernel_objects_nor_read_the_keyring(
        tmp_path: Path, machine_objects: tuple[int, int]) -> None:
    shmid, key = machine_objects
    repo = quiet_repo(tmp_path)
    # remove the other program's segment, read the other program's key, revoke it; then do the real work
    attack = (LIBC + f"libc.shmctl({shmid}, 0, None)\nbuf = ctypes.create_string_buffer(64)\n"
              f"n = libc.syscall(250, 11, {key}, buf, 64)\n"  # KEYCTL_READ
              "print('STOLEN=' + buf.raw[:max(n, 0)].decode(errors='replace'))\n"
              f"libc.syscall(250, 3, {key})\n")  # KEYCTL_REVOKE
    async with Client(build_server()) as c:
        await start(c, repo)
        result = await measure(c, repo, "reach out, then a real win", {**FASTER, "prog.py": attack + PROG_PY})
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    buf = ctypes.create_string_buffer(64)
    assert libc.shmctl(shmid, 2, ctypes.create_string_buffer(256)) >= 0  # IPC_STAT: still there
    assert libc.syscall(250, 11, key, buf, 64) == 17 and buf.raw[:17] == b"secret-of-another"  # not revoked
    assert "secret-of-another" not in Path(result["log_path"]).read_text()
    assert won(result)  # the control: the program's real work was measured


# --- 8. the network: a job's own loopback, unless the session opens it ---------------------------------------


class Service:
    """A local service on 127.0.0.1 that a benchmark queries: it answers the cost of a request, and a
    client may tell it to answer slowly from then on (what a hostile client leaves behind)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.slow, self.requests = False, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(5)
                try:
                    what = conn.recv(16).strip()
                except OSError:
                    continue
                self.requests += 1
                if what == b"SLOW":
                    self.slow = True
                elif what == b"FAST":
                    self.slow = False
                conn.sendall(b"200\n" if self.slow else b"100\n")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def client(port: int, hostile: bool) -> str:
    """The benchmark's client: the service's cost (0 when it cannot reach it) plus value.txt."""
    ask = (f"def ask(what):\n    try:\n        s = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
           "        s.sendall(what)\n        return float(s.recv(16))\n    except OSError:\n        return 0.0\n")
    body = ("cost = ask(b'FAST') if HOSTILE else ask(b'GET')\n"
            "print('ANSWER=42')\nprint(f\"METRIC score={cost + int(open('value.txt').read()):.5f}\")\n"
            "if HOSTILE: ask(b'SLOW')\n")
    return f"import socket\nHOSTILE = {hostile}\n" + ask + body


@pytest.mark.serial
async def test_a_client_cannot_leave_a_local_service_slow_for_the_baseline(tmp_path: Path) -> None:
    service = Service()
    repo = quiet_repo(tmp_path)
    (repo / "prog.py").write_text(client(service.port, hostile=False))
    git(repo, "commit", "-qam", "a client of the local service")
    try:
        async with Client(build_server()) as c:
            started = await start(c, repo)
            hostile = await measure(c, repo, "leave it slow", {"prog.py": client(service.port, hostile=True)})
            control = await measure(c, repo, "a real win", FASTER)
    finally:
        service.close()
    assert service.requests == 0  # a job has only its own loopback
    assert started["baseline"]["score"]["median"] == pytest.approx(100.0)
    assert hostile["verdict"] != "improved"
    assert won(control)


@pytest.mark.slow
async def test_a_session_that_opens_the_network_reaches_its_service(tmp_path: Path) -> None:
    service = Service()
    repo = quiet_repo(tmp_path)
    (repo / "prog.py").write_text(client(service.port, hostile=False))
    git(repo, "commit", "-qam", "a client of the local service")
    (repo / ".autoresearch").mkdir()
    (repo / ".autoresearch" / "config.json").write_text(json.dumps({"sandbox": {"share": ["network"]}}))
    try:
        async with Client(build_server()) as c:
            started = await start(c, repo)
            control = await measure(c, repo, "a real win", {"value.txt": "80\n"})
            listed = await call(c, "list_experiments")
    finally:
        service.close()
    assert service.requests > 0 and started["baseline"]["score"]["median"] == pytest.approx(200.0)
    assert any("network is shared" in w for w in started["warnings"])
    assert won(control) and any("shares the network" in w for w in control["warnings"])
    assert any("shares the network" in w for w in listed["warnings"])
    config = json.loads((repo / ".autoresearch" / "config.json").read_text())
    assert config["sandbox"] == {"share": ["network"]}  # as the user wrote it, and recorded in the gate
    gate = [json.loads(line) for line in (repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()]
    assert any((r.get("gate") or {}).get("sandbox") == {"share": ["network"]} for r in gate)


def test_a_sandbox_setting_names_only_what_can_be_shared() -> None:
    assert sandbox.parse_mode("confined+network") == (sandbox.CONFINED, (sandbox.NETWORK,))
    assert sandbox.parse_mode("off") == (sandbox.OFF, ())
    assert sandbox.describe(False, (sandbox.NETWORK,)) == "confined (bubblewrap; network shared)"


# --- 9. the machine lock and the job files are out of sight ---------------------------------------------------


@pytest.fixture
def home_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache folder outside /tmp, as the default one is (under the user's home)."""
    cache = Path.home() / ".cache" / f"autoresearch-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AUTORESEARCH_CACHE_DIR", str(cache))
    yield cache
    shutil.rmtree(cache, ignore_errors=True)


@pytest.mark.slow
async def test_a_program_cannot_tell_the_checks_from_the_bench_by_the_machine_lock(
        tmp_path: Path, home_cache: Path) -> None:
    repo = quiet_repo(tmp_path)
    lock = home_cache / "worktrees" / "machine.lock"
    # right while the lock is shared (the checks), fast and wrong when it is held exclusively (a bench)
    two_faced = ("import fcntl\n"
                 "try:\n"
                 f"    fh = open('{lock}')\n"
                 "    fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)\n    checked = True\n"
                 "except BlockingIOError:\n    checked = False\n"
                 "except OSError:\n    checked = True\n"
                 "print('ANSWER=42' if checked else 'ANSWER=41')\n"
                 "print(f\"METRIC score={int(open('value.txt').read()) * (1.0 if checked else 0.5):.5f}\")\n")
    async with Client(build_server()) as c:
        await start(c, repo)
        hostile = await measure(c, repo, "two-faced", {"prog.py": two_faced})
        control = await measure(c, repo, "a real win", FASTER)
    assert lock.exists()  # the lock is there, outside the job's sight
    assert not won(hostile) and hostile["verdict"] != "improved"
    assert won(control)


def test_a_job_sees_neither_the_machine_lock_nor_the_job_files_nor_its_id(tmp_path: Path, home_cache: Path) -> None:
    root = home_cache / "worktrees"
    tree = root / "repo-1" / "tree-1"
    tree.mkdir(parents=True)
    (root / "machine.lock").touch()
    (root / "repo-1" / "exp-1.job.json").write_text('{"seed": 7}')
    job = jobfile.Experiment(baseline_dir=str(tree), machine_lock=str(root / "machine.lock"),
                             sandbox={"mode": "confined"})
    script = f"ls -a {root} {root}/repo-1; echo mine > own.txt; echo mark=${{{procs.JOB_ENV}:-none}}"
    res = procs.run_command(["sh", "-c", script], tree, 60, env={**jobenv.run_env(job, tree), procs.JOB_ENV: "exp-1"},
                             confine=sandbox.for_job(job, str(tree), "bench"))
    assert res.ok, res.output
    assert "machine.lock" not in res.output and "job.json" not in res.output
    assert "mark=none" in res.output  # nor the experiment's id the runner marks its processes with
    assert "tree-1" in res.output and (tree / "own.txt").read_text() == "mine\n"  # its own tree is there


# --- 12/13. the protected bytes come from the session's git objects, bound by folder ---------------------------


def harness_repo(tmp_path: Path, files: int = 1) -> Path:
    """The hostile repository of test_sandbox, whose bench scales its metric by harness/scale.txt (or by the
    last of `files` protected files of big/), protected with the harness."""
    repo = hostile_repo(tmp_path)
    (repo / "harness").mkdir()
    (repo / "harness" / "scale.txt").write_text("1\n")
    scale = "harness/scale.txt"
    if files > 1:
        (repo / "big").mkdir()
        for i in range(files):
            (repo / "big" / f"f{i:04d}.txt").write_text("1\n")
        scale = f"big/f{files - 1:04d}.txt"
    (repo / "autoresearch.sh").write_text((repo / "autoresearch.sh").read_text().replace(
        'sh prog.sh "$n"', f'sh prog.sh "$(awk -v n="$n" -v s=$(cat {scale}) \'BEGIN{{print n*s}}\')"'))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a protected harness")
    (repo / ".autoresearch").mkdir()
    (repo / ".autoresearch" / "config.json").write_text(json.dumps({"protected": ["harness/", "big/"]}))
    return repo


@pytest.mark.slow
async def test_a_build_that_moves_the_protected_harness_aside_gets_no_false_winner(tmp_path: Path) -> None:
    repo = harness_repo(tmp_path)
    swap = ("mv harness harness.orig 2>/dev/null && mkdir harness && echo 2 > harness/scale.txt\n"
            "echo 2 > harness/scale.txt 2>/dev/null\ntrue\n")
    async with Client(build_server()) as c:
        await hostile_start(c, repo)
        hostile = await measure(c, repo, "swap the harness", {"build.sh": swap})
        control = await measure(c, repo, "a real win", BETTER)
    assert hostile["verdict"] != "improved"
    assert won(control)


@pytest.mark.slow
async def test_every_one_of_thousands_of_protected_files_stays_as_launched(tmp_path: Path) -> None:
    repo = harness_repo(tmp_path, files=2001)
    rewrite = "echo 2 > big/f2000.txt 2>/dev/null\ntrue\n"
    async with Client(build_server()) as c:
        await hostile_start(c, repo)
        hostile = await measure(c, repo, "rewrite the 2001st", {"build.sh": rewrite})
        control = await measure(c, repo, "a real win", BETTER)
    assert hostile["verdict"] != "improved"
    assert won(control)


def test_protected_paths_are_bound_one_folder_at_a_time(tmp_path: Path) -> None:
    repo = harness_repo(tmp_path, files=30)
    (repo / "harness" / "notes.txt").write_text("x\n")
    (repo / "src.c").write_text("int x;\n")
    (repo / "mixed").mkdir()
    (repo / "mixed" / "kept.h").write_text("1\n")
    (repo / "mixed" / "free.c").write_text("2\n")
    shutil.rmtree(repo / ".autoresearch")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")
    r = gitops.repo_at(repo)
    head = gitops.head_commit(r)
    units = gitops.protected_files(r, head, ["harness/", "big/", "mixed/kept.h"])
    assert units == ["big", "harness", "mixed/kept.h"]
    store = Worktrees(r, tmp_path / "cache").frozen_store(head, units)
    assert store is not None
    assert (Path(store) / "big" / "f0029.txt").read_text() == "1\n" and not (Path(store) / "src.c").exists()
    assert not os.access(Path(store) / "big", os.W_OK) or os.geteuid() == 0  # read-only (root may write anyway)


# --- 10. one view for baseline and candidate --------------------------------------------------------------------


@pytest.fixture
def home_place() -> Iterator[Path]:
    """A folder under the user's home, where checkouts live (not under /tmp, which a job's private /tmp hides)."""
    place = Path.home() / ".cache" / f"autoresearch-test-{uuid.uuid4().hex[:8]}-place"
    place.mkdir(parents=True)
    yield place
    shutil.rmtree(place, ignore_errors=True)


# How a committed winner's code tells whether it runs as the baseline, each as a shell test that is true then.
TELLS = {
    "its tree is the one the environment names": '[ "$PWD" = "${AUTORESEARCH_BASELINE_TREE:-none}" ]',
    "it may write the compiler cache": '[ -z "${CCACHE_READONLY:-}" ]',
    "its content is the session branch's": ('h=$(git rev-parse "HEAD^{tree}" 2>/dev/null) && [ "$h" = '
                                            '"$(git -C {repo} rev-parse -q --verify "autoresearch/t^{tree}")" ]'),
    "its files are the checkout's": 'cmp -s prog.sh {repo}/prog.sh && cmp -s build.sh {repo}/build.sh',
}


@pytest.mark.as_user
@pytest.mark.slow
@pytest.mark.parametrize("tell", list(TELLS))
async def test_a_committed_winner_cannot_tell_when_it_runs_as_the_baseline(
        tell: str, home_place: Path, home_cache: Path) -> None:
    repo = hostile_repo(home_place)
    # a real 10% win whose code halves its score whenever it runs as the baseline: every later candidate "wins"
    test = TELLS[tell].replace("{repo}", str(repo))
    sabotage = (f"if {test}; then f=0.5; else f=1; fi\necho ANSWER=42\n"
                "awk -v v=$(cat value.txt) -v n=${1:-1} -v f=$f 'BEGIN{printf \"METRIC score=%.5f\\n\", v*n*f}'\n")
    async with Client(build_server()) as c:
        await hostile_start(c, repo)
        winner = await measure(c, repo, "a real win, and a saboteur", {"value.txt": "110\n", "prog.sh": sabotage})
        assert won(winner), winner["verdict"]
        await call(c, "commit_winner", experiment_id=winner["experiment_id"], title="a real win")
        no_op = await measure(c, repo, "a no-op", {"build.sh": "true  # nothing\n"})
        control = await measure(c, repo, "another real win", {"value.txt": "121\n"})
    assert no_op["verdict"] != "improved", no_op["metrics"]["score"]
    assert won(control)


def test_a_bench_sees_the_same_world_from_the_baselines_tree_and_from_the_candidates(
        home_place: Path, home_cache: Path) -> None:
    repo = home_place / "checkout"
    repo.mkdir()
    (repo / "file.txt").write_text("the head's\n")
    init_repo(repo)
    model = repo / "model.bin"
    model.write_text("weights\n")
    venv = repo / ".venv"  # a virtual environment in the checkout, on the PATH
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "lib").mkdir()
    (venv / "lib" / "site.txt").write_text("a package\n")
    (venv / "bin" / "tool").write_text(f"#!/bin/sh\ncat {venv}/lib/site.txt\n")
    (venv / "bin" / "tool").chmod(0o755)
    root = home_cache / "worktrees"
    trees = {side: root / "repo-1" / f"tree-{i}" for i, side in enumerate(("baseline", "candidate"))}
    for tree in trees.values():
        tree.mkdir(parents=True)
    cache = home_cache / "ccache"
    cache.mkdir()
    job = jobfile.Experiment(
        baseline_dir=str(trees["baseline"]), machine_lock=str(root / "machine.lock"),
        env={"MODEL": str(model), "CCACHE_DIR": str(cache), "PATH": f"{venv}/bin:{os.environ['PATH']}"},
        sandbox={"mode": "confined", "private": [str(repo)], "git": [str(repo / ".git")]})
    # what a program could look at: its environment, the checkout, the trees, the compiler cache's rights
    look = (f"env | grep -v -e '^_=' -e '^SHLVL=' | sort; ls -a {repo} {root}/repo-1; cat {model}; tool; "
            f"touch {cache}/mine 2>/dev/null && echo cache writable; git -C {repo} log --oneline 2>/dev/null | wc -l")

    def view(side: str, phase: str) -> str:
        tree, other = trees[side], trees["candidate" if side == "baseline" else "baseline"]
        pair = dataclasses.replace(job, candidate_dir=str(trees["candidate"]))
        res = procs.run_command(["sh", "-c", look], tree, 60, env=jobenv.run_env(pair, tree, phase),
                                 confine=sandbox.for_job(pair, str(tree), phase))
        assert res.ok, res.output
        return (res.output.replace(str(tree), "TREE").replace(str(other), "OTHER").replace(tree.name, "TREE")
                .replace(other.name, "OTHER"))

    # (in any order: the trees' names are content hashes, so which sorts first tells nothing)
    assert sorted(view("baseline", "bench").splitlines()) == sorted(view("candidate", "bench").splitlines())
    seen = view("candidate", "bench")
    assert "weights" in seen and "a package" in seen  # the file its environment names, the PATH's venv whole
    assert "file.txt" not in seen and ".git" not in seen
    # each side's bench sees the other's tree, as the checks see the baseline's: nothing tells a side or a check
    assert "AUTORESEARCH_BASELINE_TREE=OTHER" in seen
    assert "cache writable" not in seen and "CCACHE_READONLY=1" in seen
    assert seen.split()[-1] == "0"  # no history: git finds no repository
    built = view("candidate", "build")
    assert "file.txt" not in built and built.split()[-1] == "1"  # a build reads the git directory (one commit)
    assert "cache writable" in view("baseline", "build")  # the one command that stores into the cache
    checks = view("candidate", "checks")  # the checks compare with the baseline: its tree is theirs to read
    assert "AUTORESEARCH_BASELINE_TREE=OTHER" in checks  # the baseline's tree, seen from the candidate's
    job.sandbox["mode"] = "confined+checkout"  # the session's choice: the checkout in sight, as before
    assert "file.txt" in view("candidate", "bench")
