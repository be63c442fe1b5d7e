"""analyze_bounds: the roofline verdict, the machine's peaks (measured, cached) and perf counters."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mcp import Client

from autoresearch_mcp.analysis import peak_probe
from autoresearch_mcp.analysis.bounds import Roofs, analyze_bounds, assess, roofs_for
from autoresearch_mcp.analysis.counters import parse_perf_csv, perf_counters
from autoresearch_mcp.analysis.peaks import (
    cache_path,
    cached_peaks,
    measure_local_peaks,
    parse_identity_output,
    parse_probe_output,
    probe_command,
)
from autoresearch_mcp.app import build_server
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.models import PeakFigures, Precision
from autoresearch_mcp.settings import Settings
from autoresearch_mcp.state import AppState
from autoresearch_mcp.worker import profiler
from conftest import script_repo

ROOFS = Roofs(bandwidth_gb_s=100.0, gflop_s=1000.0)  # ridge point: 10 flop/byte
VM_1: dict[str, Any] = {"host": "vm-1", "cpu_model": "EPYC 9R14", "logical_cpus": 8}


def fixed_peaks(**changes: object) -> PeakFigures:
    figures: dict[str, object] = dict(
        method="c", flags="-O3 -march=native -fopenmp", flop_kernel="vector FMA", host="h", cpu_model="cpu",
        logical_cpus=4,
        threads=4, llc_bytes=32 << 20, array_bytes=128 << 20, copy_gb_s=40.0, triad_gb_s=42.0,
        copy_gb_s_1t=15.0, triad_gb_s_1t=14.0, gflop_s_fp32=400.0, gflop_s_fp32_1t=100.0,
        gflop_s_fp64=200.0, gflop_s_fp64_1t=50.0, quick=True, duration_s=1.0, measured_at="now")
    figures.update(changes)
    return PeakFigures.model_validate(figures)


@pytest.fixture(scope="session")
def measured_peaks(tmp_path_factory: pytest.TempPathFactory) -> PeakFigures:
    """This machine's peaks from the quick probe, measured once for the whole test session."""
    cache = tmp_path_factory.mktemp("peaks-cache")
    return cached_peaks(cache, measure=lambda: measure_local_peaks(quick=True))


@pytest.fixture
def state(tmp_path: Path, measured_peaks: PeakFigures) -> AppState:
    """Server state whose cache already holds this machine's quick peaks (as a second call would).

    Marked undisturbed: a disturbed cached measurement would be measured again by each test.
    """
    settings = Settings.from_env()
    path = cache_path(settings.cache_dir, peak_probe.identify())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(measured_peaks.model_copy(update={"disturbed": False}).model_dump_json())
    return AppState(settings=settings)


# --- the roofline, with fixed peaks --------------------------------------------------------------


def test_achieved_figures_fractions_and_roofline_follow_from_the_unit_and_its_rate() -> None:
    a = assess(ROOFS, units_per_second=50.0, bytes_per_unit=1e9, flops_per_unit=2e9)
    assert (a.achieved_bandwidth_gb_s, a.achieved_gflop_s) == (50.0, 100.0)
    assert (a.bandwidth_fraction, a.compute_fraction) == (0.5, 0.1)
    r = a.roofline
    assert r.arithmetic_intensity_flop_per_byte == 2.0
    assert r.ridge_point_flop_per_byte == 10.0
    assert r.limiting_roof == "memory"
    assert r.attainable_gflop_s == 200.0  # min(1000, 2 flop/byte x 100 GB/s)
    assert r.attainable_units_per_second == 100.0
    assert r.headroom == 2.0


def test_a_workload_at_half_its_memory_roof_or_more_is_memory_bound() -> None:
    a = assess(ROOFS, units_per_second=80.0, bytes_per_unit=1e9, flops_per_unit=1e9)
    assert a.verdict == "memory_bound"
    assert any("fewer bytes" in line or "fuse" in line for line in a.advice)


def test_a_workload_near_its_compute_roof_is_compute_bound() -> None:
    a = assess(ROOFS, units_per_second=90.0, bytes_per_unit=1e8, flops_per_unit=1e10)
    assert a.verdict == "compute_bound"
    assert a.roofline.limiting_roof == "compute"
    assert any("Vectorize" in line for line in a.advice)


