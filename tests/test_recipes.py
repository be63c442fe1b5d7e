"""The llama.cpp recipe on a small stand-in tree: a CMake project whose `llama-bench` and
`llama-perplexity` are tiny C programs printing what the real ones print (JSON records; the
per-chunk KL-divergence table), so the recipe's own scripts run for real in seconds: build with
CMake, pick records by field, pass the model, compare with the baseline, cross-build for aarch64.
The real llama.cpp tree runs in test_llama_recipe.py (slow)."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp import recipes
from autoresearch_mcp.app import build_server
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.store.config import config_path
from conftest import git, init_repo
from helpers import call, error, wait_final

pytestmark = pytest.mark.anyio

CMAKE = """cmake_minimum_required(VERSION 3.14)
project(standin C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(llama-bench tools/llama-bench/bench.c)
add_executable(llama-perplexity tools/perplexity/ppl.c)
"""

# llama-bench -o json: one record per test, the prompt test's (-p N) and the generation test's (-n N), each
# only where its count is not 0; the prompt-processing record comes first, as in the real tool: a parser
# that takes the first avg_ts reports 500 t/s of "text generation". Each run appends its arguments to
# bench-args.txt, one line, and spends some CPU time, as the real one does; its usage (--help) offers
# --no-warmup, as a recent one's does.
BENCH_C = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../../src/speed.h"
int main(int argc, char **argv) {
    const char *model = 0; int prompt = 0, gen = 0;
    FILE *args = fopen("bench-args.txt", "a");
    for (int i = 1; i < argc; i++) {
        fprintf(args, "%s ", argv[i]);
        if (!strcmp(argv[i], "-m")) model = argv[i + 1];
        if (!strcmp(argv[i], "-p")) prompt = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-n")) gen = atoi(argv[i + 1]);
    }
    fprintf(args, "\n");
    fclose(args);
    if (argc == 2 && !strcmp(argv[1], "--help")) { printf("  --no-warmup    skip warmup runs\n"); return 0; }
    FILE *m = model ? fopen(model, "rb") : 0;
    if (!m) { fprintf(stderr, "cannot open model\n"); return 1; }
    fclose(m);
    while (clock() < CLOCKS_PER_SEC / 100) {}
    const char *sep = "";
    printf("[\n");
    if (prompt > 0) { printf("  {\"n_prompt\": %d, \"n_gen\": 0, \"avg_ts\": %.3f}\n", prompt, PP_TPS); sep = ","; }
    if (gen > 0 && TG_TPS > 0) printf("  %s{\"n_prompt\": 0, \"n_gen\": %d, \"avg_ts\": %.3f}\n", sep, gen, TG_TPS);
    printf("]\n");
    return 0;
}
"""


# llama-perplexity: with --kl-divergence-base alone it saves a file of --chunks chunks; with
# --kl-divergence it prints the per-chunk table with running figures (KLD and same-top % from
# src/speed.h), dropping the last LOST lines the way the real tool sometimes loses output at exit.
PPL_C = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../src/speed.h"
int main(int argc, char **argv) {
    const char *base = 0; int compare = 0, chunks = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kl-divergence-base")) base = argv[i + 1];
        if (!strcmp(argv[i], "--kl-divergence")) compare = 1;
        if (!strcmp(argv[i], "--chunks")) chunks = atoi(argv[i + 1]);
    }
    if (!base) return 2;
    if (!compare) {
        printf("perplexity: calculating perplexity over %d chunks, n_ctx=128\n", chunks);
        FILE *f = fopen(base, "wb"); fprintf(f, "_logits_%d", chunks); fclose(f); return 0;
    }
    FILE *f = fopen(base, "rb"); fscanf(f, "_logits_%d", &chunks); fclose(f);
    printf("chunk    PPL    ln(PPL(Q)/PPL(base))    KL Divergence    Δp RMS    Same top p\n");
    for (int c = 1; c <= chunks - LOST; c++)
        printf("%4d    %9.4lf ± %9.4lf    %10.5lf ± %10.5lf    %10.5lf ± %10.5lf"
               "    %6.3lf ± %6.3lf %%    %6.3lf ± %6.3lf %%\n",
               c, 300.0, 1.0, 0.0, 0.0, KLD, 0.0, 0.1, 0.0, TOP, 0.0);
    return 0;
}
"""


def speed(pp: float = 500.0, tg: float = 14.0, kld: float = 0.0, top: float = 100.0, lost: int = 0) -> str:
    return (f"#define PP_TPS {pp}\n#define TG_TPS {tg}\n#define KLD {kld}\n#define TOP {top}\n"
            f"#define LOST {lost}\n")


def standin_tree(root: Path) -> Path:
    """A git repository that looks like llama.cpp to the recipe and to `recipes.detect`."""
    for rel, text in {"CMakeLists.txt": CMAKE, "tools/llama-bench/bench.c": BENCH_C,
                      "tools/perplexity/ppl.c": PPL_C, "src/speed.h": speed(),
                      "include/llama.h": "/* stand-in */\n", "ggml/src/ggml-cpu/README": "stand-in\n",
                      ".gitignore": "build-autoresearch/\nbench-args.txt\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return init_repo(root)


def speed_patch(old: str, new: str) -> str:
    return "--- a/src/speed.h\n+++ b/src/speed.h\n@@ -1,5 +1,5 @@\n" + "".join(
        f"-{line}\n" for line in old.splitlines()) + "".join(f"+{line}\n" for line in new.splitlines())


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "tiny.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF" + bytes(64))
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return standin_tree(tmp_path / "llama.cpp")


async def start(c: Client, tree: Path, **kw: Any) -> dict[str, Any]:
    return await call(c, "start_session", repo=str(tree), metric="tg_tps", direction="higher", tag="t", **kw)


def bench_runs(path: Path) -> list[dict[str, str]]:
    """The fake llama-bench's benchmark processes, oldest first, each as its options' values (a flag's: "").
    The recipe asks the tool's usage first (`--help`: whether it can skip its warm-up); those are left out."""
    runs = []
    for words in map(str.split, path.read_text().splitlines()):
        if words == ["--help"]:
            continue
        opts, i = {}, 0
        while i < len(words):
            value = i + 1 < len(words) and not words[i + 1].startswith("-")
            opts[words[i]] = words[i + 1] if value else ""
            i += 2 if value else 1
        runs.append(opts)
    return runs


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoresearch_mcp", *args], capture_output=True, text=True,
                          timeout=60, check=False)


