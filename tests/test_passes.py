"""find_passes: consecutive passes over the same buffer in C/C++ functions, on small files written
for the tests, on llama.cpp's ggml as vendored by llama-cpp-python 0.3.19, and through MCP clients."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mcp import Client

from autoresearch_mcp.analysis.passes import find_passes, search, short_name
from autoresearch_mcp.app import build_server
from autoresearch_mcp.errors import InputError
from autoresearch_mcp.models import FindPassesResult, PassFinding
from helpers import call, error
from realtree import CURRENT, UNFUSED_RMS_NORM, TreeUnavailable, llama_cpp_tree


def source(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return path


def scan(tmp_path: Path, code: str, name: str = "k.c") -> FindPassesResult:
    return find_passes([source(tmp_path, name, code)], limit=200)


def only(result: FindPassesResult, function: str, buffer: str) -> PassFinding:
    hits = [f for f in result.findings if f.function == function and f.buffer.split(" ")[0] == buffer]
    assert len(hits) == 1, [(f.function, f.buffer, f.kind) for f in result.findings]
    return hits[0]


# --- small files -----------------------------------------------------------------------------------


def test_a_single_pass_is_not_reported(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void scale(const float *x, float *y, int n, float s) {
            for (int i = 0; i < n; i++) y[i] = x[i] * s;
        }
    """)
    assert result.findings == [] and result.functions_scanned == 1


def test_copy_then_scale_in_place_is_one_pass_too_many(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <string.h>
        void norm(const float *x, float *y, int n) {
            float sum = 0.0f;
            for (int i = 0; i < n; i++) {
                sum += x[i] * x[i];
            }
            const float scale = 1.0f / sum;
            memcpy(y, x, n * sizeof(float));
            for (int i = 0; i < n; i++) y[i] *= scale;
        }
    """)
    y = only(result, "norm", "y")
    assert y.kind == "write_then_update" and y.fusable and y.depends_on == []
    assert [(p.start_line, p.end_line, p.access) for p in y.passes] == [(9, 9, "write"), (10, 10, "update")]
    assert y.passes[0].code.startswith("memcpy(y, x")
    assert "first pass" in y.suggestion
    x = only(result, "norm", "x")  # the sum loop and the memcpy both read x, and the copy needs no sum
    assert x.kind == "read_then_read" and x.fusable
    assert (x.passes[0].start_line, x.passes[0].end_line) == (5, 7)


def test_a_pass_that_needs_the_previous_reduction_fuses_only_online(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <math.h>
        void soft_max(const float *x, float *y, int n) {
            float max = x[0];
            for (int i = 1; i < n; i++) if (x[i] > max) max = x[i];
            double sum = 0.0;
            for (int i = 0; i < n; i++) { y[i] = expf(x[i] - max); sum += y[i]; }
            const float inv = (float)(1.0 / sum);
            for (int i = 0; i < n; i++) y[i] *= inv;
        }
    """)
    x = only(result, "soft_max", "x")
    assert x.kind == "read_then_read" and not x.fusable and x.depends_on == ["max"]
    assert "online" in x.suggestion
    y = only(result, "soft_max", "y")
    assert y.kind == "update_then_update" and y.depends_on == ["inv"]  # through inv = 1/sum


def test_passes_over_different_buffers_are_not_reported(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <string.h>
        void two(const float *a, float *b, const float *c, float *d, float *ws, int n) {
            for (int i = 0; i < n; i++) b[i] = a[i] * 2.0f;
            memset(d, 0, n * sizeof(float));
            for (int i = 0; i < n; i++) ws[i] = c[i];
            float *lo = ws + n;
            for (int i = 0; i < n; i++) lo[i] = 1.0f;
        }
    """)
    assert result.findings == []  # d once, and ws and ws + n are different halves of one workspace


def test_rows_of_one_buffer_indexed_at_different_offsets_are_different_buffers(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void halves(float *ws, int n) {
            for (int i = 0; i < n; i++) ws[i] = 0.0f;
            for (int i = 0; i < n; i++) ws[n + i] = 1.0f;
        }
        void shifted(float *y, int n) {
            for (int i = 0; i < n; i++) y[i] = 0.0f;
            for (int i = 0; i < n - 1; i++) y[i + 1] += 1.0f;
        }
    """)
    assert not [f for f in result.findings if f.function == "halves"]  # each element is written once
    assert only(result, "shifted", "y").kind == "write_then_update"  # a literal offset stays in the row


def test_nested_loop_nests_over_one_matrix_are_two_passes(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void fill_then_double(float *m, const float *v, int rows, int cols) {
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++)
                    m[r * cols + c] = v[c];
            for (int r = 0; r < rows; r++) {
                for (int c = 0; c < cols; c++) {
                    m[r * cols + c] *= 2.0f;
                }
            }
        }
    """)
    m = only(result, "fill_then_double", "m")
    assert m.kind == "write_then_update" and m.fusable
    assert [(p.start_line, p.end_line) for p in m.passes] == [(3, 5), (6, 10)]


def test_passes_inside_a_row_loop_are_found_per_row(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void normalize_rows(float *m, int rows, int cols) {
            for (int r = 0; r < rows; r++) {
                float *row = m + r * cols;
                float s = 0.0f;
                for (int c = 0; c < cols; c++) s += row[c];
                for (int c = 0; c < cols; c++) row[c] /= s;
            }
        }
    """)
    row = only(result, "normalize_rows", "row")
    assert row.buffer == "row (m)" and row.kind == "read_then_update" and row.depends_on == ["s"]