def test_a_workload_far_below_both_roofs_is_latency_bound() -> None:
    a = assess(ROOFS, units_per_second=1.0, bytes_per_unit=1e9, flops_per_unit=1e9)
    assert a.verdict == "latency_bound"
    assert a.roofline.headroom == 100.0
    assert any("overhead" in line for line in a.advice)


def test_a_roof_without_its_input_is_not_checked_and_the_result_says_so() -> None:
    a = assess(ROOFS, units_per_second=1.0, bytes_per_unit=1e9, flops_per_unit=None)
    assert a.achieved_gflop_s is None and a.compute_fraction is None
    assert a.verdict == "latency_bound"
    assert any("compute-bound is not ruled out" in w for w in a.warnings)


def test_achieved_bandwidth_above_the_peak_is_flagged_as_overcounted() -> None:
    a = assess(ROOFS, units_per_second=200.0, bytes_per_unit=1e9, flops_per_unit=0.0)
    assert a.verdict == "memory_bound"
    assert any("served from cache" in w for w in a.warnings)


def test_one_thread_uses_the_one_thread_peaks() -> None:
    roofs, _ = roofs_for(fixed_peaks(), 1, "fp64")
    assert roofs == Roofs(15.0, 50.0)


def test_some_threads_scale_the_one_thread_peaks_up_to_the_all_thread_ones() -> None:
    roofs, warnings = roofs_for(fixed_peaks(), 2, "fp32")
    assert roofs == Roofs(30.0, 200.0)
    assert warnings and "estimated" in warnings[0]


def test_all_threads_never_have_lower_peaks_than_one_thread() -> None:
    disturbed = fixed_peaks(gflop_s_fp32=80.0, copy_gb_s=10.0, triad_gb_s=9.0)
    roofs, _ = roofs_for(disturbed, 4, "fp32")
    assert roofs == Roofs(15.0, 100.0)


# --- verdicts of real workloads against this machine's measured peaks ----------------------------


def verdicts_next_to_fresh_peaks(rate: Callable[[PeakFigures], float], bytes_per_unit: Callable[[PeakFigures], float],
                                 flops_per_unit: float, expected: str, precision: Precision = "fp32",
                                 attempts: int = 3) -> list[str]:
    """The workload's verdict against peaks measured right before it, one thread, up to `attempts` times.

    Load from other processes lowers the workload's rate and the peaks alike when they are measured
    together; a calm moment in any attempt gives the verdict the workload deserves.
    """
    summaries = []
    for _ in range(attempts):
        peaks = measure_local_peaks(quick=True)
        roofs, _ = roofs_for(peaks, 1, precision)
        verdict = assess(roofs, rate(peaks), bytes_per_unit(peaks), flops_per_unit)
        summaries.append(verdict.summary)
        if verdict.verdict == expected:
            break
    return summaries