# --- writing the recipe ----------------------------------------------------------------------------


def test_the_recipe_command_writes_ready_scripts_and_never_replaces_the_users(tmp_path: Path) -> None:
    done = cli("recipe", "llama.cpp", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "autoresearch.sh, autoresearch.checks.sh, autoresearch.checks.txt" in done.stdout
    for name in ("autoresearch.sh", "autoresearch.checks.sh"):
        assert (tmp_path / name).stat().st_mode & 0o111
        assert subprocess.run(["bash", "-n", str(tmp_path / name)], check=False).returncode == 0
    assert "nothing" in cli("recipe", "llama.cpp", str(tmp_path)).stdout  # identical files stay
    (tmp_path / "autoresearch.sh").write_text("#!/bin/sh\necho mine\n")
    refused = cli("recipe", "llama.cpp", str(tmp_path))
    assert refused.returncode == 1 and "autoresearch.sh already exist" in refused.stderr
    assert (tmp_path / "autoresearch.sh").read_text() == "#!/bin/sh\necho mine\n"
    assert cli("recipe", "llama.cpp", str(tmp_path), "--force").returncode == 0
    assert "llama-bench" in (tmp_path / "autoresearch.sh").read_text()
    unknown = cli("recipe", "nope", str(tmp_path))
    assert unknown.returncode == 1 and "known recipes: llama.cpp" in unknown.stderr


def test_the_shipped_recipe_is_in_the_wheel(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(root)], check=True, timeout=300, capture_output=True)
    import zipfile

    names = zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist()
    for name in recipes.get("llama.cpp").files:
        assert f"autoresearch_mcp/recipes/llama_cpp/{name}" in names


def test_the_focus_chains_are_those_the_op_benchmark_times() -> None:
    recipe = recipes.get("llama.cpp")
    source = recipe.source("autoresearch.opbench.cpp").read_text()
    table = re.findall(r'^\s*\{"([A-Z_+]+)", \[\]\(Builder', source, re.M)
    assert [tuple(label.split("+")) for label in table] == list(recipe.focus)
    assert {("RMS_NORM", "MUL"), ("SOFT_MAX",), ("FLASH_ATTN_EXT",)} <= set(recipe.focus)


