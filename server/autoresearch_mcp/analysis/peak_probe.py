"""Measure a machine's peak memory bandwidth and peak FLOP/s: a standalone probe.

Like worker/runner.py, this file is self-contained (standard library, numpy only for the
fallback) so that the very same bytes run here (`python3 peak_probe.py`) and on a cloud VM. Its
last stdout line is one machine-readable line, `AUTORESEARCH_PEAKS {json}`, that
`peaks.parse_probe_output` reads whatever the executor.

Method: when a C compiler exists, a small STREAM-like program (copy and triad over arrays far
larger than the last-level cache, best of several repetitions) and a register-resident FMA kernel
(independent vector accumulators, so neither memory nor FMA latency limits it) are compiled with
`-O3 -march=native -fopenmp` and run on one thread and on all threads. Without a compiler, numpy
measures the same copy and triad with one Python thread per CPU, and FLOP/s with BLAS GEMM.
`python3 peak_probe.py --identify` prints the host and CPU model only: the key of the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEAKS_PREFIX = "AUTORESEARCH_PEAKS "
IDENTITY_PREFIX = "AUTORESEARCH_IDENTITY "
MIB = 1 << 20
DEFAULT_LLC_BYTES = 32 * MIB

# STREAM's rule: each array at least 4x the last-level caches, so no repetition is served from
# cache. The quick mode (tests) keeps 2x: still mostly DRAM traffic, half the setup time.
SIZES = {
    "full": {"llc_factor": 4, "min_bytes": 64 * MIB, "reps": 10, "flop_seconds": 0.3},
    "quick": {"llc_factor": 2, "min_bytes": 32 * MIB, "reps": 5, "flop_seconds": 0.1},
}

C_SOURCE = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__)
#define VBYTES 64
#elif defined(__AVX__)
#define VBYTES 32
#else
#define VBYTES 16
#endif
/* Ten independent accumulators cover FMA latency x throughput (4 cycles x 2 units) and still fit
   the 16 vector registers of AVX2 when the compiler splits wider vectors. */
#define NACC 10

typedef float vf __attribute__((vector_size(VBYTES)));
typedef double vd __attribute__((vector_size(VBYTES)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

volatile double sink;

#define FMA_KERNEL(NAME, VT, ST)                                                  \
    static void NAME(long iters) {                                                \
        VT acc[NACC];                                                             \
        VT a = (VT){0} + (ST)0.999999, b = (VT){0} + (ST)1e-6;                    \
        for (int k = 0; k < NACC; k++) acc[k] = (VT){0} + (ST)(k + 1) * (ST)1e-3; \
        for (long i = 0; i < iters; i++)                                          \
            for (int k = 0; k < NACC; k++) acc[k] = acc[k] * a + b;               \
        ST s = 0;                                                                 \
        for (int k = 0; k < NACC; k++)                                            \
            for (int j = 0; j < (int)(VBYTES / sizeof(ST)); j++) s += acc[k][j];  \
        sink += (double)s;                                                        \
    }
FMA_KERNEL(fma_f32, vf, float)
FMA_KERNEL(fma_f64, vd, double)

/* Iterations of `kernel` that take about `seconds` on one thread. */
static long calibrate(void (*kernel)(long), double seconds) {
    long iters = 1 << 12;
    for (;;) {
        double t0 = now();
        kernel(iters);
        double t = now() - t0;
        if (t > seconds / 4 || iters > (1L << 40)) return (long)((double)iters * seconds / t) + 1;
        iters *= 2;
    }
}

static double gflops(void (*kernel)(long), double flops_per_iter, long iters, int threads) {
    double t0 = now();
    #pragma omp parallel num_threads(threads)
    kernel(iters);
    return flops_per_iter * (double)iters * threads / (now() - t0) / 1e9;
}

static double copy_gbs(double *a, double *c, long n, int threads) {
    double t0 = now();
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; i++) c[i] = a[i];
    return 2.0 * sizeof(double) * (double)n / (now() - t0) / 1e9;
}

static double triad_gbs(double *a, double *b, double *c, long n, int threads) {
    double t0 = now(), q = 3.0;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; i++) a[i] = b[i] + q * c[i];
    return 3.0 * sizeof(double) * (double)n / (now() - t0) / 1e9;
}

static void keep_max(double *best, double value) {
    if (value > *best) *best = value;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s ELEMENTS REPS FLOP_SECONDS\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]);
    int reps = atoi(argv[2]);
    double seconds = atof(argv[3]);
    int threads = max_threads();
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)),
           *c = malloc(n * sizeof(double));
    if (!a || !b || !c) {
        fprintf(stderr, "cannot allocate 3 x %ld doubles\n", n);
        return 1;
    }
    /* First touch by the threads that will use each page (NUMA placement). */
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; i++) { a[i] = 1.0; b[i] = 2.0; c[i] = 0.0; }
    double f32 = 2 * NACC * (VBYTES / sizeof(float)), f64 = 2 * NACC * (VBYTES / sizeof(double));
    long it32 = calibrate(fma_f32, seconds / reps), it64 = calibrate(fma_f64, seconds / reps);
    /* Rounds interleave every figure and keep each one's best, so a burst of other work on the
       machine spoils one sample of each figure rather than all samples of one. */
    double best[8] = {0};
    for (int r = 0; r < reps; r++) {
        keep_max(&best[0], copy_gbs(a, c, n, threads));
        keep_max(&best[1], triad_gbs(a, b, c, n, threads));
        keep_max(&best[2], copy_gbs(a, c, n, 1));
        keep_max(&best[3], triad_gbs(a, b, c, n, 1));
        keep_max(&best[4], gflops(fma_f32, f32, it32, threads));
        keep_max(&best[5], gflops(fma_f32, f32, it32, 1));
        keep_max(&best[6], gflops(fma_f64, f64, it64, threads));
        keep_max(&best[7], gflops(fma_f64, f64, it64, 1));
    }
    printf("threads %d\nvector_bytes %d\n", threads, VBYTES);
    printf("copy_gb_s %.4f\ntriad_gb_s %.4f\n", best[0], best[1]);
    printf("copy_gb_s_1t %.4f\ntriad_gb_s_1t %.4f\n", best[2], best[3]);
    printf("gflop_s_fp32 %.4f\ngflop_s_fp32_1t %.4f\n", best[4], best[5]);
    printf("gflop_s_fp64 %.4f\ngflop_s_fp64_1t %.4f\n", best[6], best[7]);
    free(a);
    free(b);
    free(c);
    return 0;
}
"""

