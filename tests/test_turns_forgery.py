"""Pairs in turns that a candidate cannot forge (issue 40), through the real MCP client on the bundled example
with `"pairing": "turns"`: the CPU time judged against each side's own group (orphans included), a METRIC line
glued to another refused, and a job's scratch bounded (issue 45)."""

from __future__ import annotations

import difflib
import itertools
import json
import re
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from autoresearch_mcp.app import build_server
from autoresearch_mcp.store.config import config_path
from autoresearch_mcp.worker import decide, jobenv, jobfile, procs, sandbox, turns
from conftest import script_repo, slow_clock
from helpers import call, error, wait_final

confined = pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
# a memory cgroup counts a job's scratch (its tmpfs pages); without one, the size of each tmpfs bounds it
needs_memory_group = pytest.mark.skipif(sandbox.unavailable() is not None or "memory" in sandbox.lacking(),
                                        reason="no bubblewrap or no memory cgroup can be made here")
MAIN = "src/main.c"
OPS_CPU = "backend/cpu/ops-cpu.c"
LOOP = "    for (int it = 0; it < iters; it++) ns_cpu_forward(x, w, y, tmp, n);\n"
# The rows are computed in a child the program never waits for (a pipe says when it is done): the program's own
# CPU clock, which its rows_per_s.cpu divides by, then counts none of them.
UNCOUNTED = ("    { int p[2]; char c; if (pipe(p)) return 1;\n"
             "      if (fork() == 0) { for (int it = 0; it < iters; it++) ns_cpu_forward(x, w, y, tmp, n);\n"
             "                         if (write(p[1], \"x\", 1) < 0) _exit(1); _exit(0); }\n"
             "      if (read(p[0], &c, 1) < 0) return 1; }\n")
REAL_CPU_LINE = '    printf("METRIC rows_per_s.cpu=%.4f\\n", iters / dc);\n'
# Its own rows_per_s.cpu first, then a line left open, so the real one is glued to it.
GLUED = '    printf("METRIC rows_per_s.cpu=%.4f\\nnote: ", 1e6);\n' + REAL_CPU_LINE


def edited(repo: Path, rel: str, old: str, new: str, header: str = "") -> str:
    before = (repo / rel).read_text()
    assert old in before
    after = header + before.replace(old, new)
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}", f"b/{rel}"))


def in_turns(repo: Path) -> None:
    config_path(repo).parent.mkdir(exist_ok=True)
    config_path(repo).write_text(json.dumps({"pairing": "turns"}) + "\n")


@pytest.mark.as_user
@pytest.mark.serial
@confined
@pytest.mark.anyio
async def test_work_done_in_a_process_nobody_waits_for_is_counted_and_the_claim_refused(
        example_repo: Path, patches: Path) -> None:
    in_turns(example_repo)
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher", tag="orphan")
        fake = await call(c, "launch_experiment", title="rows in a child", source="patch", repeats=30,
                          patch=edited(example_repo, MAIN, LOOP, UNCOUNTED, "#include <unistd.h>\n"))
        real = await call(c, "launch_experiment", title="fused rms_norm and mul", source="patch", repeats="auto",
                          patch=(patches / "fuse-rms-norm-mul.patch").read_text())
        await wait_final(c, fake["experiment_id"], timeout=900)
        await wait_final(c, real["experiment_id"], timeout=900)
        # everything, the harness's own measures in full among it
        faked = await call(c, "get_experiment", experiment_id=fake["experiment_id"], samples=True)
        fused = await call(c, "get_experiment", experiment_id=real["experiment_id"], samples=True)
        refusal = await error(c, "commit_winner", experiment_id=fake["experiment_id"], title="rows in a child")
    assert faked["status"] == "done" and faked["checks"]["passed"], faked["log_tail"][-800:]
    rows = faked["metrics"]["rows_per_s"]
    assert rows["delta_pct"] > 100  # the claim, as its own CPU clock makes it
    assert faked["verdict"] != "improved" and "timed from outside" in refusal, refusal
    # the side's group counted the child: the same work (and a fork's page copies), no less CPU time
    assert faked["metrics"][decide.HARNESS_CPU]["delta_pct"] > -10
    # the control: a real fusion shows from outside too, and is not refused by it
    assert "timed from outside" not in str(fused["metrics"]["rows_per_s"].get("note") or "")
    assert fused["metrics"][decide.HARNESS_CPU]["delta_pct"] < 0
    assert fused["verdict"] in ("improved", "inconclusive", "noisy"), fused["metrics"]["rows_per_s"]


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_metric_line_glued_to_an_open_line_makes_the_run_invalid_not_a_winner(example_repo: Path) -> None:
    in_turns(example_repo)
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher", tag="glue")
        exp = await call(c, "launch_experiment", title="a glued line", source="patch", repeats=30,
                         patch=edited(example_repo, MAIN, REAL_CPU_LINE, GLUED))
        out = await wait_final(c, exp["experiment_id"], timeout=600)
        await error(c, "commit_winner", experiment_id=exp["experiment_id"], title="a glued line")
    assert out["verdict"] == "invalid", (out["verdict"], out["error"])
    assert "joined to the end of other output" in (out["error"] or ""), out["error"]


