/*
 * backend_cpu_typed: the CPU backend's typed ops (engine/backend.h, "Typed
 * tensors"). At dt = ZT_F32 each is its fp32 kernel, called as it is. With a
 * 16-bit dt the CPU, which has no 16-bit arithmetic, widens the op's 16-bit
 * inputs into fp32 scratch exactly, runs the same fp32 kernel and rounds
 * each output once (zt_convert_host), so a 16-bit op gives what its fp32
 * kernel gives on the widened inputs, rounded, and the result never depends
 * on the thread count. Where the contract rounds an intermediate (the
 * epilogues' pre-activation, residual + layernorm's x1, the bias gradient
 * from the rounded dpre), the intermediate is rounded here too.
 *
 * Memory: a 16-bit op's scratch is heap memory for the call's duration (the
 * fp32 forms of its tensors); fp32 ops allocate nothing. A failed allocation
 * makes the op do nothing and `check` report ZT_ERR_OOM.
 * Collective: none.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu/backend_cpu_nn.h"
#include "engine/dtype.h"

static atomic_bool typed_oom;

zt_status zt_cpu_typed_status(void)
{
    if (!atomic_load(&typed_oom))
        return ZT_OK;
    return zt_fail(ZT_ERR_OOM, "lower the micro-batch or the model size",
                   "the CPU backend could not allocate the fp32 scratch of a 16-bit op");
}

/* The fp32 scratch of one op: up to 6 tensors, freed together. */
typedef struct {
    float *p[6];
    int n;
    bool failed;
} scratch;

static float *scratch_get(scratch *s, int64_t numel)
{
    float *p = malloc((size_t)(numel > 0 ? numel : 1) * sizeof(float));
    if (!p || s->n == 6) {
        free(p);
        s->failed = true;
        atomic_store(&typed_oom, true);
        return NULL;
    }
    s->p[s->n++] = p;
    return p;
}

static void scratch_free(scratch *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->p[i]);
}

/* x (numel of dt) widened: x itself at fp32, else a scratch copy. */
static float *widen(scratch *s, const void *x, zt_dtype dt, int64_t numel)
{
    if (dt == ZT_F32 || !x)
        return (float *)x;
    float *w = scratch_get(s, numel);
    if (w)
        zt_convert_host(w, ZT_F32, x, dt, numel, 1.0f, false);
    return w;
}

/* Uninitialised fp32 room for an output of dt: y itself at fp32. */
static float *room(scratch *s, void *y, zt_dtype dt, int64_t numel)
{
    return dt == ZT_F32 || !y ? y : scratch_get(s, numel);
}

static void narrow(void *y, zt_dtype dt, const float *v, int64_t numel)
{
    if (dt != ZT_F32 && y)
        zt_convert_host(y, dt, v, ZT_F32, numel, 1.0f, false);
}

/* v rounded to dt and read back: what a (dt) tensor holding v gives. */
static void round_trip(scratch *s, float *v, zt_dtype dt, int64_t numel)
{
    if (dt == ZT_F32)
        return;
    float *held = scratch_get(s, (numel + 1) / 2); /* numel 16-bit values */
    if (!held)
        return;
    zt_convert_host(held, dt, v, ZT_F32, numel, 1.0f, false);
    zt_convert_host(v, ZT_F32, held, dt, numel, 1.0f, false);
}

/* Elements a (rows, cols) matrix with row stride ld spans. */
static int64_t span(int64_t rows, int64_t cols, int64_t ld)
{
    return rows > 0 && cols > 0 ? (rows - 1) * ld + cols : 0;
}

/* rows x cols of v (stride ld) rounded into y (stride ld), the rest of y
 * (a padded vocabulary's columns) untouched. */
