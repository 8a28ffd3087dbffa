#include "models/layers.h"

#include <math.h>

void zt_linear_forward(const zt_backend *be, zt_dtype dt, void *y, const void *x, const void *w,
                       const void *b, int64_t rows, int64_t in, int64_t out)
{
    if (be->linear_act_forward && dt != ZT_F32) { /* one rounding of x w^T + b, not two */
        be->linear_act_forward(be, dt, y, NULL, x, w, b, rows, in, out, ZT_ACT_NONE);
        return;
    }
    be->gemm(be, dt, dt, false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y,
             out); // (rows, out)
    if (b)
        be->bias_add(be, dt, y, b, rows, out);
}

void zt_linear_backward(const zt_backend *be, zt_dtype dt, void *dx, float *dw, float *db,
                        const void *dy, int64_t ldy, const void *x, const void *w, int64_t rows,
                        int64_t in, int64_t out, bool accumulate, bool dx_accumulate)
{
    if (be->linear_backward && dx != x) {
        be->linear_backward(be, dt, dx, dw, db, dy, ldy, x, w, rows, in, out, accumulate,
                            dx_accumulate);
        return;
    }
    be->gemm(be, dt, ZT_F32, true, false, out, in, rows, 1.0f, dy, ldy, x, in,
             accumulate ? 1.0f : 0.0f, dw, in); // (out, in)
    if (db)
        be->bias_grad(be, dt, db, dy, rows, out, accumulate);
    if (dx)
        be->gemm(be, dt, dt, false, false, rows, in, out, 1.0f, dy, ldy, w, in,
                 dx_accumulate ? 1.0f : 0.0f, dx, in); // (rows, in)
}

void zt_linear_act_forward(const zt_backend *be, zt_dtype dt, void *y, void *pre,
                           const void *x, const void *w, const void *b, int64_t rows, int64_t in,
                           int64_t out, zt_act act)
{
    if (be->linear_act_forward) {
        be->linear_act_forward(be, dt, y, pre, x, w, b, rows, in, out, act);
        return;
    }
    float *v = pre ? pre : y; // (rows, out)
    zt_linear_forward(be, ZT_F32, v, x, w, b, rows, in, out);
    if (act == ZT_ACT_GELU)
        be->gelu_forward(be, y, v, rows * out);
    else if (act == ZT_ACT_RELU)
        be->relu_forward(be, y, v, rows * out);
    else if (y != v)
        be->copy_d2d(be, y, v, (size_t)(rows * out) * sizeof(float));
}

void zt_act_bias_grad(const zt_backend *be, zt_dtype dt, void *dpre, float *db, const void *dy,
                      const void *pre, int64_t rows, int64_t cols, zt_act act, bool accumulate)
{
    if (be->act_bias_grad) {
        be->act_bias_grad(be, dt, dpre, db, dy, pre, rows, cols, act, accumulate);
        return;
    }
    if (act == ZT_ACT_GELU)
        be->gelu_backward(be, dpre, dy, pre, rows * cols);
    else if (act == ZT_ACT_RELU)
        be->relu_backward(be, dpre, dy, pre, rows * cols);
    else if (dpre != dy)
        be->copy_d2d(be, dpre, dy, (size_t)(rows * cols) * sizeof(float));
    be->bias_grad(be, ZT_F32, db, dpre, rows, cols, accumulate);
}

void zt_residual_layernorm(const zt_backend *be, zt_dtype dt, void *x1, void *y, float *mean,
                           float *rstd, const void *x, const void *branch, const void *w,
                           const void *b, int64_t rows, int64_t cols)
{
    if (be->residual_layernorm_forward) {
        be->residual_layernorm_forward(be, dt, x1, y, mean, rstd, x, branch, w, b, rows, cols,
                                       ZT_LAYERNORM_EPS);
        return;
    }
    if (x1 == branch) {
        be->axpy(be, dt, x1, 1.0f, x, rows * cols);
    } else {
        if (x1 != x)
            be->copy_d2d(be, x1, x, (size_t)(rows * cols) * zt_dtype_size(dt));
        be->axpy(be, dt, x1, 1.0f, branch, rows * cols);
    }
    be->layernorm_forward(be, dt, y, mean, rstd, x1, w, b, rows, cols, ZT_LAYERNORM_EPS);
}

zt_dropout_desc zt_layer_dropout(const zt_unit *u, int k, const zt_batch *bt, int64_t a,
                                 int64_t b, int64_t c, int64_t key_b, int64_t key_c)
{
    return (zt_dropout_desc){.seed = bt->seed,
                             .site = zt_dropout_site(u->index, k),
                             .step = bt->step,
                             .row_keys = bt->row_keys,
                             .n = bt->n,
                             .a = a,
                             .b = b,
                             .c = c,
                             .key_b = key_b,
                             .key_c = key_c,
                             .p = bt->training ? u->dropout : 0.0f};
}

const void *zt_layer_dropped(const zt_backend *be, zt_dtype dt, void *dst, const void *src,
                             const zt_dropout_desc *d)
{
    if (d->p <= 0.0f)
        return src;
    be->dropout(be, dt, dst, src, d);
    return dst;
}

/* Head h of sample s: Q, K, V are column blocks of qkv with row stride 3C. */
static const float *attn_q(const float *qkv, const zt_attn_shape *s, int64_t smp)
{
    return qkv + smp * s->t * 3 * s->c;
}

int64_t zt_attention_saved_numel(int64_t t, int64_t heads, bool unfused)
{
    return unfused ? heads * t * t : heads * t;
}