@pytest.mark.as_user
@pytest.mark.serial
@needs_memory_group
@pytest.mark.anyio
async def test_a_build_that_fills_its_scratch_space_fails_saying_so(example_repo: Path) -> None:
    makefile = "normsoft: $(OBJS)\n"
    # it writes 1 GB (the write stops at the bound) and goes on building for a while
    fill = "normsoft: $(OBJS)\n\thead -c 1000M /dev/zero > /tmp/fill || true\n\tsleep 1\n"
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher", tag="fill")
        exp = await call(c, "launch_experiment", title="a greedy build", source="patch", repeats=30,
                         patch=edited(example_repo, "Makefile", makefile, fill))
        out = await wait_final(c, exp["experiment_id"], timeout=600)
    assert out["status"] == "failed", (out["status"], out["verdict"])
    assert "filled its scratch space" in (out["error"] or "") + out["log_tail"], (out["error"], out["log_tail"])


@pytest.mark.skipif(sandbox.unavailable() is not None or sandbox.group() is None, reason="no cgroup here")
def test_a_confined_command_sees_no_name_of_its_group(tmp_path: Path) -> None:
    job = jobfile.Experiment(baseline_dir=str(tmp_path), sandbox={"mode": sandbox.CONFINED})
    res = procs.run_command(["cat", "/proc/self/cgroup"], tmp_path, 60, env=jobenv.run_env(job, tmp_path),
                             confine=sandbox.for_job(job, str(tmp_path), "bench"))
    assert res.ok, res.output
    lines = res.output.split()
    assert lines and all(line.endswith(":/") for line in lines), res.output  # its cgroup namespace's root


# --- a bench as people write it: a wall-clock figure only, in turns ------------------------------------------

# Fixed work (the count in cost.txt), timed with the wall clock: the bench prints only that figure.
WALL_BENCH = """import time
n = int(open("cost.txt").read())
t = time.perf_counter()
x = 0
for i in range(n):
    x = (x * 31 + i) % 1000003
print(f"METRIC t_ms={(time.perf_counter() - t) * 1e3:.3f}")
"""


def wall_clock_repo(tmp_path: Path) -> Path:
    repo = script_repo(tmp_path, "python3 work.py")
    (repo / "work.py").write_text(WALL_BENCH)
    (repo / "cost.txt").write_text("1500000\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "the bench"], cwd=repo, check=True)
    in_turns(repo)
    return repo


@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_a_bench_that_prints_only_a_wall_clock_figure_is_judged_in_turns(tmp_path: Path) -> None:
    repo = wall_clock_repo(tmp_path)
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="wall")
        faster = await call(c, "launch_experiment", title="less work", source="patch", repeats="auto",
                            patch=edited(repo, "cost.txt", "1500000\n", "1200000\n"))
        same = await call(c, "launch_experiment", title="a comment", source="patch", repeats="auto",
                          patch=edited(repo, "work.py", "x = 0\n", "x = 0  # the accumulator\n"))
        won = await wait_final(c, faster["experiment_id"], timeout=900)
        flat = await wait_final(c, same["experiment_id"], timeout=900)
    assert started["pairing"] == "turns", started
    assert won["verdict"] == "improved", (won["verdict"], won["metrics"]["t_ms"])
    assert -30 < won["metrics"]["t_ms"]["delta_pct"] < -10  # 20% less work: about -20% over each side's own turns
    # the figure as printed (its clock ran through the other side's turns) is kept, not judged
    assert "t_ms.wall" in won["metrics"] and won["metrics"]["t_ms.wall"].get("verdict") is None
    assert flat["verdict"] != "improved", (flat["verdict"], flat["metrics"]["t_ms"])


