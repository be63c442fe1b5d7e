/* The "accelerated" backend: fuses RMS_NORM followed by MUL into one pass, and folds the
 * softmax maximum into that pass, as GPU backends do. */
#include <math.h>
#include "../ops.h"

static const enum ns_op accel_fusions[][2] = {
    { NS_OP_RMS_NORM, NS_OP_MUL },
};

static int accel_can_fuse(const enum ns_op *ops, size_t n_ops, size_t i) {
    for (size_t f = 0; f < sizeof(accel_fusions) / sizeof(accel_fusions[0]); f++) {
        if (i + 1 < n_ops && ops[i] == accel_fusions[f][0] && ops[i + 1] == accel_fusions[f][1]) return 1;
    }
    return 0;
}

static float accel_rms_norm_mul(const float *x, const float *w, float *out, size_t n) {
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + 1e-6f);
    float max = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        out[i] = x[i] * scale * w[i];
        if (out[i] > max) max = out[i];
    }
    return max;
}

static void accel_soft_max(float *x, float max, size_t n) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) { x[i] = expf(x[i] - max); sum += x[i]; }
    const float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++) x[i] *= inv;
}

void ns_accel_forward(const float *x, const float *w, float *y, float *tmp, size_t n) {
    static const enum ns_op graph[] = { NS_OP_RMS_NORM, NS_OP_MUL, NS_OP_SOFT_MAX };
    (void)tmp;
    if (accel_can_fuse(graph, 3, 0)) {
        float max = accel_rms_norm_mul(x, w, y, n);
        accel_soft_max(y, max, n);
    }
}