def test_alternative_branches_and_barriers_separate_passes(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <string.h>
        void sync(int);
        void variants(const float *x, float *y, int n, int fast) {
        #ifdef USE_FAST
            memcpy(y, x, n * sizeof(float));
        #else
            for (int i = 0; i < n; i++) y[i] = x[i];
        #endif
            if (fast) {
                for (int i = 0; i < n; i++) y[i] = 0.0f;
            } else {
                for (int i = 0; i < n; i++) y[i] = 1.0f;
            }
        }
        void threaded(const float *x, float *y, int n, void *pool) {
            for (int i = 0; i < n; i++) y[i] = x[i];
            ggml_barrier(pool);
            for (int i = 0; i < n; i++) y[i] += 1.0f;
        }
    """)
    pairs = {tuple(p.start_line for p in f.passes) for f in result.findings if f.function == "variants"}
    # each if branch follows the #if, but branches of one conditional never pair, and the #else (the same
    # pass for another build) is reported through its #if
    assert pairs == {(6, 11), (6, 13)}
    assert not [f for f in result.findings if f.function == "threaded"]


def test_debug_only_loops_are_not_passes(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <assert.h>
        #include <math.h>
        void check(float);
        void k(const float *x, float *y, int n) {
            for (int i = 0; i < n; i++) y[i] = x[i] * 2.0f;
        #ifndef NDEBUG
            for (int i = 0; i < n; i++) check(y[i]);
        #endif
            for (int i = 0; i < n; i++) assert(!isnan(y[i]));
        }
    """, name="k.cpp")
    assert result.findings == []


def test_a_simd_body_and_its_scalar_tail_are_one_pass(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void scale(const float *x, float *y, int n, float s) {
            const int np = n & ~7;
            for (int i = 0; i < np; i += 8) {
                store8(y + i, mul8(load8(x + i), s));
            }
            for (int i = np; i < n; ++i) {
                y[i] = x[i] * s;
            }
        }
        void scale2(const float *x, float *y, int n, float s) {
            int i = 0;
            for (; i + 7 < n; i += 8) store8(y + i, mul8(load8(x + i), s));
            for (; i < n; ++i) y[i] = x[i] * s;
            for (i = 0; i < n; ++i) y[i] += 1.0f;
        }
    """)
    assert not [f for f in result.findings if f.function == "scale"]
    # the tail continues the body; the third loop starts over: a second pass over y (and x is not in it),
    # reported once, from the body (the tail is not a pass of its own)
    assert [(f.buffer, f.passes[0].start_line, f.passes[1].start_line) for f in result.findings] == [("y", 13, 15)]


def test_cases_of_a_switch_are_alternatives_even_with_nested_ifs(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void fill(float *y, int n) { for (int i = 0; i < n; i++) y[i] = 0.0f; }
        void set(float *y, int n) { for (int i = 0; i < n; i++) y[i] = 1.0f; }
        void dispatch(float *y, int n, int type, int sub) {
            switch (type) {
                case 0: { if (sub) { fill(y, n); } else { set(y, n); } } break;
                case 1: { if (sub) { set(y, n); } } break;
                default: fill(y, n);
            }
        }
    """)
    assert not [f for f in result.findings if f.function == "dispatch"]


def test_calls_of_helpers_that_walk_their_parameters_are_passes(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        static void rms_norm(const float *x, float *out, int n) {
            float ss = 0.0f;
            for (int i = 0; i < n; i++) ss += x[i] * x[i];
            for (int i = 0; i < n; i++) out[i] = x[i] / ss;
        }
        static void mul(const float *a, const float *b, float *out, int n) {
            for (int i = 0; i < n; i++) out[i] = a[i] * b[i];
        }
        static float first(const float *a) { return a[0]; }
        void pick(const float *x, float *y, int n, int fast) { fast ? mul(x, x, y, n) : rms_norm(x, y, n); }
        void forward(const float *x, const float *w, float *y, float *tmp, int n) {
            rms_norm(x, tmp, n);
            mul(tmp, w, y, n);
            float f = first(y);
            mul(tmp, &f, y, 1);
        }
    """)
    tmp = [f for f in result.findings if f.function == "forward" and f.buffer == "tmp"]
    assert not [f for f in result.findings if f.function == "pick"]  # one statement, one of two calls runs
    assert [(f.kind, f.passes[0].code, f.passes[1].code) for f in tmp] == [
        ("write_then_read", "rms_norm(x, tmp, n);", "mul(tmp, w, y, n);"),
        ("read_then_read", "mul(tmp, w, y, n);", "mul(tmp, &f, y, 1);")]
    assert "consume it in the same loop" in tmp[0].suggestion  # the RMS_NORM + MUL fusion


def test_single_element_copies_and_register_arrays_are_not_passes(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <string.h>
        #define ARR 4
        void simd(const float *x, float *y, int n, const void *params) {
            float eps;
            memcpy(&eps, params, sizeof(float));
            float acc[ARR];
            for (int j = 0; j < ARR; j++) acc[j] = 0.0f;
            for (int j = 0; j < ARR; j++) acc[j] += eps;
            for (int i = 0; i < n; i++) y[i] = x[i] * eps;
        }
    """)
    assert result.findings == []


