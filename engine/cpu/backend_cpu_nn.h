/*
 * backend_cpu_nn: the CPU backend's transformer-layer ops (embedding, sinusoidal
 * positions, layernorm, GELU, batched gemm, attention softmax, fused attention
 * (backend_cpu_flash.c), keyed dropout, mean pooling, and the fused epilogues:
 * residual + layernorm, linear + bias + activation, activation gradient + bias
 * gradient), kept apart from backend_cpu.c so each file stays readable.
 * Private to engine/cpu: the rest of the tree reaches these ops only through
 * the zt_backend function pointers that zt_backend_cpu_init fills.
 *
 * Every op writes each output element from one thread with a fixed order of
 * additions, so results are bit-identical for any OMP_NUM_THREADS.
 *
 * Memory: ops write only the buffers they are given and allocate nothing
 * (the typed ops' 16-bit forms excepted: their fp32 scratch belongs to the
 * backend's impl, backend_cpu_typed.c).
 * Collective: none.
 */
#ifndef ZT_BACKEND_CPU_NN_H
#define ZT_BACKEND_CPU_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"

/* Below this many elements an op runs on one thread: waking the team costs
 * more than the loop. Shared by every CPU op. */
#define ZT_CPU_PAR_MIN 32768

/* Columns per bias_grad task (and act_bias_grad's, which must sum alike): 64
 * floats are four cache lines, wide enough for full-line reads down a column
 * block, narrow enough to give threads work. */
#define ZT_CPU_BIAS_COL_BLOCK 64

/* sum of a * b in float32: eight lanes, then a fixed tree, so a dot product
 * has the same bits wherever it is taken (attention softmax backward, the
 * fused attention's rowsum(dO * O)). */
static inline float zt_cpu_dot_f32(const float *a, const float *b, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++)
        acc[0] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* The fp32 kernels behind the typed ops (backend_cpu_typed.c installs the
 * ops): each is its op's contract at dt = ZT_F32, with float pointers. */
void zt_cpu_gemm_f32(const zt_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc);
void zt_cpu_bias_add_f32(const zt_backend *be, float *y, const float *bias, int64_t rows,
                         int64_t cols);
void zt_cpu_bias_grad_f32(const zt_backend *be, float *dbias, const float *dy, int64_t rows,
                          int64_t cols, bool accumulate);
void zt_cpu_linear_backward_f32(const zt_backend *be, float *dx, float *dw, float *dbias,
                                const float *dy, int64_t ldy, const float *x, const float *w,
                                int64_t rows, int64_t in, int64_t out, bool accumulate,
                                bool dx_accumulate);
double zt_cpu_xent_forward_backward_f32(const zt_backend *be, const float *logits,
                                        const int32_t *labels, int64_t rows, int64_t classes,
                                        int64_t ld, int32_t ignore_index, float dscale,
                                        float *dlogits);
/* Rows [0, nr) of the cross-entropy: each row's loss into row_loss[r] and,
 * with dlogits, its gradient. The op adds row_loss up in increasing row
 * order, so a caller that feeds it rows in blocks gets the op's sum. */
void zt_cpu_xent_rows_f32(const float *logits, const int32_t *labels, int64_t nr,
                          int64_t classes, int64_t ld, int32_t ignore_index, float dscale,
                          float *dlogits, double *row_loss);
void zt_cpu_axpy_f32(const zt_backend *be, float *y, float a, const float *x, int64_t n);
void zt_cpu_embedding_forward_f32(const zt_backend *be, float *y, const int32_t *ids,
                                  const float *table, int64_t rows, int64_t cols,
                                  bool accumulate);
void zt_cpu_embedding_backward_f32(const zt_backend *be, float *dtable, const int32_t *ids,
                                   const float *dy, int64_t rows, int64_t cols, int64_t vocab,
                                   bool accumulate);
