/* Operations of the normsoft graph and the two backends that run it. */
#ifndef NORMSOFT_OPS_H
#define NORMSOFT_OPS_H

#include <stddef.h>

enum ns_op {
    NS_OP_RMS_NORM,
    NS_OP_MUL,
    NS_OP_SOFT_MAX,
    NS_OP_COUNT
};

/* One row: y = softmax(rms_norm(x) * w). tmp is scratch space of n floats. */
void ns_cpu_forward(const float *x, const float *w, float *y, float *tmp, size_t n);
void ns_accel_forward(const float *x, const float *w, float *y, float *tmp, size_t n);

#endif
