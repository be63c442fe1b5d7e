/* The plain CPU backend: one pass over memory per operation, as the graph lists them. */
#include <math.h>
#include "../ops.h"

static void cpu_rms_norm(const float *x, float *out, size_t n) {
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + 1e-6f);
    for (size_t i = 0; i < n; i++) out[i] = x[i] * scale;
}

static void cpu_mul(const float *a, const float *b, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}

static void cpu_soft_max(const float *x, float *out, size_t n) {
    float max = x[0];
    for (size_t i = 1; i < n; i++) if (x[i] > max) max = x[i];
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) { out[i] = expf(x[i] - max); sum += out[i]; }
    const float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++) out[i] *= inv;
}

static void cpu_compute(enum ns_op op, const float *a, const float *b, float *out, size_t n) {
    switch (op) {
        case NS_OP_RMS_NORM: cpu_rms_norm(a, out, n); break;
        case NS_OP_MUL:      cpu_mul(a, b, out, n); break;
        case NS_OP_SOFT_MAX: cpu_soft_max(a, out, n); break;
        default: break;
    }
}

void ns_cpu_forward(const float *x, const float *w, float *y, float *tmp, size_t n) {
    cpu_compute(NS_OP_RMS_NORM, x, NULL, tmp, n);
    cpu_compute(NS_OP_MUL, tmp, w, y, n);
    cpu_compute(NS_OP_SOFT_MAX, y, NULL, y, n);
}
