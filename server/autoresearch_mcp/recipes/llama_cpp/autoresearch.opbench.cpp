// autoresearch op micro-benchmark for llama.cpp's CPU backend (shipped by the autoresearch recipe).
//
//   autoresearch-opbench --model M.gguf --focus RMS_NORM,MUL [--threads N] [--tokens T] [--budget-ms B]
//   autoresearch-opbench --list
//
// Times the focus (ggml ops as llama.cpp chains them in its graph, so a graph fusion that ggml-cpu
// applies to the chain is what runs) and a few control ops not in the focus, all in the same run,
// at the shapes of the model's hyperparameters (read from the GGUF file with ggml's gguf API) and T
// tokens (the prompt batch). Prints `METRIC focus.<A+B>=<us>` and `METRIC control.<OP>=<us>`:
// CPU microseconds per graph evaluation, the median of many timed evaluations after a warm-up,
// the graphs interleaved round by round so drift hits all of them alike.
//
// Built against the tree's own ggml (public API only: ggml_init, the op constructors, ggml-alloc,
// ggml_backend_graph_compute on the CPU backend), so a candidate's kernel change is what it measures.
// This file is protected: candidates cannot change it.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "gguf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <time.h>

namespace {

// --- the model's shapes ------------------------------------------------------------------------

struct Shapes {
    std::string arch;
    int64_t n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_rot = 0;
    int64_t n_ctx_orig = 0;
    float rms_eps = 1e-5f, norm_eps = 1e-5f, rope_base = 10000.0f;
    ggml_type wtype = GGML_TYPE_F16;  // the type of the model's projection weights (MUL_MAT)
    int64_t tokens = 0;               // the batch: rows of activations and query rows of attention
    int64_t n_kv = 0;                 // KV cells attended over (llama.cpp pads them to 256)
};

[[noreturn]] void die(const std::string & msg, int code = 1) {
    fprintf(stderr, "autoresearch-opbench: %s\n", msg.c_str());
    exit(code);
}

// A number from the GGUF metadata; per-layer arrays give their first element.
double gguf_number(const gguf_context * g, const std::string & key, double fallback) {
    const int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0) {
        return fallback;
    }
    enum gguf_type t = gguf_get_kv_type(g, id);
    const void * data = nullptr;
    if (t == GGUF_TYPE_ARRAY) {
        t = gguf_get_arr_type(g, id);
        if (gguf_get_arr_n(g, id) == 0) {
            return fallback;
        }
        data = gguf_get_arr_data(g, id);
    }
    switch (t) {
        case GGUF_TYPE_UINT32:  return data ? *(const uint32_t *) data : gguf_get_val_u32(g, id);
        case GGUF_TYPE_INT32:   return data ? *(const int32_t  *) data : gguf_get_val_i32(g, id);
        case GGUF_TYPE_UINT64:  return (double) (data ? *(const uint64_t *) data : gguf_get_val_u64(g, id));
        case GGUF_TYPE_INT64:   return (double) (data ? *(const int64_t  *) data : gguf_get_val_i64(g, id));
        case GGUF_TYPE_FLOAT32: return data ? *(const float *) data : gguf_get_val_f32(g, id);
        case GGUF_TYPE_FLOAT64: return data ? *(const double *) data : gguf_get_val_f64(g, id);
        case GGUF_TYPE_UINT16:  return data ? *(const uint16_t *) data : gguf_get_val_u16(g, id);
        default: die("GGUF key " + key + " is not a number");
    }
}