# --- nothing tells a bench from a check: a program right only where its checks run is right in its bench too ------

OPS_CPU = "backend/cpu/ops-cpu.c"
FORWARD = "void ns_cpu_forward(const float *x, const float *w, float *y, float *tmp, size_t n) {\n"
# Wrong (and fast) unless the variable only the checks used to get is set.
ONLY_WHERE_CHECKED = ("#include <stdlib.h>\n", FORWARD + "    if (!getenv(\"AUTORESEARCH_BASELINE_TREE\")) return;\n")
# Wrong (and fast) once it has been continued after a stop: what every turn began with when turns used SIGSTOP.
AFTER_A_CONTINUE = ("#include <signal.h>\nstatic volatile sig_atomic_t continued;\n"
                    "static void on_continue(int sig) { (void)sig; continued = 1; }\n"
                    "__attribute__((constructor)) static void watch(void) { signal(SIGCONT, on_continue); }\n",
                    FORWARD + "    if (continued) return;\n")


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.parametrize(("tell", "pairing"), [("only where checked", "sequential"),
                                               ("after a continue", "turns")])
@pytest.mark.serial
@pytest.mark.anyio
async def test_a_program_right_only_in_its_checks_is_no_winner(example_repo: Path, tell: str, pairing: str) -> None:
    header, body = ONLY_WHERE_CHECKED if tell == "only where checked" else AFTER_A_CONTINUE
    config_path(example_repo).parent.mkdir(exist_ok=True)
    config_path(example_repo).write_text(json.dumps({"pairing": pairing}) + "\n")
    before = (example_repo / OPS_CPU).read_text()
    after = header + before.replace(FORWARD, body)
    patch = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{OPS_CPU}",
                                         f"b/{OPS_CPU}"))
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher", tag="tell")
        exp = await call(c, "launch_experiment", title=f"right {tell}", source="patch", repeats="auto", patch=patch)
        out = await wait_final(c, exp["experiment_id"], timeout=900)
        refused = await error(c, "commit_winner", experiment_id=exp["experiment_id"], title="x")
    # its checks pass (they ran where it is right); its bench ran where it is right too: nothing won
    assert out["checks"] is None or out["checks"]["passed"] or out["status"] == "checks_failed", out["checks"]
    assert out["verdict"] != "improved", (out["verdict"], out["metrics"].get("rows_per_s"))
    assert "not 'improved'" in refused or "checks did not pass" in refused, refused


# --- a process that re-forks all the time is stopped with the rest of its side --------------------------------

# Each step forks and the parent exits, so the working process has a new pid at every step (a walk of the tree
# never catches up with it); it notes the clock at each step and says through a file when it is done.
REFORK = """import os, time
end = time.monotonic() + 0.6  # (a forked process's CPU clock starts at 0: the chain keeps to the wall clock)
f = open("stamps-a", "a")
while True:
    if os.fork():
        os._exit(0)
    f.write(f"{time.monotonic():.6f}\\n")
    f.flush()
    if time.monotonic() > end:
        break
open("done", "w").close()
"""
STEADY = """import time
t = time.process_time()
f = open("stamps-b", "w")
while time.process_time() - t < 0.3:
    f.write(f"{time.monotonic():.6f}\\n")
"""