def test_a_focus_the_recipe_cannot_time_is_refused_with_the_chains_it_can() -> None:
    llama = recipes.get("llama.cpp")
    recipes.check_focus(llama, ["RMS_NORM", "MUL"])
    with pytest.raises(InputError) as refused:
        recipes.check_focus(llama, ["MUL", "RMS_NORM"])  # not the order llama.cpp's graph runs them
    assert "no chain ['MUL', 'RMS_NORM']" in str(refused.value) and "RMS_NORM, MUL; " in str(refused.value)
    recipes.check_focus(None, ["anything", "a generic bench reads"])


def test_the_recipe_settings_are_the_scripts_defaults() -> None:
    recipe = recipes.get("llama.cpp")
    script = recipe.source("autoresearch.sh").read_text()
    defaults = dict(re.findall(r"\$\{(LLAMA_BENCH_[A-Z]+|LLAMA_AMX):-(\w+)\}", script))
    assert defaults == dict(recipe.settings)
    assert int(recipe.settings["LLAMA_BENCH_GEN"]) >= 128  # 32 tokens were 0.17 s of work: too short to be steady


async def test_a_llama_cpp_tree_without_scripts_is_offered_the_recipe(tree: Path) -> None:
    async with Client(build_server()) as c:
        res = await start(c, tree)
    assert res["recipe_suggested"] == "llama.cpp" and res["templates_created"] == []
    assert any("recipe='llama.cpp'" in step for step in res["next_steps"])
    assert not (tree / "autoresearch.sh").exists()  # no blank template in the way of the recipe


# --- the benchmark --------------------------------------------------------------------------------


async def test_the_recipe_validates_both_metrics_picked_by_field(tree: Path, model: Path) -> None:
    async with Client(build_server()) as c:
        res = await start(c, tree, recipe="llama.cpp", model=str(model))
    assert res["recipe"] == "llama.cpp" and res["objectives"] == ["tg_tps", "pp_tps"]
    assert set(res["templates_created"]) == set(recipes.get("llama.cpp").files)
    # the recipe's pairs run in turns: each objective is its CPU-time form, llama-bench's own rate kept as .wall
    assert res["pairing"] == "turns"
    assert res["baseline"]["tg_tps.wall"]["mean"] == 14.0 and res["baseline"]["pp_tps.wall"]["mean"] == 500.0
    cpu = [float(line.split("=")[1]) for line in res["raw_metric_lines"] if line.startswith("METRIC tg_tps.cpu=")]
    assert res["baseline"]["tg_tps"]["mean"] == pytest.approx(sum(cpu) / len(cpu))
    assert "METRIC tg_tps=14.0" in res["raw_metric_lines"] and "METRIC pp_tps=500.0" in res["raw_metric_lines"]
    # committed on the session branch, the user's branch untouched, and the tools that measure protected
    assert git(tree, "log", "-1", "--format=%s", "autoresearch/t") == \
        "autoresearch: llama.cpp recipe (benchmark and checks)"
    assert "autoresearch.sh" not in git(tree, "ls-tree", "--name-only", "main")
    assert git(tree, "status", "--porcelain") == ""
    config = json.loads(config_path(tree).read_text())
    assert config["model"] == str(model)
    assert {"tools/llama-bench", "tools/perplexity", "autoresearch.checks.txt",
            "autoresearch.opbench.cpp"} <= set(config["protected"])
    # every setting the runs are measured with is recorded and shown
    assert config["env"] == {"LLAMA_BENCH_FA": "1", "LLAMA_BENCH_PROMPT": "128", "LLAMA_BENCH_GEN": "128",
                             "LLAMA_AMX": "0"}
    # (the fake llama-bench records its arguments in its tree, so only the checks run read-only here)
    assert res["settings"] == {"threads": str(config["threads"]), "read_only_runs": "checks",
                               "measure": res["settings"]["measure"], "pairing": "turns", **config["env"]}
    assert "bench" not in res["settings"]  # a recipe's bench is known to do fixed work: no shape runs
    used = next(Path(p) for p in (Path(config["repo"]).parent / "cache").rglob("bench-args.txt"))
    runs = bench_runs(used)
    # each run is two llama-bench processes: the prompt test (twice over), then the generation test, neither
    # warmed up (its CPU time would count work that no token does); the validation's two runs at once, in turns
    tests = [(args["-p"], args["-n"], args["-r"]) for args in runs[-4:]]
    assert sorted(tests) == [("0", "128", "1")] * 2 + [("128", "0", "2")] * 2
    for args in runs:
        assert args["-ngl"] == "0" and args["-fa"] == "1" and args["-o"] == "json" and "--no-warmup" in args
        assert args["-t"] == str(config["threads"]) and args["-m"] == str(model)