Shapes read_shapes(const char * path, int64_t tokens) {
    gguf_init_params params = { /*.no_alloc =*/ true, /*.ctx =*/ nullptr };
    gguf_context * g = gguf_init_from_file(path, params);
    if (!g) {
        die(std::string("cannot read the GGUF file ") + path);
    }
    Shapes s;
    const int64_t arch_id = gguf_find_key(g, "general.architecture");
    if (arch_id < 0) {
        die(std::string(path) + " has no general.architecture");
    }
    s.arch = gguf_get_val_str(g, arch_id);
    auto num = [&](const char * key, double fallback) { return gguf_number(g, s.arch + "." + key, fallback); };
    s.n_embd = (int64_t) num("embedding_length", 0);
    s.n_head = (int64_t) num("attention.head_count", 0);
    if (s.n_embd <= 0 || s.n_head <= 0) {
        die(std::string(path) + ": no " + s.arch + ".embedding_length or " + s.arch + ".attention.head_count");
    }
    s.n_head_kv = (int64_t) num("attention.head_count_kv", (double) s.n_head);
    s.head_dim = (int64_t) num("attention.key_length", (double) (s.n_embd / s.n_head));
    s.n_ff = (int64_t) num("feed_forward_length", 4.0 * s.n_embd);
    s.n_rot = (int64_t) num("rope.dimension_count", (double) s.head_dim);
    s.n_ctx_orig = (int64_t) num("context_length", 4096);
    s.rms_eps = (float) num("attention.layer_norm_rms_epsilon", 1e-5);
    s.norm_eps = (float) num("attention.layer_norm_epsilon", 1e-5);
    s.rope_base = (float) num("rope.freq_base", 10000.0);
    const int64_t wq = gguf_find_tensor(g, "blk.0.attn_q.weight");
    if (wq >= 0) {
        s.wtype = gguf_get_tensor_type(g, wq);
    }
    gguf_free(g);
    if (ggml_quantize_requires_imatrix(s.wtype)) {
        s.wtype = GGML_TYPE_Q4_0;  // random weights cannot be quantized to it without an importance matrix
    }
    s.tokens = tokens;
    s.n_kv = std::max<int64_t>(256, (tokens + 255) / 256 * 256);
    return s;
}

// --- inputs and weights ------------------------------------------------------------------------

struct Rng {
    uint64_t state;
    float uniform() {  // xorshift64*, in [-1, 1): the same data in every run, cheap to make
        state ^= state >> 12; state ^= state << 25; state ^= state >> 27;
        return (float) ((state * 2685821657736338717ULL) >> 40) / (float) (1ULL << 23) - 1.0f;
    }
};

// random: uniform in [-1, 1), enough for timing; the mask is llama.cpp's causal mask
enum class Fill { random, causal_mask, positions };
enum class Norm { rms, plain };  // build_norm's LLM_NORM_RMS and LLM_NORM

// What a chain's graph reads: tensors of the weights context (filled on first use) or graph inputs.
struct Model {
    Shapes s;
    ggml_backend_t backend = nullptr;
    ggml_context * wctx = nullptr, * qctx = nullptr;
    ggml_backend_buffer_t wbuf = nullptr, qbuf = nullptr;
    ggml_backend_buffer_type_t qbuft = nullptr;
    ggml_tensor * norm_w = nullptr;   // [n_embd] F32: the norm weight
    ggml_tensor * norm_b = nullptr;   // [n_embd] F32: a layer norm's bias
    ggml_tensor * wq = nullptr;       // [n_embd, n_embd] of the model's weight type, placed as llama.cpp would
    ggml_tensor * k_cache = nullptr;  // [head_dim * n_head_kv, n_kv] F16, one layer
    ggml_tensor * v_cache = nullptr;
    std::vector<ggml_tensor *> filled;
};

