"""profile_hotspots: the benchmark under perf record, read back as hot functions and source lines;
then find_passes ranked by that profile. Real perf, real builds of the bundled example."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import git
import pytest
from mcp import Client

from autoresearch_mcp.analysis import hotspots
from autoresearch_mcp.app import build_server
from autoresearch_mcp.errors import StateError
from autoresearch_mcp.executors import skypilot
from autoresearch_mcp.executors.sky_pool import SkyPool
from autoresearch_mcp.store.config import SessionConfig
from autoresearch_mcp.worker import outcomes, profiler
from autoresearch_mcp.worker.profiler import parse_report
from conftest import script_repo
from helpers import call, error, wait_final
from sky_fake import FakeSky

needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")

# `perf report --stdio --no-children -t $'\x1f' -F overhead,sample,dso,sym,srcline` of a small C program
# built with -O2 -g, recorded on this kind of machine (no PMU: cpu-clock).
RECORDED = """\
# Samples: 237  of event 'cpu-clock:ppp'
# Event count (approx.): 237237237
#
 59.49% \x1f 141        \x1ft                \x1f[.] main                            \x1f/tmp/p/t.c:6
 13.08% \x1f 31         \x1ft                \x1f[.] main                            \x1f/tmp/p/t.c:9
 8.02%  \x1f 19         \x1flibc.so.6        \x1f[.] __memmove_avx512_unaligned_erms \x1f./string/memmove.S:544
 2.95%  \x1f 7          \x1flibc.so.6        \x1f[.] __memmove_avx512_unaligned_erms \x1f./string/memmove.S:546
 1.69%  \x1f 4          \x1f[kernel.kallsyms]\x1f[k] clear_page_erms                 \x1fclear_page_erms+7
 0.42%  \x1f 1          \x1ft                \x1f[.] helper                          \x1ft+0x1175
"""


def test_report_rows_add_up_to_functions_with_their_lines() -> None:
    event, functions = parse_report(RECORDED)
    assert event == "cpu-clock:ppp"
    main = functions[("t", "main")]
    assert main["samples"] == 172 and main["lines"] == {("/tmp/p/t.c", 6): 141, ("/tmp/p/t.c", 9): 31}
    assert functions[("libc.so.6", "__memmove_avx512_unaligned_erms")]["samples"] == 26
    kernel = functions[("[kernel.kallsyms]", "clear_page_erms")]
    assert kernel["samples"] == 4 and not kernel["lines"]  # sym+offset: no source line
    assert not functions[("t", "helper")]["lines"]  # no debug info


def test_a_worker_sends_back_the_hottest_rows_of_the_report_only() -> None:
    rows = "".join(f" 1.00% \x1f {100 - i} \x1ft \x1f[.] f{i} \x1f/p/t.c:{i + 1}\n" for i in range(50))
    sent = profiler.bounded({"report": "# Samples: 5050 of event 'cpu-clock'\n" + rows}, rows=10)
    assert sent["report_rows_dropped"] == 40 and sent["report"].startswith("# Samples")
    assert "[.] f9 " in sent["report"] and "[.] f10 " not in sent["report"]
    small = profiler.bounded({"report": rows}, chars=len(rows) // 10)
    assert 0 < len(small["report"]) <= len(rows) // 10
    assert small["report_rows_dropped"] == 50 - small["report"].count("\n")


@pytest.fixture
def debug_example(example_repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example built with line tables (its Makefile takes CFLAGS from the environment)."""
    monkeypatch.setenv("CFLAGS", "-O2 -g")
    monkeypatch.setenv("NORMSOFT_ITERS", "12")
    return example_repo


