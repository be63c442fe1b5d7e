"""Is a workload memory-bound, compute-bound or neither? A roofline verdict against measured peaks.

What one unit of work moves (bytes) and computes (flops), times its measured rate, gives the
achieved bandwidth and FLOP/s; divided by the worker's peaks (peaks.py), the fractions of each roof.
The roof a workload is close to says which kind of change can pay off, before any experiment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from autoresearch_mcp.analysis.counters import perf_counters
from autoresearch_mcp.analysis.peaks import cached_peaks, measure_local_peaks
from autoresearch_mcp.errors import InputError, StateError
from autoresearch_mcp.git.worktrees import machine_lock
from autoresearch_mcp.models import (
    AnalyzeBoundsResult,
    BoundVerdict,
    MetricUnit,
    PeakFigures,
    Precision,
    Roofline,
)
from autoresearch_mcp.session import Session
from autoresearch_mcp.settings import Settings

# A workload at half of a roof or more is "at" that roof: well-tuned streaming code reaches
# 60-90% of STREAM, and dense kernels 50-90% of the FMA peak. Below half of both roofs, the time
# goes to something else (overhead, latency, idle cores).
NEAR_ROOF = 0.5
# Achieved figures this far above a peak mean the inputs overcount (or the peak was disturbed).
ABOVE_PEAK = 1.15

ADVICE: dict[BoundVerdict, list[str]] = {
    "memory_bound": [
        "Move fewer bytes per unit: fuse consecutive operations so data is read once, not once per op.",
        "Keep the working set in cache (tiling/blocking, reordering loops) so repeated reads hit cache.",
        "Use smaller types: fp16/bf16, int8 or quantized weights, packed layouts.",
        "Avoid extra write traffic (in-place updates, non-temporal stores for write-only output).",
        "Do not expect SIMD or arithmetic micro-optimizations to help: the cores wait for memory.",
    ],
    "compute_bound": [
        "Vectorize better: wider SIMD (AVX2/AVX-512/NEON/SVE), FMA, ISA-specific kernels.",
        "Do fewer operations per unit: algebraic simplification, cheaper instructions, lookup tables.",
        "Use all cores if the workload does not yet.",
        "Do not expect memory-layout changes to help much: the arithmetic units are busy.",
    ],
    "latency_bound": [
        "Neither roof is near: find the overhead (per-call dispatch, synchronization, barriers, allocation, "
        "thread start-up, system calls, I/O or sleeps).",
        "Look for dependency chains and cache-miss latency (pointer chasing, gathers): prefetch, "
        "restructure data for sequential access, interleave independent work.",
        "Expose more parallelism: more threads, batching, overlapping independent steps.",
        "Profile where the time goes before optimizing arithmetic or bandwidth.",
    ],
}


class ServerState(Protocol):
    """What `analyze_bounds` reads of the server's state (app.py passes its AppState)."""

    session: Session | None
    settings: Settings


@dataclass(frozen=True)
class Roofs:
    """The peaks that apply to a workload: for its thread count and precision."""

    bandwidth_gb_s: float
    gflop_s: float


@dataclass
class Assessment:
    verdict: BoundVerdict
    summary: str
    achieved_bandwidth_gb_s: float | None
    achieved_gflop_s: float | None
    bandwidth_fraction: float | None
    compute_fraction: float | None
    roofline: Roofline
    advice: list[str]
    warnings: list[str] = field(default_factory=list)


