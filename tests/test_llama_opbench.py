"""The llama.cpp recipe's op micro-benchmark on a real llama.cpp tree: `autoresearch.sh bench` with
AUTORESEARCH_FOCUS prints the focus chain's time and the controls' beside tg_tps and pp_tps; a focus
it cannot time fails the run with the chains it can; and a one-pass rms_norm (the first fusion of the
published run) is measured faster on its focus and not on the controls, at TinyLlama's widths.

Slow: the first build of the recipe's targets takes about 8 minutes on 2 cores; with the compiler
cache the tests of test_llama_recipe.py filled (or fill after), each tree here takes a minute or two.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import realtree
import tinymodel
from autoresearch_mcp import recipes
from autoresearch_mcp.worker import builds
from realtree import ONE_PASS, REPEATED_SCALE, TWO_PASSES

pytestmark = [pytest.mark.serial, pytest.mark.timeout(2700)]

BUILD_TIMEOUT = 1800.0
OPS = "ggml/src/ggml-cpu/ops.cpp"
METRIC = re.compile(r"^METRIC (\S+)=(\S+)$", re.M)


def recipe_tree(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    recipes.write(recipes.get("llama.cpp"), dest)
    return dest


def build(tree: Path) -> None:
    """`autoresearch.sh build` as the harness runs it (the compiler cache shared across trees)."""
    with open(tree.parent / f"{tree.name}-build.log", "w") as log:
        built = builds.build_tree(str(tree), BUILD_TIMEOUT, log)
    assert built.ok, (tree.parent / f"{tree.name}-build.log").read_text()[-3000:]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """One built llama.cpp tree with the recipe, the tiny test model and a TinyLlama-width one."""
    try:
        source = realtree.llama_cpp_tree(realtree.CURRENT)
    except realtree.TreeUnavailable as exc:
        pytest.skip(f"no llama.cpp tree: {exc}")
    root = tmp_path_factory.mktemp("opbench")
    tree = recipe_tree(source, root / "llama.cpp")
    build(tree)
    yield {"source": source, "root": root, "tree": tree,
           "tiny": tinymodel.write_model(tree, root / "tiny.gguf"),
           "wide": tinymodel.write_model(tree, root / "rehearsal.gguf", shape="REHEARSAL")}


def bench(tree: Path, model: Path, focus: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AUTORESEARCH_MODEL": str(model), "AUTORESEARCH_THREADS": "1"}
    env.pop("AUTORESEARCH_FOCUS", None)
    if focus is not None:
        env["AUTORESEARCH_FOCUS"] = focus
    return subprocess.run(["bash", "./autoresearch.sh", "bench"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def opbench(tree: Path, model: Path, focus: str) -> dict[str, float]:
    """One run of the op benchmark alone, at one thread: {metric: microseconds per evaluation}."""
    done = subprocess.run([str(tree / "build-autoresearch/bin/autoresearch-opbench"), "--model", str(model),
                           "--focus", focus, "--threads", "1"], capture_output=True, text=True, timeout=120,
                          check=True)
    return {name: float(value) for name, value in METRIC.findall(done.stdout)}


@pytest.mark.parametrize(("focus", "label", "controls"), [
    ("RMS_NORM,MUL", "RMS_NORM+MUL", ["ADD", "SCALE", "ROPE"]),
    ("SOFT_MAX", "SOFT_MAX", ["ADD", "SCALE", "ROPE"]),
    ("FLASH_ATTN_EXT", "FLASH_ATTN_EXT", ["ADD", "SCALE", "ROPE"]),
    ("ADD", "ADD", ["SCALE", "ROPE", "SOFT_MAX"]),  # a control is never an op of the focus
])
def test_a_focus_is_timed_beside_controls_and_the_end_to_end_metrics(
    shared: dict[str, Path], focus: str, label: str, controls: list[str]
) -> None:
    done = bench(shared["tree"], shared["tiny"], focus)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = {name: float(value) for name, value in METRIC.findall(done.stdout)}
    assert list(metrics) == [f"focus.{label}", *(f"control.{op}" for op in controls), "pp_tps", "pp_tps.cpu",
                             "tg_tps", "tg_tps.cpu"]
    assert all(value > 0 for value in metrics.values())
    # the shapes are the model's: n_embd 128, 4 heads of 32, 2 KV heads, 128 tokens over 256 KV cells
    assert "n_embd=128 n_head=4 n_head_kv=2 head_dim=32 n_ff=256" in done.stderr
    assert "tokens=128 n_kv=256 threads=1" in done.stderr


def test_without_a_focus_the_bench_prints_only_its_metrics(shared: dict[str, Path]) -> None:
    done = bench(shared["tree"], shared["tiny"], None)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(name for name, _ in METRIC.findall(done.stdout)) == ["pp_tps", "pp_tps.cpu", "tg_tps", "tg_tps.cpu"]


def test_a_focus_it_cannot_time_fails_the_run_with_the_chains_it_can(shared: dict[str, Path]) -> None:
    done = bench(shared["tree"], shared["tiny"], "MUL,RMS_NORM")
    assert done.returncode != 0 and "METRIC" not in done.stdout  # before llama-bench spends its time
    assert 'no op chain "MUL,RMS_NORM" to time' in done.stderr
    listed = done.stderr.split("joined by \",\"): ")[1].split()
    assert listed == [",".join(chain) for chain in recipes.get("llama.cpp").focus]


def test_a_one_pass_rms_norm_is_faster_on_its_focus_and_not_on_the_controls(shared: dict[str, Path]) -> None:
    trees = {}
    for name, new in (("four-passes", REPEATED_SCALE), ("one-pass", ONE_PASS)):
        trees[name] = recipe_tree(shared["source"], shared["root"] / name)
        ops = trees[name] / OPS
        text = ops.read_text()
        assert text.count(TWO_PASSES) == 1
        ops.write_text(text.replace(TWO_PASSES, new))
        build(trees[name])
    baseline, candidate = trees["four-passes"], trees["one-pass"]
    ratios: dict[str, list[float]] = {}
    for i in range(10):  # interleaved, each side first in half of the pairs
        order = [baseline, candidate][:: 1 if i % 2 else -1]
        runs = {tree: opbench(tree, shared["wide"], "RMS_NORM") for tree in order}
        for name, value in runs[candidate].items():
            ratios.setdefault(name, []).append(value / runs[baseline][name])
    change = {name: statistics.median(values) for name, values in ratios.items()}
    assert set(change) == {"focus.RMS_NORM", "control.ADD", "control.SCALE", "control.ROPE"}
    # measured on this 2-core VM at load averages of 3-6: focus -9% to -11% (-7% to -15% a pair); controls
    # within +-1.5%, ROPE (in the same ops.cpp: layout) up to -3.5%, a whole run now and then slower
    # and since, at load 2-3 against the real two passes: focus -3% with every control +2% to +3%, focus -7.6% with
    # the controls -2.5% to -5.6%, focus -4.0% with two controls -3.9%: a build's layout shifts all of ops.cpp by up
    # to 5% either way, so the baseline here scales each row four times (REPEATED_SCALE) and the focus is held to
    # the controls; and CI once saw focus -30% with ADD +14% and SCALE +17% (ten interleaved pairs, medians): a
    # build's layout (or minutes of a neighbour's cache traffic) can move a control by more than any fixed band on
    # this machine, so what is held is the focus's distance from every control, with a band only wide enough to
    # catch a broken measurement (a control halved or doubled)
    controls = {name: value for name, value in change.items() if name.startswith("control.")}
    focus = change["focus.RMS_NORM"]
    assert focus < 0.9 * statistics.median(controls.values()), change
    assert all(0.7 < value < 1.4 and value - focus > 0.05 for value in controls.values()), change


def marked(text: str, signature: str, label: str) -> str:
    """`text` with a line that says `label` on stderr, once, at the start of the function at `signature`."""
    start = text.index(signature)
    body = text.index("{\n", start) + 2
    say = ("    { static bool said = false; if (!said) { said = true; "
           f'fprintf(stderr, "autoresearch-test: {label}\\n"); }} }}\n')
    return text[:body] + say + text[body:]


def test_the_flash_attention_focus_runs_the_tiled_path_the_prompt_batch_takes(shared: dict[str, Path]) -> None:
    # ggml-cpu takes its tiled flash attention (where the fusion of scale, mask and max over a KQ tile lives)
    # for 64 query rows or more: the prompt batch's; one query row (text generation) takes the one-chunk path
    tree = recipe_tree(shared["source"], shared["root"] / "marked")
    ops = tree / OPS
    text = marked(ops.read_text(), "static void ggml_compute_forward_flash_attn_ext_tiled(", "tiled flash attention")
    text = marked(text, "static void ggml_compute_forward_flash_attn_ext_f16_one_chunk(", "one-chunk flash attention")
    ops.write_text(text)
    build(tree)
    done = subprocess.run([str(tree / "build-autoresearch/bin/autoresearch-opbench"), "--model", str(shared["wide"]),
                           "--focus", "FLASH_ATTN_EXT", "--threads", "1", "--tokens", "128"], capture_output=True,
                          text=True, timeout=300, check=True)
    assert "autoresearch-test: tiled flash attention" in done.stderr, done.stderr[-2000:]
    assert "autoresearch-test: one-chunk flash attention" not in done.stderr
    assert "head_dim=64" in done.stderr and "tokens=128 n_kv=256" in done.stderr  # TinyLlama's widths
    assert "METRIC focus.FLASH_ATTN_EXT=" in done.stdout
    # the recipe's default prompt is that batch: the bench times the tiled path, not a shape llama-bench never runs
    assert recipes.get("llama.cpp").settings["LLAMA_BENCH_PROMPT"] == "128"
    # text generation's shape (one query row) takes the other path: the tiled fusion cannot move tg_tps
    one = subprocess.run([str(tree / "build-autoresearch/bin/autoresearch-opbench"), "--model", str(shared["wide"]),
                          "--focus", "FLASH_ATTN_EXT", "--threads", "1", "--tokens", "1"], capture_output=True,
                         text=True, timeout=300, check=True)
    assert "autoresearch-test: one-chunk flash attention" in one.stderr
    assert "autoresearch-test: tiled flash attention" not in one.stderr