@pytest.mark.slow
@needs_perf
@pytest.mark.anyio
async def test_profile_names_the_hot_functions_and_lines_then_ranks_the_passes(debug_example: Path) -> None:
    async with Client(build_server()) as client:
        await call(client, "start_session", repo=str(debug_example), metric="rows_per_s", direction="higher",
                   tag="prof")
        prof = await call(client, "profile_hotspots", top=3, lines=2)
        assert prof["build"] == "baseline" and prof["total_samples"] > 50
        top = prof["functions"][0]
        assert top["dso"] == "normsoft" and top["share_pct"] > 20 and len(prof["functions"]) <= 3
        assert 1 <= len(top["lines"]) <= 2
        hottest = top["lines"][0]
        # the static cpu_* helpers are inlined into their caller, but the lines are theirs
        assert hottest["file"] == "backend/cpu/ops-cpu.c" and hottest["code"] and hottest["share_pct"] > 1
        assert Path(prof["report_path"]).read_text().count("\x1f") > 10
        assert "find_passes" in prof["notes"][-1]
        few = [n for n in prof["notes"] if n.startswith(f"only {prof['total_samples']} samples")]
        assert bool(few) == (prof["total_samples"] < hotspots.FEW_SAMPLES)

        found = await call(client, "find_passes", profile_id=prof["profile_id"])
        hot = {f["function"] for f in found["findings"]}
        assert {"cpu_soft_max", "cpu_rms_norm"} <= hot
        assert all(f["hot_share_pct"] for f in found["findings"])
        assert found["findings"][0]["file"] == "backend/cpu/ops-cpu.c"  # main.c's setup code is cold
        shares = [f["hot_share_pct"] for f in found["findings"]]
        assert shares == sorted(shares, reverse=True)
        soft = [f for f in found["findings"] if f["function"] == "cpu_soft_max" and f["buffer"] == "x"]
        assert soft and soft[0]["depends_on"] == ["max"]  # max, then exp(x - max): online softmax
        # the op-level fusion: RMS_NORM writes tmp, MUL reads it back (the helpers are inlined here)
        assert any(f["function"] == "ns_cpu_forward" and f["buffer"] == "tmp" and f["fusable"]
                   for f in found["findings"])


@pytest.mark.slow
@needs_perf
@pytest.mark.anyio
async def test_a_candidate_build_is_profiled_and_bad_ids_are_explained(debug_example: Path, patches: Path) -> None:
    async with Client(build_server()) as client:
        await call(client, "start_session", repo=str(debug_example), metric="rows_per_s", direction="higher",
                   tag="cand")
        launched = await call(client, "launch_experiment", title="fuse", source="patch", repeats="auto",
                              patch=(patches / "fuse-rms-norm-mul.patch").read_text())
        await wait_final(client, launched["experiment_id"], timeout=240)
        prof = await call(client, "profile_hotspots", experiment_id=launched["experiment_id"], top=5)
        assert prof["build"] == launched["experiment_id"] and prof["commit"] == launched["candidate_commit"]
        assert prof["functions"] and prof["bench_exit_code"] == 0
        # the candidate's own sources are scanned: its lines, its functions (the work tree has neither)
        found = await call(client, "find_passes", profile_id=prof["profile_id"])
        functions = {f["function"] for f in found["findings"]}
        assert "cpu_soft_max_from" in functions
        assert not [f for f in found["findings"] if f["function"] == "ns_cpu_forward" and f["buffer"] == "tmp"]
        kept = debug_example / ".autoresearch" / "profiles" / f"{prof['profile_id']}.src" / "backend/cpu/ops-cpu.c"
        assert "cpu_rms_norm_mul" in kept.read_text()
        assert "no experiment 'nope'" in await error(client, "profile_hotspots", experiment_id="nope")
        assert "no profile" in await error(client, "find_passes", profile_id="0000000000")
        assert await error(client, "profile_hotspots", top=0)