void zt_cpu_sinusoid_add_f32(const zt_backend *be, float *y, int64_t n, int64_t t, int64_t cols);
void zt_cpu_layernorm_forward_f32(const zt_backend *be, float *y, float *mean, float *rstd,
                                  const float *x, const float *w, const float *b, int64_t rows,
                                  int64_t cols, float eps);
void zt_cpu_residual_layernorm_forward_f32(const zt_backend *be, float *x1, float *y,
                                           float *mean, float *rstd, const float *x,
                                           const float *branch, const float *w, const float *b,
                                           int64_t rows, int64_t cols, float eps);
void zt_cpu_layernorm_backward_f32(const zt_backend *be, float *dx, float *dw, float *db,
                                   const float *dy, const float *x, const float *mean,
                                   const float *rstd, const float *w, int64_t rows, int64_t cols,
                                   bool accumulate_dx, bool accumulate_params);
void zt_cpu_linear_act_forward_f32(const zt_backend *be, float *y, float *pre, const float *x,
                                   const float *w, const float *bias, int64_t rows, int64_t in,
                                   int64_t out, zt_act act);
void zt_cpu_act_bias_grad_f32(const zt_backend *be, float *dpre, float *dbias, const float *dy,
                              const float *pre, int64_t rows, int64_t cols, zt_act act,
                              bool accumulate);
void zt_cpu_attn_flash_forward_f32(const zt_backend *be, float *y, float *lse, float *work,
                                   const float *qkv, int64_t n, int64_t h, int64_t t, int64_t c,
                                   float scale, bool causal, const int32_t *lengths,
                                   const zt_dropout_desc *drop);
void zt_cpu_attn_flash_backward_f32(const zt_backend *be, float *dqkv, const float *dy,
                                    const float *y, const float *lse, const float *qkv,
                                    float *work, int64_t n, int64_t h, int64_t t, int64_t c,
                                    float scale, bool causal, const int32_t *lengths,
                                    const zt_dropout_desc *drop);
void zt_cpu_dropout_f32(const zt_backend *be, float *y, const float *x, const zt_dropout_desc *d);
/* Rows [r0, r1) of dropout with p > 0, the tensor seen as rows of d->c:
 * y and x point at row r0 (y == x allowed). */
void zt_cpu_dropout_rows_f32(float *y, const float *x, const zt_dropout_desc *d, int64_t r0,
                             int64_t r1);
void zt_cpu_mean_pool_forward_f32(const zt_backend *be, float *y, const float *x,
                                  const int32_t *lengths, int64_t n, int64_t t, int64_t cols);
void zt_cpu_mean_pool_backward_f32(const zt_backend *be, float *dx, const float *dy,
                                   const int32_t *lengths, int64_t n, int64_t t, int64_t cols);
/* The activation ops (fp32 only), which the typed epilogues reuse. */
void zt_cpu_relu_forward(const zt_backend *be, float *y, const float *x, int64_t n);
void zt_cpu_relu_backward(const zt_backend *be, float *dx, const float *dy, const float *y,
                          int64_t n);
void zt_cpu_gelu_forward(const zt_backend *be, float *y, const float *x, int64_t n);
void zt_cpu_gelu_backward(const zt_backend *be, float *dx, const float *dy, const float *x,
                          int64_t n);

/* Fills the typed ops of a CPU backend and makes its impl, which holds
 * their fp32 scratch (backend_cpu_typed.c). ZT_ERR_OOM, with be->impl NULL,
 * when the impl cannot be allocated. */
zt_status zt_backend_cpu_typed_ops(zt_backend *be);
/* Frees the impl and its scratch (the backend's destroy); NULL impl: nothing. */
void zt_cpu_typed_free(zt_backend *be);
/* ZT_ERR_OOM once a 16-bit op could not grow the scratch (the op then did
 * nothing); the backend's `check` returns it. */
zt_status zt_cpu_typed_status(const zt_backend *be);

/* Fills the transformer-layer function pointers of a CPU backend; the rest of
 * *be is left as it is. */
void zt_backend_cpu_nn_ops(zt_backend *be);

#endif