void fill(ggml_tensor * t, Fill how, Rng & rng, const Shapes & s) {
    const int64_t n = ggml_nelements(t);
    std::vector<float> data(n);
    if (how == Fill::positions) {
        std::vector<int32_t> pos(n);
        for (int64_t i = 0; i < n; i++) pos[i] = (int32_t) i;
        ggml_backend_tensor_set(t, pos.data(), 0, n * sizeof(int32_t));
        return;
    }
    if (how == Fill::causal_mask) {  // the batch's tokens at positions 0..T-1 in cells 0..T-1, empty cells after
        const int64_t n_kv = t->ne[0];
        for (int64_t i = 0; i < n; i++) {
            const int64_t cell = i % n_kv, token = (i / n_kv) % s.tokens;
            data[i] = cell <= token ? 0.0f : -INFINITY;
        }
    } else {
        for (float & x : data) x = rng.uniform();
    }
    if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(t, data.data(), 0, n * sizeof(float));
    } else if (t->type == GGML_TYPE_F16) {
        std::vector<ggml_fp16_t> half(n);
        ggml_fp32_to_fp16_row(data.data(), half.data(), n);
        ggml_backend_tensor_set(t, half.data(), 0, n * sizeof(ggml_fp16_t));
    } else {
        std::vector<uint8_t> q(ggml_nbytes(t));
        ggml_quantize_chunk(t->type, data.data(), q.data(), 0, ggml_nrows(t), t->ne[0], nullptr);
        ggml_backend_tensor_set(t, q.data(), 0, q.size());
    }
}

// The buffer type llama.cpp's model loader gives a weight that MUL_MAT reads: the CPU backend's first
// extra buffer type that supports the product (e.g. Q4_0 repacked for its GEMM/GEMV kernels), else
// the plain one. Asked the loader's way: a dummy buffer of each type under the weight, supports_op.
ggml_backend_buffer_type_t mul_mat_buft(ggml_tensor * w) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(
        ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
    ggml_backend_buffer_type_t chosen = ggml_backend_dev_buffer_type(dev);
    if (get_extra) {
        ggml_init_params params = { ggml_tensor_overhead() * 4, nullptr, /*.no_alloc =*/ true };
        ggml_context * ctx = ggml_init(params);
        ggml_tensor * op = ggml_mul_mat(ctx, w, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w->ne[0], 512));
        for (ggml_backend_buffer_type_t * buft = get_extra(dev); buft && *buft; ++buft) {
            w->buffer = ggml_backend_buft_alloc_buffer(*buft, 0);
            const bool supported = ggml_backend_dev_supports_op(dev, op);
            ggml_backend_buffer_free(w->buffer);
            w->buffer = nullptr;
            if (supported) {
                chosen = *buft;
                break;
            }
        }
        ggml_free(ctx);
    }
    return chosen;
}

void load_weights(Model & m) {
    const Shapes & s = m.s;
    ggml_init_params params = { ggml_tensor_overhead() * 16, nullptr, /*.no_alloc =*/ true };
    m.wctx = ggml_init(params);
    m.norm_w = ggml_new_tensor_1d(m.wctx, GGML_TYPE_F32, s.n_embd);
    m.norm_b = ggml_new_tensor_1d(m.wctx, GGML_TYPE_F32, s.n_embd);
    m.k_cache = ggml_new_tensor_2d(m.wctx, GGML_TYPE_F16, s.head_dim * s.n_head_kv, s.n_kv);
    m.v_cache = ggml_new_tensor_2d(m.wctx, GGML_TYPE_F16, s.head_dim * s.n_head_kv, s.n_kv);
    m.wbuf = ggml_backend_alloc_ctx_tensors(m.wctx, m.backend);
    m.qctx = ggml_init(params);
    m.wq = ggml_new_tensor_2d(m.qctx, s.wtype, s.n_embd, s.n_embd);
    m.qbuft = mul_mat_buft(m.wq);
    m.qbuf = ggml_backend_alloc_ctx_tensors_from_buft(m.qctx, m.qbuft);
    if (!m.wbuf || !m.qbuf) {
        die("cannot allocate the weights");
    }
}

// A weight, filled the first time a graph reads it (only the weights of the timed chains are made).
ggml_tensor * weight(Model & m, ggml_tensor * t) {
    if (std::find(m.filled.begin(), m.filled.end(), t) == m.filled.end()) {
        Rng rng{0x9E3779B97F4A7C15ULL + m.filled.size()};
        fill(t, Fill::random, rng, m.s);
        m.filled.push_back(t);
    }
    return t;
}

