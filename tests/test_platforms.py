"""Every platform: a winner is built and checked on the host and an emulated aarch64 (and confirmed on
measured cloud workers) before commit_winner accepts it. Real MCP client, real git repositories, real
cross compiler and qemu; the cloud through the fake SkyPort."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters

from autoresearch_mcp import hooks
from autoresearch_mcp.app import build_server
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.executors.sky_pool import SkyPool
from autoresearch_mcp.experiments import platforms
from autoresearch_mcp.store.config import Platform, SessionConfig, job_env, resolve
from autoresearch_mcp.worker.outcomes import Experiment as Ran
from conftest import git, init_repo
from helpers import FINAL, call, error
from sky_fake import FakeSky

pytestmark = pytest.mark.anyio

CROSS_TOOLS = ("qemu-aarch64", "aarch64-linux-gnu-gcc")
needs_cross = pytest.mark.skipif(
    any(shutil.which(t) is None for t in CROSS_TOOLS),
    reason="needs qemu-user and gcc-aarch64-linux-gnu (scripts/setup.sh installs them as root)")

N = 4099  # not a multiple of the vector width: the tail loop matters
GENERIC = """\
    long s = 0;
    for (int i = 0; i < n; i++) { s += (long)x[i] * y[i]; steps++; }
    return s;"""
GENERIC_UNROLLED = """\
    long s = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s += (long)x[i] * y[i] + (long)x[i + 1] * y[i + 1] + (long)x[i + 2] * y[i + 2] + (long)x[i + 3] * y[i + 3];
        steps++;
    }
    for (; i < n; i++) { s += (long)x[i] * y[i]; steps++; }
    return s;"""
NEON = """\
    int32x4_t acc = vdupq_n_s32(0);
    int i = 0;
    for (; i + 4 <= n; i += 4) { acc = vmlaq_s32(acc, vld1q_s32(x + i), vld1q_s32(y + i)); steps++; }
    long s = vaddvq_s32(acc);
    for (; i < n; i++) { s += (long)x[i] * y[i]; steps++; }
    return s;"""
NEON_UNROLLED = """\
    int32x4_t acc0 = vdupq_n_s32(0), acc1 = vdupq_n_s32(0);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        acc0 = vmlaq_s32(acc0, vld1q_s32(x + i), vld1q_s32(y + i));
        acc1 = vmlaq_s32(acc1, vld1q_s32(x + i + 4), vld1q_s32(y + i + 4));
        steps++;
    }
    long s = vaddvq_s32(vaddq_s32(acc0, acc1));
    for (; i < n; i++) { s += (long)x[i] * y[i]; steps++; }
    return s;"""
# The same unrolling with the tail loop forgotten: right on the host, wrong on aarch64 only.
NEON_UNROLLED_NO_TAIL = NEON_UNROLLED.replace("    for (; i < n; i++) { s += (long)x[i] * y[i]; steps++; }\n", "")


def dot_c(generic: str, neon: str) -> str:
    return f"""\
#include <stdio.h>
#include <string.h>
#if defined(__aarch64__)
#include <arm_neon.h>
#define ARCH "aarch64"
#else
#define ARCH "generic"
#endif

#define N {N}
static int a[N], b[N];
static long steps; /* loop iterations: the work the benchmark reports */

static long dot(const int *x, const int *y, int n) {{
#if defined(__aarch64__)
{neon}
#else
{generic}
#endif
}}

int main(int argc, char **argv) {{
    for (int i = 0; i < N; i++) {{ a[i] = i % 7 - 3; b[i] = i % 5 - 2; }}
    long r = dot(a, b, N);
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) printf("METRIC steps=%ld\\n", steps);
    else printf("arch=%s dot=%ld\\n", ARCH, r);
    return 0;
}}
"""


BENCH = """\
#!/usr/bin/env bash
set -eu
cd "$(dirname "$0")"
case "$1" in
  build) ${CC:-cc} -O2 -o dot dot.c && echo "built for $AUTORESEARCH_PLATFORM with ${CC:-cc}" ;;
  bench) $AUTORESEARCH_EMULATOR ./dot --bench ;;