def test_ggml_vector_helpers_are_passes_with_out_first(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void op(const float *sp, float *wp, float *dp, int n, float scale) {
            ggml_vec_cpy_f32(n, wp, sp);
            ggml_vec_scale_f32(n, wp, scale);
            float max = -INFINITY;
            ggml_vec_max_f32(n, &max, wp);
            ggml_float sum = ggml_vec_soft_max_f32(n, dp, wp, max);
            ggml_vec_scale_f32(n, dp, 1.0/sum);
        }
    """, name="ops.cpp")
    kinds = [(f.buffer, f.kind, f.depends_on) for f in result.findings]
    assert ("wp", "write_then_update", []) in kinds
    assert ("wp", "update_then_read", []) in kinds
    assert ("wp", "read_then_read", ["max"]) in kinds
    assert ("dp", "write_then_update", ["sum"]) in kinds
    assert result.findings[0].fusable  # directly fusable pairs come first


def test_only_named_functions_are_scanned(tmp_path: Path) -> None:
    path = source(tmp_path, "two.c", """
        void a(float *y, int n) { for (int i = 0; i < n; i++) y[i] = 0; for (int i = 0; i < n; i++) y[i] += 1; }
        void b(float *y, int n) { for (int i = 0; i < n; i++) y[i] = 0; for (int i = 0; i < n; i++) y[i] += 1; }
    """)
    result = find_passes([path], functions={"b", "missing"})
    assert {f.function for f in result.findings} == {"b"} and result.functions_scanned == 1
    assert result.notes == ["no definition found for: missing"]


def test_profile_names_match_definitions() -> None:
    assert short_name("ggml_compute_forward_soft_max_f32(ggml_compute_params const*, ggml_tensor*)") == \
        "ggml_compute_forward_soft_max_f32"
    assert short_name("void ns::kernel<float, 4>(float*) [clone .part.0]") == "kernel"


def test_nothing_to_scan_is_an_error_that_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="paths"):
        search(tmp_path, None, None, None, 20)
    with pytest.raises(InputError, match="does not exist"):
        search(tmp_path, ["nope.c"], None, None, 20)


def test_functions_alone_are_found_in_the_repository(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    source(tmp_path, "src/k.cpp", """
        void hot(float *y, int n) { for (int i = 0; i < n; i++) y[i] = 0; for (int i = 0; i < n; i++) y[i] += 1; }
    """)
    source(tmp_path, "src/other.cpp", "void cold(void) {}\n")
    result = search(tmp_path, None, ["hot"], None, 20)
    assert result.files_scanned == 1 and result.findings[0].file == "src/k.cpp"


# --- llama.cpp's ggml -------------------------------------------------------------------------------


def ops_cpp(version: str = UNFUSED_RMS_NORM) -> Path:
    try:
        root = llama_cpp_tree(version)
    except TreeUnavailable as exc:
        pytest.skip(f"llama-cpp-python {version} sdist unavailable (PyPI unreachable?): {exc}")
    return root / "ggml" / "src" / "ggml-cpu" / "ops.cpp"


@pytest.mark.slow
def test_real_rms_norm_copies_then_scales_in_a_second_pass() -> None:
    result = find_passes([ops_cpp()], limit=500)
    rms = only(result, "ggml_compute_forward_rms_norm_f32", "y")
    assert rms.buffer == "y (dst->data)" and rms.kind == "write_then_update" and rms.fusable
    assert rms.passes[0].code == "memcpy(y, x, ne00 * sizeof(float));"
    assert rms.passes[1].code == "ggml_vec_scale_f32(ne00, y, scale);"
    # ggml's own TODO in scale_f32 ("add x parameter to ggml_vec_scale_f32 and remove this memcpy")
    scale = only(result, "ggml_compute_forward_scale_f32", "dst->data")
    assert scale.kind == "write_then_update"
    # soft_max's copy, scale, mask and max are four passes over wp; max -> exp-sum fuses only online
    soft = [f for f in result.findings if f.function == "ggml_compute_forward_soft_max_f32"]
    assert {(f.buffer, f.kind, f.fusable) for f in soft} >= {
        ("wp (params->wdata)", "write_then_update", True), ("wp (params->wdata)", "read_then_read", False)}
    assert result.functions_scanned > 150 and not result.notes


@pytest.mark.anyio
async def test_real_tree_through_the_mcp_client_ranks_named_functions() -> None:
    path = ops_cpp()
    async with Client(build_server()) as client:
        res = await call(client, "find_passes", paths=[str(path)],
                         functions=["ggml_compute_forward_rms_norm_f32", "ggml_compute_forward_norm_f32"])
    assert res["functions_scanned"] == 2
    assert {f["function"] for f in res["findings"]} == {
        "ggml_compute_forward_rms_norm_f32", "ggml_compute_forward_norm_f32"}
    assert [f["fusable"] for f in res["findings"]] == sorted((f["fusable"] for f in res["findings"]), reverse=True)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tool_answers_and_refuses_through_both_protocol_modes(tmp_path: Path, mode: str) -> None:
    path = source(tmp_path, "k.c", """
        void k(const float *x, float *y, int n) {
            for (int i = 0; i < n; i++) y[i] = x[i];
            for (int i = 0; i < n; i++) y[i] *= 2.0f;
        }
    """)
    async with Client(build_server(), mode=mode) as client:  # type: ignore[arg-type]
        res = await call(client, "find_passes", paths=[str(path)])
        assert [(f["buffer"], f["kind"]) for f in res["findings"]] == [("y", "write_then_update")]
        assert "paths" in await error(client, "find_passes")
        assert "start_session" in await error(client, "find_passes", profile_id="0123456789")
        assert await error(client, "find_passes", paths=[str(path)], limit=0)


@pytest.mark.anyio
async def test_a_whole_file_system_or_home_folder_is_refused_not_walked() -> None:
    async with Client(build_server()) as client:
        for root in ("/", str(Path.home())):
            assert "whole file system or home folder" in await error(client, "find_passes", paths=[root])


def test_a_folder_with_more_files_than_the_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import autoresearch_mcp.analysis.passes as passes

    monkeypatch.setattr(passes, "MAX_FILES", 3)
    (tmp_path / "many" / "build").mkdir(parents=True)
    for i in range(4):
        source(tmp_path / "many", f"f{i}.c", "void f(void) {}")
    source(tmp_path / "many" / "build", "skipped.c", "void g(void) {}")
    with pytest.raises(InputError, match="more than 3"):
        passes.source_files([tmp_path / "many"])
    assert len(passes.source_files([tmp_path / "many" / "build"])) == 1


# --- loop shapes beyond `for (i = 0; i < n; i++) y[i]`, aliases, lambdas, ranges, #if ----------------


def test_pointer_walk_loops_are_passes_over_what_the_pointers_point_into(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void walk(const float *x, float *y, int n, float s) {
            float *p = y;
            const float *q = x;
            int k = n;
            while (k--) *p++ = *q++ * s;
            for (float *e = y + n, *r = y; r != e; ++r) *r += 1.0f;
        }
        void once(const float *x, float *y, int n, float s) {
            while (n--) *y++ = *x++ * s;
        }
    """)
    y = only(result, "walk", "p")
    assert y.buffer == "p (y)" and y.kind == "write_then_update" and y.fusable
    assert [p.start_line for p in y.passes] == [6, 7]
    assert not [f for f in result.findings if f.function == "once"]