// --- the graphs, built as llama.cpp builds them ------------------------------------------------

struct Builder {
    ggml_context * ctx;
    Model & m;
    std::vector<std::pair<ggml_tensor *, Fill>> inputs;

    ggml_tensor * input(ggml_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, Fill how = Fill::random) {
        ggml_tensor * t = ggml_new_tensor_3d(ctx, type, ne0, ne1, ne2);
        ggml_set_input(t);
        ggml_set_output(t);  // never overwritten in place: every evaluation reads the same data
        inputs.emplace_back(t, how);
        return t;
    }
    const Shapes & s() const { return m.s; }
    ggml_tensor * hidden() { return input(GGML_TYPE_F32, s().n_embd, s().tokens); }
    ggml_tensor * ffn() { return input(GGML_TYPE_F32, s().n_ff, s().tokens); }
    float kq_scale() const { return 1.0f / std::sqrt((float) s().head_dim); }
    ggml_tensor * norm_w() { return weight(m, m.norm_w); }
    ggml_tensor * norm_b() { return weight(m, m.norm_b); }

    // build_norm: the hidden state normalized (ggml_rms_norm or ggml_norm), then times the norm weight
    ggml_tensor * normed(Norm kind) {
        ggml_tensor * x = hidden();
        return kind == Norm::rms ? ggml_rms_norm(ctx, x, s().rms_eps) : ggml_norm(ctx, x, s().norm_eps);
    }
    ggml_tensor * weighted(Norm kind) {
        ggml_tensor * x = normed(kind);
        return ggml_mul(ctx, x, norm_w());
    }

    // a layer's K or V cache as attention reads it: [head_dim, n_kv, n_head_kv], permuted
    ggml_tensor * cache_view(ggml_tensor * cache) {
        ggml_tensor * v = ggml_view_3d(ctx, cache, s().head_dim, s().n_head_kv, s().n_kv,
                                       ggml_row_size(cache->type, s().head_dim), cache->nb[1], 0);
        return ggml_permute(ctx, v, 0, 2, 1, 3);
    }
};

using Build = std::function<ggml_tensor *(Builder &)>;

struct Chain {
    const char * label;  // the op names as chained in the graph, joined by "+"
    Build build;
};