esac
"""
CHECKS = """\
#!/usr/bin/env bash
set -eu
cd "$(dirname "$0")"
out="$($AUTORESEARCH_EMULATOR ./dot)"
echo "checked on $AUTORESEARCH_PLATFORM: $out"
[ "${out#* }" = "dot=$(cat expected.txt)" ]
"""


@pytest.fixture
def dot_repo(tmp_path: Path) -> Iterator[Path]:
    """A small C target with a generic path and a NEON path under `#if defined(__aarch64__)`."""
    repo = tmp_path / "dot"
    repo.mkdir()
    (repo / "dot.c").write_text(dot_c(GENERIC, NEON))
    (repo / "autoresearch.sh").write_text(BENCH)
    (repo / "autoresearch.checks.sh").write_text(CHECKS)
    expected = sum((i % 7 - 3) * (i % 5 - 2) for i in range(N))
    (repo / "expected.txt").write_text(f"{expected}\n")
    yield init_repo(repo)


async def settled(client: Client, experiment_id: str, timeout: float = 180.0) -> dict[str, Any]:
    """fetch_sky_logs once the host has finished and every other platform has too (or never starts)."""
    with anyio.fail_after(timeout):
        while True:  # a waiting fetch also wakes when another platform's status changes
            res = await call(client, "fetch_sky_logs", experiment_id=experiment_id, tail_lines=5, wait_s=30)
            if res["status"] in FINAL and all(p["status"] in FINAL | {"not_run"} for p in res["platforms"]):
                return res


async def launch(client: Client, repo: Path, title: str, source: str) -> str:
    (repo / "dot.c").write_text(source)
    res = await call(client, "launch_experiment", title=title, hypothesis="fewer loop iterations",
                     sources=["test"], repeats=30, restore_worktree=True)
    return str(res["experiment_id"])


# --- the emulated aarch64 platform ---------------------------------------------------------------


@pytest.mark.slow
@needs_cross
async def test_a_winner_correct_on_both_isas_is_committed_with_both_platforms_in_its_message(
        dot_repo: Path) -> None:
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(dot_repo), metric="steps", direction="lower", tag="isa",
                             platforms=["host", "aarch64-qemu"])
        assert started["baseline"]["steps"]["mean"] == N
        assert any(line.startswith("aarch64-qemu") and "passes the checks" in line for line in started["platforms"])

        exp_id = await launch(c, dot_repo, "unroll both paths", dot_c(GENERIC_UNROLLED, NEON_UNROLLED))
        res = await settled(c, exp_id)
        assert res["verdict"] == "improved", res
        [arm] = res["platforms"]
        assert arm["name"] == "aarch64-qemu" and arm["measured"] is False and arm["passed"] is True, arm
        assert arm["build"] == "ok" and arm["checks"]["passed"]
        # the checks really ran the aarch64 binary, under the emulator, with the platform's environment
        assert "checked on aarch64-qemu: arch=aarch64 dot=" in arm["checks"]["tail"]
        assert "verdict" not in arm  # emulated: never timed

        committed = await call(c, "commit_winner", experiment_id=exp_id)
    message = committed["message"]
    assert "Platforms:" in message
    assert "- host (local, measured): improved" in message
    assert "- aarch64-qemu (emulated, build and checks): built, checks passed" in message
    result = json.loads(message.split("Autoresearch-Result: ")[1])
    assert set(result["platforms"]) == {"host", "aarch64-qemu"}
    assert git(dot_repo, "log", "-1", "--format=%s", "autoresearch/isa") == "unroll both paths"


@pytest.mark.slow
@needs_cross
async def test_a_host_winner_that_breaks_only_the_aarch64_path_is_refused_naming_the_platform(
        dot_repo: Path) -> None:
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(dot_repo), metric="steps", direction="lower", tag="isa",
                   platforms=["host", "aarch64-qemu"])
        head = git(dot_repo, "rev-parse", "autoresearch/isa")
        exp_id = await launch(c, dot_repo, "unroll, tail forgotten on NEON",
                              dot_c(GENERIC_UNROLLED, NEON_UNROLLED_NO_TAIL))
        res = await settled(c, exp_id)
        assert res["status"] == "done" and res["verdict"] == "improved" and res["checks"]["passed"], res
        [arm] = res["platforms"]
        assert arm["passed"] is False and arm["status"] == "checks_failed", arm
        assert arm["build"] == "ok" and "arch=aarch64" in arm["checks"]["tail"]
        assert "aarch64-qemu" in res["next_step"]

        message = await error(c, "commit_winner", experiment_id=exp_id)
        assert "aarch64-qemu" in message and "failed its checks" in message
        listed = await call(c, "list_experiments")
        assert listed["best"] is None  # a candidate that fails a platform is nobody's best
    assert git(dot_repo, "rev-parse", "autoresearch/isa") == head


@pytest.mark.slow
@needs_cross
async def test_a_candidate_that_does_not_compile_for_aarch64_is_refused_as_a_build_failure(
        dot_repo: Path) -> None:
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(dot_repo), metric="steps", direction="lower", tag="isa",
                   platforms=["host", "aarch64-qemu"])
        exp_id = await launch(c, dot_repo, "unroll, NEON typo",
                              dot_c(GENERIC_UNROLLED, NEON_UNROLLED.replace("vaddq_s32", "vaddq_s32_typo")))
        res = await settled(c, exp_id)
        [arm] = res["platforms"]
        assert res["verdict"] == "improved" and arm["build"] == "failed" and arm["passed"] is False, arm
        message = await error(c, "commit_winner", experiment_id=exp_id)
        assert "aarch64-qemu" in message and "failed to build" in message


@needs_cross
async def test_a_head_that_already_fails_on_a_platform_is_an_error_at_start_session(dot_repo: Path) -> None:
    (dot_repo / "dot.c").write_text(dot_c(GENERIC, NEON_UNROLLED_NO_TAIL))
    git(dot_repo, "commit", "-qam", "broken on aarch64")
    async with Client(build_server()) as c:
        message = await error(c, "start_session", repo=str(dot_repo), metric="steps", direction="lower",
                              tag="isa", platforms=["host", "aarch64-qemu"])
    assert "aarch64-qemu" in message and "checks of the session head" in message


# --- a platform that cannot run ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_missing_emulator_or_compiler_is_a_clear_error_at_start_session(dot_repo: Path, mode: str) -> None:
    missing = {"name": "arm", "emulator": "qemu-nowhere-to-be-found -L /nonexistent",
               "env": {"CC": "nowhere-linux-gnu-gcc"}}
    async with Client(build_server(), mode=mode) as c:
        message = await error(c, "start_session", repo=str(dot_repo), metric="steps", direction="lower",
                              tag="nope", platforms=["host", missing])
    assert "platform arm" in message
    assert "`qemu-nowhere-to-be-found`" in message and "apt-get install qemu-user" in message
    assert "`nowhere-linux-gnu-gcc`" in message and "apt-get install gcc-nowhere-linux-gnu" in message
    assert "/nonexistent" in message
    # refused before anything of the repository changed
    assert "autoresearch/nope" not in git(dot_repo, "branch", "--list")
    assert not (dot_repo / ".autoresearch" / "config.json").exists()


def test_platform_lists_that_cannot_work_are_refused_with_the_reason() -> None:
    with pytest.raises(InputError, match="host where experiments are measured"):
        resolve(["aarch64-qemu"], None)
    with pytest.raises(InputError, match="timings mean nothing"):
        resolve(["host", {"name": "arm", "emulator": "qemu-aarch64", "measure": True}], None)
    with pytest.raises(InputError, match="not a preset"):
        resolve(["host", "riscv"], None)
    with pytest.raises(InputError, match="unique"):
        resolve(["host", "aarch64-qemu", "aarch64-qemu"], None)
    with pytest.raises(InputError, match="same machine"):
        resolve(["host"], "sky")


def test_a_preset_can_be_extended_without_losing_its_toolchain() -> None:
    host, arm = resolve(["host", {"name": "aarch64-qemu", "env": {"CFLAGS": "-O3"}}], None)
    assert host.measure and not host.emulator
    assert arm.env["CFLAGS"] == "-O3"
    assert arm.env["CC"] == "aarch64-linux-gnu-gcc" and arm.env["CXX"] == "aarch64-linux-gnu-g++"
    assert Path(arm.env["CMAKE_TOOLCHAIN_FILE"]).is_file()
    assert arm.emulator == "qemu-aarch64 -L /usr/aarch64-linux-gnu" and not arm.measure
    assert job_env(arm)["AUTORESEARCH_EMULATOR"] == arm.emulator
    assert job_env(host) == {"AUTORESEARCH_PLATFORM": "host", "AUTORESEARCH_EMULATOR": ""}


def test_an_emulated_platform_is_unmeasured_unless_told_otherwise() -> None:
    _, emulated = resolve(["host", {"name": "arm", "emulator": "qemu-aarch64"}], None)
    assert emulated.measure is False


async def test_without_platforms_the_host_scripts_still_see_their_platform_name(tmp_path: Path) -> None:
    repo = tmp_path / "plain"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        '#!/usr/bin/env bash\nset -eu\ncase "$1" in\n  build) true ;;\n'
        '  bench) echo "METRIC t=$(cat value-$AUTORESEARCH_PLATFORM.txt)" ;;\nesac\n')
    (repo / "autoresearch.checks.sh").write_text('#!/usr/bin/env bash\n[ -z "$AUTORESEARCH_EMULATOR" ]\n')
    (repo / "value-host.txt").write_text("100\n")
    init_repo(repo)
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(repo), metric="t", direction="lower", tag="plain")
    assert started["baseline"]["t"]["mean"] == 100 and started["platforms"] == []


# --- a measured cloud platform (the fake SkyPort runs the real runner) ---------------------------


@pytest.fixture
def fake_sky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSky]:
    """Sky platforms get worker pools on a fake SkyPort; the pools are closed and the VMs downed after."""
    from autoresearch_mcp.executors import skypilot

    fake = FakeSky(tmp_path / "vms")
    pools: list[SkyPool] = []

    def executor(repo: Any, cfg: SessionConfig, settings: Any) -> SkyPool:
        pool = SkyPool(Path(repo.working_dir), cfg, fake, tmp_path / "staging", poll_s=0.02, log_refresh_s=0.05)
        pools.append(pool)
        return pool

    monkeypatch.setattr(skypilot, "SkyExecutor", executor)
    yield fake
    for pool in pools:
        pool.close()
    for name in list(fake.vms):
        fake.down(name)


def values_repo(tmp_path: Path) -> Path:
    """A benchmark that reports, on each platform, the number in that platform's file."""
    repo = tmp_path / "values"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        '#!/usr/bin/env bash\nset -eu\ncd "$(dirname "$0")"\ncase "$1" in\n  build) true ;;\n'
        '  bench) echo "METRIC t=$(cat value-$AUTORESEARCH_PLATFORM.txt)" ;;\nesac\n')
    (repo / "autoresearch.checks.sh").write_text('#!/usr/bin/env bash\necho "checked on $AUTORESEARCH_PLATFORM"\n')
    (repo / "value-host.txt").write_text("100\n")
    (repo / "value-graviton.txt").write_text("100\n")
    return init_repo(repo)