def roofs_for(peaks: PeakFigures, threads: int, precision: Precision) -> tuple[Roofs, list[str]]:
    """Peaks for `threads` threads: the measured one-thread or all-thread figures, or in between an
    estimate (one thread's peak times the threads, capped at all threads').

    More threads never lower a peak: an all-thread figure below the one-thread one was disturbed,
    and the one-thread figure is the better bound.
    """
    bw_1t = max(peaks.copy_gb_s_1t, peaks.triad_gb_s_1t)
    bw_all = max(peaks.copy_gb_s, peaks.triad_gb_s, bw_1t)
    flop_1t = peaks.gflop_s_fp32_1t if precision == "fp32" else peaks.gflop_s_fp64_1t
    flop_all = max(peaks.gflop_s_fp32 if precision == "fp32" else peaks.gflop_s_fp64, flop_1t)
    warnings: list[str] = []
    if threads == 1:
        return Roofs(bw_1t, flop_1t), warnings
    if threads >= peaks.threads:
        if threads > peaks.threads:
            warnings.append(f"threads={threads} exceeds the {peaks.threads} CPUs the peaks were measured "
                            "on: oversubscribed threads add no peak")
        return Roofs(bw_all, flop_all), warnings
    warnings.append(f"the peaks for {threads} of {peaks.threads} threads are estimated from the one-thread "
                    "and all-thread measurements")
    return Roofs(min(bw_all, bw_1t * threads), min(flop_all, flop_1t * threads)), warnings


def assess(roofs: Roofs, units_per_second: float, bytes_per_unit: float | None,
           flops_per_unit: float | None) -> Assessment:
    """The roofline verdict of a workload doing `units_per_second` units of the given size."""
    achieved_bw = bytes_per_unit * units_per_second / 1e9 if bytes_per_unit is not None else None
    achieved_flop = flops_per_unit * units_per_second / 1e9 if flops_per_unit is not None else None
    bw_fraction = achieved_bw / roofs.bandwidth_gb_s if achieved_bw is not None else None
    compute_fraction = achieved_flop / roofs.gflop_s if achieved_flop is not None else None
    roofline = _roofline(roofs, units_per_second, bytes_per_unit, flops_per_unit)

    fractions: list[tuple[float, BoundVerdict]] = []
    if bw_fraction is not None:
        fractions.append((bw_fraction, "memory_bound"))
    if compute_fraction is not None:
        fractions.append((compute_fraction, "compute_bound"))
    nearest, nearest_roof = max(fractions)
    verdict: BoundVerdict = nearest_roof if nearest >= NEAR_ROOF else "latency_bound"

    warnings = _input_warnings(bw_fraction, compute_fraction, verdict)
    summary = (f"{verdict}: {_figure(achieved_bw, roofs.bandwidth_gb_s, 'GB/s', bw_fraction)}, "
               f"{_figure(achieved_flop, roofs.gflop_s, 'GFLOP/s', compute_fraction)}")
    if roofline.headroom is not None and roofline.headroom >= 1:
        summary += f"; the roofs allow at most {roofline.headroom:.3g}x the measured rate at this traffic"
    elif roofline.headroom is not None:
        summary += "; the measured rate is above what the peaks allow (see warnings)"
    return Assessment(verdict=verdict, summary=summary, achieved_bandwidth_gb_s=_round(achieved_bw),
                      achieved_gflop_s=_round(achieved_flop), bandwidth_fraction=_round(bw_fraction),
                      compute_fraction=_round(compute_fraction), roofline=roofline,
                      advice=list(ADVICE[verdict]), warnings=warnings)


def _roofline(roofs: Roofs, units_per_second: float, bytes_per_unit: float | None,
              flops_per_unit: float | None) -> Roofline:
    ridge = roofs.gflop_s / roofs.bandwidth_gb_s
    # Units per second each roof allows; a roof that the unit does not touch allows any rate.
    limits = []
    if bytes_per_unit:
        limits.append(roofs.bandwidth_gb_s * 1e9 / bytes_per_unit)
    if flops_per_unit:
        limits.append(roofs.gflop_s * 1e9 / flops_per_unit)
    attainable_rate = min(limits) if limits else None
    intensity = attainable_flop = None
    limiting = None
    if bytes_per_unit and flops_per_unit is not None:
        intensity = flops_per_unit / bytes_per_unit
        attainable_flop = min(roofs.gflop_s, intensity * roofs.bandwidth_gb_s)
        limiting = "memory" if intensity < ridge else "compute"
    elif bytes_per_unit:
        limiting = "memory"
    elif flops_per_unit:
        limiting = "compute"
    return Roofline(
        arithmetic_intensity_flop_per_byte=_round(intensity),
        ridge_point_flop_per_byte=round(ridge, 4),
        limiting_roof=limiting,
        attainable_gflop_s=_round(attainable_flop),
        attainable_units_per_second=_round(attainable_rate),
        headroom=_round(attainable_rate / units_per_second) if attainable_rate else None,
    )