def test_do_while_loops_are_passes(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void dw(float *y, int n) {
            int i = 0;
            do { y[i] = 0.0f; i++; } while (i < n);
            float *p = y;
            int k = n;
            do { *p *= 2.0f; p++; } while (--k);
        }
        void single(float *y, int n) {
            int i = 0;
            do { y[i] = 0.0f; } while (++i < n);
        }
    """)
    y = only(result, "dw", "y")
    assert y.kind == "write_then_update" and [p.start_line for p in y.passes] == [4, 7]
    assert not [f for f in result.findings if f.function == "single"]


def test_range_for_and_std_algorithms_over_one_container_are_passes(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <algorithm>
        #include <vector>
        void ranges(std::vector<float> & v, const std::vector<float> & w, float s) {
            std::fill(v.begin(), v.end(), 0.0f);
            for (auto & x : v) x += 1.0f;
            std::transform(v.begin(), v.end(), v.begin(), [s](float x) { return x * s; });
            std::for_each(v.begin(), v.end(), [](float & x) { x = x > 0 ? x : 0; });
            float sum = 0.0f;
            for (const float x : w) sum += x;
        }
        void copies(const float *x, float *y, int n) {
            std::copy(x, x + n, y);
            std::for_each(y, y + n, [](float & e) { e *= 2.0f; });
        }
        void other_containers(std::vector<float> & a, std::vector<float> & b) {
            for (auto & x : a) x = 0.0f;
            std::fill(b.begin(), b.end(), 1.0f);
            for (const auto & x : a) b[0] += x;
        }
        void ranges_lib(std::vector<float> & v, std::vector<std::thread> & pool) {
            std::ranges::fill(v, 0.0f);
            for (float & x : v) x += 1.0f;
            for (auto & t : pool) t.join();
            for (auto & t : pool) t.detach();
        }
    """, name="k.cpp")
    v = [(f.kind, [p.start_line for p in f.passes]) for f in result.findings if f.function == "ranges"]
    assert v == [("write_then_update", [5, 6]), ("update_then_update", [6, 7]), ("update_then_update", [7, 8])]
    y = only(result, "copies", "y")
    assert y.kind == "write_then_update" and [p.start_line for p in y.passes] == [13, 14]
    a = only(result, "other_containers", "a")  # b is filled once; b[0] is one element
    assert a.kind == "write_then_read"
    # threads are not numbers in memory: walking them twice is not a pass to fuse
    assert [(f.buffer, f.kind) for f in result.findings if f.function == "ranges_lib"] == [("v", "write_then_update")]


def test_aliases_made_by_data_casts_and_assignments_are_the_buffer(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <string.h>
        #include <vector>
        struct tensor { void * data; };
        void data_alias(std::vector<float> & v, int n) {
            float * y = v.data();
            for (int i = 0; i < n; i++) y[i] = 0.0f;
            for (auto & x : v) x += 1.0f;
        }
        void cast_alias(const tensor * dst, const float * x, int n, int i, int nb1) {
            auto * y = (float *) ((char *) dst->data + i*nb1);
            memcpy(y, x, n * sizeof(float));
            float * z = (float *) ((char *) dst->data + i*nb1);
            for (int k = 0; k < n; k++) z[k] *= 2.0f;
        }
        void cast_offset(const tensor * dst, int n, int i, int nb1, float s) {
            auto * y = (float *) dst->data + i*nb1;
            for (int k = 0; k < n; k++) y[k] = 0.0f;
            ggml_vec_scale_f32(n, (float *) dst->data + i*nb1, s);
            ggml_vec_scale_f32(n, (float *) dst->data + (i + 1)*nb1, s);
        }
        void reassigned(const float * x, float * ws, int n) {
            float * y;
            y = ws;
            for (int i = 0; i < n; i++) y[i] = x[i];
            y = ws + n;
            for (int i = 0; i < n; i++) y[i] = 1.0f;
            y = ws;
            for (int i = 0; i < n; i++) y[i] *= 2.0f;
        }
    """, name="k.cpp")
    assert only(result, "data_alias", "y").kind == "write_then_update"
    assert only(result, "cast_alias", "y").kind == "write_then_update"
    offset = only(result, "cast_offset", "y")  # the next row, (i + 1)*nb1, is another buffer
    assert offset.buffer == "y (dst->data)" and offset.kind == "write_then_update"
    ws = [(f.kind, [p.start_line for p in f.passes]) for f in result.findings
          if f.function == "reassigned" and f.buffer.startswith("y")]
    assert ws == [("write_then_update", [25, 29])]  # ws + n in between is another row


def test_lambda_bodies_are_scanned_as_functions_of_their_own(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <string.h>
        template <typename F> void parallel_for(int n, F f) { f(0, n); }
        void op(const float * x, float * y, int rows, int n, float s) {
            parallel_for(rows, [&](int begin, int end) {
                for (int r = begin; r < end; ++r) {
                    float * row = y + r*n;
                    memcpy(row, x + r*n, n * sizeof(float));
                    for (int i = 0; i < n; i++) row[i] *= s;
                }
            });
            auto one = [&](float * out) {
                for (int i = 0; i < n; i++) out[i] = x[i];
            };
            auto two = [&](float * out) {
                for (int i = 0; i < n; i++) out[i] *= s;
            };
            one(y);
            two(y);
        }
    """, name="k.cpp")
    row = [f for f in result.findings if f.buffer.startswith("row")]
    assert len(row) == 1 and row[0].function == "op::<lambda at line 5>" and row[0].kind == "write_then_update"
    assert [p.start_line for p in row[0].passes] == [8, 9]
    # one and two make one pass each; called one after the other on y, they are two passes of op, and so is
    # the parallel_for whose lambda writes y's rows
    assert {f.function for f in result.findings} == {"op::<lambda at line 5>", "op"}
    y = [(f.kind, [p.code for p in f.passes]) for f in result.findings if f.function == "op"]
    assert y == [("update_then_write", ["parallel_for(rows, [&](int begin, int end) {", "one(y);"]),
                 ("write_then_update", ["one(y);", "two(y);"])]


