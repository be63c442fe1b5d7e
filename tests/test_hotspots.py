"""profile_hotspots: the benchmark under perf record, read back as hot functions and source lines;
then find_passes ranked by that profile. Real perf, real builds of the bundled example."""

from __future__ import annotations

import shutil
from pathlib import Path

import git
import pytest
from mcp import Client

from autoresearch_mcp.analysis import hotspots
from autoresearch_mcp.analysis.hotspots import parse_report, profile_hotspots
from autoresearch_mcp.app import build_server
from autoresearch_mcp.errors import StateError
from autoresearch_mcp.executors.sky_pool import SkyPool
from autoresearch_mcp.experiments.ledger import Ledger
from autoresearch_mcp.experiments.scheduler import ExperimentManager
from autoresearch_mcp.session import SessionConfig
from autoresearch_mcp.state import Session
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
    assert main.samples == 172 and dict(main.lines) == {("/tmp/p/t.c", 6): 141, ("/tmp/p/t.c", 9): 31}
    assert functions[("libc.so.6", "__memmove_avx512_unaligned_erms")].samples == 26
    kernel = functions[("[kernel.kallsyms]", "clear_page_erms")]
    assert kernel.samples == 4 and not kernel.lines  # sym+offset: no source line
    assert not functions[("t", "helper")].lines  # no debug info


def test_a_refused_perf_record_says_how_to_allow_it() -> None:
    said = ("Error:\nYou may not have permission to collect stats.\n\nConsider tweaking "
            "/proc/sys/kernel/perf_event_paranoid, which controls use of the performance events system")
    message = hotspots._record_failure(said)
    assert "sysctl -w kernel.perf_event_paranoid=1" in message and "root" in message


def test_sky_sessions_are_refused_with_the_way_to_profile(tmp_path: Path) -> None:
    repo = script_repo(tmp_path, "echo METRIC t=1")
    config = SessionConfig(session_id="s", tag="t", branch="autoresearch/t", repo=str(repo), metric="t",
                           direction="lower", executor="sky", start_commit="0" * 40, created_at="now")
    pool = SkyPool(repo, config, FakeSky(tmp_path / "vms"), tmp_path / "staging")
    try:
        ledger = Ledger(tmp_path / "ledger.jsonl")
        session = Session(git.Repo(repo), config, ledger, ExperimentManager(git.Repo(repo), config, ledger, pool))
        with pytest.raises(StateError, match="executor='local'"):
            profile_hotspots(session, None, 5, 5)
    finally:
        pool.close()


@pytest.fixture
def debug_example(example_repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example built with line tables (its Makefile takes CFLAGS from the environment)."""
    monkeypatch.setenv("CFLAGS", "-O2 -g")
    monkeypatch.setenv("NORMSOFT_ITERS", "12")
    return example_repo


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


@needs_perf
@pytest.mark.anyio
async def test_a_candidate_build_is_profiled_and_bad_ids_are_explained(debug_example: Path, patches: Path) -> None:
    async with Client(build_server()) as client:
        await call(client, "start_session", repo=str(debug_example), metric="rows_per_s", direction="higher",
                   tag="cand")
        launched = await call(client, "launch_experiment", title="fuse", source="patch", repeats=3,
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


@pytest.mark.anyio
async def test_without_perf_the_error_says_how_to_install_it(
        debug_example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Client(build_server()) as client:
        assert "start_session" in await error(client, "profile_hotspots")
        await call(client, "start_session", repo=str(debug_example), metric="rows_per_s", direction="higher",
                   tag="noperf")
        real_which = shutil.which
        monkeypatch.setattr(hotspots.shutil, "which", lambda name: None if name == "perf" else real_which(name))
        assert "apt-get install linux-perf" in await error(client, "profile_hotspots")


def test_a_line_compiled_in_another_worktree_is_shown_relative_to_this_one(tmp_path: Path) -> None:
    tree = tmp_path / "tree-b"
    (tree / "backend").mkdir(parents=True)
    (tree / "backend" / "ops.c").write_text("int x;\n")
    # ccache hands out objects compiled in another worktree: their debug info names that worktree
    assert hotspots._in_tree(tmp_path / "tree-a" / "backend" / "ops.c", tree) == Path("backend/ops.c")
    assert hotspots._in_tree(tree / "backend" / "ops.c", tree) == Path("backend/ops.c")
    assert hotspots._in_tree(Path("/usr/include/stdio.h"), tree) is None


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
