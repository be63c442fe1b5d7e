"""A real multi-backend tree for tests and benchmarks: llama.cpp as vendored in the
llama-cpp-python sdist on PyPI, downloaded once with pip and cached. The whole source tree is
extracted (enough to build `llama-bench` and `llama-perplexity`) except the bulky folders no build
reads (`models/` vocabularies, `docs/`, `media/`).

Cache: $AUTORESEARCH_TEST_CACHE, else ~/.cache/autoresearch-mcp-tests (not AUTORESEARCH_CACHE_DIR,
which the test suite points at a fresh temporary folder for every test).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from filelock import FileLock

# 0.3.36: current ggml (about 500k lines under ggml/); its CPU backend already fuses RMS_NORM+MUL.
CURRENT = "0.3.36"
# 0.3.16 (August 2025): the CPU backend fuses nothing while CUDA, Metal, Vulkan and OpenCL fuse
# RMS_NORM+MUL: the gap that the published llama.cpp run turned into its best win.
HISTORIC = "0.3.16"
# 0.3.19: ggml-cpu's rms_norm still copies x into y, then scales y in a second pass (find_passes).
UNFUSED_RMS_NORM = "0.3.19"


# ggml-cpu's rms_norm (without the fused MUL) copies each row, then scales it in a second pass
TWO_PASSES = """                } else {
                    memcpy(y, x, ne00 * sizeof(float));
                    ggml_vec_scale_f32(ne00, y, scale);
                }"""
ONE_PASS = """                } else {
                    for (int64_t i00 = 0; i00 < ne00; i00++) {
                        y[i00] = x[i00] * scale;
                    }
                }"""
# The same rms_norm with each row copied and scaled four times over (the same numbers): a baseline against which
# the one-pass change gains far beyond what code layout moves the untouched ops (up to 5% either way, measured);
# against the real two passes the gain on short rows is about that size.
REPEATED_SCALE = """                } else {
                    for (int rep = 0; rep < 4; rep++) {  // test fixture: the row copied and scaled 4 times
                        memcpy(y, x, ne00 * sizeof(float));
                        ggml_vec_scale_f32(ne00, y, scale);
                    }
                }"""


class TreeUnavailable(Exception):
    """The registry could not be reached or the download failed."""


def cache_dir() -> Path:
    return Path(os.environ.get("AUTORESEARCH_TEST_CACHE") or "~/.cache/autoresearch-mcp-tests").expanduser()


# Top-level folders left out: large and read by no build.
SKIPPED = ("models", "docs", "media")


def llama_cpp_tree(version: str = CURRENT) -> Path:
    """The llama.cpp source tree (with `ggml/`) as vendored in llama-cpp-python==version."""
    cache = cache_dir()
    dest = cache / f"llama-cpp-python-{version}-src"
    done = dest / ".complete"
    if done.exists():
        return dest / "llama.cpp"
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f"llama-cpp-python-{version}.lock")):
        if done.exists():
            return dest / "llama.cpp"
        sdist = _download(version, cache / "sdist")
        shutil.rmtree(dest, ignore_errors=True)
        prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
        with tarfile.open(sdist) as tar:
            members = []
            for member in tar.getmembers():
                rel = member.name[len(prefix):]
                if (not member.name.startswith(prefix) or not rel or rel == ".git"
                        or rel.split("/")[0] in SKIPPED or not (member.isfile() or member.isdir())):
                    continue
                member.name = "llama.cpp/" + rel
                members.append(member)
            tar.extractall(dest, members=members, filter="data")
        done.touch()
    return dest / "llama.cpp"


def _download(version: str, folder: Path) -> Path:
    sdist = folder / f"llama_cpp_python-{version}.tar.gz"
    if sdist.exists():
        return sdist
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           f"llama-cpp-python=={version}", "-d", str(folder)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TreeUnavailable(f"pip download failed: {exc}") from exc
    if proc.returncode != 0 or not sdist.exists():
        raise TreeUnavailable(f"pip download of llama-cpp-python=={version} failed: {proc.stderr[-500:]}")
    return sdist