# Tried in order: the first that compiles is used (ARM compilers may want -mcpu=native; a
# compiler without OpenMP still gives the one-thread figures).
FLAG_SETS = (
    ["-O3", "-march=native", "-fopenmp"],
    ["-O3", "-mcpu=native", "-fopenmp"],
    ["-O3", "-march=native"],
    ["-O3"],
)


# --- identity ------------------------------------------------------------------------------------


def usable_cpus() -> int:
    """CPUs this process may run on (the affinity mask, which containers narrow)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Hardware", "Processor", "CPU part"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if match:
            return match.group(1).strip()
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                 text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown"


def _parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
    if not match:
        return 0
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]


def llc_bytes() -> int:
    """Total last-level cache of the machine: one instance's size times the instances."""
    best_level, size, sharing = 0, 0, 1
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            this_size = _parse_size((index / "size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and level > best_level and this_size:
            best_level, size, sharing = level, this_size, max(1, _count_cpu_list(shared))
    if not size:
        return DEFAULT_LLC_BYTES
    cpus = os.cpu_count() or 1
    return size * max(1, -(-cpus // sharing))


def _count_cpu_list(text: str) -> int:
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.strip().isdigit():
            count += (int(hi) - int(lo) + 1) if hi.strip().isdigit() else 1
    return count


def available_memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def identify() -> dict[str, Any]:
    """The cache key of a machine's peaks, plus what sizes the arrays."""
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "logical_cpus": usable_cpus(),
        "llc_bytes": llc_bytes(),
        "machine": platform.machine(),
    }


def array_bytes(mode: str, llc: int, available: int | None) -> int:
    size = SIZES[mode]
    want = max(int(size["llc_factor"]) * llc, int(size["min_bytes"]))
    if available:
        want = min(want, available // 8)  # three arrays stay under 3/8 of the free memory
    return max(want, 8 * MIB)


# --- C probe -------------------------------------------------------------------------------------


def find_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def compile_probe(compiler: str, workdir: Path) -> tuple[Path, list[str]]:
    """Compile C_SOURCE with the best flag set the compiler accepts; raise with its errors."""
    source = workdir / "peak_probe.c"
    source.write_text(C_SOURCE)
    binary = workdir / "peak_probe"
    errors = ""
    for flags in FLAG_SETS:
        out = subprocess.run([compiler, *flags, str(source), "-o", str(binary)],
                             capture_output=True, text=True, timeout=120)
        if out.returncode == 0:
            return binary, flags
        errors = out.stderr.strip()[-500:]
    raise RuntimeError(f"{compiler} could not compile the probe: {errors}")


def compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return compiler
    first = out.stdout.strip().splitlines()
    return first[0] if first else compiler


def c_peaks(mode: str, elements: int, cpus: int) -> dict[str, Any]:
    compiler = find_compiler()
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc, clang or $CC) on PATH")
    size = SIZES[mode]
    with tempfile.TemporaryDirectory(prefix="autoresearch-peaks-") as tmp:
        binary, flags = compile_probe(compiler, Path(tmp))
        env = dict(os.environ, OMP_NUM_THREADS=str(cpus))
        out = subprocess.run([str(binary), str(elements), str(size["reps"]), str(size["flop_seconds"])],
                             capture_output=True, text=True, timeout=600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"the compiled probe failed (exit {out.returncode}): {out.stderr.strip()[-500:]}")
    figures: dict[str, Any] = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition(" ")
        figures[key] = int(value) if key in ("threads", "vector_bytes") else float(value)
    figures.update(method="c", compiler=compiler_version(compiler), flags=" ".join(flags),
                   flop_kernel="register-resident vector FMA")
    return figures


# --- numpy fallback ------------------------------------------------------------------------------


def _best_rate(work: Any, amount: float, reps: int) -> float:
    best = 0.0
    for _ in range(reps):
        start = time.perf_counter()
        work()
        best = max(best, amount / (time.perf_counter() - start) / 1e9)
    return best


def numpy_bandwidth(elements: int, reps: int, threads: int) -> dict[str, float]:
    """Copy and triad with numpy; large ufunc calls release the GIL, so threads run in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    a, b, c = np.ones(elements), np.full(elements, 2.0), np.zeros(elements)
    block = 1 << 15  # triad in L2-sized blocks: the temporary stays in cache, as in a fused loop

    def copy(lo: int, hi: int) -> None:
        np.copyto(c[lo:hi], a[lo:hi])

    def triad(lo: int, hi: int) -> None:
        for start in range(lo, hi, block):
            end = min(start + block, hi)
            np.multiply(c[start:end], 3.0, out=a[start:end])
            np.add(a[start:end], b[start:end], out=a[start:end])

    figures: dict[str, float] = {}
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for count, suffix in ((threads, ""), (1, "_1t")):
            bounds = [(i * elements // count, (i + 1) * elements // count) for i in range(count)]
            for name, kernel, nbytes in (("copy", copy, 16), ("triad", triad, 24)):

                def run(kernel: Any = kernel, bounds: list[tuple[int, int]] = bounds) -> None:
                    list(pool.map(lambda span: kernel(*span), bounds))

                figures[f"{name}_gb_s{suffix}"] = _best_rate(run, nbytes * elements, reps)
    return figures


def numpy_gemm_gflops(seconds: float) -> dict[str, float]:
    return {f"gflop_s_{name}": _gemm_rate(name, seconds) for name in ("fp32", "fp64")}


def _gemm_rate(precision: str, seconds: float, n: int = 1024) -> float:
    import numpy as np

    dtype = np.float32 if precision == "fp32" else np.float64
    x = np.random.default_rng(0).random((n, n), dtype=dtype)
    y = x.T.copy()

    def gemm() -> None:
        np.matmul(x, y)

    reps = max(3, int(seconds / max(_time_once(gemm), 1e-6)))  # the first call also warms BLAS up
    return _best_rate(gemm, 2.0 * n**3, reps)


def _time_once(work: Any) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def numpy_peaks(mode: str, elements: int, cpus: int) -> dict[str, Any]:
    import numpy as np

    size = SIZES[mode]
    figures: dict[str, Any] = dict(numpy_bandwidth(elements, int(size["reps"]), cpus))
    figures.update(numpy_gemm_gflops(float(size["flop_seconds"])))
    # One BLAS thread needs a fresh process: the thread count is read when BLAS loads.
    single_env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--gemm-only", "--mode", mode],
                         capture_output=True, text=True, timeout=600, env=single_env)
    single = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}
    for name in ("fp32", "fp64"):
        figures[f"gflop_s_{name}_1t"] = single.get(f"gflop_s_{name}", figures[f"gflop_s_{name}"] / cpus)
    figures.update(threads=cpus, method="numpy", compiler=None, flags=None,
                   flop_kernel=f"BLAS GEMM (numpy {np.__version__})")
    return figures


# --- entry point ---------------------------------------------------------------------------------


def _busy_cpu_seconds() -> float | None:
    """CPU seconds all processes used since boot, steal time included (Linux /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(f) for f in fields]
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]  # all but idle and iowait (steal: the hypervisor's)
    return busy / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    import resource

    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def setup_warnings(figures: dict[str, Any]) -> list[str]:
    """How the way the probe was built limits its figures (no OpenMP, no native SIMD)."""
    warnings = []
    flags = figures.get("flags") or ""
    if figures.get("method") == "c" and "-fopenmp" not in flags and figures.get("logical_cpus", 1) > 1:
        warnings.append("the probe was compiled without OpenMP: the all-thread figures are one thread's; "
                        "an OpenMP-capable compiler (gcc) gives multi-core peaks")
    if figures.get("method") == "c" and "native" not in flags:
        warnings.append("the probe was compiled without -march/-mcpu=native: the FLOP peak is that of the "
                        "baseline SIMD, below what the CPU can do")
    return warnings


def disturbance(figures: dict[str, Any], other_load: float | None) -> list[str]:
    """Signs that something else ran during the measurement, which lowers the peaks."""
    signs = []
    if other_load is not None and other_load > 0.25:
        signs.append(f"other processes (or the hypervisor) kept {other_load:.2f} CPUs busy while the "
                     "peaks were measured: they may be low; they are measured again at the next call")
    for kind in ("copy_gb_s", "triad_gb_s", "gflop_s_fp32", "gflop_s_fp64"):
        if figures["threads"] > 1 and figures[kind] < 0.95 * figures[kind + "_1t"]:
            signs.append(f"{kind} on all threads is below its one-thread figure: the measurement was "
                         "disturbed")
    return signs


def measure(mode: str = "full", method: str = "auto") -> dict[str, Any]:
    """Measure the peaks with the compiled probe, or numpy when that is impossible (say why)."""
    started = time.perf_counter()
    busy_before, own_before = _busy_cpu_seconds(), _own_cpu_seconds()
    ident = identify()
    nbytes = array_bytes(mode, ident["llc_bytes"], available_memory_bytes())
    elements = nbytes // 8
    cpus = ident["logical_cpus"]
    fallback_reason = None
    figures: dict[str, Any] | None = None
    if method in ("auto", "c"):
        try:
            figures = c_peaks(mode, elements, cpus)
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
            if method == "c":
                raise
            fallback_reason = str(exc)
    if figures is None:
        figures = numpy_peaks(mode, elements, cpus)
    elapsed = time.perf_counter() - started
    busy_after = _busy_cpu_seconds()
    other_load = None
    if busy_before is not None and busy_after is not None:
        others = (busy_after - busy_before) - (_own_cpu_seconds() - own_before)
        other_load = round(max(0.0, others) / elapsed, 3)
    figures.update(ident)
    signs = disturbance(figures, other_load)
    figures.update(other_cpu_load=other_load, disturbed=bool(signs), warnings=setup_warnings(figures) + signs)
    figures.update(quick=mode == "quick", array_bytes=nbytes, fallback_reason=fallback_reason,
                   duration_s=round(elapsed, 3),
                   measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mode", choices=sorted(SIZES), default="full")
    parser.add_argument("--method", choices=["auto", "c", "numpy"], default="auto")
    parser.add_argument("--identify", action="store_true", help="print the machine's identity only")
    parser.add_argument("--gemm-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.gemm_only:
        print(json.dumps(numpy_gemm_gflops(float(SIZES[args.mode]["flop_seconds"]))))
    elif args.identify:
        print(IDENTITY_PREFIX + json.dumps(identify()))
    else:
        print(PEAKS_PREFIX + json.dumps(measure(args.mode, args.method)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