def test_a_single_element_store_between_loops_is_not_a_pass(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void k(const float *x, float *y, int n) {
            for (int i = 0; i < n; i++) y[i] = x[i];
            y[0] = 0.0f;
        }
        void k2(const float *x, float *y, int n) {
            y[0] = 0.0f;
            for (int i = 1; i < n; i++) y[i] = y[i - 1] + x[i];
            y[n - 1] *= 0.5f;
        }
    """)
    assert result.findings == []


def test_loops_over_different_ranges_are_not_reported(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <string.h>
        void diag(float *d, const float *x, int i1, int n) {
            for (int i0 = 0; i0 < i1; i0++) d[i0] = 0.0f;
            d[i1] = x[i1];
            for (int i0 = i1 + 1; i0 < n; i0++) d[i0] = 0.0f;
        }
        void pad(float *s, int m, int up, int begin) {
            for (int i = m; i < up; ++i) s[i] = 0.0f;
            ggml_vec_scale_f32(begin, s, 2.0f);
        }
        void same(float *y, const float *x, int n) {
            memcpy(y, x, n*sizeof(float));
            for (int i = 0; i < n; ++i) y[i] *= 2.0f;
            ggml_vec_scale_f32(n, y, 0.5f);
        }
    """)
    assert {f.function for f in result.findings} == {"same"}
    assert [f.kind for f in result.findings if f.buffer == "y"] == ["write_then_update", "update_then_update"]


def test_a_reduction_then_a_dependent_pass_in_a_range_for_says_what_it_needs(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <vector>
        void normalize(std::vector<float> & v) {
            float sum = 0.0f;
            for (const auto & x : v) sum += x;
            const float inv = 1.0f / sum;
            for (auto & x : v) x *= inv;
        }
    """, name="k.cpp")
    v = only(result, "normalize", "v")
    assert v.kind == "read_then_update" and not v.fusable and v.depends_on == ["inv"]
    assert "online" in v.suggestion


def test_a_simd_path_and_its_scalar_alternative_are_one_pass(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void scale_then_add(float *y, int n, float v) {
        #if defined(GGML_SIMD)
            const int np = (n & ~(GGML_F32_STEP - 1));
            GGML_F32_VEC vx = GGML_F32_VEC_SET1(v);
            GGML_F32_VEC ay[GGML_F32_ARR];
            for (int i = 0; i < np; i += GGML_F32_STEP) {
                for (int j = 0; j < GGML_F32_ARR; j++) {
                    ay[j] = GGML_F32_VEC_LOAD(y + i + j*GGML_F32_EPR);
                    ay[j] = GGML_F32_VEC_MUL(ay[j], vx);
                    GGML_F32_VEC_STORE(y + i + j*GGML_F32_EPR, ay[j]);
                }
            }
            for (int i = np; i < n; ++i) {
                y[i] *= v;
            }
        #else
            for (int i = 0; i < n; ++i) {
                y[i] *= v;
            }
        #endif
            for (int i = 0; i < n; ++i) y[i] += 1.0f;
        }
        void simd_only(float *y, int n, float v) {
        #if defined(__ARM_FEATURE_SVE)
            for (int i = 0; i < n; i += 8) {
                svbool_t pg = svwhilelt_b32(i, n);
                svst1_f32(pg, y + i, svmul_f32_m(pg, svld1_f32(pg, y + i), v));
            }
        #elif defined(__riscv_v_intrinsic)
            for (int i = 0, avl; i < n; i += avl) {
                avl = __riscv_vsetvl_e32m8(n - i);
                __riscv_vse32_v_f32m8(&y[i], __riscv_vfmul_vf_f32m8(__riscv_vle32_v_f32m8(&y[i], avl), v, avl), avl);
            }
        #endif
        }
    """)
    y = [(f.kind, [p.start_line for p in f.passes]) for f in result.findings if f.function == "scale_then_add"]
    assert y == [("update_then_update", [7, 22])]  # once, from the SIMD path, not again from the scalar one
    assert not [f for f in result.findings if f.function == "simd_only"]


def test_a_pass_in_a_branch_that_returns_is_not_followed_by_the_code_after_it(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <string.h>
        void dup(const float *x, float *y, int n, int contiguous) {
            if (contiguous) {
                memcpy(y, x, n * sizeof(float));
                return;
            }
            for (int i = 0; i < n; i++) y[i] = x[i];
            for (int i = 0; i < n; i++) y[i] *= 2.0f;
        }
    """)
    y = only(result, "dup", "y")
    assert [p.start_line for p in y.passes] == [8, 9]


def test_a_simd_reduction_through_register_accumulators_is_a_dependency(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <math.h>
        void simd_norm(float *y, int n) {
            GGML_F32_VEC sum[GGML_F32_ARR] = { GGML_F32_VEC_ZERO };
            const int np = n & ~(GGML_F32_STEP - 1);
            for (int i = 0; i < np; i += GGML_F32_STEP) {
                for (int j = 0; j < GGML_F32_ARR; j++) {
                    GGML_F32_VEC ay = GGML_F32_VEC_LOAD(y + i + j*GGML_F32_EPR);
                    sum[j] = GGML_F32_VEC_FMA(sum[j], ay, ay);
                }
            }
            float sumf;
            GGML_F32_VEC_REDUCE(sumf, sum);
            for (int i = np; i < n; ++i) sumf += y[i]*y[i];
            const float scale = 1.0f/sqrtf(sumf);
            ggml_vec_scale_f32(n, y, scale);
        }
    """)
    y = only(result, "simd_norm", "y")
    assert y.kind == "read_then_update" and not y.fusable and y.depends_on == ["scale"]
    assert [p.start_line for p in y.passes] == [6, 16]