// Keep this table and CHAINS in recipes/__init__.py alike (a test compares them).
const std::vector<Chain> & chains() {
    static const std::vector<Chain> table = {
        // build_norm(LLM_NORM_RMS): ggml_rms_norm, then ggml_mul by the norm weight
        {"RMS_NORM", [](Builder & b) { return b.normed(Norm::rms); }},
        {"RMS_NORM+MUL", [](Builder & b) { return b.weighted(Norm::rms); }},
        // a post-norm's residual (Gemma-style): norm, weight, add the block's input
        {"RMS_NORM+MUL+ADD", [](Builder & b) {
            ggml_tensor * x = b.weighted(Norm::rms);
            return ggml_add(b.ctx, x, b.hidden()); }},
        // build_norm(LLM_NORM): ggml_norm, weight, bias
        {"NORM", [](Builder & b) { return b.normed(Norm::plain); }},
        {"NORM+MUL", [](Builder & b) { return b.weighted(Norm::plain); }},
        {"NORM+MUL+ADD", [](Builder & b) {
            ggml_tensor * x = b.weighted(Norm::plain);
            return ggml_add(b.ctx, x, b.norm_b()); }},
        {"MUL", [](Builder & b) { return ggml_mul(b.ctx, b.hidden(), b.norm_w()); }},
        // the residual connection
        {"ADD", [](Builder & b) { return ggml_add(b.ctx, b.hidden(), b.hidden()); }},
        {"SCALE", [](Builder & b) { return ggml_scale(b.ctx, b.hidden(), 0.5f); }},
        // a projection: the model's weight type times the batch
        {"MUL_MAT", [](Builder & b) { return ggml_mul_mat(b.ctx, weight(b.m, b.m.wq), b.hidden()); }},
        // Q (or K) after its projection, [head_dim, n_head, T], rotated at positions 0..T-1
        {"ROPE", [](Builder & b) {
            const Shapes & s = b.s();
            ggml_tensor * q = b.input(GGML_TYPE_F32, s.head_dim, s.n_head, s.tokens);
            ggml_tensor * pos = b.input(GGML_TYPE_I32, s.tokens, 1, 1, Fill::positions);
            return ggml_rope_ext(b.ctx, q, pos, nullptr, (int) s.n_rot, 0, (int) s.n_ctx_orig, s.rope_base,
                                 1.0f, 0.0f, 1.0f, 32.0f, 1.0f); }},
        // attention without flash attention: KQ [n_kv, T, n_head], soft_max_ext with the causal
        // F32 mask [n_kv, T] and the 1/sqrt(head_dim) scale
        {"SOFT_MAX", [](Builder & b) {
            const Shapes & s = b.s();
            ggml_tensor * kq = b.input(GGML_TYPE_F32, s.n_kv, s.tokens, s.n_head);
            ggml_tensor * mask = b.input(GGML_TYPE_F32, s.n_kv, s.tokens, 1, Fill::causal_mask);
            return ggml_soft_max_ext(b.ctx, kq, mask, b.kq_scale(), 0.0f); }},
        // the same scores computed from Q and the K cache, then soft_max_ext
        {"MUL_MAT+SOFT_MAX", [](Builder & b) {
            const Shapes & s = b.s();
            ggml_tensor * q = ggml_permute(b.ctx, b.input(GGML_TYPE_F32, s.head_dim, s.n_head, s.tokens), 0, 2, 1, 3);
            ggml_tensor * kq = ggml_mul_mat(b.ctx, b.cache_view(weight(b.m, b.m.k_cache)), q);
            ggml_mul_mat_set_prec(kq, GGML_PREC_F32);
            ggml_tensor * mask = b.input(GGML_TYPE_F32, s.n_kv, s.tokens, 1, Fill::causal_mask);
            return ggml_soft_max_ext(b.ctx, kq, mask, b.kq_scale(), 0.0f); }},
        // flash attention: Q F32 permuted, K and V F16 views of the cache, the F16 causal mask; with
        // T >= 64 query rows ggml-cpu takes its tiled path
        {"FLASH_ATTN_EXT", [](Builder & b) {
            const Shapes & s = b.s();
            ggml_tensor * q = ggml_permute(b.ctx, b.input(GGML_TYPE_F32, s.head_dim, s.n_head, s.tokens), 0, 2, 1, 3);
            ggml_tensor * mask = b.input(GGML_TYPE_F16, s.n_kv, s.tokens, 1, Fill::causal_mask);
            ggml_tensor * out = ggml_flash_attn_ext(b.ctx, q, b.cache_view(weight(b.m, b.m.k_cache)), b.cache_view(weight(b.m, b.m.v_cache)),
                                                    mask, b.kq_scale(), 0.0f, 0.0f);
            ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
            return out; }},
        // the feed-forward gate: build_ffn(LLM_FFN_SILU, LLM_FFN_PAR) is one GLU op (swiglu_split);
        // older graphs ran SILU then MUL by the up projection
        {"GLU", [](Builder & b) { return ggml_swiglu_split(b.ctx, b.ffn(), b.ffn()); }},
        {"SILU", [](Builder & b) { return ggml_silu(b.ctx, b.ffn()); }},
        {"SILU+MUL", [](Builder & b) { return ggml_mul(b.ctx, ggml_silu(b.ctx, b.ffn()), b.ffn()); }},
        {"GELU", [](Builder & b) { return ggml_gelu(b.ctx, b.ffn()); }},
    };
    return table;
}