@pytest.mark.slow
@pytest.mark.anyio
async def test_without_perf_the_error_says_how_to_install_it(
        debug_example: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    async with Client(build_server()) as client:
        assert "start_session" in await error(client, "profile_hotspots")
        await call(client, "start_session", repo=str(debug_example), metric="rows_per_s", direction="higher",
                   tag="noperf")
        # the profile job runs in a process of its own: its PATH holds every program but perf
        no_perf = tmp_path / "bin"
        no_perf.mkdir()
        for folder in os.environ["PATH"].split(os.pathsep):
            for program in Path(folder).glob("*") if Path(folder).is_dir() else []:
                if program.name != "perf" and not (no_perf / program.name).exists():
                    (no_perf / program.name).symlink_to(program)
        monkeypatch.setenv("PATH", str(no_perf))
        assert "apt-get install linux-perf" in await error(client, "profile_hotspots")


def test_a_line_compiled_in_another_worktree_is_shown_relative_to_this_one(tmp_path: Path) -> None:
    tree = tmp_path / "tree-b"
    (tree / "backend").mkdir(parents=True)
    (tree / "backend" / "ops.c").write_text("int x;\n")
    # ccache hands out objects compiled in another worktree: their debug info names that worktree
    assert profiler.in_tree(tmp_path / "tree-a" / "backend" / "ops.c", tree) == Path("backend/ops.c")
    assert profiler.in_tree(tree / "backend" / "ops.c", tree) == Path("backend/ops.c")
    assert profiler.in_tree(Path("/usr/include/stdio.h"), tree) is None


@needs_perf
@pytest.mark.anyio
async def test_without_debug_info_functions_are_named_and_found_by_name(example_repo: Path) -> None:
    async with Client(build_server(), mode="legacy") as client:  # the example's own flags: no -g
        await call(client, "start_session", repo=str(example_repo), metric="rows_per_s", direction="higher",
                   tag="nog")
        prof = await call(client, "profile_hotspots", top=3)
        assert prof["functions"][0]["dso"] == "normsoft" and not prof["functions"][0]["lines"]
        debug = next(note for note in prof["notes"] if "-g" in note and "RelWithDebInfo" in note)
        assert "ask them" in debug  # the guard refuses the agent's own commit on the session branch
        found = await call(client, "find_passes", profile_id=prof["profile_id"])
        # the hot symbols are looked up by name in the repository (git grep), then scanned
        assert {f["function"] for f in found["findings"]} & {"ns_cpu_forward", "cpu_soft_max"}


REFUSED = ("Error:\nAccess to performance monitoring and observability operations is limited.\nConsider adjusting "
           "/proc/sys/kernel/perf_event_paranoid setting to open\naccess to performance monitoring and observability "
           "operations for processes\nwithout CAP_PERFMON, CAP_SYS_PTRACE or CAP_SYS_ADMIN Linux capability.\n")


def test_a_refused_perf_record_here_or_in_a_pod_says_how_to_allow_it() -> None:
    raw = outcomes.Profile(status="failed", problem="record", refused=True, paranoid="4", detail=REFUSED)
    with pytest.raises(StateError) as refused:
        hotspots._check(hotspots._Run(raw, "this machine"), hotspots._Target("baseline", "a", "a"), "t")
    assert "sysctl -w kernel.perf_event_paranoid=1" in str(refused.value) and "root" in str(refused.value)
    assert "kernel.perf_event_paranoid is 4" in str(refused.value)
    on_a_pod = hotspots._Run(dataclasses.replace(raw, host={"cloud": "Kubernetes"}), "worker ar-x-0", "ar-x-0")
    with pytest.raises(StateError, match=r"pod cannot lower .*capabilities.add: \[PERFMON\]"):
        hotspots._check(on_a_pod, hotspots._Target("baseline", "a", "a"), "t")


# --- on SkyPilot workers (the fake cloud runs the generated job scripts, and perf, on this machine) ----------


@pytest.fixture
def sky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSky]:
    """Sessions started with executor='sky' get a worker pool on a fake cloud; its VMs are downed at the end."""
    fake = FakeSky(tmp_path / "vms")
    pools: list[SkyPool] = []

    def make(repo: git.Repo, cfg: SessionConfig, _settings: object) -> SkyPool:
        pool = SkyPool(Path(repo.working_dir), cfg, fake, tmp_path / "staging", poll_s=0.02, bench_poll_s=0.02,
                       log_refresh_s=0.05, clock=fake.clock)
        pools.append(pool)
        return pool

    monkeypatch.setattr(skypilot, "SkyExecutor", make)
    yield fake
    for pool in pools:
        pool.close()
    for name in list(fake.vms):
        fake.down(name)