def test_a_scalar_tail_run_once_per_register_lane_finishes_the_simd_body(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void mad_unroll(const int n, float * y, const float * x[2], const float * v[2]) {
            const int np = (n & ~(GGML_F32_STEP - 1));
            for (int i = 0; i < np; i += GGML_F32_STEP) {
                for (int j = 0; j < GGML_F32_ARR; j++) {
                    GGML_F32_VEC ay = GGML_F32_VEC_LOAD(y + i + j*GGML_F32_EPR);
                    for (int k = 0; k < GGML_VEC_MAD_UNROLL; ++k) {
                        ay = GGML_F32_VEC_FMA(ay, GGML_F32_VEC_LOAD(x[k] + i + j*GGML_F32_EPR), v[k][0]);
                    }
                    GGML_F32_VEC_STORE(y + i + j*GGML_F32_EPR, ay);
                }
            }
            for (int k = 0; k < GGML_VEC_MAD_UNROLL; ++k) {
                for (int i = np; i < n; ++i) {
                    y[i] += x[k][i]*v[k][0];
                }
            }
        }
    """)
    assert result.findings == []


def test_a_loop_that_stops_where_the_data_says_is_a_search_not_a_pass(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        int skip_then_copy(const char *s, char *out, int n) {
            const char *p = s;
            while (*p == ' ') p++;
            int i = 0;
            for (; i < n && s[i] != ']'; i++) {}
            for (int k = 0; k < n; k++) out[k] = s[k];
            return i;
        }
    """)
    assert result.findings == []


def test_an_upper_case_parameter_is_a_runtime_bound_not_a_register_lane(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <math.h>
        #define LANES 8
        void layernorm(float *out, const float *inp, int B, int C) {
            for (int b = 0; b < B; b++) {
                const float *x = inp + b * C;
                float m = 0.0f;
                for (int i = 0; i < C; i++) m += x[i];
                m = m / C;
                float v = 0.0f;
                for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
                const float s = 1.0f / sqrtf(v / C + 1e-5f);
                float *o = out + b * C;
                for (int i = 0; i < C; i++) o[i] = s * (x[i] - m);
                float acc[LANES];
                for (int j = 0; j < LANES; j++) acc[j] = o[j];
            }
        }
    """)
    x = [(f.kind, f.depends_on, [p.start_line for p in f.passes]) for f in result.findings if f.buffer == "x (inp)"]
    assert x == [("read_then_read", ["m"], [8, 11]), ("read_then_read", ["s"], [11, 14])]
    assert not [f for f in result.findings if f.buffer.startswith("o")]  # LANES is a constant: acc is registers


def test_lambdas_passed_to_a_call_walk_the_buffers_they_capture(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        template <typename F> void parallel_for(int n, F f) { f(0, n); }
        void op(float * y, const float * x, int n, float s) {
            parallel_for(n, [&](int b, int e) {
                for (int i = b; i < e; i++) y[i] = x[i];
            });
            parallel_for(n, [&](int b, int e) {
                float * tmp = new float[e - b];
                for (int i = b; i < e; i++) { tmp[i - b] = y[i]; y[i] *= s; }
                delete[] tmp;
            });
        }
    """, name="k.cpp")
    assert [(f.function, f.buffer, f.kind) for f in result.findings] == [("op", "y", "write_then_update")]


# --- helpers defined in other files of the tree, local tiles, memo branches, the limit (issue 27) ---------


def tree(root: Path, files: dict[str, str]) -> Path:
    """Write a small source tree; returns its root."""
    for name, code in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        source(root, name, code)
    return root


def pairs_of(result: FindPassesResult, function: str) -> list[tuple[str, str, list[int]]]:
    return [(f.buffer.split(" ")[0], f.kind, [p.start_line for p in f.passes])
            for f in result.findings if f.function == function]


def test_helpers_defined_in_included_files_are_followed(tmp_path: Path) -> None:
    # vec.h declares row_scale and vec.c (beside it) defines it; util.h sits in an include/ folder above
    root = tree(tmp_path, {
        "lib/include/util.h": """
            static inline void row_copy(int n, float * dst, const float * src) {
                for (int i = 0; i < n; i++) dst[i] = src[i];
            }
            static inline float first(const float * x) { return x[0]; }
        """,
        "lib/cpu/vec.h": "void row_scale(int n, float * y, float s);\n",
        "lib/cpu/vec.c": """
            #include "vec.h"
            void row_scale(int n, float * y, float s) { for (int i = 0; i < n; ++i) y[i] *= s; }
        """,
        "lib/cpu/ops.c": """
            #include "vec.h"
            #include "util.h"
            void norm(const float * x, float * y, int n, float s) {
                row_copy(n, y, x);
                row_scale(n, y, s);
                float f = first(y);
                (void) f;
            }
        """,
    })
    result = find_passes([root / "lib/cpu/ops.c"], limit=50)
    y = only(result, "norm", "y")
    assert y.kind == "write_then_update" and y.fusable
    assert [p.code for p in y.passes] == ["row_copy(n, y, x);", "row_scale(n, y, s);"]
    assert result.files_scanned == 1 and [f.function for f in result.findings] == ["norm"]


def test_a_helper_definition_wins_over_the_ggml_naming_convention(tmp_path: Path) -> None:
    # the convention reads (n, out, in...): here the written row is the third argument, after a stride,
    # and a qualifier macro sits in the parameter list
    root = tree(tmp_path, {
        "vec.h": """
            #define GGML_RESTRICT __restrict
            inline static void ggml_vec_mad_strided(const int n, const int xs, float * GGML_RESTRICT y,
                                                    const float * GGML_RESTRICT x) {
                for (int i = 0; i < n; ++i) y[i] += x[i*xs];
            }
        """,
        "ops.cpp": """
            #include "vec.h"
            void acc(float * y, const float * x, int n) {
                ggml_vec_set_f32(n, y, 0.0f);
                ggml_vec_mad_strided(n, 4, y, x);
            }
        """,
    })
    result = find_passes([root / "ops.cpp"], limit=50)
    assert pairs_of(result, "acc") == [("y", "write_then_update", [4, 5])]


def test_a_helper_walks_as_many_elements_as_its_count_argument_says(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        "vec.h": """
            static void row_set(int n, float * y, float v) { for (int i = 0; i < n; i++) y[i] = v; }
            static void row_scale(int n, float * y, float s) {
                int i = 0;
                const __m256 vs = _mm256_set1_ps(s);
                for (; i + 7 < n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vs));
                for (; i < n; i++) y[i] *= s;
            }
        """,
        "ops.c": """
            #include "vec.h"
            void pad_then_scale(float * y, int n, int pad, float s) {
                row_set(pad, y, 0.0f);
                row_scale(n, y, s);
            }
            void set_then_scale(float * y, int n, float s) {
                row_set(n, y, 0.0f);
                row_scale(n, y, s);
            }
        """,
    })
    result = find_passes([root / "ops.c"], limit=50)
    assert pairs_of(result, "pad_then_scale") == []  # pad elements, then n: another range
    assert pairs_of(result, "set_then_scale") == [("y", "write_then_update", [8, 9])]