def values_patch(host: tuple[int, int], graviton: tuple[int, int]) -> str:
    return "".join(f"--- a/value-{name}.txt\n+++ b/value-{name}.txt\n@@ -1 +1 @@\n-{old}\n+{new}\n"
                   for name, (old, new) in (("host", host), ("graviton", graviton)))


@pytest.mark.slow
async def test_a_measured_sky_platform_confirms_a_winner_and_refuses_one_that_regresses_there(
        tmp_path: Path, fake_sky: FakeSky) -> None:
    repo = values_repo(tmp_path)
    graviton = {"name": "graviton", "executor": "sky", "measure": True,
                "sky": {"instance_type": "m7g.xlarge", "cpus": None}}
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(repo), metric="t", direction="lower", tag="cloud",
                             platforms=["host", graviton])
        assert any(line.startswith("graviton (sky, measured)") for line in started["platforms"])

        launched = await call(c, "launch_experiment", title="faster everywhere", source="patch", repeats=30,
                              patch=values_patch((100, 90), (100, 95)))
        res = await settled(c, launched["experiment_id"])
        [cloud] = res["platforms"]
        assert cloud["verdict"] == "improved" and cloud["passed"] is True, json.dumps(cloud, indent=1)
        assert cloud["delta_pct"] == pytest.approx(-5.0) and cloud["worker"].startswith("ar-")
        assert cloud["cost_usd"] > 0 and res["cost_usd"] >= cloud["cost_usd"]
        assert fake_sky.tasks[-1]["resources"]["instance_type"] == "m7g.xlarge"
        committed = await call(c, "commit_winner", experiment_id=launched["experiment_id"])
        assert "- graviton (sky, measured): improved -5.00% in the confirmation A/B" in committed["message"]

        launched = await call(c, "launch_experiment", title="faster here, slower on graviton", source="patch",
                              repeats=30, patch=values_patch((90, 80), (95, 120)))
        res = await settled(c, launched["experiment_id"])
        assert res["verdict"] == "improved"
        [cloud] = res["platforms"]
        assert cloud["verdict"] == "regressed" and cloud["passed"] is False, json.dumps(cloud, indent=1)
        message = await error(c, "commit_winner", experiment_id=launched["experiment_id"])
        assert "graviton" in message and "regressed" in message
        released = await call(c, "stop_workers", mode="down")
    assert released["released"] and fake_sky.vms == {}


