"""Building a tree once per content: a marker records what was built, the compiler cache is shared between
trees, and a build's cache hits are counted. Standard library only (shipped beside the runner)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import jobenv, machinelock, procs, sandbox

BUILT_MARKER = ".autoresearch-built"


STATS_LOG = ".autoresearch-ccache-stats"


def _cache_counts(stats_log: Path) -> dict[str, int] | None:
    """Hits and misses of one build, from ccache's per-compilation stats log (None: no log)."""
    if not stats_log.exists():
        return None
    hits = misses = 0
    for record in stats_log.read_text(errors="replace").split("# ")[1:]:
        fields = record.split()
        if "direct_cache_hit" in fields or "preprocessed_cache_hit" in fields:
            hits += 1
        elif "cache_miss" in fields:
            misses += 1
    return {"hits": hits, "misses": misses}


@dataclass
class BuildResult:
    """One tree's build: `reused` when an earlier build of the same content was kept."""

    mode: str  # "reused", "fresh" or "incremental"
    duration_s: float = 0.0
    command: procs.CommandResult | None = None
    cache: dict[str, int] | None = None

    @property
    def ok(self) -> bool:
        return self.command is None or self.command.ok

    def record(self) -> dict[str, Any]:
        return {"mode": self.mode, "reused": self.mode == "reused", "duration_s": round(self.duration_s, 3),
                "cache": self.cache}


def build_tree(
    tree: str, timeout_s: float, log: Any, content: str | None = None, machine_lock: str | None = None,
    env: dict[str, str] | None = None, confine: sandbox.Confinement | None = None,
) -> BuildResult:
    """Build one tree unless it already holds a build of `content` (a git tree id).

    `env` is the job's environment (run_env; without it, one of no job); `confine` how the build runs
    (every job's build is confined: only the server's own tests of this function pass None).

    The marker records which content was built, so a persistent build directory that moved to
    other content builds again (incrementally), while a tree with the same content is reused.
    Without `content` (a tree whose content never changes) any finished build is reused.
    """
    marker = Path(tree) / BUILT_MARKER
    tree_lock = str(Path(tree).parent / (Path(tree).name + ".build.lock"))
    with machinelock.file_lock(tree_lock), machinelock.machine_turn(machine_lock, shared=True):
        built = _read_marker(marker)
        if built is not None and (content is None or built.get("content") == content):
            log.write(f"[autoresearch] reusing the build of {tree}\n")
            return BuildResult("reused")
        mode = "fresh" if built is None else "incremental"
        _unmark(marker)
        log.write(f"[autoresearch] build {tree} ({mode})\n")
        log.flush()
        # inside the tree: the only place of the job's a confined build can write (its figures are cosmetic)
        stats = Path(tree) / STATS_LOG
        stats.unlink(missing_ok=True)
        full = {**(env if env is not None else jobenv.run_env(None, tree))}
        if "CCACHE_BASEDIR" in full:
            full["CCACHE_STATSLOG"] = str(stats.resolve())
        res = procs.run_command(["bash", "./autoresearch.sh", "build"], tree, timeout_s, env=full, log=log,
                          confine=confine)
        cache = _cache_counts(stats)
        stats.unlink(missing_ok=True)
        if res.ok:
            _mark(marker, {"content": content, "duration_s": res.duration_s}, log)
        else:  # whatever a failed build wrote at the marker's path never makes its tree count as built
            _unmark(marker)
        return BuildResult(mode, res.duration_s, res, cache)


def _mark(marker: Path, record: dict[str, Any], log: Any) -> None:
    """Record a finished build at `marker`, whole or not at all: a disk that filled up leaves no half-written
    marker that would keep the tree as a build (unmarked, it is dropped when its job ends)."""
    part = marker.with_name(marker.name + ".part")
    try:
        _unmark(part)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(record))
        os.replace(part, marker)  # whatever the build left at the marker's path (a link, say) is replaced
    except OSError as exc:
        log.write(f"[autoresearch] the build of {marker.parent} is not kept for reuse: {exc}\n")
        with contextlib.suppress(OSError):
            _unmark(part)
            _unmark(marker)


def _unmark(path: Path) -> None:
    """Remove what is at `path` (a file, a link, or a folder the build made there)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _read_marker(marker: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