@pytest.mark.slow
@needs_perf
@pytest.mark.anyio
async def test_on_a_cloud_worker_the_profile_runs_alone_and_find_passes_reads_the_commits_sources(
        debug_example: Path, patches: Path, sky: FakeSky) -> None:
    async with Client(build_server()) as client:
        await call(client, "start_session", repo=str(debug_example), metric="rows_per_s", direction="higher",
                   executor="sky", tag="skyprof")
        launched = await call(client, "launch_experiment", title="fuse", source="patch", repeats="auto",
                              patch=(patches / "fuse-rms-norm-mul.patch").read_text())
        # while its pairs are measured, the candidate's profile goes to another worker, never beside them
        cand = await call(client, "profile_hotspots", experiment_id=launched["experiment_id"], top=3)
        await wait_final(client, launched["experiment_id"], timeout=240)
        prof = await call(client, "profile_hotspots", top=3, lines=2)
        assert sky.overlaps == 0
        assert cand["commit"] == launched["candidate_commit"] and cand["build"] == launched["experiment_id"]
        assert prof["build"] == "baseline" and prof["worker"].startswith("ar-") and prof["cost_usd"] > 0
        top = prof["functions"][0]
        assert top["dso"] == "normsoft" and top["share_pct"] > 20 and 1 <= len(top["lines"]) <= 2
        assert top["lines"][0]["file"] == "backend/cpu/ops-cpu.c" and top["lines"][0]["code"]
        # the raw data stays on the worker; what came back is the parsed profile and the top of the report
        worker, path = prof["perf_data_path"].split(":", 1)
        assert worker == prof["worker"] and Path(path).is_relative_to(sky.vms[worker].home)
        assert Path(path).stat().st_size > 0
        assert Path(prof["report_path"]).read_text().count("\x1f") > 10
        assert any("stays on it" in n for n in prof["notes"])
        # the profiles' cloud time is the session's cost too (the ledger keeps it across restarts)
        listed = await call(client, "list_experiments")
        runs = sum(e["cost_usd"] or 0.0 for e in listed["experiments"])
        assert listed["cost_usd"] == pytest.approx(runs + cand["cost_usd"] + prof["cost_usd"], abs=1e-3)

        found = await call(client, "find_passes", profile_id=prof["profile_id"])
        assert {"cpu_soft_max", "cpu_rms_norm"} <= {f["function"] for f in found["findings"]}
        assert found["findings"][0]["file"] == "backend/cpu/ops-cpu.c"
        # the candidate's lines are read in its own commit's files (from git: the worker's copy is gone)
        found = await call(client, "find_passes", profile_id=cand["profile_id"])
        assert "cpu_soft_max_from" in {f["function"] for f in found["findings"]}
        kept = debug_example / ".autoresearch" / "profiles" / f"{cand['profile_id']}.src" / "backend/cpu/ops-cpu.c"
        assert kept.read_text() == git.Repo(debug_example).git.show(f"{cand['commit']}:backend/cpu/ops-cpu.c") + "\n"


def _path_without_perf(tmp_path: Path) -> str:
    """A PATH with every program of this one but perf (links in one folder)."""
    farm = tmp_path / "bin-without-perf"
    farm.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for program in Path(folder).glob("*") if Path(folder).is_dir() else []:
            if program.name != "perf" and not (farm / program.name).exists():
                (farm / program.name).symlink_to(program)
    return str(farm)


