/*
 * layers: the pieces the transformer units are built from, composed from
 * backend ops: Linear, multi-head self-attention on a fused (rows, 3C)
 * query/key/value tensor, and the keyed dropout of a unit's sites. Each piece
 * has a forward and a backward; a unit chains them and decides what to keep.
 *
 * Shapes are per batch: rows = n * t tokens of width C, H heads of size
 * C / H. Attention is fused (flash) by default: it keeps an (n, H, t)
 * log-sum-exp and no (t, t) tensor anywhere; the unfused three-op path
 * (--attention unfused, kept for comparison) keeps (n, H, t, t)
 * probabilities, dense at the batch's t.
 *
 * Typed: every piece takes the storage dtype dt of its tensors (backend.h's
 * typed ops): activations, their gradients and the parameters read are of
 * dt, parameter gradients and statistics (mean, rstd, log-sum-exp) fp32.
 * A 16-bit dt needs the backend's fused epilogues and fused attention: the
 * op-by-op sequences (--fused-ops off, --attention unfused) are fp32 only.
 *
 * Memory: layers own nothing; every buffer is the caller's (a unit's saved
 * or work region). Collective: none.
 */
#ifndef ZT_LAYERS_H
#define ZT_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "models/unit.h"

/* PyTorch's LayerNorm default. */
#define ZT_LAYERNORM_EPS 1e-5f

/* y(rows, out) = x(rows, in) w^T + b; w (out, in), b (out) or NULL. */
void zt_linear_forward(const zt_backend *be, zt_dtype dt, void *y, const void *x, const void *w,
                       const void *b, int64_t rows, int64_t in, int64_t out);
/* dw (+)= dy^T x, db (+)= column sums of dy (accumulate: add; skipped when
 * db is NULL), and, unless dx is NULL, dx = (dx_accumulate ? dx : 0) + dy w;
 * dy (rows, out) has row stride ldy (> out only without db). dx may be x (in
 * place): dw and db are then made first, op by op; otherwise the backend's
 * linear_backward may run the two products at once. */
void zt_linear_backward(const zt_backend *be, zt_dtype dt, void *dx, float *dw, float *db,
                        const void *dy, int64_t ldy, const void *x, const void *w, int64_t rows,
                        int64_t in, int64_t out, bool accumulate, bool dx_accumulate);

/* The fused epilogues (backend.h), or the op-by-op sequence they replace
 * when the backend leaves them NULL (--fused-ops off): the same float32
 * results either way.
 *
 * y(rows, out) = act(x(rows, in) w^T + b); pre (rows, out) receives the
 * pre-activation where given (GELU's backward needs it; ReLU's reads y). */
void zt_linear_act_forward(const zt_backend *be, zt_dtype dt, void *y, void *pre,
                           const void *x, const void *w, const void *b, int64_t rows, int64_t in,
                           int64_t out, zt_act act);
/* dpre = dy act'(pre) (ReLU: pre is y), db (+)= its column sums; dpre == dy allowed. */
void zt_act_bias_grad(const zt_backend *be, zt_dtype dt, void *dpre, float *db, const void *dy,
                      const void *pre, int64_t rows, int64_t cols, zt_act act, bool accumulate);
/* x1 = x + branch (x1 may alias x or branch), y = layernorm(x1) with its
 * mean and rstd. */
void zt_residual_layernorm(const zt_backend *be, zt_dtype dt, void *x1, void *y, float *mean,
                           float *rstd, const void *x, const void *branch, const void *w,
                           const void *b, int64_t rows, int64_t cols);

typedef struct {
    int64_t n, t;            /* samples, tokens per sample in this batch */
    int64_t max_t;           /* the model's sequence length (dropout key extent) */
    int64_t c, heads;        /* width, heads (head size c / heads) */
    bool causal;
    const int32_t *lengths;  /* (n) key padding, or NULL */
    bool unfused;            /* the three-op path (--attention unfused) */
} zt_attn_shape;

/* Carving a unit's saved and work regions into views. Typed units put their
 * fp32 statistics first, so they stay aligned whatever the tensors' dtype;
 * with a 16-bit dtype each statistic takes two elements' room. */
/* Elements of a tensor of dt that `floats` fp32 values take. */
int64_t zt_layer_stats_room(int64_t floats, zt_dtype dt);
/* Takes numel elements of dt off the region at *at, returning their start. */
void *zt_layer_take(void **at, zt_dtype dt, int64_t numel);
float *zt_layer_take_f32(void **at, int64_t floats);

/* Dropout k of unit u on a per-sample tensor (a, b, c) whose largest shape is
 * (a, key_b, key_c); p = 0 outside training. */
zt_dropout_desc zt_layer_dropout(const zt_unit *u, int k, const zt_batch *bt, int64_t a,
                                 int64_t b, int64_t c, int64_t key_b, int64_t key_c);

/* The tensor a consumer of drop(src) reads: src dropped into dst (dst ==
 * src drops in place), or src itself when the site is off, with no copy. */
const void *zt_layer_dropped(const zt_backend *be, zt_dtype dt, void *dst, const void *src,
                             const zt_dropout_desc *d);

/* Attention's saved tensor per sample at sequence length t: the (H, t)
 * log-sum-exp of the fused path, or the (H, t, t) probabilities of the
 * unfused one. */
int64_t zt_attention_saved_numel(int64_t t, int64_t heads, bool unfused);
/* Its scratch per sample at width c: the fused ops' tiles (linear in t), or
 * one more (H, t, t) tensor unfused. */
int64_t zt_attention_work_numel(int64_t t, int64_t c, int64_t heads, bool unfused);

/* y(rows, C) = concat over heads of drop(softmax(scale Q K^T, masks)) V with
 * Q, K, V the column blocks of qkv (rows, 3C). Fused (the default): one
 * attn_flash_forward; att receives the (n, H, t) log-sum-exp. Unfused
 * (s->unfused): scores by batched GEMM, attn_softmax_forward, dropout and a
 * batched GEMM with V; att (n, H, t, t) receives the probabilities before
 * dropout and work holds the dropped copy. Work sized by
 * zt_attention_work_numel either way. */
void zt_attention_forward(const zt_backend *be, zt_dtype dt, void *y, float *att, float *work,
                          const void *qkv, const zt_attn_shape *s, const zt_dropout_desc *drop);
/* From dy (rows, C) writes dqkv (rows, 3C) (assigns); y is the forward's
 * output (the fused backward's D = rowsum(dy * y)). */
void zt_attention_backward(const zt_backend *be, zt_dtype dt, void *dqkv, const void *dy,
                           const void *y, const float *att, const void *qkv, float *work,
                           const zt_attn_shape *s, const zt_dropout_desc *drop);

#endif
