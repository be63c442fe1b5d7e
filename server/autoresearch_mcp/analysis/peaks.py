"""A worker's peak bandwidth and FLOP/s: run the standalone probe once per machine, cache the result.

Any executor can produce peaks: it runs `probe_command(...)` where it runs benchmarks (the local
machine, or a VM after copying `PROBE_SCRIPT` there), hands the probe's stdout to
`parse_probe_output`, and `cached_peaks` keeps one file per host and CPU model so the probe runs
once per worker.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import ValidationError

from autoresearch_mcp.analysis import peak_probe
from autoresearch_mcp.analysis.counters import run_counted
from autoresearch_mcp.errors import ExternalError
from autoresearch_mcp.models import PeakFigures

log = logging.getLogger(__name__)

PROBE_SCRIPT = Path(peak_probe.__file__).resolve()
PROBE_TIMEOUT_S = 900.0
FIGURES = ("copy_gb_s", "triad_gb_s", "copy_gb_s_1t", "triad_gb_s_1t",
           "gflop_s_fp32", "gflop_s_fp32_1t", "gflop_s_fp64", "gflop_s_fp64_1t")


def probe_command(script: str = str(PROBE_SCRIPT), python: str = sys.executable, *, quick: bool = False,
                  identify: bool = False) -> list[str]:
    """The argv that runs the probe (for a VM: the path where the script was copied, `python3`)."""
    if identify:
        return [python, script, "--identify"]
    return [python, script, "--mode", "quick" if quick else "full"]


def _prefixed_json(text: str, prefix: str, what: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        if line.startswith(prefix):
            data: dict[str, Any] = json.loads(line[len(prefix):])
            return data
    raise ExternalError(f"the peak probe printed no {prefix.strip()} line ({what}); its output ended with: "
                        f"{text.strip()[-300:]!r}. Run `python3 {PROBE_SCRIPT.name}` on the worker to see why.")


def parse_probe_output(text: str) -> PeakFigures:
    """Read the probe's last `AUTORESEARCH_PEAKS {json}` line."""
    data = _prefixed_json(text, peak_probe.PEAKS_PREFIX, "peaks")
    try:
        return PeakFigures.model_validate(data)
    except ValidationError as exc:
        raise ExternalError(f"the peak probe's result line is incomplete: {exc}") from exc


def parse_identity_output(text: str) -> dict[str, Any]:
    """Read the probe's last `AUTORESEARCH_IDENTITY {json}` line (`probe_command(identify=True)`)."""
    return _prefixed_json(text, peak_probe.IDENTITY_PREFIX, "identity")


def measure_local_peaks(*, quick: bool = False, method: str = "auto", machine_lock: str | None = None) -> PeakFigures:
    """Run the probe in a subprocess on this machine (the same bytes a VM would run), as a counters job under
    the machine's turn: it never loads the CPU during another experiment's pairs, nor is disturbed by them.

    It runs in its own process group, so a timeout also stops the compiler and the compiled probe.
    """
    argv = [*probe_command(quick=quick), "--method", method]
    result = run_counted([(argv, tempfile.gettempdir(), PROBE_TIMEOUT_S, False)], machine_lock)[0]
    if result.timed_out:
        raise ExternalError(f"the peak probe did not finish within {PROBE_TIMEOUT_S:.0f} s; is the machine "
                            "overloaded?")
    if result.exit_code != 0:
        raise ExternalError(f"the peak probe failed (exit {result.exit_code}): {result.tail(500).strip()}")
    return parse_probe_output(result.output)


@functools.cache
def local_identity() -> dict[str, Any]:
    """This machine's identity (the peaks' cache key), read once per process."""
    return peak_probe.identify()


def merge_best(old: PeakFigures, new: PeakFigures) -> PeakFigures:
    """Two measurements of one machine: each figure's best, as the probe itself keeps best-of-N."""
    if (old.method, old.threads) != (new.method, new.threads):
        return new
    loads = [x for x in (old.other_cpu_load, new.other_cpu_load) if x is not None]
    update: dict[str, Any] = {f: max(getattr(old, f), getattr(new, f)) for f in FIGURES}
    update["other_cpu_load"] = min(loads) if loads else None
    figures = new.model_copy(update=update).model_dump()
    signs = peak_probe.disturbance(figures, update["other_cpu_load"])
    update.update(disturbed=bool(signs), warnings=peak_probe.setup_warnings(figures) + signs)
    return new.model_copy(update=update)


def cache_path(cache_dir: Path, identity: dict[str, Any]) -> Path:
    """One file per host, CPU model and CPU count: a resized or migrated VM gets measured again."""
    key = f"{identity['host']}-{identity['cpu_model']}-{identity['logical_cpus']}cpu"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("_")[:120] or "unknown"
    return cache_dir / "peaks" / f"{slug}.json"


def cached_peaks(
    cache_dir: Path,
    *,
    identity: dict[str, Any] | None = None,
    measure: Callable[[], PeakFigures] | None = None,
    remeasure: bool = False,
) -> PeakFigures:
    """The worker's peaks from the cache, measured first when missing or when `remeasure`.

    A cached measurement that was disturbed (by other load) is measured again and merged,
    so a busy moment at the first call does not set low peaks for good.
    Defaults to this machine; an executor for another worker passes that worker's `identity`
    (`parse_identity_output` of `probe_command(identify=True)` run there) and a `measure` that runs
    the probe there.
    """
    path = cache_path(cache_dir, identity if identity is not None else local_identity())
    path.parent.mkdir(parents=True, exist_ok=True)
    # A lock, so that two calls at once measure once, and never while the other one is measuring.
    with FileLock(str(path) + ".lock"):
        previous = None
        if path.exists() and not remeasure:
            try:
                previous = PeakFigures.model_validate_json(path.read_text())
            except (OSError, ValidationError):
                log.warning("ignoring an unreadable peaks cache %s", path)
        if previous is not None and not previous.disturbed:
            return previous.model_copy(update={"cached": True, "cache_path": str(path)})
        peaks = (measure or measure_local_peaks)()
        if previous is not None:
            peaks = merge_best(previous, peaks)
        path.write_text(peaks.model_dump_json(indent=2, exclude={"cached", "cache_path"}))
        log.info("measured peaks in %.1f s (%s), cached in %s", peaks.duration_s, peaks.method, path)
        return peaks.model_copy(update={"cached": False, "cache_path": str(path)})