@pytest.mark.serial
@confined
def test_a_side_that_forks_all_the_time_runs_only_in_its_own_turns(tmp_path: Path) -> None:
    job = jobfile.Experiment(baseline_dir=str(tmp_path), sandbox={"mode": sandbox.CONFINED})
    side = jobenv.Prepared.of(job, str(tmp_path), "bench")
    (tmp_path / "refork.py").write_text(REFORK)
    (tmp_path / "steady.py").write_text(STEADY)
    refork = ["sh", "-c", "python3 refork.py; while [ ! -e done ]; do sleep 0.01; done"]
    with (tmp_path / "log").open("w") as log:
        results = turns.run_in_turns([(side, refork), (side, ["python3", "steady.py"])], 60, log)
    assert all(r.ok for r in results), [r.output[-500:] for r in results]
    a = [float(x) for x in (tmp_path / "stamps-a").read_text().split()]
    b = [float(x) for x in (tmp_path / "stamps-b").read_text().split()]
    assert len(a) > 100 and len(b) > 1000
    merged = sorted([(t, 0) for t in a] + [(t, 1) for t in b])
    passes = sum(1 for x, y in itertools.pairwise(merged) if x[1] != y[1])
    # in turns of about 20 ms, about once a turn (0.3 s of CPU each); together they would pass at every step
    assert passes <= 200, passes


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.anyio
async def test_start_session_says_when_runs_are_too_short_to_measure_in_turns(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, "echo METRIC t_ms=1.5")
    in_turns(repo)
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="short")
    assert any("poorly measured in turns" in w for w in started["warnings"]), started["warnings"]


# A third of the rows once a page of the tree is resident (the Makefile's first page, which nothing of the bench
# reads): the page cache as memory of an earlier run (the build's, the checks', a bench's), claiming all the rows.
RESIDENT = ("static int resident(void) {\n"
            "    unsigned char seen = 0; int fd = open(\"Makefile\", O_RDONLY); if (fd < 0) return 0;\n"
            "    void *p = mmap(0, 4096, PROT_READ, MAP_SHARED, fd, 0);\n"
            "    if (p != MAP_FAILED) { if (mincore(p, 4096, &seen)) seen = 0;\n"
            "                           (void)*(volatile char *)p; munmap(p, 4096); }\n"
            "    close(fd); return seen & 1;\n}\n\nint main(")
REMEMBERED = ("    const int todo = resident() ? (iters + 2) / 3 : iters;\n"
              "    if (todo < iters) printf(\"normsoft: an earlier run's page is resident\\n\");\n"
              "    for (int it = 0; it < todo; it++) ns_cpu_forward(x, w, y, tmp, n);\n")


@pytest.mark.as_user
@pytest.mark.serial
@pytest.mark.skipif(sandbox.unavailable() is not None, reason="bubblewrap cannot confine here")
@pytest.mark.parametrize("pairing", ["sequential", "turns"])
@pytest.mark.anyio
async def test_a_page_an_earlier_run_left_resident_tells_a_run_nothing(example_repo: Path, pairing: str) -> None:
    config_path(example_repo).parent.mkdir(exist_ok=True)
    config_path(example_repo).write_text(json.dumps({"pairing": pairing}) + "\n")
    before = (example_repo / MAIN).read_text()
    after = ("#include <fcntl.h>\n#include <sys/mman.h>\n#include <unistd.h>\n"
             + before.replace(LOOP, REMEMBERED).replace("int main(", RESIDENT, 1))
    patch = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{MAIN}", f"b/{MAIN}"))
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher", tag="page")
        exp = await call(c, "launch_experiment", title="rows remembered", source="patch", repeats=30, patch=patch)
        out = await wait_final(c, exp["experiment_id"], timeout=600)
        await error(c, "commit_winner", experiment_id=exp["experiment_id"], title="rows remembered")
    assert out["status"] == "done" and out["checks"]["passed"], out["log_tail"][-800:]
    log = Path(out["log_path"]).read_text()
    assert "normsoft: 6 rows" in log and "an earlier run's page is resident" not in log, log[-2000:]
    assert out["verdict"] != "improved", out["metrics"]["rows_per_s"]