@pytest.mark.anyio
async def test_on_a_worker_without_perf_or_its_permission_the_error_gives_the_setup_lines(
        tmp_path: Path, sky: FakeSky, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = script_repo(tmp_path, "echo METRIC t=1")
    async with Client(build_server(), mode="legacy") as client:
        await call(client, "start_session", repo=str(repo), metric="t", direction="lower", executor="sky", tag="np")
        without_perf = _path_without_perf(tmp_path)
        monkeypatch.setenv("PATH", without_perf)  # the worker's image has no perf
        message = await error(client, "profile_hotspots")
        assert "does not run on worker ar-" in message and "no perf on PATH" in message
        assert "linux-tools-$(uname -r)" in message and "sudo sysctl -w kernel.perf_event_paranoid=1" in message
        assert "`sky.setup`" in message and "stop_workers(mode='down') and start_session(..., tag='np')" in message

        # Ubuntu's perf without the tools of the running kernel: a wrapper that says so and fails
        wrapper = tmp_path / "ubuntu-bin"
        wrapper.mkdir()
        (wrapper / "perf").write_text("#!/bin/sh\necho 'WARNING: perf not found for kernel 6.8.0-1021-aws' >&2\n"
                                      "echo '  linux-tools-6.8.0-1021-aws' >&2\nexit 2\n")
        (wrapper / "perf").chmod(0o755)
        monkeypatch.setenv("PATH", f"{wrapper}{os.pathsep}{without_perf}")
        assert "perf not found for kernel 6.8.0-1021-aws" in await error(client, "profile_hotspots")

        # perf runs, but the kernel refuses the job's user (perf_event_paranoid above 1)
        (wrapper / "perf").write_text(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'perf version 6.8.12'; exit 0; fi\n"
            f"cat >&2 <<'EOF'\n{REFUSED}EOF\nexit 255\n")
        message = await error(client, "profile_hotspots")
        assert "perf may not record on worker ar-" in message and "kernel.perf_event_paranoid is " in message
        assert '"sudo sysctl -w kernel.perf_event_paranoid=1"' in message and "`sky.setup`" in message
        assert "Access to performance monitoring" in message
    assert sky.overlaps == 0


@needs_perf
@pytest.mark.anyio
async def test_a_candidate_that_does_not_build_on_the_worker_is_named_with_the_builds_output(
        tmp_path: Path, sky: FakeSky) -> None:
    repo = script_repo(tmp_path, "echo METRIC t=1", build="if [ -e broken ]; then echo 'ops.c:3: error: x' >&2; "
                                                        "exit 1; fi")
    async with Client(build_server()) as client:
        await call(client, "start_session", repo=str(repo), metric="t", direction="lower", executor="sky", tag="b")
        launched = await call(client, "launch_experiment", title="breaks", source="patch", repeats="auto",
                              patch="--- /dev/null\n+++ b/broken\n@@ -0,0 +1 @@\n+x\n")
        assert (await wait_final(client, launched["experiment_id"]))["status"] == "failed"
        message = await error(client, "profile_hotspots", experiment_id=launched["experiment_id"])
    assert f"build` of {launched['experiment_id']} failed on worker ar-" in message and "ops.c:3: error" in message


# The recipe's way of needing its model (and a setting of the session's config): a benchmark that fails
# without them, as llama.cpp's did under profile_hotspots ("AUTORESEARCH_MODEL is not set", exit 1).
NEEDS_MODEL = ('[ -f "${AUTORESEARCH_MODEL:-}" ] && [ "${BENCH_SETTING:-}" = steady ] '
               '|| { echo "autoresearch.sh: AUTORESEARCH_MODEL is not set" >&2; exit 1; }; '
               'awk "BEGIN { for (i = 0; i < 3e6; i++) s += i }"; echo METRIC score=1')


def configured(repo: Path, **settings: object) -> Path:
    """Settings kept across sessions, written before the first start_session (as a person would)."""
    (repo / ".autoresearch").mkdir()
    (repo / ".autoresearch" / "config.json").write_text(json.dumps({
        "session_id": "x", "tag": "old", "branch": "autoresearch/old", "repo": str(repo), "metric": "score",
        "direction": "higher", "executor": "local", "start_commit": "0", "created_at": "now", **settings}))
    return repo


@needs_perf
@pytest.mark.anyio
async def test_the_profiled_benchmark_runs_with_the_sessions_model_and_settings(tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    repo = configured(script_repo(tmp_path, NEEDS_MODEL), env={"BENCH_SETTING": "steady"})
    async with Client(build_server()) as client:
        await call(client, "start_session", repo=str(repo), metric="score", direction="higher", tag="m",
                   model=str(model))
        prof = await call(client, "profile_hotspots", top=5)
    assert prof["bench_exit_code"] == 0 and prof["total_samples"] > 0
    assert any(f["dso"].startswith(("awk", "mawk", "gawk")) for f in prof["functions"])


@needs_perf
@pytest.mark.anyio
async def test_a_benchmark_that_fails_under_perf_gives_no_profile(tmp_path: Path) -> None:
    # validation runs it twice, then alone and at half duty (the bench's shape); the fifth run (the profile's) fails
    bench = ('n=$(cat .runs 2>/dev/null || echo 0); echo $((n + 1)) > .runs; '
             '[ "$n" -lt 4 ] || { echo "broken on run $n" >&2; exit 3; }; echo METRIC score=1')
    repo = configured(script_repo(tmp_path, bench), threads=1)
    async with Client(build_server()) as client:
        await call(client, "start_session", repo=str(repo), metric="score", direction="higher", tag="f")
        refused = await error(client, "profile_hotspots")
    assert "`autoresearch.sh bench` of baseline exited with status 3 under perf" in refused
    assert "broken on run 4" in refused
    assert not list((repo / ".autoresearch" / "profiles").glob("*.json"))