// Controls: ops whose code a change to the focus does not touch, in this order of preference.
const char * const CONTROLS[] = {"ADD", "SCALE", "ROPE", "SOFT_MAX", "RMS_NORM"};
const int N_CONTROLS = 3;

const Chain * find_chain(const std::string & label) {
    for (const Chain & c : chains()) {
        if (label == c.label) return &c;
    }
    return nullptr;
}

std::string supported() {
    std::string out;
    for (const Chain & c : chains()) {
        std::string names = c.label;
        std::replace(names.begin(), names.end(), '+', ',');
        out += (out.empty() ? "" : "  ") + names;
    }
    return out;
}

// --- timing ------------------------------------------------------------------------------------

struct Graph {
    std::string metric;
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_gallocr_t alloc = nullptr;
    int inner = 1, reps = 0;
    double budget_us = 0;
    std::vector<double> samples;  // microseconds per evaluation
};

Graph make_graph(Model & m, const Chain & chain, const std::string & metric, double budget_us) {
    Graph g;
    g.metric = metric;
    g.budget_us = budget_us;
    ggml_init_params params = { ggml_tensor_overhead() * 64 + ggml_graph_overhead(), nullptr, /*.no_alloc =*/ true };
    g.ctx = ggml_init(params);
    Builder b{g.ctx, m, {}};
    ggml_tensor * out = chain.build(b);
    ggml_set_output(out);
    g.gf = ggml_new_graph(g.ctx);
    ggml_build_forward_expand(g.gf, out);
    // llama.cpp allocates its graphs this way too: intermediate results may share memory in place
    g.alloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(m.backend));
    if (!ggml_gallocr_alloc_graph(g.alloc, g.gf)) {
        die("cannot allocate the graph of " + metric);
    }
    Rng rng{0xD1B54A32D192ED03ULL};
    for (auto & [t, how] : b.inputs) {
        fill(t, how, rng, m.s);
    }
    return g;
}

// CPU time of the process (all its threads), not wall time: on a shared machine an evaluation that
// is preempted would otherwise count the other processes' turns too (measured here: SOFT_MAX's
// median wall time per evaluation moved between 2.1 and 6.4 ms from run to run at a load average of
// 5 on 2 cores; its CPU time does not).
double cpu_us() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

double evaluate(Model & m, Graph & g, int times) {
    const double t0 = cpu_us();
    for (int i = 0; i < times; i++) {
        if (ggml_backend_graph_compute(m.backend, g.gf) != GGML_STATUS_SUCCESS) {
            die("the graph of " + g.metric + " failed to compute");
        }
    }
    return (cpu_us() - t0) / times;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Warm each graph up, size its inner repetitions (a timed sample of at least MIN_SAMPLE_US) and
// its samples (its budget, at least MIN_SAMPLES), then time them round by round, interleaved.
void measure(Model & m, std::vector<Graph> & graphs) {
    const double MIN_SAMPLE_US = 50.0, WARMUP_US = 10000.0;
    const int MIN_SAMPLES = 7, MAX_SAMPLES = 2000;
    for (Graph & g : graphs) {
        std::vector<double> warm;
        double spent = 0;
        while (warm.size() < 3 || (spent < WARMUP_US && warm.size() < 1000)) {
            warm.push_back(evaluate(m, g, 1));
            spent += warm.back();
        }
        const double typical = std::max(median(warm), 0.01);  // one preempted evaluation must not size the run
        g.inner = std::max(1, (int) std::ceil(MIN_SAMPLE_US / typical));
        g.reps = std::clamp((int) (g.budget_us / (typical * g.inner)), MIN_SAMPLES, MAX_SAMPLES);
    }
    for (bool more = true; more;) {
        more = false;
        for (Graph & g : graphs) {
            if ((int) g.samples.size() < g.reps) {
                g.samples.push_back(evaluate(m, g, g.inner));
                more = more || (int) g.samples.size() < g.reps;
            }
        }
    }
}

std::vector<std::string> split(const std::string & text, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t i = 0; i <= text.size(); i++) {
        if (i == text.size() || text[i] == sep) {
            std::string part = text.substr(start, i - start);
            part.erase(0, part.find_first_not_of(" \t"));
            part.erase(part.find_last_not_of(" \t") + 1);
            if (!part.empty()) out.push_back(part);
            start = i + 1;
        }
    }
    return out;
}

}  // namespace