async def test_a_setting_edited_in_the_config_reaches_the_benchmark(tree: Path, model: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, tree, recipe="llama.cpp", model=str(model))
        config = json.loads(config_path(tree).read_text())
        config["env"]["LLAMA_BENCH_GEN"] = "256"
        config_path(tree).write_text(json.dumps(config))
        res = await start(c, tree)
    assert res["settings"]["LLAMA_BENCH_GEN"] == "256"
    files = sorted((Path(config["repo"]).parent / "cache").rglob("bench-args.txt"), key=lambda p: p.stat().st_mtime)
    assert sorted((args["-p"], args["-n"]) for args in bench_runs(files[-1])[-4:]) == [("0", "256")] * 2 + [
        ("128", "0")] * 2


async def test_a_missing_record_is_an_error_never_a_default(tree: Path, model: Path) -> None:
    (tree / "src/speed.h").write_text(speed(tg=0))  # no text-generation record at all
    git(tree, "commit", "-qam", "no tg")
    async with Client(build_server()) as c:
        msg = await error(c, "start_session", repo=str(tree), metric="tg_tps", direction="higher", tag="t",
                          recipe="llama.cpp", model=str(model))
    assert "expected one llama-bench record with avg_ts for tg_tps, found 0" in msg


@pytest.fixture
def built(tree: Path, model: Path) -> Path:
    """The stand-in tree with the recipe's scripts, built."""
    recipes.write(recipes.get("llama.cpp"), tree)
    done = recipe_script(tree, model, "build")
    assert done.returncode == 0, done.stderr
    return tree