# --- a platform run that ends without a result ---------------------------------------------------


SLOWPOKE = {"name": "slowpoke", "env": {"SLOW": "1"}, "measure": False}
FASTER_PATCH = ("--- a/value.txt\n+++ b/value.txt\n@@ -1 +1 @@\n-100\n+90\n"
                "--- /dev/null\n+++ b/candidate\n@@ -0,0 +1 @@\n+x\n")


def slow_repo(tmp_path: Path) -> Path:
    """A host winner whose checks take a minute on the `slowpoke` platform only."""
    repo = tmp_path / "slow"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        '#!/usr/bin/env bash\nset -eu\ncd "$(dirname "$0")"\ncase "$1" in\n  build) true ;;\n'
        '  bench) echo "METRIC t=$(cat value.txt)" ;;\nesac\n')
    (repo / "autoresearch.checks.sh").write_text(
        '#!/usr/bin/env bash\ncd "$(dirname "$0")"\n'
        'if [ -n "${SLOW:-}" ] && [ -e candidate ]; then sleep 60; fi\n')
    (repo / "value.txt").write_text("100\n")
    return init_repo(repo)


async def launch_until_slowpoke_checks(c: Client) -> str:
    launched = await call(c, "launch_experiment", title="less", source="patch", repeats=30, patch=FASTER_PATCH)
    exp_id = str(launched["experiment_id"])
    with anyio.fail_after(120):
        while (await call(c, "fetch_sky_logs", experiment_id=exp_id))["platforms"][0]["status"] != "checking":
            await anyio.sleep(0.1)
    return exp_id