def test_local_tile_arrays_are_buffers_and_small_ones_registers(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        "tile.h": """
            #define TILE_KV 64
            struct tile_config { static constexpr int Q = 64; };
        """,
        "attn.cpp": """
            #include "tile.h"
            #include <math.h>
            void attn(const float * s, const float * mask, float * out, float scale) {
                static constexpr int Q = tile_config::Q;
                float kq[Q * TILE_KV];
                float row_max[Q];
                for (int i = 0; i < Q * TILE_KV; i++) kq[i] = s[i] * scale;
                for (int i = 0; i < Q * TILE_KV; i++) kq[i] += mask[i];
                for (int q = 0; q < Q; q++) row_max[q] = -INFINITY;
                for (int q = 0; q < Q; q++) {
                    for (int k = 0; k < TILE_KV; k++) row_max[q] = fmaxf(row_max[q], kq[q*TILE_KV + k]);
                }
                for (int q = 0; q < Q; q++) out[q] = row_max[q];
            }
            void square(float * out) {
                float t[64][64];
                for (int q = 0; q < 64; q++) for (int k = 0; k < 64; k++) t[q][k] = (float) (q * k);
                for (int q = 0; q < 64; q++) for (int k = 0; k < 64; k++) t[q][k] *= 0.5f;
                out[0] = t[1][1];
            }
        """,
    })
    result = find_passes([root / "attn.cpp"], limit=50)
    assert pairs_of(result, "attn") == [("kq", "write_then_update", [8, 9]), ("kq", "update_then_read", [9, 11])]
    assert pairs_of(result, "square") == [("t", "write_then_update", [18, 19])]  # row_max (64 floats): registers


def test_a_memo_branch_is_not_one_more_pass_over_each_row(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        #include <math.h>
        void rope(const int * pos, const float * x, float * y, float * cache, int n, int rows) {
            int last = -1;
            for (int r = 0; r < rows; r++) {
                if (last != pos[r]) {
                    for (int i = 0; i < n; i++) cache[i] = sinf((float) (pos[r] * i));
                    last = pos[r];
                }
                for (int i = 0; i < n; i++) y[r*n + i] = x[r*n + i] * cache[i];
            }
        }
        void online(const float * v, float * acc, const float * s, int n, int keys) {
            float m = -INFINITY;
            for (int k = 0; k < keys; k++) {
                if (s[k] > m) {
                    const float ms = expf(m - s[k]);
                    m = s[k];
                    for (int i = 0; i < n; i++) acc[i] *= ms;
                }
                for (int i = 0; i < n; i++) acc[i] += v[k*n + i] * expf(s[k] - m);
            }
        }
    """)
    assert pairs_of(result, "rope") == []  # the cache is made once per position and read by every row
    assert pairs_of(result, "online") == [("acc", "update_then_update", [19, 21])]  # a running max is no memo


def test_calls_per_row_walk_the_whole_tile_and_rows_of_one_width_overlap(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void tile(float * kq, const float * mask, int rows, float scale) {
            ggml_vec_scale_f32(ROWS * WIDTH, kq, scale);
            ggml_vec_add_f32(rows * WIDTH, kq, kq, mask);
            for (int r = 0; r < ROWS; r++) {
                float * row = kq + r * WIDTH;
                float m;
                ggml_vec_max_f32(WIDTH, &m, row);
            }
        }
        void pad(float * y, const float * x, int n, int p) {
            ggml_vec_cpy_f32(n, y, x);
            for (int i = 1; i <= p; i++) y[-i] = y[i];
        }
    """, name="k.cpp")
    assert pairs_of(result, "tile") == [("kq", "update_then_update", [3, 4]), ("kq", "update_then_read", [4, 5])]
    assert pairs_of(result, "pad") == []  # n elements, then a padding of p: another range


def test_a_branch_that_returns_ends_the_passes_before_what_follows_it(tmp_path: Path) -> None:
    result = scan(tmp_path, """
        void gemv(int n, float * s, const float * x) {
        #if defined(__AVX2__)
            {
                for (int i = 0; i < n; i++) s[i] = x[i] * 2.0f;
                return;
            }
        #endif
            for (int i = 0; i < n; i++) s[i] = x[i] * 3.0f;
        }
        void blocks_then_rest(int n, float * s, const float * x) {
            gemm4(n - n % 4, s, x);
            for (int i = n - n % 4; i < n; i++) s[i] = x[i];
        }
        static void gemm4(int n, float * s, const float * x) { for (int i = 0; i < n; i++) s[i] = x[i]; }
    """)
    assert result.findings == []


def test_within_the_limit_every_function_is_shown_before_any_second_finding(tmp_path: Path) -> None:
    result = find_passes([source(tmp_path, "k.c", """
        void chain(float * y, const float * x, int n) {
            for (int i = 0; i < n; i++) y[i] = x[i];
            for (int i = 0; i < n; i++) y[i] *= 2.0f;
            for (int i = 0; i < n; i++) y[i] += 1.0f;
            for (int i = 0; i < n; i++) y[i] *= 3.0f;
        }
        void pair(float * y, int n) {
            for (int i = 0; i < n; i++) y[i] = 0.0f;
            for (int i = 0; i < n; i++) y[i] += 1.0f;
        }
        void norm(float * y, const float * x, int n) {
            float sum = 0.0f;
            for (int i = 0; i < n; i++) sum += x[i];
            for (int i = 0; i < n; i++) y[i] = x[i] / sum;
        }
    """)], limit=3)
    assert {f.function for f in result.findings} == {"chain", "pair", "norm"}
    assert [f.fusable for f in result.findings] == [True, True, False]  # listed easiest first
    assert result.total_findings == 5 and "2 more findings" in result.notes[0]



# --- llama.cpp's ggml: every multi-pass CPU function, and none of the single-pass ones (issue 27) --------