def recipe_script(tree: Path, model: Path, step: str) -> subprocess.CompletedProcess[str]:
    env = {"AUTORESEARCH_MODEL": str(model), "AUTORESEARCH_THREADS": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", "autoresearch.sh", step], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_bench_prints_each_rate_over_its_own_processes_cpu_time(built: Path, model: Path) -> None:
    done = recipe_script(built, model, "bench")
    assert done.returncode == 0, done.stderr
    metrics = dict(re.findall(r"^METRIC (\S+)=(\S+)$", done.stdout, re.M))
    assert sorted(metrics) == ["pp_tps", "pp_tps.cpu", "tg_tps", "tg_tps.cpu"]
    assert metrics["tg_tps"] == "14.0" and metrics["pp_tps"] == "500.0"
    # the fake spends at least 10 ms of CPU a process: 128 tokens over that is at most 12,800 t/s (the prompt
    # test's two repetitions: 25,600)
    assert 0 < float(metrics["tg_tps.cpu"]) <= 12800 and 0 < float(metrics["pp_tps.cpu"]) <= 25600
    assert len(done.stdout.splitlines()) == 4


def test_a_llama_bench_that_fails_fails_the_bench_naming_the_test(built: Path, model: Path) -> None:
    binary = built / "build-autoresearch/bin/llama-bench"
    binary.write_text("#!/bin/sh\necho 'llama-bench: failed to load model' >&2\nexit 3\n")
    done = recipe_script(built, model, "bench")
    assert done.returncode != 0 and "METRIC" not in done.stdout
    assert "llama-bench: failed to load model" in done.stderr  # its own stderr passes through
    assert "autoresearch.sh: llama-bench's pp_tps test failed (exit status 3)" in done.stderr


async def test_without_a_model_the_session_says_how_to_give_one(tree: Path, model: Path) -> None:
    async with Client(build_server()) as c:
        res = await start(c, tree, recipe="llama.cpp")
        assert res["baseline"] == {} and "model=" in res["next_steps"][0]
        again = await start(c, tree, recipe="llama.cpp", model=str(model))  # resume, now with a model
    assert again["resumed"] and again["baseline"]["tg_tps.wall"]["mean"] == 14.0


async def test_a_file_that_is_not_gguf_is_refused(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "page.html").write_text("<html>not a model</html>")
    async with Client(build_server()) as c:
        msg = await error(c, "start_session", repo=str(tree), metric="tg_tps", direction="higher", tag="t",
                          recipe="llama.cpp", model=str(tmp_path / "page.html"))
    assert "is not a GGUF file" in msg


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server over tmp_path/www that records the paths it was asked for."""
    www = tmp_path / "www"
    www.mkdir()
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, directory=str(www), **kw)

        def do_GET(self) -> None:
            asked.append(self.path)
            super().do_GET()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()


@pytest.mark.slow
async def test_model_url_is_downloaded_once_into_the_cache(
    tree: Path, model: Path, tmp_path: Path, http_server: tuple[str, list[str]]
) -> None:
    url, asked = http_server
    shutil.copy(model, tmp_path / "www" / "tiny.gguf")
    (tmp_path / "www" / "fake.gguf").write_text("<html>404 page served as 200</html>")
    async with Client(build_server()) as c:
        first = await start(c, tree, recipe="llama.cpp", model=f"{url}/tiny.gguf")
        again = await start(c, tree)
        bad = await error(c, "start_session", repo=str(tree), metric="tg_tps", direction="higher", tag="u",
                          model=f"{url}/fake.gguf")
        missing = await error(c, "start_session", repo=str(tree), metric="tg_tps", direction="higher", tag="v",
                              model=f"{url}/absent.gguf")
    assert first["baseline"]["tg_tps.wall"]["mean"] == 14.0 and again["resumed"]
    assert asked.count("/tiny.gguf") == 1
    cached = list((tmp_path / "cache" / "models").rglob("tiny.gguf"))
    assert len(cached) == 1 and cached[0].read_bytes() == model.read_bytes()
    assert "did not answer a GGUF file" in bad and "HTTP 404" in missing


# --- the checks -------------------------------------------------------------------------------------


async def checked(c: Client, tree: Path, new: str, title: str) -> dict[str, Any]:
    exp = await call(c, "launch_experiment", title=title, source="patch", repeats="auto",
                     patch=speed_patch(speed(), new))
    return await wait_final(c, exp["experiment_id"], timeout=180)


@pytest.mark.slow
async def test_checks_compare_the_candidate_with_the_baseline_and_name_the_figures(tree: Path, model: Path) -> None:
    async with Client(build_server()) as c:
        await start(c, tree, recipe="llama.cpp", model=str(model))
        same = await checked(c, tree, speed(tg=15.0), "faster, same outputs")
        broken = await checked(c, tree, speed(tg=16.0, kld=0.25, top=71.5), "faster, wrong outputs")
        late = await checked(c, tree, speed(tg=17.0, lost=1), "the extra chunk's line lost at exit")
        lost = await checked(c, tree, speed(tg=18.0, lost=2), "a judged line lost at exit")
    assert same["status"] == "done" and same["checks"]["passed"]
    assert "mean KLD 0.00000 (limit 0.001), same top token 100.000%" in same["checks"]["tail"]
    assert broken["status"] == "checks_failed"
    assert "mean KLD 0.25000 (limit 0.001), same top token 71.500% (limit 98%)" in broken["checks"]["tail"]
    # the figures are read one chunk before the end, so losing the last line costs nothing ...
    assert late["status"] == "done" and late["checks"]["passed"]
    # ... but a figure that is missing is never a pass
    assert lost["status"] == "checks_failed"
    assert "reported 5 of 6 chunks (-fa 1) in 3 attempts" in lost["checks"]["tail"]


# --- the cross path ----------------------------------------------------------------------------------


@pytest.mark.skipif(not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")),
                    reason="needs gcc-aarch64-linux-gnu and qemu-user")
def test_a_cross_compiler_gets_a_toolchain_file_and_binaries_run_through_the_emulator(
    tree: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipes.write(recipes.get("llama.cpp"), tree)
    env = {"CC": "aarch64-linux-gnu-gcc", "AUTORESEARCH_EMULATOR": "qemu-aarch64 -L /usr/aarch64-linux-gnu",
           "AUTORESEARCH_MODEL": str(model), "PATH": "/usr/bin:/bin"}
    built = subprocess.run(["bash", "autoresearch.sh", "build"], cwd=tree, env=env, capture_output=True, text=True,
                           timeout=300, check=False)
    assert built.returncode == 0, built.stderr
    toolchain = (tree / "build-autoresearch/autoresearch-toolchain.cmake").read_text()
    assert "CMAKE_SYSTEM_PROCESSOR aarch64" in toolchain and "aarch64-linux-gnu-gcc" in toolchain
    binary = (tree / "build-autoresearch/bin/llama-bench").read_bytes()
    assert binary[18] == 0xB7  # ELF e_machine EM_AARCH64
    bench = subprocess.run(["bash", "autoresearch.sh", "bench"], cwd=tree, env=env, capture_output=True, text=True,
                           timeout=120, check=False)
    assert bench.returncode == 0, bench.stderr
    assert "METRIC tg_tps=14.0" in bench.stdout