def test_a_streaming_copy_is_memory_bound() -> None:
    def rate(peaks: PeakFigures) -> float:
        src = np.ones(peaks.array_bytes // 8)
        dst = np.empty_like(src)
        return 1.0 / min(_seconds(lambda: np.copyto(dst, src)) for _ in range(5))

    summaries = verdicts_next_to_fresh_peaks(rate, lambda peaks: 2.0 * (peaks.array_bytes // 8) * 8, 0.0,
                                             "memory_bound")
    assert summaries[-1].startswith("memory_bound"), summaries


GEMM_RATE = """
import sys, time, numpy as np
n = 512
x = np.random.default_rng(0).random((n, n), dtype=np.float32)
y = x.T.copy()
np.matmul(x, y)
best = float("inf")
for _ in range(20):
    t = time.perf_counter(); np.matmul(x, y); best = min(best, time.perf_counter() - t)
print(1.0 / best)
"""


def test_a_dense_register_resident_kernel_is_compute_bound() -> None:
    # Single-threaded BLAS GEMM (a fresh process reads the thread count when BLAS loads).
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin"}

    def rate(_peaks: PeakFigures) -> float:
        out = subprocess.run([sys.executable, "-c", GEMM_RATE], capture_output=True, text=True, check=True,
                             env=env)
        return float(out.stdout)

    n = 512
    summaries = verdicts_next_to_fresh_peaks(rate, lambda _peaks: 3.0 * n * n * 4, 2.0 * n**3, "compute_bound")
    assert summaries[-1].startswith("compute_bound"), summaries


def test_a_sleep_dominated_loop_is_latency_bound(state: AppState) -> None:
    data = np.ones(1000)
    units = 50
    start = time.perf_counter()
    for _ in range(units):
        float(data.sum())
        time.sleep(0.002)
    rate = units / (time.perf_counter() - start)
    result = analyze_bounds(state, bytes_per_unit=float(data.nbytes), flops_per_unit=1000.0,
                            units_per_second=rate, threads=1)
    assert result.verdict == "latency_bound", result.summary


def _seconds(work: object) -> float:
    start = time.perf_counter()
    work()  # type: ignore[operator]
    return time.perf_counter() - start


# --- inputs --------------------------------------------------------------------------------------


def test_a_model_file_size_becomes_the_bytes_per_token(state: AppState, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"\0" * 4096)
    result = analyze_bounds(state, model_path=str(model), units_per_second=10.0)
    assert result.bytes_per_unit == 4096.0
    assert result.achieved_bandwidth_gb_s == pytest.approx(4096 * 10 / 1e9)


@pytest.mark.parametrize("kwargs", [
    {"bytes_per_unit": 1.0},  # no rate
    {"bytes_per_unit": 1.0, "units_per_second": 1.0, "metric": "m"},  # two rates
    {"units_per_second": 1.0},  # nothing about the unit
    {"bytes_per_unit": 1.0, "model_path": "x", "units_per_second": 1.0},
    {"model_path": "/nonexistent/model.gguf", "units_per_second": 1.0},
])
def test_unusable_inputs_are_refused_with_what_to_give(state: AppState, kwargs: dict[str, object]) -> None:
    with pytest.raises(InputError):
        analyze_bounds(state, **kwargs)  # type: ignore[arg-type]


def test_a_session_metric_without_a_session_says_to_start_one(state: AppState) -> None:
    with pytest.raises(StateError, match="start_session"):
        analyze_bounds(state, bytes_per_unit=1.0, metric="tok_s")


# --- peaks: the probe and its cache --------------------------------------------------------------


def test_measured_peaks_are_positive_and_name_their_method(measured_peaks: PeakFigures) -> None:
    assert measured_peaks.method in ("c", "numpy")
    assert measured_peaks.copy_gb_s_1t > 0 and measured_peaks.triad_gb_s > 0
    assert measured_peaks.gflop_s_fp32_1t > 0 and measured_peaks.gflop_s_fp64 > 0
    assert measured_peaks.array_bytes >= 2 * measured_peaks.llc_bytes


def test_peaks_are_measured_once_per_machine_then_read_from_the_cache(tmp_path: Path) -> None:
    calls: list[int] = []

    def measure() -> PeakFigures:
        calls.append(1)
        return fixed_peaks()

    first = cached_peaks(tmp_path, identity=VM_1, measure=measure)
    again = cached_peaks(tmp_path, identity=VM_1, measure=measure)
    other = cached_peaks(tmp_path, identity={**VM_1, "host": "vm-2"}, measure=measure)
    assert (first.cached, again.cached, other.cached) == (False, True, False)
    assert again.copy_gb_s == first.copy_gb_s
    assert len(calls) == 2
    assert cached_peaks(tmp_path, identity=VM_1, measure=measure,
                        remeasure=True).cached is False


def test_a_resized_vm_is_measured_again(tmp_path: Path) -> None:
    calls: list[int] = []

    def measure() -> PeakFigures:
        calls.append(1)
        return fixed_peaks()

    cached_peaks(tmp_path, identity=VM_1, measure=measure)
    resized = cached_peaks(tmp_path, identity={**VM_1, "logical_cpus": 16}, measure=measure)
    assert resized.cached is False and len(calls) == 2


def test_a_disturbed_cached_measurement_is_measured_again_and_each_figures_best_kept(tmp_path: Path) -> None:
    identity = VM_1
    disturbed = fixed_peaks(copy_gb_s=10.0, gflop_s_fp32=90.0, other_cpu_load=1.2, disturbed=True,
                            warnings=["other processes kept 1.20 CPUs busy"])
    cached_peaks(tmp_path, identity=identity, measure=lambda: disturbed)
    calm = fixed_peaks(copy_gb_s=38.0, triad_gb_s=30.0, other_cpu_load=0.01)
    merged = cached_peaks(tmp_path, identity=identity, measure=lambda: calm)
    assert (merged.copy_gb_s, merged.triad_gb_s, merged.gflop_s_fp32) == (38.0, 42.0, 400.0)
    assert merged.warnings == [] and not merged.disturbed and merged.cached is False
    assert cached_peaks(tmp_path, identity=identity, measure=lambda: disturbed).cached is True


def test_the_numpy_fallback_measures_the_same_figures() -> None:
    out = subprocess.run([*probe_command(quick=True), "--method", "numpy"], capture_output=True, text=True,
                         check=True)
    peaks = parse_probe_output(out.stdout)
    assert peaks.method == "numpy" and peaks.compiler is None
    assert peaks.copy_gb_s > 0 and peaks.gflop_s_fp32 > 0 and peaks.gflop_s_fp64_1t > 0


def test_the_probe_identifies_its_machine_without_measuring() -> None:
    out = subprocess.run(probe_command(identify=True), capture_output=True, text=True, check=True)
    identity = parse_identity_output(out.stdout)
    assert identity["host"] and identity["cpu_model"] and identity["logical_cpus"] >= 1
    assert identity == peak_probe.identify()


# --- counters ------------------------------------------------------------------------------------


PERF_CSV = """# started on Mon Nov 30 01:00:00 2026

12.50,msec,task-clock,12500000,100.00,0.980,CPUs utilized
<not supported>,,cycles,0,100.00,,
3000000,,cpu_core/instructions/,1000,100.00,,
1000000,,cpu_atom/instructions/,1000,100.00,,
40000,,cache-references:u,1000,100.00,,
<not counted>,,cache-misses,0,0.00,,
"""


def test_perf_csv_is_read_with_uncounted_events_as_none_and_core_types_summed() -> None:
    counts = parse_perf_csv(PERF_CSV)
    assert counts == {"task-clock": 12.5, "cycles": None, "instructions": 4000000.0,
                      "cache-references": 40000.0, "cache-misses": None}


# What `perf stat -x, -e task-clock,cycles,instructions,cache-references,cache-misses` wrote on a
# machine with a PMU, and in a VM whose hypervisor hides it.
PERF_CSV_COUNTED = """# started on Mon Nov 30 01:00:00 2026

1002.53,msec,task-clock,1002530000,100.00,0.998,CPUs utilized
3512345678,,cycles,1002530000,100.00,3.503,GHz
8123456789,,instructions,1002530000,100.00,2.31,insn per cycle
123456789,,cache-references,1002530000,100.00,123.143,M/sec
12345678,,cache-misses,1002530000,100.00,10.00,of all cache refs
"""
PERF_CSV_NO_PMU = """# started on Mon Nov 30 01:00:00 2026

1.23,msec,task-clock,1230000,100.00,0.512,CPUs utilized
<not supported>,,cycles,0,100.00,,
<not supported>,,instructions,0,100.00,,
<not supported>,,cache-references,0,100.00,,
<not supported>,,cache-misses,0,100.00,,
"""

FAKE_PERF = """#!{python}
# perf stat as the counters code calls it: run the command after `--`; when it ends, or when
# SIGINT stops it, write the recorded counts to the `-o` file.
import signal, subprocess, sys
args = sys.argv[1:]
signal.signal(signal.SIGINT, lambda *_: None)  # like perf: wait for the command, then report
code = subprocess.call(args[args.index("--") + 1:])
with open(args[args.index("-o") + 1], "w") as out, open({recorded!r}) as recorded:
    out.write(recorded.read())
sys.exit(code if code >= 0 else 128 - code)
"""


@pytest.fixture
def fake_perf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Put a `perf` that writes the given recorded CSV first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def install(csv: str) -> None:
        recorded = tmp_path / "recorded.csv"
        recorded.write_text(csv)
        perf = bin_dir / "perf"
        perf.write_text(FAKE_PERF.format(python=sys.executable, recorded=str(recorded)))
        perf.chmod(0o755)

    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return install


def test_counted_events_give_instructions_per_cycle_and_the_miss_rate(
    fake_perf: Callable[[str], None], tmp_path: Path
) -> None:
    fake_perf(PERF_CSV_COUNTED)
    report = perf_counters("true", cwd=tmp_path, timeout_s=60)
    assert report.available and report.exit_code == 0 and report.unsupported == []
    assert (report.cycles, report.instructions) == (3512345678.0, 8123456789.0)
    assert report.instructions_per_cycle == pytest.approx(2.313, abs=1e-3)
    assert report.cache_miss_rate == pytest.approx(0.1, abs=1e-4)


def test_a_machine_without_hardware_counters_says_so_instead_of_giving_zeros(
    fake_perf: Callable[[str], None], tmp_path: Path
) -> None:
    fake_perf(PERF_CSV_NO_PMU)
    report = perf_counters("true", cwd=tmp_path, timeout_s=60)
    assert not report.available and report.cycles is None and report.instructions_per_cycle is None
    assert report.unsupported == ["cycles", "instructions", "cache-references", "cache-misses"]
    assert report.reason is not None and "no hardware performance counters" in report.reason


def test_a_command_stopped_at_the_timeout_still_gives_the_counts_so_far(
    fake_perf: Callable[[str], None], tmp_path: Path
) -> None:
    fake_perf(PERF_CSV_COUNTED)
    report = perf_counters("sleep 60", cwd=tmp_path, timeout_s=0.5)
    assert report.available and report.exit_code is None
    assert report.instructions_per_cycle == pytest.approx(2.313, abs=1e-3)
    assert any("timed out after 0.5 s" in note and "cover that time" in note for note in report.notes)
    assert report.reason is None


def test_a_command_that_ignores_the_interrupt_is_killed_and_the_lost_counts_explained(
    fake_perf: Callable[[str], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(profiler, "INTERRUPT_GRACE_S", 0.5)  # the counters job stops its commands
    fake_perf(PERF_CSV_COUNTED)
    report = perf_counters("trap '' INT; sleep 60", cwd=tmp_path, timeout_s=0.5)
    assert not report.available and report.exit_code is None
    assert report.reason is not None and "timed out after 0.5 s" in report.reason
    assert "paranoid" not in report.reason


# --- through the MCP protocol --------------------------------------------------------------------


@pytest.mark.anyio
async def test_analyze_bounds_through_an_mcp_client(state: AppState, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with Client(build_server()) as client:
        tool = {t.name: t for t in (await client.list_tools()).tools}["analyze_bounds"]
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert {"bytes_per_unit", "flops_per_unit", "units_per_second"} <= set(tool.input_schema["properties"])
        assert "anyOf" not in tool.input_schema and "oneOf" not in tool.input_schema

        r = await client.call_tool("analyze_bounds", {"bytes_per_unit": 1e6, "flops_per_unit": 1e6,
                                                      "units_per_second": 1.0})
        assert not r.is_error, r.content
        out = r.structured_content
        assert out is not None
        for name in ("peak_bandwidth_gb_s", "peak_gflop_s", "achieved_bandwidth_gb_s", "achieved_gflop_s",
                     "verdict"):
            assert name in out
        assert out["verdict"] == "latency_bound"
        assert out["peaks"]["cached"] is True

        r = await client.call_tool("analyze_bounds", {"bytes_per_unit": 1e6, "metric": "tok_s"})
        assert r.is_error and "start_session" in str(r.content)


@pytest.mark.anyio
async def test_the_rate_can_come_from_the_session_baseline(state: AppState, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    repo = script_repo(tmp_path, bench="echo 'METRIC ms_per_token=20'")
    monkeypatch.chdir(tmp_path)
    async with Client(build_server()) as client:
        started = await client.call_tool("start_session", {"repo": str(repo), "metric": "ms_per_token",
                                                           "direction": "lower"})
        assert not started.is_error, started.content
        r = await client.call_tool("analyze_bounds", {"bytes_per_unit": 1e9, "metric": "ms_per_token",
                                                      "metric_unit": "milliseconds"})
        assert not r.is_error, r.content
        assert r.structured_content is not None
        assert r.structured_content["units_per_second"] == pytest.approx(50.0)
        assert "ms_per_token" in r.structured_content["rate_source"]
