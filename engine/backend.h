/*
 * backend: the device interface. One instance per backend (CPU always; CUDA when
 * built with nvcc), a struct of function pointers in the style of ggml's backend
 * interface. Layers, the optimizer and the engine call only these, so every
 * feature written against the CPU backend runs on the others unchanged.
 *
 * Conventions: row-major tensors; pointers passed to ops are device pointers of
 * this backend; float32 math with float32 accumulation unless stated; ops are
 * enqueued on the backend's compute stream (synchronous on CPU), `sync` waits.
 * Ops that return a host value (sum_squares, has_inf_nan) synchronise.
 *
 * Memory: `alloc`/`free` hand out raw device memory; only engine/arena calls
 * them (one allocation per arena), everything else lives inside arenas.
 * Collective: none.
 */
#ifndef ZT_BACKEND_H
#define ZT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum { ZT_DEVICE_CPU = 0, ZT_DEVICE_CUDA = 1 } zt_device_kind;

typedef struct zt_backend zt_backend;

/* Adam/AdamW hyper-parameters for one step, DeepSpeed FusedAdam equations. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    bool adam_w_mode;     /* decoupled weight decay */
    bool bias_correction;
    int64_t step;         /* applied steps including this one, >= 1 */
} zt_adam_hparams;

/* torch.optim.SGD semantics. */
typedef struct {
    float lr, momentum, dampening, weight_decay;
    bool nesterov;
    bool first_step; /* momentum buffer is initialised to the gradient */
} zt_sgd_hparams;

struct zt_backend {
    const char *name;
    zt_device_kind kind;
    void *impl;

    /* Memory. alloc returns 64-byte aligned, uninitialised device memory. */
    zt_status (*alloc)(const zt_backend *be, size_t bytes, void **out);
    void (*free)(const zt_backend *be, void *ptr);
    void (*copy_h2d)(const zt_backend *be, void *dst, const void *src, size_t bytes);
    void (*copy_d2h)(const zt_backend *be, void *dst, const void *src, size_t bytes);
    void (*copy_d2d)(const zt_backend *be, void *dst, const void *src, size_t bytes);
    void (*memset_zero)(const zt_backend *be, void *dst, size_t bytes);
    void (*sync)(const zt_backend *be);

    /* C(m,n) = alpha * op(A) * op(B) + beta * C, row-major; op(A) is (m,k),
     * op(B) is (k,n); lda/ldb/ldc are row strides of the stored matrices. */
    void (*gemm)(const zt_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
                 int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float beta, float *c, int64_t ldc);
    /* y(rows, cols) += bias(cols) broadcast over rows. */
    void (*bias_add)(const zt_backend *be, float *y, const float *bias, int64_t rows,
                     int64_t cols);
    /* dbias(cols) = (accumulate ? dbias : 0) + sum over rows of dy(rows, cols). */
    void (*bias_grad)(const zt_backend *be, float *dbias, const float *dy, int64_t rows,
                      int64_t cols, bool accumulate);
    /* y = max(x, 0); in place allowed. */
    void (*relu_forward)(const zt_backend *be, float *y, const float *x, int64_t n);
    /* dx = dy * (y > 0); in place (dx == dy) allowed. */
    void (*relu_backward)(const zt_backend *be, float *dx, const float *dy, const float *y,
                          int64_t n);
    /* Softmax cross-entropy over rows of logits (rows, classes). Rows whose label
     * is ignore_index contribute nothing. Returns the sum over counted rows of
     * -log softmax(logits)[label] (as float64 on the host) and writes
     * dlogits = dscale * (softmax - onehot) (zero rows for ignored labels).
     * Labels outside [0, classes) other than ignore_index are an internal error
     * caught earlier by the data loaders. dlogits may be NULL (eval). */
    double (*xent_forward_backward)(const zt_backend *be, const float *logits,
                                    const int32_t *labels, int64_t rows, int64_t classes,
                                    int32_t ignore_index, float dscale, float *dlogits);
    /* x *= a */
    void (*scale)(const zt_backend *be, float *x, float a, int64_t n);
    /* y += a * x */
    void (*axpy)(const zt_backend *be, float *y, float a, const float *x, int64_t n);
    /* sum of x^2 accumulated in float64 */
    double (*sum_squares)(const zt_backend *be, const float *x, int64_t n);
    /* any inf or nan in x */
    bool (*has_inf_nan)(const zt_backend *be, const float *x, int64_t n);
    /* One Adam/AdamW step on a flat shard, in place on p, m, v. */
    void (*adam)(const zt_backend *be, float *p, const float *g, float *m, float *v,
                 int64_t n, const zt_adam_hparams *hp);
    /* One SGD step on a flat shard; buf is the momentum buffer (unused when
     * momentum == 0). */
    void (*sgd)(const zt_backend *be, float *p, const float *g, float *buf, int64_t n,
                const zt_sgd_hparams *hp);
};

/* The CPU backend (OpenBLAS + OpenMP). Threads: OMP_NUM_THREADS. */
zt_status zt_backend_cpu_init(zt_backend *be);
void zt_backend_cpu_free(zt_backend *be);

#endif