FORWARD = "ggml_compute_forward_"
MULTI_PASS = {FORWARD + name for name in (
    "rms_norm_f32", "soft_max_f32", "norm_f32", "flash_attn_ext_f16_one_chunk", "flash_attn_ext_tiled")}
SINGLE_PASS = {FORWARD + name for name in (  # element-wise ops, rope, plain reductions, a padding, a top-k
    "add1_f32", "add_id_f32", "silu_f32", "gelu_f32", "leaky_relu_f32", "clamp_f32", "rope_flt", "sum_f32",
    "sum_rows_f32", "mean_f32", "argmax_f32", "count_equal_i32", "pad_reflect_1d", "top_k_f32")}


def real_passes(version: str, limit: int = 1000) -> FindPassesResult:
    return find_passes([ops_cpp(version)], limit=limit)


def default_answer(version: str, function: str) -> list[PassFinding]:
    """The findings on `function` in the answer a call without a limit gets (20 findings of about 90)."""
    return [f for f in real_passes(version, limit=20).findings if f.function == function]


def code_pairs(result: FindPassesResult, function: str, buffer: str) -> list[tuple[str, str]]:
    return [(f.passes[0].code, f.passes[1].code) for f in result.findings
            if f.function == function and f.buffer.split(" ")[0] == buffer]


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("version", [UNFUSED_RMS_NORM, CURRENT])
async def test_real_multi_pass_functions_all_lead_the_default_answer_and_single_pass_ones_never_show(
        version: str) -> None:
    path = ops_cpp(version)
    async with Client(build_server()) as client:
        res = await call(client, "find_passes", paths=[str(path)])  # the default limit: 20 findings
    assert {f["function"] for f in res["findings"]} >= MULTI_PASS
    assert res["total_findings"] > len(res["findings"]) and "more findings" in res["notes"][-1]
    everything = real_passes(version)
    assert not SINGLE_PASS & {f.function for f in everything.findings}
    assert everything.functions_scanned > 200


@pytest.mark.slow
@pytest.mark.parametrize("version", [UNFUSED_RMS_NORM, CURRENT])
def test_real_norm_reads_the_row_twice_then_scales_y_in_a_third_pass(version: str) -> None:
    result = real_passes(version)
    norm = FORWARD + "norm_f32"
    shown = default_answer(version, norm)
    assert [f.kind for f in shown] == ["read_then_read"] and "ggml_vec_sum_f32" in shown[0].passes[0].code
    x = [f for f in result.findings if f.function == norm and f.kind == "read_then_read"
         and "ggml_vec_sum_f32(ne00, &sum" in f.passes[0].code and "ggml_vec_cvar_f32(ne00" in f.passes[1].code]
    assert len(x) == 1 and x[0].depends_on == ["mean"] and "Welford" in x[0].suggestion
    y = [f for f in result.findings if f.function == norm and f.kind == "write_then_update"
         and "ggml_vec_cvar_f32(ne00" in f.passes[0].code and "ggml_vec_scale_f32(ne00" in f.passes[1].code]
    assert len(y) == 1 and y[0].depends_on == ["scale"]  # cvar writes y centred, then y is scaled again


@pytest.mark.slow
@pytest.mark.parametrize("version", [UNFUSED_RMS_NORM, CURRENT])
def test_real_tiled_flash_attention_walks_the_kq_tile_once_per_step(version: str) -> None:
    result = real_passes(version)
    tiled = FORWARD + "flash_attn_ext_tiled"
    kq = code_pairs(result, tiled, "KQ")
    assert {
        ("memset(KQ, 0, Q_TILE_SZ * KV_TILE_SZ * sizeof(float));",  # simd_gemm is in simd-gemm.h
         "simd_gemm(KQ, (const float *)Q_q, K_f32, Q_TILE_SZ, DK, KV_TILE_SZ);"),
        ("simd_gemm(KQ, (const float *)Q_q, K_f32, Q_TILE_SZ, DK, KV_TILE_SZ);",
         "ggml_vec_scale_f32(Q_TILE_SZ * KV_TILE_SZ, KQ, scale);"),
        ("ggml_vec_tanh_f32(Q_TILE_SZ * KV_TILE_SZ, KQ, KQ);",  # softcap
         "ggml_vec_scale_f32(Q_TILE_SZ * KV_TILE_SZ, KQ, logit_softcap);"),
        ("ggml_vec_add_f32(tile_rows * KV_TILE_SZ, KQ, KQ, mask32);",  # mask, then each row's max and exp-sum
         "for (int tq = 0; tq < Q_TILE_SZ; tq++) {"),
    } <= set(kq)
    assert [second for _, second in kq].count("ggml_vec_add_f32(tile_rows * KV_TILE_SZ, KQ, KQ, mask32);") == 1
    row = [f for f in result.findings if f.function == tiled and f.buffer.startswith("kq_row")
           and f.passes[0].code == "ggml_vec_max_f32(KV_TILE_SZ, &tile_max, kq_row);"]
    assert len(row) == 1 and "ggml_vec_soft_max_f32(KV_TILE_SZ, kq_row, kq_row, Mnew)" in row[0].passes[1].code
    assert "Mnew" in row[0].depends_on and not row[0].fusable  # max, then exp and sum: an online softmax


@pytest.mark.slow
@pytest.mark.parametrize("version", [UNFUSED_RMS_NORM, CURRENT])
def test_real_one_chunk_flash_attention_rescales_the_accumulator_in_passes_of_its_own(version: str) -> None:
    result = real_passes(version)
    chunk = FORWARD + "flash_attn_ext_f16_one_chunk"
    assert default_answer(version, chunk)
    assert ("ggml_vec_scale_f16(DV, VKQ16, ms);", "ggml_vec_mad_f16(DV, VKQ16, (const ggml_fp16_t *) v_data, vs);") \
        in code_pairs(result, chunk, "VKQ16")
    assert ("ggml_vec_scale_f32(DV, VKQ32, S_inv);", "memcpy((char *) dst->data + (i3*ne2*ne1 + i2 + i1*ne1)*nb1, "
            "VKQ32, nb1);") in code_pairs(result, chunk, "VKQ32")