def _input_warnings(bw_fraction: float | None, compute_fraction: float | None,
                    verdict: BoundVerdict) -> list[str]:
    warnings = []
    if bw_fraction is not None and bw_fraction > ABOVE_PEAK:
        warnings.append(f"the achieved bandwidth is {bw_fraction:.2f}x the measured peak: bytes_per_unit "
                        "probably counts data served from cache (reused across units), or the peaks "
                        "were measured while the machine was busy (remeasure=true)")
    if compute_fraction is not None and compute_fraction > ABOVE_PEAK:
        warnings.append(f"the achieved FLOP/s is {compute_fraction:.2f}x the measured peak: flops_per_unit "
                        "overcounts, or the work runs in narrower types (fp16/int8 dot products) than "
                        "`precision`")
    if compute_fraction is None:
        warnings.append("flops_per_unit not given: the compute roof was not checked"
                        + (", so compute-bound is not ruled out" if verdict == "latency_bound" else ""))
    if bw_fraction is None:
        warnings.append("bytes_per_unit not given: the memory roof was not checked"
                        + (", so memory-bound is not ruled out" if verdict == "latency_bound" else ""))
    return warnings


def _figure(achieved: float | None, peak: float, unit: str, fraction: float | None) -> str:
    if achieved is None or fraction is None:
        return f"? of {peak:.4g} {unit}"
    return f"{achieved:.4g} of {peak:.4g} {unit} ({fraction:.0%})"


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


# --- the tool ------------------------------------------------------------------------------------


def session_rate(session: Session | None, metric: str, metric_unit: MetricUnit) -> tuple[float, str]:
    """Units per second from the bound session's baseline mean of `metric`."""
    if session is None:
        raise StateError(f"no session is bound, so metric {metric!r} has no baseline: call start_session "
                         "first, or give units_per_second directly")
    mean = session.baseline_mean(metric)
    if mean is None:
        raise InputError(f"the session has no baseline for metric {metric!r}: use one of the METRIC names "
                         "its benchmark prints, or give units_per_second")
    if mean <= 0:
        raise InputError(f"the baseline mean of metric {metric!r} is {mean}: a rate or a time must be "
                         "positive; give units_per_second instead")
    rate = {"per_second": mean, "seconds": 1.0 / mean, "milliseconds": 1000.0 / mean}[metric_unit]
    return float(rate), f"baseline mean of session metric {metric!r} ({mean:.6g}, unit: {metric_unit})"


def _check_inputs(bytes_per_unit: float | None, flops_per_unit: float | None, model_path: str | None,
                  units_per_second: float | None, metric: str | None) -> None:
    if (units_per_second is None) == (metric is None):
        raise InputError("give exactly one of units_per_second (a measured rate) or metric (a METRIC of the "
                         "bound session, whose baseline mean is used)")
    if units_per_second is not None and units_per_second <= 0:
        raise InputError(f"units_per_second must be positive, got {units_per_second}")
    if model_path is not None and bytes_per_unit is not None:
        raise InputError("give bytes_per_unit or model_path, not both: model_path sets bytes_per_unit to the "
                         "model file's size")
    if bytes_per_unit is None and flops_per_unit is None and model_path is None:
        raise InputError("say what one unit of work does: bytes_per_unit and/or flops_per_unit, or "
                         "model_path for LLM decoding (each token reads every weight once)")
    for name, value in (("bytes_per_unit", bytes_per_unit), ("flops_per_unit", flops_per_unit)):
        if value is not None and value < 0:
            raise InputError(f"{name} must be 0 or more, got {value}")


def _model_bytes(model_path: str) -> float:
    path = Path(model_path).expanduser()
    if not path.is_file():
        raise InputError(f"model_path {model_path!r} is not a file: give the model file (e.g. a .gguf) that "
                         "every generated token reads, or bytes_per_unit")
    return float(path.stat().st_size)