async def test_a_cancelled_platform_run_blocks_the_commit_until_it_is_checked_again_on_that_platform(
        tmp_path: Path) -> None:
    repo = slow_repo(tmp_path)
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="t", direction="lower", tag="slow",
                   platforms=["host", SLOWPOKE])
        exp_id = await launch_until_slowpoke_checks(c)
        assert "slowpoke" in (await error(c, "commit_winner", experiment_id=exp_id))  # still running there
        listed = await call(c, "list_experiments")
        assert listed["running"] == 1 and listed["discarded"] == 0
        reminder = hooks.stop({"cwd": str(repo), "stop_hook_active": False})  # Claude Code's Stop hook
        assert reminder is not None and exp_id in reminder["reason"]

        cancelled = await call(c, "cancel_experiment", experiment_id=exp_id)
        assert cancelled["status"] == "done" and "slowpoke" in cancelled["message"]
        with anyio.fail_after(30):
            while (await call(c, "fetch_sky_logs", experiment_id=exp_id))["platforms"][0]["status"] != "cancelled":
                await anyio.sleep(0.1)
        message = await error(c, "commit_winner", experiment_id=exp_id)
        assert "not checked on every platform" in message and "slowpoke: cancelled" in message
        assert f"source='experiment', experiment_id='{exp_id}'" in message
        # a plain relaunch would measure the host again with a fresh alpha: refused
        assert exp_id in await error(c, "launch_experiment", title="less, again", source="patch", repeats=30,
                                     patch=FASTER_PATCH)
        again = await call(c, "launch_experiment", title="", source="experiment", experiment_id=exp_id)
        assert again["experiment_id"] == exp_id and "slowpoke" in again["message"]
        res = await call(c, "fetch_sky_logs", experiment_id=exp_id)
        assert res["verdict"] == "improved" and res["platforms"][0]["status"] in ("queued", "building", "checking")
        assert res["platforms"][0]["passed"] is None
        await call(c, "cancel_experiment", experiment_id=exp_id)
        res = await call(c, "fetch_sky_logs", experiment_id=exp_id)
        assert res["platforms"][0]["status"] == "cancelled", json.dumps(res["platforms"][0])

    def runners() -> list[psutil.Process]:  # every runner of this experiment's platform runs
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if f"exp-{exp_id}-slowpoke" in " ".join(proc.cmdline()):
                    found.append(proc)
        return found

    _, alive = psutil.wait_procs(runners(), timeout=15)
    assert not alive, [p.cmdline() for p in alive]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
