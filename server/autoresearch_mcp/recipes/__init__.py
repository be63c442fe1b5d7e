"""Recipes: ready benchmark and checks scripts for projects we know (`start_session(recipe=...)`,
`autoresearch-mcp recipe NAME [DIR]`). The generic templates stay for every other project.

A recipe is a folder of files shipped in the package plus what the session needs to know about
them: the metrics they print, which are objectives, which extra paths must be protected (the fixed
text the checks read, the tools that measure), whether a model file is needed, the settings its
benchmark reads (recorded in the session's config, given to every build, bench and checks run), and
the focus chains its op micro-benchmark can time (`launch_experiment(focus=[...])`).
"""

from __future__ import annotations

import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_mcp.errors import InputError, RefusedError
from autoresearch_mcp.models import Direction

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Recipe:
    name: str
    folder: str
    summary: str
    metric: str
    direction: Direction
    objectives: tuple[str, ...]
    files: tuple[str, ...]
    protected: tuple[str, ...]
    needs_model: bool
    looks_like: tuple[str, ...]
    settings: Mapping[str, str] = field(default_factory=dict)  # environment defaults of its scripts
    focus: tuple[tuple[str, ...], ...] = ()  # op chains its benchmark times, as launch_experiment names them
    # how much worse each objective may get in a focus experiment, percent (suited to the metric's noise)
    focus_tolerance_pct: Mapping[str, float] = field(default_factory=dict)
    # the least share of a bench run each objective's timed work takes (config harness_share)
    harness_share: Mapping[str, float] = field(default_factory=dict)
    # how a pair's two runs share the machine (config pairing), unless the person's config says otherwise
    pairing: str = "sequential"

    def source(self, filename: str) -> Path:
        return _HERE / self.folder / filename

    def matches(self, root: Path) -> bool:
        """Whether the tree at `root` looks like this recipe's project."""
        return all((root / rel).exists() for rel in self.looks_like)


RECIPES: dict[str, Recipe] = {
    "llama.cpp": Recipe(
        name="llama.cpp",
        folder="llama_cpp",
        summary="CPU inference: llama-bench text generation (tg_tps) and prompt processing (pp_tps), "
                "checked by KL divergence against the baseline's outputs",
        metric="tg_tps",
        direction="higher",
        objectives=("tg_tps", "pp_tps"),
        files=("autoresearch.sh", "autoresearch.checks.sh", "autoresearch.checks.txt", "autoresearch.opbench.cpp"),
        # the fixed text the checks compare on, the op benchmark, and the programs that measure and compare
        protected=("autoresearch.checks.txt", "autoresearch.opbench.cpp", "tools/llama-bench", "tools/perplexity"),
        needs_model=True,
        looks_like=("include/llama.h", "ggml/src/ggml-cpu", "tools/llama-bench"),
        # flash attention on: the CPU fusions that matter most show only with it. 128 generated tokens:
        # 32 were 0.17 s of work on a TinyLlama-width model, too short to be steady on a shared machine.
        # AMX off: llama.cpp's AMX kernels crashed on this kind of machine (autoresearch.sh says why).
        settings={"LLAMA_BENCH_FA": "1", "LLAMA_BENCH_PROMPT": "128", "LLAMA_BENCH_GEN": "128", "LLAMA_AMX": "0"},
        # autoresearch.opbench.cpp's table of chains, in its order (tests/test_recipes.py compares them)
        focus=(("RMS_NORM",), ("RMS_NORM", "MUL"), ("RMS_NORM", "MUL", "ADD"), ("NORM",), ("NORM", "MUL"),
               ("NORM", "MUL", "ADD"), ("MUL",), ("ADD",), ("SCALE",), ("MUL_MAT",), ("ROPE",), ("SOFT_MAX",),
               ("MUL_MAT", "SOFT_MAX"), ("FLASH_ATTN_EXT",), ("GLU",), ("SILU",), ("SILU", "MUL"), ("GELU",)),
        # prompt processing is steady (a rehearsal's fusions moved it within +-0.3%); text generation less so
        focus_tolerance_pct={"tg_tps": 2.0, "pp_tps": 1.5},
        # a bench run is the op benchmark (with a focus), llama-bench's model load and warm-up, 128 prompt tokens
        # in one batch and 128 generated one at a time: text generation is the most of it, the prompt's batch
        # a small part (its GEMMs are fast); lower bounds, so a real win is never held to more than it moves
        harness_share={"tg_tps": 0.2, "pp_tps": 0.02},
        # both runs of a pair at once, in turns of the CPU, each judged on its CPU time (the bench prints
        # tg_tps.cpu and pp_tps.cpu): beside a memory-bound neighbour on 2 vCPUs the spread of a pair was
        # 12.5-13.7% one after the other and 2.8% in turns (docs/llama-cpp.md)
        pairing="turns",
    ),
}


def get(name: str) -> Recipe:
    recipe = RECIPES.get(name)
    if recipe is None:
        raise InputError(f"no recipe {name!r}; known recipes: {', '.join(sorted(RECIPES))}")
    return recipe


def check_focus(recipe: Recipe | None, names: Sequence[str]) -> None:
    """Refuse a focus the recipe's benchmark cannot time (a generic project's bench reads any names)."""
    if recipe is None or not recipe.focus:
        return
    if tuple(names) not in recipe.focus:
        known = "; ".join(", ".join(chain) for chain in recipe.focus)
        raise InputError(f"the {recipe.name} recipe's op benchmark has no chain {list(names)!r}. A focus is the ggml "
                         f"ops the change acts on, in the order llama.cpp's graph runs them (several names are one "
                         f"chain, so a fusion is timed as the chain); one of: {known}")


def detect(root: Path) -> Recipe | None:
    """The recipe whose project the tree at `root` looks like, if any."""
    return next((r for r in RECIPES.values() if r.matches(root)), None)


def installed(root: Path) -> Recipe | None:
    """The recipe whose files are all in `root`, unchanged (written by `autoresearch-mcp recipe`)."""
    return next((r for r in RECIPES.values() if all((root / f).exists() for f in r.files)
                 and not conflicts(r, root)), None)


def conflicts(recipe: Recipe, dest: Path) -> list[str]:
    """Recipe files that already exist in `dest` with other content."""
    return [f for f in recipe.files
            if (dest / f).exists() and (dest / f).read_bytes() != recipe.source(f).read_bytes()]


def write(recipe: Recipe, dest: Path, overwrite: bool = False) -> list[str]:
    """Write the recipe's files into `dest`; returns those written (identical files are left alone).

    Refuses to replace a file with other content unless `overwrite`: it may be the user's own script.
    """
    if not dest.is_dir():
        raise InputError(f"{dest} is not a directory; give the root of the project")
    clash = conflicts(recipe, dest)
    if clash and not overwrite:
        raise RefusedError(
            f"{', '.join(clash)} already exist in {dest} with other content; move them away (or pass "
            f"--force to `autoresearch-mcp recipe`) to use the {recipe.name} recipe")
    written = []
    for name in recipe.files:
        src, target = recipe.source(name), dest / name
        if target.exists() and name not in clash:
            continue
        target.write_bytes(src.read_bytes())
        if name.endswith(".sh"):
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        written.append(name)
    return written