def analyze_bounds(
    state: ServerState,
    *,
    bytes_per_unit: float | None = None,
    flops_per_unit: float | None = None,
    units_per_second: float | None = None,
    model_path: str | None = None,
    metric: str | None = None,
    metric_unit: MetricUnit = "per_second",
    threads: int | None = None,
    precision: Precision = "fp32",
    command: str | None = None,
    command_timeout_s: float = 300.0,
    remeasure: bool = False,
) -> AnalyzeBoundsResult:
    """The verdict for a workload on this worker, with the peaks (cached) and, where perf can, counters."""
    _check_inputs(bytes_per_unit, flops_per_unit, model_path, units_per_second, metric)
    if threads is not None and threads < 1:
        raise InputError(f"threads must be 1 or more, got {threads}")
    session = state.session
    warnings: list[str] = []
    if model_path is not None:
        bytes_per_unit = _model_bytes(model_path)
        warnings.append(f"bytes_per_unit = size of {model_path} ({bytes_per_unit / 2**20:.0f} MiB): every "
                        "token reads all weights once; the KV cache adds to it at long contexts")
    if units_per_second is not None:
        rate, rate_source = units_per_second, "units_per_second input"
    else:
        rate, rate_source = session_rate(session, str(metric), metric_unit)

    # the peak probe and the counted command take the machine's turn, as a bench does
    lock = str(machine_lock(state.settings.cache_dir))
    peaks = cached_peaks(state.settings.cache_dir, remeasure=remeasure,
                         measure=lambda: measure_local_peaks(machine_lock=lock))
    used_threads = threads or peaks.threads
    roofs, roof_warnings = roofs_for(peaks, used_threads, precision)
    result = assess(roofs, rate, bytes_per_unit, flops_per_unit)
    advice = result.advice
    all_bw = roofs_for(peaks, peaks.threads, precision)[0].bandwidth_gb_s
    if result.verdict == "memory_bound" and all_bw > 1.2 * roofs.bandwidth_gb_s:
        advice = [f"More threads raise the memory roof itself: {roofs.bandwidth_gb_s:.3g} GB/s with "
                  f"{used_threads} thread(s), {all_bw:.3g} GB/s with all {peaks.threads}.", *advice]

    cwd = Path(session.repo.working_dir) if session is not None else None
    counters = perf_counters(command, cwd=cwd, timeout_s=command_timeout_s, machine_lock=lock)
    if peaks.quick:
        warnings.append("the peaks come from the quick probe (smaller arrays, fewer repetitions): "
                        "remeasure=true for the full measurement")
    return AnalyzeBoundsResult(
        verdict=result.verdict,
        summary=result.summary,
        peak_bandwidth_gb_s=round(roofs.bandwidth_gb_s, 3),
        peak_gflop_s=round(roofs.gflop_s, 3),
        achieved_bandwidth_gb_s=result.achieved_bandwidth_gb_s,
        achieved_gflop_s=result.achieved_gflop_s,
        bandwidth_fraction=result.bandwidth_fraction,
        compute_fraction=result.compute_fraction,
        units_per_second=rate,
        bytes_per_unit=bytes_per_unit,
        flops_per_unit=flops_per_unit,
        rate_source=rate_source,
        threads=used_threads,
        precision=precision,
        roofline=result.roofline,
        advice=advice,
        method=describe_method(peaks),
        peaks=peaks,
        counters=counters,
        warnings=[*warnings, *peaks.warnings, *roof_warnings, *result.warnings],
    )


def describe_method(peaks: PeakFigures) -> str:
    where = "cached" if peaks.cached else "measured now"
    if peaks.method == "c":
        how = (f"compiled C probe ({peaks.compiler}, {peaks.flags}): STREAM-like copy/triad over "
               f"{peaks.array_bytes / 2**20:.0f} MiB arrays and a {peaks.flop_kernel} kernel")
    else:
        how = (f"numpy fallback (copy/triad over {peaks.array_bytes / 2**20:.0f} MiB arrays, "
               f"{peaks.flop_kernel} for FLOP/s)")
        if peaks.fallback_reason:
            how += f" because {peaks.fallback_reason}"
    return f"{how}; {where} on {peaks.host} ({peaks.cpu_model}, {peaks.threads} threads) at {peaks.measured_at}"
