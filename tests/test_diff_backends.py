"""diff_backends: backend discovery, per-backend inventory, and the gaps of a target backend.

Synthetic trees use their own op naming family (TOY_OP_*, TOY_UNARY_OP_*), so nothing in the
extraction is tied to llama.cpp's names. The real-tree tests read llama.cpp's ggml as vendored in
the llama-cpp-python sdist (downloaded once and cached; see realtree.py).
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from autoresearch_mcp import limits
from autoresearch_mcp.analysis import backends
from autoresearch_mcp.analysis.diff_backends import compare_backends
from autoresearch_mcp.app import build_server
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.models import BackendGap, BackendInventory, DiffBackendsResult
from realtree import CURRENT, HISTORIC, UNFUSED_RMS_NORM, TreeUnavailable, llama_cpp_tree

HEADER = """\
enum toy_op {
    TOY_OP_NONE = 0,
    TOY_OP_ADD, TOY_OP_MUL, TOY_OP_RMS_NORM, TOY_OP_SOFT_MAX,
    TOY_OP_ROPE, TOY_OP_UNARY, TOY_OP_SCALE,
    TOY_OP_COUNT,
};
enum toy_unary_op { TOY_UNARY_OP_SILU, TOY_UNARY_OP_GELU, TOY_UNARY_OP_TANH, TOY_UNARY_OP_COUNT };
enum toy_op_pool { TOY_OP_POOL_AVG, TOY_OP_POOL_MAX, TOY_OP_POOL_COUNT };
"""

# CPU: supports every op by default, rejects ROPE; separate passes, no fusion.
CPU = """\
#include <immintrin.h>
static void toy_cpu_rms_norm(float * x, int n) { __m256 acc = _mm256_setzero_ps(); (void) acc; }
static void toy_compute_forward(struct toy_tensor * t) {
    switch (t->op) {
        case TOY_OP_ADD:      toy_cpu_add(t); break;
        case TOY_OP_MUL:      toy_cpu_mul(t); break;
        case TOY_OP_RMS_NORM: toy_cpu_rms_norm(t->data, t->n); break;
        default: break;
    }
}
static bool toy_cpu_supports_op(const struct toy_tensor * op) {
    switch (op->op) {
        case TOY_OP_ROPE:
            return false;
        case TOY_OP_MUL:
            return op->type == 0;
        default:
            return true;
    }
}
"""

# CUDA: a multi-line initializer list, a unary sub-op, a commented-out fusion, an op in a string.
CUDA = """\
__global__ void rms_norm_f32(const float * x, float * dst) { }
static bool toy_cuda_supports_op(const struct toy_tensor * op) {
    switch (op->op) {
        case TOY_OP_ADD: case TOY_OP_MUL: case TOY_OP_RMS_NORM: case TOY_OP_SOFT_MAX: case TOY_OP_ROPE:
        case TOY_OP_UNARY: case TOY_OP_SCALE:
            return true;
        default:
            return false;
    }
}
static void toy_cuda_graph_compute(struct toy_graph * g) {
    for (int i = 0; i < g->n; i++) {
        if (toy_can_fuse(g, i, {
                TOY_OP_RMS_NORM,
                TOY_OP_MUL,
                TOY_OP_ADD })) {
            i += 2; continue;
        }
        if (toy_cuda_can_fuse(g, i, { TOY_OP_UNARY, TOY_OP_MUL }, { TOY_UNARY_OP_SILU })) { i++; continue; }
        // if (toy_can_fuse(g, i, { TOY_OP_SOFT_MAX, TOY_OP_SCALE })) { ... }
        /* toy_can_fuse(g, i, { TOY_OP_ROPE, TOY_OP_SCALE }) */
        log_info("fused TOY_OP_SCALE, TOY_OP_ROPE");
    }
}
"""

# Metal: an array filled element by element whose first op comes from the dispatch that calls it,
# and a fusion list behind a macro.
METAL = """\
#define RMS_MUL_OPS { TOY_OP_RMS_NORM, TOY_OP_MUL }
kernel void kernel_rms_norm(device const float * x) { }
static int toy_metal_op_rms_norm(struct ctx * ctx, int idx) {
    enum toy_op ops[8];
    ops[0] = ctx->node(idx)->op;
    ops[1] = TOY_OP_MUL;
    ops[2] = TOY_OP_ADD;
    int n_fuse = 1;
    while (toy_can_fuse(ctx->gf, idx + n_fuse, ops + n_fuse, 2)) { n_fuse++; }
    return n_fuse;
}
static int toy_metal_encode(struct ctx * ctx, int idx) {
    switch (ctx->node(idx)->op) {
        case TOY_OP_RMS_NORM:
            return toy_metal_op_rms_norm(ctx, idx);
        case TOY_OP_SOFT_MAX:
            if (toy_can_fuse(ctx->gf, idx, RMS_MUL_OPS)) { return 2; }
            return 1;
        case TOY_OP_ADD: case TOY_OP_MUL: case TOY_OP_SCALE:
            return 1;
        default:
            return 0;
    }
}
"""

# Vulkan: named fusion strings, and a list of ops that is not a fusion (no fusion check uses it).
VULKAN = """\
static const enum toy_op elementwise_ops[] = { TOY_OP_ADD, TOY_OP_MUL, TOY_OP_SCALE };
static void toy_vk_build(struct toy_graph * g, int i) {
    const char * fusion_string = "";
    if (toy_vk_fuse_rms_mul(g, i)) {
        fusion_string = "RMS_NORM_MUL";
    } else if (toy_vk_fuse_silu_mul(g, i)) {
        fusion_string = "SILU_MUL";
    }
    for (int k = 0; k < 3; k++) { toy_vk_pipeline(elementwise_ops[k]); }
    switch (g->nodes[i]->op) { case TOY_OP_RMS_NORM: case TOY_OP_ROPE: case TOY_OP_SOFT_MAX: break; }
}
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """A git work tree holding `files` (diff_backends reads only repositories)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "toy", {
        "include/toy.h": HEADER,
        "src/toy-cpu/toy-cpu.c": CPU,
        "src/toy-cuda/toy-cuda.cu": CUDA,
        "src/toy-metal/toy-metal.m": METAL,
        "src/toy-vulkan/toy-vulkan.cpp": VULKAN,
        "README.md": "# toy\n",
    })


def gap(result: DiffBackendsResult, item: str) -> BackendGap:
    found = [g for g in result.gaps if g.item == item]
    assert found, f"{item} not in {[g.item for g in result.gaps]}"
    return found[0]


def backend(result: DiffBackendsResult, name: str) -> BackendInventory:
    return next(b for b in result.backends if b.name == name)


# --- discovery ---------------------------------------------------------------------------------


def test_backends_are_found_by_folder_conventions(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "p", {
        "include/toy.h": HEADER,
        "lib/toy-cpu/a.c": CPU,
        "lib/toy-cuda/b.cu": CUDA,
        "lib/toy-fancy/c.c": "int f(void) { return TOY_OP_ADD; }\n",  # unknown name, shared prefix
        "lib/toy-cpu/arch/x86/d.c": "int g(void) { return 0; }\n",  # inside a backend: not a backend
        "plugins/backends/npu2/e.cpp": "int h(void) { return TOY_OP_MUL; }\n",  # child of backends/
    })
    result = compare_backends(str(tree))
    assert {b.name: b.root for b in result.backends} == {
        "cpu": "lib/toy-cpu", "cuda": "lib/toy-cuda", "fancy": "lib/toy-fancy", "npu2": "plugins/backends/npu2",
    }
    assert result.target == "cpu"


def test_no_backends_says_what_was_looked_for_and_how_to_name_them(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "p", {"src/main.c": "int main(void) { return 0; }\n"})
    with pytest.raises(InputError, match=r"no backends found.*ggml-cuda.*cpu=src/cpu.*name=ref:path"):
        compare_backends(str(tree))


def test_a_backend_path_outside_the_repository_is_refused(toy: Path) -> None:
    (toy.parent / "elsewhere").mkdir()
    with pytest.raises(InputError, match="outside"):
        compare_backends(str(toy), ["cpu", "x=../elsewhere"])


def test_backends_named_with_paths_need_no_walk_of_the_repository(
    toy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_walk(repo: Path) -> None:
        raise AssertionError("the repository was walked for backends")

    monkeypatch.setattr(backends, "discover", no_walk)
    result = compare_backends(str(toy), ["cpu=src/toy-cpu", "cuda=src/toy-cuda"])
    assert [b.name for b in result.backends] == ["cpu", "cuda"]


def test_binary_and_huge_files_are_skipped_and_reported(toy: Path) -> None:
    (toy / "src/toy-cuda/blob.h").write_bytes(b"\x00\x01TOY_OP_SCALE" * 10)
    (toy / "src/toy-cuda/huge.cu").write_text("// x\n" * 500_000)
    result = compare_backends(str(toy))
    cuda = backend(result, "cuda")
    assert cuda.skipped_files == 2
    assert any("binary" in s for s in cuda.skipped_examples)
    assert any("huge" in s for s in cuda.skipped_examples)


# --- inventory ---------------------------------------------------------------------------------


def test_op_family_is_detected_from_case_labels_and_narrowed_by_its_enum(toy: Path) -> None:
    result = compare_backends(str(toy))
    assert result.op_families[:2] == ["TOY_OP_", "TOY_UNARY_OP_"]
    (toy / "src/toy-vulkan/pool.cpp").write_text(
        "int pool(int p) { switch (p) { case TOY_OP_POOL_AVG: case TOY_OP_POOL_MAX: return 1; } return 0; }\n"
    )
    vulkan = backend(compare_backends(str(toy)), "vulkan")
    assert not [op for op in vulkan.ops if "POOL" in op]


def test_multiline_initializer_list_in_a_fusion_check_is_a_fusion(toy: Path) -> None:
    assert "RMS_NORM+MUL+ADD" in backend(compare_backends(str(toy)), "cuda").fusions


def test_unary_placeholder_is_replaced_by_its_sub_op(toy: Path) -> None:
    assert "SILU+MUL" in backend(compare_backends(str(toy)), "cuda").fusions


def test_comments_and_strings_do_not_count(toy: Path) -> None:
    cuda = backend(compare_backends(str(toy)), "cuda")
    assert "SOFT_MAX+SCALE" not in cuda.fusions
    assert "ROPE+SCALE" not in cuda.fusions
    assert cuda.fusions_count == 2


def test_element_filled_array_takes_its_first_op_from_the_calling_dispatch(toy: Path) -> None:
    assert "RMS_NORM+MUL+ADD" in backend(compare_backends(str(toy)), "metal").fusions


def test_fusion_list_behind_a_macro_is_a_fusion(toy: Path) -> None:
    assert "RMS_NORM+MUL" in backend(compare_backends(str(toy)), "metal").fusions


def test_named_fusion_strings_are_split_into_op_chains(toy: Path) -> None:
    vulkan = backend(compare_backends(str(toy)), "vulkan")
    assert set(vulkan.fusions) == {"RMS_NORM+MUL", "SILU+MUL"}  # elementwise_ops is no fusion


def test_isa_families_and_kernels_are_listed(toy: Path) -> None:
    (toy / "src/toy-cpu/arm.c").write_text(
        "#if defined(__ARM_NEON)\nfloat32x4_t v = vaddq_f32(a, b);\n#endif\n"
        "#ifdef __riscv_v\nvfloat32m1_t w;\n#endif\nint toy_vk_mm_x(void);\n"
    )
    result = compare_backends(str(toy))
    cpu = backend(result, "cpu")
    assert {i.name for i in cpu.isa} == {"AVX2", "NEON", "RVV"}  # toy_vk_mm_x is no SSE intrinsic
    assert "rms_norm_f32" in backend(result, "cuda").kernels
    assert "kernel_rms_norm" in backend(result, "metal").kernels


# --- gaps --------------------------------------------------------------------------------------


def test_gaps_are_ranked_by_how_many_backends_have_them_with_evidence(toy: Path) -> None:
    result = compare_backends(str(toy))
    assert result.gaps[0].item == "RMS_NORM+MUL"
    assert result.gaps[0].present_in == ["cuda", "metal", "vulkan"]  # cuda by its longer chain
    assert result.gaps[0].missing_in == ["cpu"]
    cuda_ev = next(e for e in result.gaps[0].evidence if e.backend == "cuda")
    assert cuda_ev.file == "src/toy-cuda/toy-cuda.cu"
    assert cuda_ev.line == 13
    assert "toy_can_fuse" in cuda_ev.snippet and "RMS_NORM+MUL+ADD" in cuda_ev.snippet
    metal_ev = next(e for e in result.gaps[0].evidence if e.backend == "metal")
    assert (metal_ev.line, metal_ev.snippet) == (1, "#define RMS_MUL_OPS { TOY_OP_RMS_NORM, TOY_OP_MUL }")
    counts = [len(g.present_in) for g in result.gaps]
    assert counts == sorted(counts, reverse=True)


def test_default_supporting_target_lacks_only_the_ops_it_rejects(toy: Path) -> None:
    result = compare_backends(str(toy))
    cpu = backend(result, "cpu")
    assert cpu.supports_by_default
    assert cpu.rejected_ops == ["TOY_OP_ROPE"]
    assert [g.item for g in result.gaps if g.kind == "op"] == ["TOY_OP_ROPE"]  # SOFT_MAX is not a gap
    assert gap(result, "TOY_OP_ROPE").present_in == ["cuda", "vulkan"]


def test_any_backend_can_be_the_target(toy: Path) -> None:
    result = compare_backends(str(toy), target="vulkan")
    assert gap(result, "RMS_NORM+MUL+ADD").present_in == ["cuda", "metal"]
    assert "TOY_OP_ROPE" not in [g.item for g in result.gaps]


def test_max_gaps_bounds_the_list_and_counts_the_rest(toy: Path) -> None:
    result = compare_backends(str(toy), max_gaps=1)
    assert len(result.gaps) == 1
    assert result.omitted == result.total_gaps - 1 > 0
    assert sum(result.omitted_by_kind.values()) == result.omitted


def test_unknown_target_names_the_backends(toy: Path) -> None:
    with pytest.raises(InputError, match="cpu, cuda, metal, vulkan"):
        compare_backends(str(toy), target="tpu")


# --- other versions and forks ------------------------------------------------------------------


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_a_backend_at_another_git_ref_is_compared(toy: Path) -> None:
    git(toy, "init", "-q")
    git(toy, "add", ".")
    git(toy, "commit", "-qm", "v1")
    git(toy, "tag", "v1")
    (toy / "src/toy-cpu/toy-cpu.c").write_text(
        CPU + "static void fuse(struct toy_graph * g) { toy_can_fuse(g, 0, { TOY_OP_SOFT_MAX, TOY_OP_SCALE }); }\n"
    )
    git(toy, "commit", "-qam", "v2")
    (toy / "src/toy-cpu/toy-cpu.c").write_text(CPU)  # the work tree went back to no fusion
    result = compare_backends(str(toy), ["cpu", "cpu_v2=HEAD:src/toy-cpu", "old=v1:src/toy-cpu"])
    assert backend(result, "cpu_v2").root == "HEAD:src/toy-cpu"
    g = gap(result, "SOFT_MAX+SCALE")
    assert g.present_in == ["cpu_v2"]
    assert g.evidence[0].file == "HEAD:src/toy-cpu/toy-cpu.c"
    assert "TOY_OP_SOFT_MAX" in g.evidence[0].snippet


def test_the_same_folder_in_another_checkout_is_compared(toy: Path, tmp_path: Path) -> None:
    fork = write_tree(tmp_path / "fork", {
        "include/toy.h": HEADER,
        "src/toy-cpu/toy-cpu.c": CPU + "void f(struct graph * g) { can_fuse(g, 0, { TOY_OP_ROPE, TOY_OP_MUL }); }\n",
    })
    result = compare_backends(str(toy), ["cpu", f"fork={fork}:src/toy-cpu"])
    assert gap(result, "ROPE+MUL").evidence[0].file == f"{fork}:src/toy-cpu/toy-cpu.c"


def test_a_bad_git_ref_is_explained(toy: Path) -> None:
    git(toy, "init", "-q")
    with pytest.raises(InputError, match="git ls-tree failed"):
        compare_backends(str(toy), ["cpu", "old=nosuchref:src/toy-cpu"])


# --- through the MCP protocol ------------------------------------------------------------------


@pytest.mark.anyio
async def test_tool_returns_structured_gaps_through_an_mcp_client(toy: Path) -> None:
    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        annotations = tools["diff_backends"].annotations
        assert annotations is not None
        assert annotations.read_only_hint is True and annotations.open_world_hint is False
        r = await client.call_tool("diff_backends", {"repo": str(toy), "max_gaps": 3})
        assert not r.is_error
        data = r.structured_content
        assert data is not None
        assert data["target"] == "cpu"
        assert data["gaps"][0]["item"] == "RMS_NORM+MUL"
        assert {"file", "line", "snippet"} <= set(data["gaps"][0]["evidence"][0])
        bad = await client.call_tool("diff_backends", {"repo": str(toy / "nope")})
        assert bad.is_error


# --- real tree: llama.cpp's ggml from the llama-cpp-python sdist (PyPI) --------------------------


def real_tree(version: str) -> Path:
    try:
        return llama_cpp_tree(version)
    except TreeUnavailable as exc:
        pytest.skip(f"llama-cpp-python {version} sdist unavailable (PyPI unreachable?): {exc}")


@pytest.fixture(scope="module")
def ggml_current() -> DiffBackendsResult:
    return compare_backends(str(real_tree(CURRENT)), max_gaps=200, fit=False)


@pytest.mark.slow
def test_real_ggml_cpu_gaps_are_fusions_other_backends_have(ggml_current: DiffBackendsResult) -> None:
    result = ggml_current
    assert {"cpu", "cuda", "metal", "vulkan", "opencl", "sycl"} <= {b.name for b in result.backends}
    assert {"GGML_OP_", "GGML_UNARY_OP_", "GGML_GLU_OP_"} <= set(result.op_families)
    cpu = backend(result, "cpu")
    assert cpu.supports_by_default and "RMS_NORM+MUL" in cpu.fusions  # ggml-cpu.c fuses it since 2026
    # ggml-cuda.cu, ggml-metal-fusion.cpp, ggml-opencl.cpp, ggml-sycl.cpp, ggml-vulkan-types.h
    # hip and musa compile ggml-cuda's sources (their CMakeLists.txt), so they fuse what CUDA fuses
    top = gap(result, "RMS_NORM+MUL+ADD")
    assert top.present_in == ["cuda", "hip", "metal", "musa", "opencl", "sycl", "vulkan"]
    assert result.gaps[0] == top
    assert any(e.backend == "cuda" and e.file.endswith("ggml-cuda.cu") and "GGML_OP_RMS_NORM" in e.snippet
               and e.snippet.endswith("(also compiled into hip, musa)") for e in top.evidence)
    assert gap(result, "RMS_NORM+MUL+ROPE").present_in == ["cuda", "hip", "musa", "vulkan"]
    assert gap(result, "SILU+MUL").present_in == ["cuda", "hip", "musa", "vulkan"]
    assert not [g for g in result.gaps if g.kind == "op"]  # CPU runs every op it does not reject
    assert len(result.model_dump_json()) < 100_000


@pytest.mark.slow
def test_real_ggml_august_2025_cpu_lacked_rms_norm_mul() -> None:
    result = compare_backends(str(real_tree(HISTORIC)))
    first = result.gaps[0]
    assert (first.kind, first.item, first.missing_in[0]) == ("fusion", "RMS_NORM+MUL", "cpu")
    assert first.present_in == ["cuda", "hip", "metal", "musa", "opencl", "vulkan"]
    metal = next(e for e in first.evidence if e.backend == "metal")
    assert metal.file.endswith("ggml-metal.m") and "as part of RMS_NORM+MUL+ADD" in metal.snippet


def test_scoped_cpp_enum_families_are_detected(tmp_path: Path) -> None:
    ops = "enum class OpType { Add, Mul, RmsNorm, Softmax };\n"
    tree = write_tree(tmp_path / "p", {
        "backend/cpu/ops.hpp": ops,
        "backend/cpu/cpu.cpp": "void run(OpType t) { switch (t) { case OpType::Add: case OpType::Mul: break; } }\n",
        "backend/gpu/gpu.cpp": (
            "void run(OpType t) { switch (t) { case OpType::Add: case OpType::Softmax: break; } }\n"
            "bool fuse(Graph & g, int i) { return can_fuse(g, i, { OpType::RmsNorm, OpType::Mul }); }\n"
        ),
    })
    result = compare_backends(str(tree))
    assert result.op_families == ["OpType::"]
    assert [(g.kind, g.item) for g in result.gaps] == [
        ("fusion", "RmsNorm+Mul"), ("op", "OpType::RmsNorm"), ("op", "OpType::Softmax"),
    ]



# --- each backend's own fusion helper; backends built from another's sources (issue 27) ---------------

SHARED = """\
static inline bool toy_can_fuse(const struct toy_graph * g, int i, const enum toy_op * ops, int n) { return true; }
"""

# a Vulkan-like backend whose own check is not named for fusing: it hands its op list to the shared one
VK_OWN_HELPER = """\
static bool toy_vk_can_combine(struct ctx * ctx, const struct toy_graph * g, int i,
                               std::initializer_list<enum toy_op> ops) {
    return ctx->enabled && toy_can_fuse(g, i, ops.begin(), (int) ops.size());
}
static void toy_vk_graph_compute(struct ctx * ctx, struct toy_graph * g) {
    for (int i = 0; i < g->n; i++) {
        if (toy_vk_can_combine(ctx, g, i, { TOY_OP_RMS_NORM, TOY_OP_MUL })) { i++; continue; }
        switch (g->nodes[i]->op) { case TOY_OP_ADD: case TOY_OP_ROPE: break; default: break; }
        toy_vk_dispatch(ctx, g->nodes[i], { TOY_OP_ADD, TOY_OP_MUL });  // not a fusion check
    }
}
"""


def test_each_backends_own_fusion_helper_is_recognised_by_what_it_does(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "p", {
        "include/toy.h": HEADER,
        "src/toy-impl.h": SHARED,
        "src/toy-cpu/toy-cpu.c": CPU,
        "src/toy-vulkan/toy-vulkan.cpp": VK_OWN_HELPER,
    })
    result = compare_backends(str(tree))
    vulkan = backend(result, "vulkan")
    assert vulkan.fusions == ["RMS_NORM+MUL"] and vulkan.fusion_helpers == ["toy_can_fuse", "toy_vk_can_combine"]
    rms = gap(result, "RMS_NORM+MUL")
    assert rms.present_in == ["vulkan"] and "toy_vk_can_combine(ctx, g, i, {" in rms.evidence[0].snippet


def test_a_backend_built_from_another_backends_sources_has_its_ops_and_fusions(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "p", {
        "include/toy.h": HEADER,
        "src/toy-cpu/toy-cpu.c": CPU,
        "src/toy-cuda/toy-cuda.cu": CUDA,
        "src/toy-cuda/common.cuh": "#define WARP 32\n",
        # no source of its own: it compiles CUDA's (HIP)
        "src/toy-hip/CMakeLists.txt": 'file(GLOB SRCS "../toy-cuda/*.cu")\nadd_library(toy-hip ${SRCS})\n',
        # a source of its own beside CUDA's (MUSA), named through the current folder
        "src/toy-musa/mudnn.cu": "__global__ void mudnn_copy(float * x) { }\n",
        "src/toy-musa/CMakeLists.txt": "list(APPEND SRCS ${CMAKE_CURRENT_SOURCE_DIR}/../toy-cuda/toy-cuda.cu)\n",
        # headers and shared files of another folder are not its sources (Metal's shaders include them)
        "src/toy-metal/toy-metal.m": METAL,
        "src/toy-metal/CMakeLists.txt": ('configure_file(../toy-common.h x COPYONLY)\n'
                                         'file(GLOB H "../toy-cuda/*.cuh")\n'),
        "scripts/hip/README": "how to build for ROCm\n",
    })
    result = compare_backends(str(tree))
    assert {b.name: b.built_from for b in result.backends} == {
        "cpu": [], "cuda": [], "hip": ["cuda"], "metal": [], "musa": ["cuda"]}
    hip, musa = backend(result, "hip"), backend(result, "musa")
    assert hip.files == 0 and hip.fusions == backend(result, "cuda").fusions
    assert "mudnn_copy" in musa.kernels and "rms_norm_f32" in musa.kernels
    rms = gap(result, "RMS_NORM+MUL+ADD")
    assert rms.present_in == ["cuda", "hip", "metal", "musa"]
    assert [e.backend for e in rms.evidence] == ["cuda", "metal"]  # one evidence per place
    assert rms.evidence[0].snippet.endswith("(also compiled into hip, musa)")
    assert not [g for g in result.gaps if "cuda" in g.present_in and {"hip", "musa"} & set(g.missing_in)]
    assert any(n.startswith("hip compiles cuda's sources (src/toy-hip/CMakeLists.txt:1") for n in result.notes)


@pytest.mark.slow
def test_real_ggml_rms_norm_mul_gap_names_every_backend_that_fuses_it() -> None:
    result = compare_backends(str(real_tree(UNFUSED_RMS_NORM)))
    first = result.gaps[0]
    assert (first.kind, first.item, first.missing_in[0]) == ("fusion", "RMS_NORM+MUL", "cpu")
    assert first.present_in == ["cuda", "hip", "metal", "musa", "opencl", "vulkan"]
    vulkan = next(e for e in first.evidence if e.backend == "vulkan")
    assert "ggml_vk_can_fuse(ctx, cgraph, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })" in vulkan.snippet
    helpers = {b.name: b.fusion_helpers for b in result.backends}
    assert {"ggml_vk_can_fuse"} <= set(helpers["vulkan"]) and {"ggml_cuda_can_fuse"} <= set(helpers["cuda"])
    assert {"ggml_opencl_can_fuse"} <= set(helpers["opencl"]) and {"can_fuse"} <= set(helpers["metal"])
    assert {"ggml_cann_can_fuse"} <= set(helpers["cann"]) and helpers["cpu"] == []
    hip = backend(result, "hip")
    assert hip.root == "ggml/src/ggml-hip" and hip.files == 0 and hip.built_from == ["cuda"]
    assert backend(result, "musa").built_from == ["cuda"]


@pytest.mark.slow
def test_real_current_ggml_every_backend_that_fuses_rms_norm_mul_has_it(ggml_current: DiffBackendsResult) -> None:
    def fuses(b: BackendInventory) -> bool:
        return b.fusions_count > 0 and ("RMS_NORM+MUL" in b.fusions or any(
            f.startswith("RMS_NORM+MUL+") for f in b.fusions))
    assert {b.name for b in ggml_current.backends if fuses(b)} >= {
        "cpu", "cuda", "et", "hexagon", "hip", "metal", "musa", "opencl", "sycl", "vulkan", "webgpu"}


# --- issue 33 item 13: fusion names, case groups and lists that are no chains ------------------------

def test_a_fusion_name_splits_into_the_most_ops_not_into_a_private_fused_op(tmp_path: Path) -> None:
    """A backend-private enum may name a fused op (Hexagon's HTP_OP_RMS_NORM_MUL): the Vulkan-like fusion
    string RMS_NORM_MUL_ROPE is still RMS_NORM+MUL+ROPE (before: RMS_NORM_MUL+ROPE, and RMS_NORM_MUL alone
    became a fusion of its own name)."""
    tree = write_tree(tmp_path / "p", {
        "include/toy.h": HEADER,
        "src/toy-cpu/toy-cpu.c": CPU,
        "src/toy-hexagon/htp-ops.h": "enum htp_op { HTP_OP_ADD, HTP_OP_MUL, HTP_OP_RMS_NORM_MUL, HTP_OP_COUNT };\n",
        "src/toy-hexagon/main.c": ("int run(int op) { switch (op) { case HTP_OP_ADD: case HTP_OP_MUL: "
                                   "case HTP_OP_RMS_NORM_MUL: return 1; } return TOY_OP_ADD; }\n"),
        "src/toy-vulkan/toy-vulkan.cpp": """\
            static void toy_vk_build(struct toy_graph * g, int i) {
                const char * fusion_string = "";
                if (toy_vk_fuse(g, i, 3)) {
                    fusion_string = "RMS_NORM_MUL_ROPE";
                } else if (toy_vk_fuse(g, i, 2)) {
                    fusion_string = "RMS_NORM_MUL";
                }
                switch (g->nodes[i]->op) { case TOY_OP_RMS_NORM: case TOY_OP_ROPE: case TOY_OP_MUL: break; }
            }
            """,
    })
    result = compare_backends(str(tree))
    assert "HTP_OP_" in result.op_families
    vulkan = backend(result, "vulkan")
    assert set(vulkan.fusions) == {"RMS_NORM+MUL+ROPE", "RMS_NORM+MUL"}
    assert gap(result, "RMS_NORM+MUL").present_in == ["vulkan"]


def test_every_label_of_the_calling_case_group_starts_a_fusion(tmp_path: Path) -> None:
    """Metal's norm function fuses `fops[0] = op->op; fops[1] = MUL; fops[2] = ADD` and is called from
    `case NORM: case RMS_NORM:`: both NORM+MUL+ADD and RMS_NORM+MUL+ADD (before: only the last label)."""
    header = HEADER.replace("TOY_OP_SCALE,", "TOY_OP_SCALE, TOY_OP_NORM,")
    tree = write_tree(tmp_path / "p", {
        "include/toy.h": header,
        "src/toy-cpu/toy-cpu.c": CPU,
        "src/toy-metal/toy-metal-ops.cpp": """\
            int toy_metal_op_norm(struct ctx * ctx, int idx) {
                enum toy_op fops[8];
                fops[0] = ctx->node(idx)->op;
                fops[1] = TOY_OP_MUL;
                fops[2] = TOY_OP_ADD;
                int n_fuse = 0;
                while (ctx->can_fuse(idx + n_fuse, fops + n_fuse, 2)) { n_fuse++; }
                return n_fuse;
            }
            static int toy_metal_encode(struct ctx * ctx, int idx) {
                int n_fuse = 1;
                switch (ctx->node(idx)->op) {
                    case TOY_OP_SOFT_MAX:
                        break;
                    case TOY_OP_NORM:
                    case TOY_OP_RMS_NORM:
                        {
                            n_fuse = toy_metal_op_norm(ctx, idx);
                        } break;
                    case TOY_OP_ADD: case TOY_OP_MUL:
                        break;
                }
                return n_fuse;
            }
            """,
    })
    metal = backend(compare_backends(str(tree)), "metal")
    assert set(metal.fusions) == {"NORM+MUL+ADD", "RMS_NORM+MUL+ADD"}


def test_a_range_for_over_ops_and_a_list_of_sub_ops_are_no_fusions(tmp_path: Path) -> None:
    """`for (op : { MUL_MAT, MUL_MAT_ID })` tries each op on its own and `{ SWIGLU, GEGLU }` lists the
    variants one GLU node may be: neither is a chain of graph nodes (before: MUL+SCALE and SILU+GELU)."""
    tree = write_tree(tmp_path / "p", {
        "include/toy.h": HEADER,
        "src/toy-cpu/toy-cpu.c": CPU,
        "src/toy-cuda/toy-cuda.cu": """\
            static bool toy_cuda_should_fuse(const struct toy_graph * g, int i) {
                static const enum toy_unary_op valid_unary_ops[] = { TOY_UNARY_OP_SILU, TOY_UNARY_OP_GELU };
                for (enum toy_op op : { TOY_OP_MUL, TOY_OP_SCALE }) {
                    if (toy_cuda_can_fuse(g, i, { TOY_OP_RMS_NORM, TOY_OP_MUL }, {})) { return true; }
                }
                return valid_unary_ops[0] == 0;
            }
            """,
    })
    cuda = backend(compare_backends(str(tree)), "cuda")
    assert cuda.fusions == ["RMS_NORM+MUL"]


# --- every llama-cpp-python release 0.3.16 .. 0.3.36 (issue 33 item 13) --------------------------------

RELEASES = [f"0.3.{n}" for n in range(16, 37)]  # all of them exist on PyPI (pip index versions)


def rms_norm_mul_fusers(version: str) -> set[str]:
    """Which backends fuse RMS_NORM+MUL in each release, read from the sources (grep): the CUDA, Metal,
    OpenCL and Vulkan backends in all of them; HIP and MUSA compile CUDA's sources (their CMakeLists.txt)."""
    n = int(version.rsplit(".", 1)[1])
    out = {"cuda", "hip", "musa", "metal", "opencl", "vulkan"}
    out |= {"webgpu"} if n >= 21 else set()  # ggml-webgpu.cpp: ggml_can_fuse(cgraph, node_idx, { RMS_NORM, MUL })
    out |= {"cpu"} if n >= 23 else set()  # ggml-cpu.c: fuse_ops[] = { RMS_NORM, MUL }
    out |= {"hexagon"} if n >= 24 else set()  # ggml-hexagon.cpp: HTP_OP_RMS_NORM_MUL
    out |= {"et"} if n >= 34 else set()
    out |= {"sycl"} if n >= 35 else set()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_real_ggml_rms_norm_mul_on_every_release(version: str) -> None:
    tree = real_tree(version)
    expected = rms_norm_mul_fusers(version)
    # the CPU is the usual target; once it fuses RMS_NORM+MUL itself, BLAS (which fuses nothing) is
    target = "cpu" if "cpu" not in expected else "blas"
    result = compare_backends(str(tree), target=target, max_gaps=300, fit=False)
    rms = gap(result, "RMS_NORM+MUL")
    assert set(rms.present_in) == expected
    assert {b.name: b.built_from for b in result.backends if b.built_from} == {"hip": ["cuda"], "musa": ["cuda"]}
    calls = {"vulkan": ("ggml-vulkan.cpp", "ggml_vk_can_fuse("), "opencl": ("ggml-opencl.cpp", "ggml_opencl_can_fuse("),
             "cuda": ("ggml-cuda.cu", "ggml_cuda_can_fuse(")}
    by_backend = {e.backend: e for e in rms.evidence}
    for name, (file, call) in calls.items():
        ev = by_backend[name]
        line = (tree / ev.file).read_text().split("\n")[ev.line - 1].strip()
        assert ev.file.endswith(file) and ev.snippet.startswith(line[:157]), (name, ev)
        assert call in line and re.search(r"\{\s*GGML_OP_RMS_NORM\s*,\s*GGML_OP_MUL\s*\}", line), (name, line)
    assert by_backend["cuda"].snippet.endswith("(also compiled into hip, musa)")
    assert not [k for b in result.backends for k in b.fusions if "RMS_NORM_MUL" in k]  # names split into ops


# --- issue 45 item 3: every backend that fuses a chain, however it spells it, named in the answer ---------


def test_an_array_filled_with_one_op_is_a_chain_of_that_op(tmp_path: Path) -> None:
    """CUDA fills its op array with `std::fill` (with the guarded node's own op), Vulkan in a loop, Metal element
    by element: each hands it to a fusion check, so each fuses a run of that op, whatever its length (before:
    only Metal's, as ADD+ADD+ADD+ADD)."""
    tree = write_tree(tmp_path / "p", {
        "include/toy.h": HEADER,
        "src/toy-impl.h": SHARED,
        "src/toy-cpu/toy-cpu.c": CPU,
        "src/toy-cuda/toy-cuda.cu": """\
            static void toy_cuda_graph_compute(struct toy_graph * g, int i) {
                struct toy_tensor * node = g->nodes[i];
                if (node->op == TOY_OP_ADD || node->op == TOY_OP_MUL) {
                    enum toy_op ops[8];
                    std::fill(ops, ops + 8, node->op);
                    int n = 0;
                    while (n < 7 && toy_can_fuse(g, i + n, ops + n, 2)) { n++; }
                }
            }
            """,
        "src/toy-vulkan/toy-vulkan.cpp": """\
            static int toy_vk_multi_scale(const struct toy_graph * g, int i) {
                enum toy_op scales[4];
                for (int k = 0; k < 4; ++k) {
                    scales[k] = TOY_OP_SCALE;
                }
                int n = 4;
                while (n > 1 && !toy_can_fuse(g, i, scales, n)) { n--; }
                return n;
            }
            """,
        "src/toy-metal/toy-metal.m": """\
            static int toy_metal_op_add(struct ctx * ctx, int idx) {
                enum toy_op fops[4];
                fops[0] = TOY_OP_ADD;
                fops[1] = TOY_OP_ADD;
                fops[2] = TOY_OP_ADD;
                fops[3] = TOY_OP_ADD;
                int n_fuse = 0;
                while (ctx->can_fuse(idx + n_fuse, fops + n_fuse, 2)) { n_fuse++; }
                return n_fuse;
            }
            """,
    })
    result = compare_backends(str(tree))
    fusions = {b.name: b.fusions for b in result.backends}
    assert fusions == {"cpu": [], "cuda": ["ADD+ADD", "MUL+MUL"], "metal": ["ADD+ADD"], "vulkan": ["SCALE+SCALE"]}
    assert gap(result, "ADD+ADD").present_in == ["cuda", "metal"]


def test_op_tests_in_a_condition_about_fusing_are_a_chain(tmp_path: Path) -> None:
    """Vulkan fuses ADD+RMS_NORM with no op list: under `if (node->op == ADD)`, a condition that speaks of fusing
    tests the next node for RMS_NORM. Tests of two nodes in one such condition are a chain too; a condition that
    does not speak of fusing, or tests the guarded node again, is none."""
    tree = write_tree(tmp_path / "p", {
        "include/toy.h": HEADER,
        "src/toy-cpu/toy-cpu.c": CPU,
        "src/toy-vulkan/toy-vulkan.cpp": """\
            static void toy_vk_build(struct ctx * ctx, struct toy_graph * g, int i) {
                struct toy_tensor * node = g->nodes[i];
                if (node->op == TOY_OP_ADD) {
                    int next = i + 1;
                    if (next < g->n && g->nodes[next]->op == TOY_OP_RMS_NORM && ctx->add_rms_fusion) {
                        ctx->fuse_next = true;
                    }
                    if (next < g->n && g->nodes[next]->op == TOY_OP_ROPE && ctx->prefetch) {
                        ctx->prefetch_next = true;
                    }
                    if (node->op == TOY_OP_ADD && ctx->fusion_stats) {
                        ctx->adds++;
                    }
                }
                if (g->nodes[i + 1]->op == TOY_OP_SCALE && g->nodes[i]->op == TOY_OP_SOFT_MAX && ctx->fuse) {
                    ctx->fuse_next = true;
                }
            }
            """,
    })
    result = compare_backends(str(tree))
    assert backend(result, "vulkan").fusions == ["ADD+RMS_NORM", "SOFT_MAX+SCALE"]
    evidence = gap(result, "ADD+RMS_NORM").evidence[0]
    assert evidence.line == 5 and "g->nodes[next]->op == TOY_OP_RMS_NORM" in evidence.snippet


def test_a_list_added_to_a_container_a_fusion_check_uses_is_a_fusion(tmp_path: Path) -> None:
    """CUDA builds its top-k MoE chain in a vector (`ops.insert(ops.end(), { gating_op, ... })`) and checks the
    vector; its first op is a variable set by a flag, so both ops it may hold start a chain. A list added to a
    container that no fusion check uses is none."""
    tree = write_tree(tmp_path / "p", {
        "include/toy.h": HEADER,
        "src/toy-impl.h": SHARED,
        "src/toy-cpu/toy-cpu.c": CPU,
        "src/toy-cuda/toy-cuda.cu": """\
            static void toy_cuda_graph_compute(struct args a, struct toy_graph * g, int i) {
                std::vector<enum toy_op> ops;
                enum toy_op gating_op = a.sigmoid ? TOY_OP_UNARY : TOY_OP_SOFT_MAX;
                ops.insert(ops.end(), { gating_op, TOY_OP_SCALE, TOY_OP_ADD });
                if (toy_can_fuse(g, i, ops.data(), (int) ops.size())) { return; }
                std::vector<enum toy_op> seen;
                seen.insert(seen.end(), { TOY_OP_ROPE, TOY_OP_MUL });
                toy_log(seen.data());
            }
            """,
    })
    result = compare_backends(str(tree))
    assert set(backend(result, "cuda").fusions) == {"SOFT_MAX+SCALE+ADD", "UNARY+SCALE+ADD"}
    assert "ops.insert(ops.end(), { gating_op," in gap(result, "SOFT_MAX+SCALE+ADD").evidence[0].snippet


def test_an_answer_too_big_for_the_cap_keeps_every_gaps_backends(tmp_path: Path) -> None:
    """Thirty backends with long kernel lists make an answer over the 64 KB cap: it sends shorter per-backend lists
    and less evidence, never a gap's present_in cut short (the server's own cut keeps 3 names of a list)."""
    kernels = "\n".join(f"__global__ void toy_kernel_with_a_long_name_{k}(float * x) {{ }}" for k in range(40))
    files = {"include/toy.h": HEADER, "src/toy-impl.h": SHARED, "backends/cpu/cpu.c": CPU}
    for n in range(30):
        files[f"backends/gpu{n:02}/gpu.cu"] = kernels + """
            static void run(struct toy_graph * g, int i) {
                if (toy_can_fuse(g, i, { TOY_OP_RMS_NORM, TOY_OP_MUL })) { return; }
                if (toy_can_fuse(g, i, { TOY_OP_SOFT_MAX, TOY_OP_SCALE })) { return; }
                switch (g->nodes[i]->op) { case TOY_OP_ADD: case TOY_OP_SCALE: break; }
            }
            """
    result = compare_backends(str(write_tree(tmp_path / "p", files)), max_gaps=200)
    assert limits.bound(result) is result  # sent whole
    gpus = [f"gpu{n:02}" for n in range(30)]
    assert [(g.item, g.present_in) for g in result.gaps] == [("RMS_NORM+MUL", gpus), ("SOFT_MAX+SCALE", gpus)]
    assert result.notes[-1].startswith("cut to fit 64 KB: each backend lists")
    assert backend(result, "gpu00").kernels_count == 40 and len(backend(result, "gpu00").kernels) < 40


@pytest.fixture(scope="module")
def release_answer(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """diff_backends on the llama-cpp-python 0.3.19 tree with the default arguments, asked once through a real
    MCP client (in a folder and cache of its own, as every test's server)."""
    tree = real_tree(UNFUSED_RMS_NORM)
    place = tmp_path_factory.mktemp("release")

    async def ask() -> dict[str, Any]:
        async with Client(build_server()) as client:
            answer = await client.call_tool("diff_backends", {"repo": str(tree)})
            assert not answer.is_error and answer.structured_content is not None, answer
            return answer.structured_content

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTORESEARCH_CACHE_DIR", str(place / "cache"))
        patch.chdir(place)
        return anyio.run(ask)


def release_gap(answer: dict[str, Any], item: str) -> dict[str, Any]:
    found = [g for g in answer["gaps"] if g["item"] == item]
    assert found, f"{item} not in {[g['item'] for g in answer['gaps']]}"
    return found[0]


def evidence_of(found: dict[str, Any]) -> dict[str, str]:
    return {e["backend"]: f"{e['file'].rsplit('/', 1)[-1]}: {e['snippet']}" for e in found["evidence"]}


@pytest.mark.slow
def test_real_release_rms_norm_mul_gap_names_all_six_backends_through_the_mcp_client(
        release_answer: dict[str, Any]) -> None:
    """Issue 45 item 3: the answer was over the 64 KB cap, and the server's cut left `cuda, hip, metal` of the six
    backends that fuse RMS_NORM+MUL (Vulkan and OpenCL spell it with their own can_fuse helpers)."""
    first = release_answer["gaps"][0]
    assert (first["kind"], first["item"], first["missing_in"][0]) == ("fusion", "RMS_NORM+MUL", "cpu")
    assert first["present_in"] == ["cuda", "hip", "metal", "musa", "opencl", "vulkan"]
    evidence = evidence_of(first)
    assert evidence["vulkan"].startswith("ggml-vulkan.cpp: } else if (ggml_vk_can_fuse(ctx, cgraph, i, {")
    assert evidence["opencl"].startswith("ggml-opencl.cpp: if (!backend_ctx->disable_fusion && ggml_opencl_can_fuse(")
    assert set(evidence) == {"cuda", "metal", "opencl", "vulkan"}  # hip and musa compile CUDA's place


@pytest.mark.slow
def test_real_release_chain_of_adds_is_found_in_cuda_metal_and_vulkan(release_answer: dict[str, Any]) -> None:
    adds = release_gap(release_answer, "ADD+ADD")
    assert adds["present_in"] == ["cuda", "hip", "metal", "musa", "vulkan"]
    assert evidence_of(adds) == {
        "cuda": "ggml-cuda.cu: std::fill(ops, ops + 8, GGML_OP_ADD); (also compiled into hip, musa)",
        "metal": "ggml-metal-ops.cpp: fops[0] = GGML_OP_ADD;",
        "vulkan": "ggml-vulkan.cpp: adds[i] = GGML_OP_ADD;",
    }
    assert not [g["item"] for g in release_answer["gaps"] if g["item"].startswith("ADD+ADD+")]


@pytest.mark.slow
def test_real_release_cuda_top_k_moe_built_in_a_vector_is_found(release_answer: dict[str, Any]) -> None:
    late = release_gap(release_answer, "ARGSORT+VIEW+GET_ROWS+RESHAPE+SOFT_MAX+RESHAPE")
    assert late["present_in"] == ["cuda", "hip", "musa", "vulkan"]
    early = release_gap(release_answer, "SOFT_MAX+RESHAPE+ARGSORT+VIEW+GET_ROWS")
    assert early["present_in"] == ["cuda", "hip", "musa", "vulkan"]
    assert evidence_of(early)["cuda"].startswith("ggml-cuda.cu: ops.insert(ops.end(), { gating_op, GGML_OP_RESHAPE,")


@pytest.mark.slow
@pytest.mark.anyio
async def test_real_release_vulkan_add_rms_norm_written_as_op_tests_is_found() -> None:
    tree = real_tree(UNFUSED_RMS_NORM)
    async with Client(build_server()) as client:
        answer = await client.call_tool("diff_backends", {"repo": str(tree), "backends": ["cpu", "cann", "vulkan"]})
    assert answer.structured_content is not None
    add_rms = release_gap(answer.structured_content, "ADD+RMS_NORM")
    assert add_rms["present_in"] == ["cann", "vulkan"]
    assert evidence_of(add_rms)["vulkan"] == "ggml-vulkan.cpp: cgraph->nodes[next_node_idx]->op == GGML_OP_RMS_NORM &&"