int main(int argc, char ** argv) {
    std::string model, focus;
    int threads = 1;
    int64_t tokens = 128;
    double budget_ms = 250;
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value after " + arg, 2);
            return argv[++i];
        };
        if (arg == "--list") {
            for (const Chain & c : chains()) printf("%s\n", c.label);
            return 0;
        } else if (arg == "--model") {
            model = value();
        } else if (arg == "--focus") {
            focus = value();
        } else if (arg == "--threads") {
            threads = std::max(1, atoi(value().c_str()));
        } else if (arg == "--tokens") {
            tokens = std::max<int64_t>(1, atoll(value().c_str()));
        } else if (arg == "--budget-ms") {
            budget_ms = std::max(1.0, atof(value().c_str()));
        } else {
            die("unknown argument " + arg + "; usage: autoresearch-opbench --model M.gguf --focus OP[,OP...] "
                "[--threads N] [--tokens T] [--budget-ms B] | --list", 2);
        }
    }
    const std::vector<std::string> names = split(focus, ',');
    std::string label;
    for (const std::string & n : names) label += (label.empty() ? "" : "+") + n;
    const Chain * chain = find_chain(label);
    if (!chain) {
        die("no op chain \"" + focus + "\" to time; the focus must be one of (ggml op names in graph order, "
            "joined by \",\"): " + supported(), 2);
    }
    if (model.empty()) die("--model is required (the GGUF file whose shapes are timed)", 2);

    Model m;
    m.s = read_shapes(model.c_str(), tokens);
    m.backend = ggml_backend_cpu_init();
    if (!m.backend) die("cannot start ggml's CPU backend");
    ggml_backend_cpu_set_n_threads(m.backend, threads);
    load_weights(m);

    // most of the budget on the focus: it decides; the controls only need to show a shift
    std::vector<Graph> graphs;
    graphs.push_back(make_graph(m, *chain, "focus." + label, budget_ms * 1000.0 * 0.55));
    int n_controls = 0;
    for (const char * c : CONTROLS) {
        if (n_controls == N_CONTROLS) break;
        if (std::find(names.begin(), names.end(), c) != names.end()) continue;
        graphs.push_back(make_graph(m, *find_chain(c), std::string("control.") + c, budget_ms * 1000.0 * 0.15));
        n_controls++;
    }
    fprintf(stderr, "autoresearch-opbench: %s n_embd=%lld n_head=%lld n_head_kv=%lld head_dim=%lld n_ff=%lld "
            "weights=%s in %s tokens=%lld n_kv=%lld threads=%d\n", m.s.arch.c_str(), (long long) m.s.n_embd,
            (long long) m.s.n_head, (long long) m.s.n_head_kv, (long long) m.s.head_dim, (long long) m.s.n_ff,
            ggml_type_name(m.s.wtype), ggml_backend_buft_name(m.qbuft), (long long) m.s.tokens, (long long) m.s.n_kv,
            threads);
    measure(m, graphs);
    for (Graph & g : graphs) {
        printf("METRIC %s=%.4f\n", g.metric.c_str(), median(g.samples));
        fprintf(stderr, "autoresearch-opbench: %s: %zu samples of %d evaluations\n", g.metric.c_str(),
                g.samples.size(), g.inner);
        ggml_gallocr_free(g.alloc);
        ggml_free(g.ctx);
    }
    ggml_backend_buffer_free(m.wbuf);
    ggml_backend_buffer_free(m.qbuf);
    ggml_free(m.wctx);
    ggml_free(m.qctx);
    ggml_backend_free(m.backend);
    return 0;
}