int64_t zt_attention_work_numel(int64_t t, int64_t c, int64_t heads, bool unfused)
{
    return unfused ? heads * t * t : zt_attn_flash_work_numel(1, heads, t, c / heads);
}

static void attention_unfused_forward(const zt_backend *be, float *y, float *att, float *work,
                                      const float *qkv, const zt_attn_shape *s,
                                      const zt_dropout_desc *drop)
{
    int64_t t = s->t, c = s->c, nh = s->heads, hs = c / nh, tt = t * t;
    float scale = 1.0f / sqrtf((float)hs);
    for (int64_t smp = 0; smp < s->n; smp++) {
        const float *q = attn_q(qkv, s, smp);
        be->gemm_batched(be, false, true, t, t, hs, 1.0f, q, 3 * c, hs, q + c, 3 * c, hs, 0.0f,
                         att + smp * nh * tt, t, tt, nh); // (H, t, t) scores
    }
    be->attn_softmax_forward(be, att, s->n, nh, t, scale, s->causal, s->lengths);
    const float *p = att;
    if (drop->p > 0.0f) {
        be->dropout(be, ZT_F32, work, att, drop);
        p = work;
    }
    for (int64_t smp = 0; smp < s->n; smp++) {
        const float *v = attn_q(qkv, s, smp) + 2 * c;
        be->gemm_batched(be, false, false, t, hs, t, 1.0f, p + smp * nh * tt, t, tt, v, 3 * c, hs,
                         0.0f, y + smp * t * c, c, hs, nh); // (t, C) heads side by side
    }
}

static void attention_unfused_backward(const zt_backend *be, float *dqkv, const float *dy,
                                       const float *att, const float *qkv, float *work,
                                       const zt_attn_shape *s, const zt_dropout_desc *drop)
{
    int64_t t = s->t, c = s->c, nh = s->heads, hs = c / nh, tt = t * t;
    float scale = 1.0f / sqrtf((float)hs);
    bool dropped = drop->p > 0.0f;
    /* dV = P_dropped^T dY first: afterwards work is free for dP. */
    const float *p = att;
    if (dropped) {
        be->dropout(be, ZT_F32, work, att, drop);
        p = work;
    }
    for (int64_t smp = 0; smp < s->n; smp++)
        be->gemm_batched(be, true, false, t, hs, t, 1.0f, p + smp * nh * tt, t, tt,
                         dy + smp * t * c, c, hs, 0.0f, dqkv + smp * t * 3 * c + 2 * c, 3 * c, hs,
                         nh);
    for (int64_t smp = 0; smp < s->n; smp++) {
        const float *v = attn_q(qkv, s, smp) + 2 * c;
        be->gemm_batched(be, false, true, t, t, hs, 1.0f, dy + smp * t * c, c, hs, v, 3 * c, hs,
                         0.0f, work + smp * nh * tt, t, tt, nh); // dP (H, t, t)
    }
    if (dropped)
        be->dropout(be, ZT_F32, work, work, drop);
    be->attn_softmax_backward(be, work, att, s->n * nh * t, t, scale);
    for (int64_t smp = 0; smp < s->n; smp++) {
        const float *q = attn_q(qkv, s, smp);
        float *dq = dqkv + smp * t * 3 * c;
        const float *ds = work + smp * nh * tt;
        be->gemm_batched(be, false, false, t, hs, t, 1.0f, ds, t, tt, q + c, 3 * c, hs, 0.0f, dq,
                         3 * c, hs, nh); // dQ = dS K
        be->gemm_batched(be, true, false, t, hs, t, 1.0f, ds, t, tt, q, 3 * c, hs, 0.0f, dq + c,
                         3 * c, hs, nh); // dK = dS^T Q
    }
}

void zt_attention_forward(const zt_backend *be, zt_dtype dt, void *y, float *att, float *work,
                          const void *qkv, const zt_attn_shape *s, const zt_dropout_desc *drop)
{
    if (s->unfused) {
        attention_unfused_forward(be, y, att, work, qkv, s, drop);
        return;
    }
    float scale = 1.0f / sqrtf((float)(s->c / s->heads));
    be->attn_flash_forward(be, dt, y, att, work, qkv, s->n, s->heads, s->t, s->c, scale,
                           s->causal, s->lengths, drop); // y (rows, C), att (n, H, t) log-sum-exp
}

void zt_attention_backward(const zt_backend *be, zt_dtype dt, void *dqkv, const void *dy,
                           const void *y, const float *att, const void *qkv, float *work,
                           const zt_attn_shape *s, const zt_dropout_desc *drop)
{
    if (s->unfused) {
        attention_unfused_backward(be, dqkv, dy, att, qkv, work, s, drop);
        return;
    }
    float scale = 1.0f / sqrtf((float)(s->c / s->heads));
    be->attn_flash_backward(be, dt, dqkv, dy, y, att, qkv, work, s->n, s->heads, s->t, s->c,
                            scale, s->causal, s->lengths, drop);
}

int64_t zt_layer_stats_room(int64_t floats, zt_dtype dt)
{
    return floats * (int64_t)(sizeof(float) / zt_dtype_size(dt));
}

void *zt_layer_take(void **at, zt_dtype dt, int64_t numel)
{
    void *p = *at;
    *at = zt_dtype_at(p, dt, numel);
    return p;
}

float *zt_layer_take_f32(void **at, int64_t floats) { return zt_layer_take(at, ZT_F32, floats); }