async def test_profile_hotspots_profiles_the_measured_host_of_a_session_with_platforms(tmp_path: Path) -> None:
    repo = tmp_path / "busy"
    repo.mkdir()
    (repo / "autoresearch.sh").write_text(
        '#!/usr/bin/env bash\nset -eu\ncase "$1" in\n  build) true ;;\n'
        '  bench) n=0; for i in $(seq 1 100000); do n=$((n + i)); done; '
        'echo "METRIC t=$(cat value-$AUTORESEARCH_PLATFORM.txt)" ;;\nesac\n')
    (repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    (repo / "value-host.txt").write_text("100\n")
    init_repo(repo)
    async with Client(build_server()) as c:
        await call(c, "start_session", repo=str(repo), metric="t", direction="lower", tag="prof",
                   platforms=["host", {"name": "second", "measure": False}])
        prof = await call(c, "profile_hotspots", top=3, lines=1)
    assert prof["build"] == "baseline" and prof["total_samples"] > 0


@pytest.mark.slow
async def test_after_kill_9_a_platform_run_is_lost_its_processes_killed_and_the_commit_refused(
        tmp_path: Path) -> None:
    repo = slow_repo(tmp_path)
    params = StdioServerParameters(command=sys.executable, args=["-m", "autoresearch_mcp", "serve"],
                                   cwd=str(repo), env=dict(os.environ))
    with pytest.raises(BaseException):  # noqa: B017 - the client loses its server mid-session, as intended
        async with Client(params) as c:
            await call(c, "start_session", repo=str(repo), metric="t", direction="lower", tag="slow",
                       platforms=["host", SLOWPOKE])
            exp_id = await launch_until_slowpoke_checks(c)
            ledger = [json.loads(line) for line in (repo / ".autoresearch" / "ledger.jsonl").read_text().splitlines()]
            pid = next(r["runtime"]["pid"] for r in ledger if r.get("platform") == "slowpoke" and r.get("runtime"))
            platform_runner = psutil.Process(pid)
            server = next(p for p in psutil.Process().children() if p.cmdline()[-3:] == ["-m", "autoresearch_mcp",
                                                                                          "serve"])
            server.send_signal(signal.SIGKILL)
            server.wait(10)
            await call(c, "list_experiments")
    assert platform_runner.is_running()
    async with Client(params) as c:  # the new server binds the session left in its cwd
        res = await call(c, "fetch_sky_logs", experiment_id=exp_id)
        assert res["status"] == "done" and res["platforms"][0]["status"] == "lost", res["platforms"]
        message = await error(c, "commit_winner", experiment_id=exp_id)
        assert "slowpoke: lost" in message
    gone, _ = psutil.wait_procs([platform_runner], timeout=15)
    assert platform_runner in gone or platform_runner.status() == psutil.STATUS_ZOMBIE



@needs_cross
@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
async def test_a_cmake_project_cross_compiles_for_aarch64_through_the_presets_toolchain(tmp_path: Path) -> None:
    repo = tmp_path / "cmake"
    repo.mkdir()
    (repo / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(arch C)\nadd_executable(arch arch.c)\n"
        # like ggml: ISA flags follow CMAKE_SYSTEM_PROCESSOR, which only a toolchain file sets right
        'if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64")\n  target_compile_options(arch PRIVATE -msse2)\nendif()\n')
    (repo / "arch.c").write_text(
        '#include <stdio.h>\n#include <string.h>\nint main(int argc, char **argv) {\n'
        '#if defined(__aarch64__)\n    const char *arch = "aarch64";\n'
        '#else\n    const char *arch = "generic";\n#endif\n'
        '    if (argc > 1 && strcmp(argv[1], "--bench") == 0) puts("METRIC t=1");\n    else puts(arch);\n'
        '    return 0;\n}\n')
    (repo / "autoresearch.sh").write_text(
        '#!/usr/bin/env bash\nset -eu\ncd "$(dirname "$0")"\ncase "$1" in\n'
        '  build) cmake -S . -B build >/dev/null && cmake --build build ;;\n'
        '  bench) $AUTORESEARCH_EMULATOR ./build/arch --bench ;;\nesac\n')
    (repo / "autoresearch.checks.sh").write_text(
        '#!/usr/bin/env bash\nset -eu\ncd "$(dirname "$0")"\nout="$($AUTORESEARCH_EMULATOR ./build/arch)"\n'
        'echo "$AUTORESEARCH_PLATFORM: $out"\n'
        '[ "$out" = "$([ "$AUTORESEARCH_PLATFORM" = aarch64-qemu ] && echo aarch64 || echo generic)" ]\n')
    init_repo(repo)
    async with Client(build_server()) as c:
        started = await call(c, "start_session", repo=str(repo), metric="t", direction="lower", tag="cm",
                             platforms=["host", "aarch64-qemu"])
    # the head's checks passed on aarch64-qemu: the CMake build there made an aarch64 binary
    assert any(line.startswith("aarch64-qemu") and "passes the checks" in line for line in started["platforms"])
    log = (repo / ".autoresearch" / "logs" / "session-validation-aarch64-qemu.log").read_text()
    assert "aarch64-qemu: aarch64" in log


def test_a_measured_platform_whose_checks_never_ran_does_not_let_the_winner_through() -> None:
    graviton = Platform(name="graviton", executor="sky")
    # the runner skips the checks of a run it stops as noisy: no verdict of correctness there
    passed, why = platforms.judge(graviton, Ran(status="done", stop_reason="noisy"), "noisy", None)
    assert not passed and "checks did not run" in why
    # a worker or cloud error is no verdict on the change: the platform must run again, not block it
    assert platforms.judge(graviton, Ran(status="failed", phase="executor", error="no cloud"), None, None) == (
        None, "did not run (executor): no cloud")
    assert platforms.judge(graviton, Ran(status="failed", phase="build", error="x.c: error"), None, None)[0] \
        is False
    checked = Ran(status="done", checks={"ran": True, "passed": True})
    assert platforms.judge(graviton, checked, "no_change", 0.3) == (
        True, "no_change +0.30% in the confirmation A/B, checks passed")
    assert platforms.judge(graviton, checked, "regressed", -4.0)[0] is False
    assert platforms.judge(graviton, dataclasses.replace(checked, error="run 0: t missing"), "invalid", None)[0] \
        is False


def test_the_stop_hook_counts_platform_runs_and_their_cloud_workers() -> None:
    from autoresearch_mcp.hooks import cloud_workers

    records = [
        {"type": "launch", "experiment_id": "a", "session_id": "s1"},
        {"type": "status", "experiment_id": "a", "status": "running", "runtime": {"cluster": "ar-s1-0"}},
        {"type": "platform", "experiment_id": "a", "platform": "graviton", "status": "running",
         "runtime": {"cluster": "ar-5f2c-0"}},
    ]
    assert cloud_workers(records, "s1") == ["ar-s1-0", "ar-5f2c-0"]


def test_a_fleet_cannot_confine_when_one_of_its_executors_cannot(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from autoresearch_mcp.executors.fleet import Fleet
    from autoresearch_mcp.executors.local import LocalExecutor
    from autoresearch_mcp.git import gitops
    from autoresearch_mcp.git.worktrees import Worktrees
    from autoresearch_mcp.worker import sandbox

    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "x.txt").write_text("x\n")
    repo = gitops.repo_at(init_repo(tmp_path / "repo"))
    monkeypatch.setattr(sandbox, "BWRAP", "no-such-bwrap")  # this machine cannot confine
    host = LocalExecutor(repo, Worktrees(repo, tmp_path / "cache"), 1)
    extra = LocalExecutor(repo, Worktrees(repo, tmp_path / "cache"), 1)
    fleet = Fleet(host, {"arm": extra}, here=host, worktrees=host.worktrees)
    try:
        why = fleet.confinement_problem(sandbox.CONFINED)
        assert why is not None and "no bubblewrap" in why  # the launch's pre-check refuses with the reason
        assert fleet.confinement_problem(sandbox.OFF) is None
    finally:
        fleet.close()