static void narrow_rows(void *y, zt_dtype dt, const float *v, int64_t rows, int64_t cols,
                        int64_t ld)
{
    if (ld == cols) {
        narrow(y, dt, v, rows * cols);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        narrow(zt_dtype_at(y, dt, r * ld), dt, v + r * ld, cols);
}

static void t_gemm(const zt_backend *be, zt_dtype dt, zt_dtype c_dt, bool trans_a, bool trans_b,
                   int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                   const void *b, int64_t ldb, float beta, void *c, int64_t ldc)
{
    if (dt == ZT_F32 && c_dt == ZT_F32) {
        zt_cpu_gemm_f32(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    scratch s = {0};
    const float *fa = widen(&s, a, dt, span(trans_a ? k : m, trans_a ? m : k, lda));
    const float *fb = widen(&s, b, dt, span(trans_b ? n : k, trans_b ? k : n, ldb));
    float *fc = c_dt == ZT_F32 ? c
                : beta != 0.0f ? widen(&s, c, c_dt, span(m, n, ldc))
                               : room(&s, c, c_dt, span(m, n, ldc));
    if (!s.failed) {
        zt_cpu_gemm_f32(be, trans_a, trans_b, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc);
        if (c_dt != ZT_F32)
            narrow_rows(c, c_dt, fc, m, n, ldc);
    }
    scratch_free(&s);
}

static void t_bias_add(const zt_backend *be, zt_dtype dt, void *y, const void *bias,
                       int64_t rows, int64_t cols)
{
    scratch s = {0};
    float *fy = widen(&s, y, dt, rows * cols);
    const float *fb = widen(&s, bias, dt, cols);
    if (!s.failed) {
        zt_cpu_bias_add_f32(be, fy, fb, rows, cols);
        narrow(y, dt, fy, rows * cols);
    }
    scratch_free(&s);
}

static void t_bias_grad(const zt_backend *be, zt_dtype dt, float *dbias, const void *dy,
                        int64_t rows, int64_t cols, bool accumulate)
{
    scratch s = {0};
    const float *fdy = widen(&s, dy, dt, rows * cols);
    if (!s.failed)
        zt_cpu_bias_grad_f32(be, dbias, fdy, rows, cols, accumulate);
    scratch_free(&s);
}

static double t_xent(const zt_backend *be, zt_dtype dt, const void *logits,
                     const int32_t *labels, int64_t rows, int64_t classes, int64_t ld,
                     int32_t ignore_index, float dscale, void *dlogits)
{
    if (dt == ZT_F32)
        return zt_cpu_xent_forward_backward_f32(be, logits, labels, rows, classes, ld,
                                                ignore_index, dscale, dlogits);
    scratch s = {0};
    /* the gradient is written over the widened logits, as the fp32 op may */
    float *fl = widen(&s, logits, dt, rows * ld);
    double loss = 0.0;
    if (!s.failed) {
        loss = zt_cpu_xent_forward_backward_f32(be, fl, labels, rows, classes, ld, ignore_index,
                                                dscale, dlogits ? fl : NULL);
        narrow(dlogits, dt, fl, rows * ld);
    }
    scratch_free(&s);
    return loss;
}

static void t_axpy(const zt_backend *be, zt_dtype dt, void *y, float a, const void *x,
                   int64_t n)
{
    scratch s = {0};
    float *fy = widen(&s, y, dt, n);
    const float *fx = x == y ? fy : widen(&s, x, dt, n);
    if (!s.failed) {
        zt_cpu_axpy_f32(be, fy, a, fx, n);
        narrow(y, dt, fy, n);
    }
    scratch_free(&s);
}

/* The table can be a whole vocabulary: only the rows looked up are widened. */
static void t_embedding_forward(const zt_backend *be, zt_dtype dt, void *y, const int32_t *ids,
                                const void *table, int64_t rows, int64_t cols, bool accumulate)
{
    if (dt == ZT_F32) {
        zt_cpu_embedding_forward_f32(be, y, ids, table, rows, cols, accumulate);
        return;
    }
#pragma omp parallel for schedule(static) if (rows * cols > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        void *yr = zt_dtype_at(y, dt, r * cols);
        zt_convert_host(yr, dt, zt_dtype_at(table, dt, (int64_t)ids[r] * cols), dt, cols, 1.0f,
                        accumulate);
    }
}

static void t_embedding_backward(const zt_backend *be, zt_dtype dt, float *dtable,
                                 const int32_t *ids, const void *dy, int64_t rows, int64_t cols,
                                 int64_t vocab, bool accumulate)
{
    scratch s = {0};
    const float *fdy = widen(&s, dy, dt, rows * cols);
    if (!s.failed)
        zt_cpu_embedding_backward_f32(be, dtable, ids, fdy, rows, cols, vocab, accumulate);
    scratch_free(&s);
}

static void t_layernorm_forward(const zt_backend *be, zt_dtype dt, void *y, float *mean,
                                float *rstd, const void *x, const void *w, const void *b,
                                int64_t rows, int64_t cols, float eps)
{
    scratch s = {0};
    const float *fx = widen(&s, x, dt, rows * cols);
    const float *fw = widen(&s, w, dt, cols);
    const float *fb = widen(&s, b, dt, cols);
    float *fy = room(&s, y, dt, rows * cols);
    if (!s.failed) {
        zt_cpu_layernorm_forward_f32(be, fy, mean, rstd, fx, fw, fb, rows, cols, eps);
        narrow(y, dt, fy, rows * cols);
    }
    scratch_free(&s);
}

static void t_residual_layernorm_forward(const zt_backend *be, zt_dtype dt, void *x1, void *y,
                                         float *mean, float *rstd, const void *x,
                                         const void *branch, const void *w, const void *b,
                                         int64_t rows, int64_t cols, float eps)
{
    if (dt == ZT_F32) {
        zt_cpu_residual_layernorm_forward_f32(be, x1, y, mean, rstd, x, branch, w, b, rows, cols,
                                              eps);
        return;
    }
    int64_t e = rows * cols;
    scratch s = {0};
    float *fx = widen(&s, x, dt, e);
    const float *fbr = widen(&s, branch, dt, e);
    const float *fw = widen(&s, w, dt, cols);
    const float *fb = widen(&s, b, dt, cols);
    float *fy = room(&s, y, dt, e);
    if (!s.failed) {
        /* x1 is rounded as stored, and normalised as stored */
        zt_cpu_axpy_f32(be, fx, 1.0f, fbr, e);
        narrow(x1, dt, fx, e);
        zt_convert_host(fx, ZT_F32, x1, dt, e, 1.0f, false);
        zt_cpu_layernorm_forward_f32(be, fy, mean, rstd, fx, fw, fb, rows, cols, eps);
        narrow(y, dt, fy, e);
    }
    scratch_free(&s);
}

static void t_layernorm_backward(const zt_backend *be, zt_dtype dt, void *dx, float *dw,
                                 float *db, const void *dy, const void *x, const float *mean,
                                 const float *rstd, const void *w, int64_t rows, int64_t cols,
                                 bool accumulate_dx, bool accumulate_params)
{
    int64_t e = rows * cols;
    scratch s = {0};
    float *fdy = widen(&s, dy, dt, e);
    const float *fx = widen(&s, x, dt, e);
    const float *fw = widen(&s, w, dt, cols);
    float *fdx = dx == dy ? fdy : accumulate_dx ? widen(&s, dx, dt, e) : room(&s, dx, dt, e);
    if (!s.failed) {
        zt_cpu_layernorm_backward_f32(be, fdx, dw, db, fdy, fx, mean, rstd, fw, rows, cols,
                                      accumulate_dx, accumulate_params);
        narrow(dx, dt, fdx, e);
    }
    scratch_free(&s);
}

static void t_linear_act_forward(const zt_backend *be, zt_dtype dt, void *y, void *pre,
                                 const void *x, const void *w, const void *bias, int64_t rows,
                                 int64_t in, int64_t out, zt_act act)
{
    if (dt == ZT_F32) {
        zt_cpu_linear_act_forward_f32(be, y, pre, x, w, bias, rows, in, out, act);
        return;
    }
    int64_t e = rows * out;
    scratch s = {0};
    const float *fx = widen(&s, x, dt, rows * in);
    const float *fw = widen(&s, w, dt, out * in);
    const float *fb = widen(&s, bias, dt, out);
    float *v = scratch_get(&s, e);
    if (!s.failed) {
        zt_cpu_linear_act_forward_f32(be, v, NULL, fx, fw, fb, rows, in, out, ZT_ACT_NONE);
        round_trip(&s, v, dt, e); /* the activation reads v as pre stores it */
        narrow(pre, dt, v, e);
        if (act == ZT_ACT_GELU)
            zt_cpu_gelu_forward(be, v, v, e);
        else if (act == ZT_ACT_RELU)
            zt_cpu_relu_forward(be, v, v, e);
        narrow(y, dt, v, e);
    }
    scratch_free(&s);
}

static void t_act_bias_grad(const zt_backend *be, zt_dtype dt, void *dpre, float *dbias,
                            const void *dy, const void *pre, int64_t rows, int64_t cols,
                            zt_act act, bool accumulate)
{
    if (dt == ZT_F32) {
        zt_cpu_act_bias_grad_f32(be, dpre, dbias, dy, pre, rows, cols, act, accumulate);
        return;
    }
    int64_t e = rows * cols;
    scratch s = {0};
    float *d = widen(&s, dy, dt, e);
    const float *p = act == ZT_ACT_NONE ? NULL : widen(&s, pre, dt, e);
    if (!s.failed) {
        if (act == ZT_ACT_GELU)
            zt_cpu_gelu_backward(be, d, d, p, e);
        else if (act == ZT_ACT_RELU)
            zt_cpu_relu_backward(be, d, d, p, e);
        narrow(dpre, dt, d, e); /* dbias sums dpre as stored */
        zt_convert_host(d, ZT_F32, dpre, dt, e, 1.0f, false);
        zt_cpu_bias_grad_f32(be, dbias, d, rows, cols, accumulate);
    }
    scratch_free(&s);
}

static void t_linear_backward(const zt_backend *be, zt_dtype dt, void *dx, float *dw,
                              float *dbias, const void *dy, int64_t ldy, const void *x,
                              const void *w, int64_t rows, int64_t in, int64_t out,
                              bool accumulate, bool dx_accumulate)
{
    scratch s = {0};
    const float *fdy = widen(&s, dy, dt, span(rows, out, ldy));
    const float *fx = widen(&s, x, dt, rows * in);
    const float *fw = widen(&s, w, dt, out * in);
    float *fdx = dx_accumulate ? widen(&s, dx, dt, rows * in) : room(&s, dx, dt, rows * in);
    if (!s.failed) {
        zt_cpu_linear_backward_f32(be, fdx, dw, dbias, fdy, ldy, fx, fw, rows, in, out,
                                   accumulate, dx_accumulate);
        narrow(dx, dt, fdx, rows * in);
    }
    scratch_free(&s);
}

static void t_attn_flash_forward(const zt_backend *be, zt_dtype dt, void *y, float *lse,
                                 float *work, const void *qkv, int64_t n, int64_t h, int64_t t,
                                 int64_t c, float scale, bool causal, const int32_t *lengths,
                                 const zt_dropout_desc *drop)
{
    scratch s = {0};
    const float *fqkv = widen(&s, qkv, dt, n * t * 3 * c);
    float *fy = room(&s, y, dt, n * t * c);
    if (!s.failed) {
        zt_cpu_attn_flash_forward_f32(be, fy, lse, work, fqkv, n, h, t, c, scale, causal, lengths,
                                      drop);
        narrow(y, dt, fy, n * t * c);
    }
    scratch_free(&s);
}

static void t_attn_flash_backward(const zt_backend *be, zt_dtype dt, void *dqkv, const void *dy,
                                  const void *y, const float *lse, const void *qkv, float *work,
                                  int64_t n, int64_t h, int64_t t, int64_t c, float scale,
                                  bool causal, const int32_t *lengths,
                                  const zt_dropout_desc *drop)
{
    scratch s = {0};
    const float *fdy = widen(&s, dy, dt, n * t * c);
    const float *fy = widen(&s, y, dt, n * t * c);
    const float *fqkv = widen(&s, qkv, dt, n * t * 3 * c);
    float *fdqkv = room(&s, dqkv, dt, n * t * 3 * c);
    if (!s.failed) {
        zt_cpu_attn_flash_backward_f32(be, fdqkv, fdy, fy, lse, fqkv, work, n, h, t, c, scale,
                                       causal, lengths, drop);
        narrow(dqkv, dt, fdqkv, n * t * 3 * c);
    }
    scratch_free(&s);
}

static void t_dropout(const zt_backend *be, zt_dtype dt, void *y, const void *x,
                      const zt_dropout_desc *d)
{
    int64_t e = d->n * d->a * d->b * d->c;
    scratch s = {0};
    float *fx = widen(&s, x, dt, e);
    float *fy = dt == ZT_F32 ? y : fx; /* in place on the scratch */
    if (!s.failed) {
        zt_cpu_dropout_f32(be, fy, fx, d);
        narrow(y, dt, fy, e);
    }
    scratch_free(&s);
}

void zt_backend_cpu_typed_ops(zt_backend *be)
{
    be->typed_dtypes = 1u << ZT_F32 | 1u << ZT_F16 | 1u << ZT_BF16;
    be->gemm = t_gemm;
    be->bias_add = t_bias_add;
    be->bias_grad = t_bias_grad;
    be->xent_forward_backward = t_xent;
    be->axpy = t_axpy;
    be->embedding_forward = t_embedding_forward;
    be->embedding_backward = t_embedding_backward;
    be->layernorm_forward = t_layernorm_forward;
    be->residual_layernorm_forward = t_residual_layernorm_forward;
    be->layernorm_backward = t_layernorm_backward;
    be->linear_act_forward = t_linear_act_forward;
    be->act_bias_grad = t_act_bias_grad;
    be->linear_backward = t_linear_backward;
    be->attn_flash_forward = t_attn_flash_forward;
    be->attn_flash_backward = t_attn_flash_backward;
    be->dropout = t_dropout;
}