@pytest.mark.as_user
@pytest.mark.serial
@confined
@pytest.mark.anyio
async def test_in_turns_a_candidate_that_slows_the_harness_clock_is_refused(example_repo: Path) -> None:
    """Its own clock_gettime linked into the program, whose timer then runs at a quarter of the real one: the
    rows it claims on its own CPU clock (rows_per_s.cpu, what turns judge) four times faster, the side's group's
    CPU time of the same runs unmoved."""
    in_turns(example_repo)
    before = (example_repo / OPS_CPU).read_text()
    patch = "".join(difflib.unified_diff(before.splitlines(True), (before + slow_clock(0.25)).splitlines(True),
                                         f"a/{OPS_CPU}", f"b/{OPS_CPU}"))
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher", tag="clock")
        fake = await call(c, "launch_experiment", title="a faster clock", source="patch", repeats=30, patch=patch)
        await wait_final(c, fake["experiment_id"], timeout=900)
        faked = await call(c, "get_experiment", experiment_id=fake["experiment_id"], samples=True)
        await error(c, "commit_winner", experiment_id=fake["experiment_id"], title="a faster clock")
    assert faked["status"] == "done" and faked["checks"]["passed"], faked["log_tail"][-800:]
    assert faked["metrics"]["rows_per_s"]["delta_pct"] > 100  # the claim, as its own clock makes it
    assert faked["verdict"] != "improved" and abs(faked["metrics"][decide.HARNESS_CPU]["delta_pct"]) < 40


@pytest.mark.as_user
@pytest.mark.serial
@confined
@pytest.mark.anyio
async def test_what_a_side_can_read_of_its_place_names_neither_its_role_nor_its_commits(tmp_path: Path) -> None:
    """Through the MCP client: each run of a pair prints its /proc/self/cgroup and mount table. A committed winner
    could read the runner's pid from its memory cgroup's name, or the base commit from the protected store's folder
    (issue 40: a no-op then won at -74.6%)."""
    repo = script_repo(tmp_path, "cat /proc/self/cgroup /proc/self/mountinfo; echo METRIC score=$(cat value.txt)")
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="score", direction="higher", tag="place")
        exp = await call(c, "launch_experiment", title="a note", source="patch", repeats=30,
                         patch="--- a/value.txt\n+++ b/value.txt\n@@ -1 +1,2 @@\n 100\n+a note\n")
        out = await wait_final(c, exp["experiment_id"], timeout=600)
    assert out["status"] == "done", out["log_tail"][-800:]
    log = Path(out["log_path"]).read_text()
    groups = [line for line in log.splitlines() if re.fullmatch(r"\d+:[^:]*:\S*", line)]
    assert groups and all(line.endswith(":/") for line in groups), groups[:5]  # its cgroup namespace's root
    for commit in (exp["base_commit"], exp["candidate_commit"]):
        assert commit[:7] not in log.replace(f"experiment {exp['experiment_id']}", ""), commit


WAITS = """import os, time
t = time.process_time()
while time.process_time() - t < 0.3:
    pass
if os.path.exists("wait.txt"):
    time.sleep(0.3)
c = (time.process_time() - t) * 1e3
print(f"METRIC t_ms={c:.3f}\\nMETRIC t_ms.cpu={c:.3f}\\nMETRIC size=100\\nMETRIC size.cpu=100")
"""


@pytest.mark.serial
@confined
@pytest.mark.anyio
async def test_a_refusal_by_the_runs_own_wall_time_names_it(tmp_path: Path) -> None:
    """A fix (issue 42): the refusal read "None harness.wall_s None: +2.83% ..." where a metric's role and verdict
    should be."""
    repo = script_repo(tmp_path, "python3 waits.py")
    (repo / "waits.py").write_text(WAITS)
    subprocess.run(["git", "add", "waits.py"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "the bench"], cwd=repo, check=True)
    config_path(repo).parent.mkdir(exist_ok=True)
    config_path(repo).write_text(json.dumps({"pairing": "turns", "guards": {
        "size": {"direction": "lower", "tolerance_pct": 1}}}) + "\n")
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="t_ms", direction="lower", tag="waits")
        exp = await call(c, "launch_experiment", title="waits", source="patch", repeats=30,
                         patch="--- /dev/null\n+++ b/wait.txt\n@@ -0,0 +1 @@\n+wait\n")
        out = await wait_final(c, exp["experiment_id"], timeout=600)
        refusal = await error(c, "commit_winner", experiment_id=exp["experiment_id"])
    assert out["verdict"] == "regressed" and decide.HARNESS_WALL in out["blocking"], (out["verdict"], out["blocking"],
                                                                                      out["metrics"], out["harness"])
    assert "the runs' own wall time (harness.wall_s, taken by the harness) regressed" in refusal, refusal
    assert "None" not in refusal, refusal
