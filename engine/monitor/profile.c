/*
 * profile: the counting backend of --profile (engine/monitor/profile.h).
 */
#include "engine/monitor/profile.h"

#include "engine/monitor/attn_flops.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One row per op of struct zt_backend that moves data, plus the modelled
 * casts; the order is the report's. */
#define PROF_OPS(X)                                                                           \
    X(copy_h2d, TRANSFER) X(copy_d2h, TRANSFER) X(copy_d2d, MEMORY) X(memset_zero, MEMORY)   \
    X(sync, MEMORY) X(check, MEMORY) X(gemm, MATMUL) X(gemm_operand_cast, MEMORY)            \
    X(bias_add, MEMORY) X(bias_grad, MEMORY) X(relu_forward, MEMORY) X(relu_backward, MEMORY) \
    X(xent_forward_backward, MEMORY) X(scale, MEMORY) X(axpy, MEMORY)                         \
    X(sum_squares, MEMORY) X(has_inf_nan, MEMORY) X(convert, MEMORY)                          \
    X(embedding_forward, MEMORY) X(embedding_backward, MEMORY) X(sinusoid_add, MEMORY)       \
    X(layernorm_forward, MEMORY) X(layernorm_backward, MEMORY) X(gelu_forward, MEMORY)        \
    X(gelu_backward, MEMORY) X(residual_layernorm_forward, MEMORY)                          \
    X(linear_act_forward, MATMUL) X(act_bias_grad, MEMORY) X(gemm_batched, MATMUL) X(attn_softmax_forward, MEMORY)          \
    X(attn_softmax_backward, MEMORY) X(attn_flash_forward, FMA)                             \
    X(attn_flash_backward, FMA) X(dropout, MEMORY) X(mean_pool_forward, MEMORY)             \
    X(mean_pool_backward, MEMORY) X(quantize, MEMORY) X(dequantize, MEMORY) X(adam, MEMORY)  \
    X(sgd, MEMORY)

#define PROF_ENUM(name, cls) OP_##name,
enum { PROF_OPS(PROF_ENUM) OP_N };
#define PROF_NAME(name, cls) #name,
static const char *const prof_names[OP_N] = {PROF_OPS(PROF_NAME)};
#define PROF_CLASS(name, cls) ZT_PROF_##cls,
static const zt_profile_class prof_classes[OP_N] = {PROF_OPS(PROF_CLASS)};

static const char *const prof_kind_names[ZT_PROF_NKINDS] = {"fp32",  "fp16",   "bf16", "int32",
                                                           "int8",  "uint64", "bytes"};

typedef struct {
    const zt_backend *inner;
    zt_profile_options opt;
    bool on;
    zt_profile_counts c[OP_N];
    int64_t steps_start, steps; /* the trainer's step counter at begin; steps since */
    uint64_t comm_start[ZT_COMM_NKINDS], comm_bytes[ZT_COMM_NKINDS];
    uint64_t host_blocks_outside; /* host-blocking CUDA calls between ops */
} prof_impl;

static prof_impl *prof_of(const zt_backend *be) { return (prof_impl *)be->impl; }
static const zt_backend *inner_of(const zt_backend *be) { return prof_of(be)->inner; }

static void add(uint64_t *x, uint64_t v) { __atomic_fetch_add(x, v, __ATOMIC_RELAXED); }

static uint64_t u(int64_t v) { return v > 0 ? (uint64_t)v : 0; }

/* While counting: the op this thread is in (-1 when none) and, with timing,
 * when it began. Per thread, since ops may come from more than one. */
static _Thread_local int tl_op = -1;
static _Thread_local bool tl_timed;
static _Thread_local uint64_t tl_t0_ns;
/* The wrapper counting now (begin to end), for zt_profile_host_block. */
static prof_impl *g_counting;

const char *zt_profile_current_op(void) { return tl_op < 0 ? NULL : prof_names[tl_op]; }

void zt_profile_host_block(void)
{
    prof_impl *p = __atomic_load_n(&g_counting, __ATOMIC_ACQUIRE);
    if (!p || !__atomic_load_n(&p->on, __ATOMIC_RELAXED))
        return;
    add(tl_op >= 0 ? &p->c[tl_op].host_blocks : &p->host_blocks_outside, 1);
}

static const char *const prof_device_names[ZT_PROF_NDEV] = {
    "launches",          "global_requests",       "global_sectors",
    "global_wavefronts", "dram_sectors",          "shared_requests",
    "shared_wavefronts", "shared_bank_conflicts", "tensor_instructions"};

void zt_profile_device_counts(const char *op, const char *const *names, const uint64_t *values,
                              int n)
{
    prof_impl *p = __atomic_load_n(&g_counting, __ATOMIC_ACQUIRE);
    for (int i = 0; p && op && i < OP_N; i++)
        for (int k = 0; !strcmp(prof_names[i], op) && k < n; k++)
            for (int d = 0; d < ZT_PROF_NDEV; d++)
                if (!strcmp(names[k], prof_device_names[d]))
                    add(&p->c[i].device[d], values[k]);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A call of op: its FLOPs; bytes follow through rd and wr. NULL when off.
 * With timing, the device is drained first, so the op's time starts with
 * nothing else queued. The modelled casts are timed inside their GEMM. */
static zt_profile_counts *count(const zt_backend *be, int op, uint64_t flops)
{
    prof_impl *p = prof_of(be);
    if (!__atomic_load_n(&p->on, __ATOMIC_RELAXED))
        return NULL;
    add(&p->c[op].calls, 1);
    add(&p->c[op].flops, flops);
    if (op == OP_gemm_operand_cast)
        return &p->c[op];
    if (p->opt.timing) {
        p->inner->sync(p->inner);
        tl_timed = true;
        tl_t0_ns = now_ns();
    }
    tl_op = op;
    return &p->c[op];
}

/* After the wrapped op: with timing, waits for it and adds its time. The
 * wait is the profiler's, not the op's: it is made outside the op, so the
 * op's host_blocks are its own. */
static void op_end(const zt_backend *be)
{
    const int op = tl_op;
    if (op < 0)
        return;
    tl_op = -1;
    if (!tl_timed)
        return;
    prof_impl *p = prof_of(be);
    p->inner->sync(p->inner);
    add(&p->c[op].ns, now_ns() - tl_t0_ns);
    tl_timed = false;
}

static zt_profile_kind kind_of(zt_dtype dt)
{
    return dt == ZT_BF16 ? ZT_PROF_BF16 : dt == ZT_F16 ? ZT_PROF_FP16 : ZT_PROF_FP32;
}

static uint64_t size_of(zt_profile_kind k)
{
    static const uint64_t sizes[ZT_PROF_NKINDS] = {4, 2, 2, 4, 1, 8, 1};
    return sizes[k];
}

/* numel elements of kind k read (written) by the call c counts. */
static void rd(zt_profile_counts *c, zt_profile_kind k, uint64_t numel)
{
    if (c)
        add(&c->read[k], numel * size_of(k));
}
static void wr(zt_profile_counts *c, zt_profile_kind k, uint64_t numel)
{
    if (c)
        add(&c->written[k], numel * size_of(k));
}
/* An attention call's FLOPs on tensor cores (its kernels pick them by dtype
 * and shape) at head size hs, and whether it drew a dropout mask: the
 * roofline prices each kernel variant by its SASS. */
static void attn_kind(zt_profile_counts *c, uint64_t tensor_flops, int64_t hs,
                      const zt_dropout_desc *drop)
{
    if (!c)
        return;
    add(&c->tensor_flops, tensor_flops);
    if (tensor_flops)
        __atomic_store_n(&c->tensor_width, u(hs), __ATOMIC_RELAXED);
    if (drop && drop->p > 0.0f)
        add(&c->dropout_calls, 1);
}

/* ---- memory and control: passed through, copies counted ---- */

static void p_destroy(zt_backend *be)
{
    free(be->impl);
    memset(be, 0, sizeof *be);
}
static zt_status p_alloc(const zt_backend *be, size_t bytes, void **out)
{
    return inner_of(be)->alloc(inner_of(be), bytes, out);
}
static void p_free(const zt_backend *be, void *ptr) { inner_of(be)->free(inner_of(be), ptr); }
static zt_status p_host_alloc(const zt_backend *be, size_t bytes, void **out)
{
    return inner_of(be)->host_alloc(inner_of(be), bytes, out);
}
static void p_host_free(const zt_backend *be, void *ptr)
{
    inner_of(be)->host_free(inner_of(be), ptr);
}
static zt_status p_mem_info(const zt_backend *be, zt_device_mem *out)
{
    return inner_of(be)->mem_info(inner_of(be), out);
}
static void p_set_workspace(const zt_backend *be, void *ptr, size_t bytes)
{
    inner_of(be)->set_workspace(inner_of(be), ptr, bytes);
}
static zt_status p_check(const zt_backend *be)
{
    count(be, OP_check, 0);
    zt_status r = inner_of(be)->check(inner_of(be));
    op_end(be);
    return r;
}
static void p_sync(const zt_backend *be)
{
    count(be, OP_sync, 0);
    inner_of(be)->sync(inner_of(be));
    op_end(be);
}
/* The copies: bytes read and written once. */
#define PROF_COPY(name)                                                                         \
    static void p_##name(const zt_backend *be, void *dst, const void *src, size_t bytes)        \
    {                                                                                           \
        zt_profile_counts *c = count(be, OP_##name, 0);                                         \
        rd(c, ZT_PROF_BYTES, bytes);                                                            \
        wr(c, ZT_PROF_BYTES, bytes);                                                            \
        inner_of(be)->name(inner_of(be), dst, src, bytes);                                      \
        op_end(be);                                                                             \
    }
PROF_COPY(copy_h2d)
PROF_COPY(copy_d2h)
PROF_COPY(copy_d2d)
static void p_memset_zero(const zt_backend *be, void *dst, size_t bytes)
{
    wr(count(be, OP_memset_zero, 0), ZT_PROF_BYTES, bytes);
    inner_of(be)->memset_zero(inner_of(be), dst, bytes);
    op_end(be);
}

/* ---- GEMMs ---- */

/* batch products C(m, n) = op(A)(m, k) op(B)(k, n) (+ beta C): A and B of
 * dt, C of c_dt. Only fp32 operands are cast (16-bit ones are read as they
 * are). */
static void count_gemm(const zt_backend *be, int op, zt_dtype dt, zt_dtype c_dt, int64_t m,
                       int64_t n, int64_t k, float beta, int64_t batch)
{
    const uint64_t b = u(batch), mn = u(m) * u(n) * b;
    const uint64_t operands = (u(m) * u(k) + u(k) * u(n)) * b;
    zt_profile_counts *c = count(be, op, 2 * mn * u(k));
    if (!c)
        return;
    const zt_dtype gd = prof_of(be)->opt.gemm_dtype;
    if (u(k) > 0 && mn > 0 && gd != ZT_F32 && dt == ZT_F32) {
        /* The CUDA backend's two cast kernels per product (one pass). */
        zt_profile_counts *cast = count(be, OP_gemm_operand_cast, 0);
        add(&cast->calls, 1);
        rd(cast, ZT_PROF_FP32, operands);
        wr(cast, kind_of(gd), operands);
        rd(c, kind_of(gd), operands);
    } else if (u(k) > 0 && mn > 0) {
        rd(c, kind_of(dt), operands);
    }
    if (beta != 0.0f && !(u(k) == 0 && beta == 1.0f))
        rd(c, kind_of(c_dt), mn);
    if (!(u(k) == 0 && beta == 1.0f))
        wr(c, kind_of(c_dt), mn);
}

static void p_gemm(const zt_backend *be, zt_dtype dt, zt_dtype c_dt, bool trans_a, bool trans_b,
                   int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                   const void *b, int64_t ldb, float beta, void *c, int64_t ldc)
{
    count_gemm(be, OP_gemm, dt, c_dt, m, n, k, beta, 1);
    inner_of(be)->gemm(inner_of(be), dt, c_dt, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                       beta, c, ldc);
    op_end(be);
}
static void p_gemm_batched(const zt_backend *be, bool trans_a, bool trans_b, int64_t m,
                           int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                           int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                           float beta, float *c, int64_t ldc, int64_t stride_c, int64_t batch)
{
    count_gemm(be, OP_gemm_batched, ZT_F32, ZT_F32, m, n, k, beta, batch);
    inner_of(be)->gemm_batched(inner_of(be), trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
                               b, ldb, stride_b, beta, c, ldc, stride_c, batch);
    op_end(be);
}

/* ---- element-wise and reductions ---- */

static void p_bias_add(const zt_backend *be, zt_dtype dt, void *y, const void *bias, int64_t rows,
                       int64_t cols)
{
    zt_profile_counts *c = count(be, OP_bias_add, u(rows) * u(cols));
    rd(c, kind_of(dt), u(rows) * u(cols) + u(cols));
    wr(c, kind_of(dt), u(rows) * u(cols));
    inner_of(be)->bias_add(inner_of(be), dt, y, bias, rows, cols);
    op_end(be);
}
static void p_bias_grad(const zt_backend *be, zt_dtype dt, float *dbias, const void *dy,
                        int64_t rows, int64_t cols, bool accumulate)
{
    zt_profile_counts *c = count(be, OP_bias_grad, u(rows) * u(cols));
    rd(c, kind_of(dt), u(rows) * u(cols));
    rd(c, ZT_PROF_FP32, accumulate ? u(cols) : 0);
    wr(c, ZT_PROF_FP32, u(cols));
    inner_of(be)->bias_grad(inner_of(be), dt, dbias, dy, rows, cols, accumulate);
    op_end(be);
}
static void p_relu_forward(const zt_backend *be, float *y, const float *x, int64_t n)
{
    zt_profile_counts *c = count(be, OP_relu_forward, u(n));
    rd(c, ZT_PROF_FP32, u(n));
    wr(c, ZT_PROF_FP32, u(n));
    inner_of(be)->relu_forward(inner_of(be), y, x, n);
    op_end(be);
}
static void p_relu_backward(const zt_backend *be, float *dx, const float *dy, const float *y,
                            int64_t n)
{
    zt_profile_counts *c = count(be, OP_relu_backward, u(n));
    rd(c, ZT_PROF_FP32, 2 * u(n));
    wr(c, ZT_PROF_FP32, u(n));
    inner_of(be)->relu_backward(inner_of(be), dx, dy, y, n);
    op_end(be);
}
static double p_xent(const zt_backend *be, zt_dtype dt, const void *logits,
                     const int32_t *labels, int64_t rows, int64_t classes, int64_t ld,
                     int32_t ignore_index, float dscale, void *dlogits)
{
    /* max, exp, sum, log, and the gradient's subtract and scale; the row is
     * read once for the loss and once more to write the gradient, which
     * covers the padding columns too */
    zt_profile_counts *c = count(be, OP_xent_forward_backward, 5 * u(rows) * u(classes));
    rd(c, kind_of(dt), (dlogits ? 2 : 1) * u(rows) * u(classes));
    rd(c, ZT_PROF_INT32, u(rows));
    if (dlogits)
        wr(c, kind_of(dt), u(rows) * u(ld));
    double r = inner_of(be)->xent_forward_backward(inner_of(be), dt, logits, labels, rows, classes,
                                                   ld, ignore_index, dscale, dlogits);
    op_end(be);
    return r;
}
static void p_scale(const zt_backend *be, float *x, float a, int64_t n)
{
    zt_profile_counts *c = count(be, OP_scale, u(n));
    rd(c, ZT_PROF_FP32, u(n));
    wr(c, ZT_PROF_FP32, u(n));
    inner_of(be)->scale(inner_of(be), x, a, n);
    op_end(be);
}
static void p_axpy(const zt_backend *be, zt_dtype dt, void *y, float a, const void *x, int64_t n)
{
    zt_profile_counts *c = count(be, OP_axpy, 2 * u(n));
    rd(c, kind_of(dt), 2 * u(n));
    wr(c, kind_of(dt), u(n));
    inner_of(be)->axpy(inner_of(be), dt, y, a, x, n);
    op_end(be);
}
static double p_sum_squares(const zt_backend *be, const void *x, zt_dtype dt, int64_t n)
{
    rd(count(be, OP_sum_squares, 2 * u(n)), kind_of(dt), u(n));
    double r = inner_of(be)->sum_squares(inner_of(be), x, dt, n);
    op_end(be);
    return r;
}
static bool p_has_inf_nan(const zt_backend *be, const void *x, zt_dtype dt, int64_t n)
{
    rd(count(be, OP_has_inf_nan, u(n)), kind_of(dt), u(n));
    bool r = inner_of(be)->has_inf_nan(inner_of(be), x, dt, n);
    op_end(be);
    return r;
}
static void p_convert(const zt_backend *be, void *dst, zt_dtype dst_dt, const void *src,
                      zt_dtype src_dt, int64_t n, float alpha, bool accumulate)
{
    zt_profile_counts *c = count(be, OP_convert, (accumulate ? 2 : 1) * u(n));
    rd(c, kind_of(src_dt), u(n));
    if (accumulate)
        rd(c, kind_of(dst_dt), u(n));
    wr(c, kind_of(dst_dt), u(n));
    inner_of(be)->convert(inner_of(be), dst, dst_dt, src, src_dt, n, alpha, accumulate);
    op_end(be);
}

/* ---- transformer layers ---- */

static void p_embedding_forward(const zt_backend *be, zt_dtype dt, void *y, const int32_t *ids,
                                const void *table, int64_t rows, int64_t cols, bool accumulate)
{
    const uint64_t e = u(rows) * u(cols);
    zt_profile_counts *c = count(be, OP_embedding_forward, accumulate ? e : 0);
    rd(c, ZT_PROF_INT32, u(rows));
    rd(c, kind_of(dt), accumulate ? 2 * e : e); /* the rows looked up (and y) */
    wr(c, kind_of(dt), e);
    inner_of(be)->embedding_forward(inner_of(be), dt, y, ids, table, rows, cols, accumulate);
    op_end(be);
}
static void p_embedding_backward(const zt_backend *be, zt_dtype dt, float *dtable,
                                 const int32_t *ids, const void *dy, int64_t rows, int64_t cols,
                                 int64_t vocab, bool accumulate)
{
    const uint64_t e = u(rows) * u(cols);
    zt_profile_counts *c = count(be, OP_embedding_backward, e);
    rd(c, ZT_PROF_INT32, u(rows));
    /* accumulating: the rows hit are read and written; else the whole
     * table is written (zeros where no id points) */
    rd(c, kind_of(dt), e);
    rd(c, ZT_PROF_FP32, accumulate ? e : 0);
    wr(c, ZT_PROF_FP32, accumulate ? e : u(vocab) * u(cols));
    inner_of(be)->embedding_backward(inner_of(be), dt, dtable, ids, dy, rows, cols, vocab,
                                     accumulate);
    op_end(be);
}
static void p_sinusoid_add(const zt_backend *be, zt_dtype dt, void *y, int64_t n, int64_t t,
                           int64_t cols)
{
    const uint64_t e = u(n) * u(t) * u(cols);
    zt_profile_counts *c = count(be, OP_sinusoid_add, 2 * e);
    rd(c, kind_of(dt), e);
    wr(c, kind_of(dt), e);
    inner_of(be)->sinusoid_add(inner_of(be), dt, y, n, t, cols);
    op_end(be);
}
static void p_layernorm_forward(const zt_backend *be, zt_dtype dt, void *y, float *mean,
                                float *rstd, const void *x, const void *w, const void *b,
                                int64_t rows, int64_t cols, float eps)
{
    const uint64_t e = u(rows) * u(cols);
    zt_profile_counts *c = count(be, OP_layernorm_forward, 8 * e);
    rd(c, kind_of(dt), e + 2 * u(cols));
    wr(c, kind_of(dt), e);
    wr(c, ZT_PROF_FP32, 2 * u(rows));
    inner_of(be)->layernorm_forward(inner_of(be), dt, y, mean, rstd, x, w, b, rows, cols, eps);
    op_end(be);
}
static void p_layernorm_backward(const zt_backend *be, zt_dtype dt, void *dx, float *dw,
                                 float *db, const void *dy, const void *x, const float *mean,
                                 const float *rstd, const void *w, int64_t rows, int64_t cols,
                                 bool accumulate_dx, bool accumulate_params)
{
    const uint64_t e = u(rows) * u(cols);
    zt_profile_counts *c = count(be, OP_layernorm_backward, 12 * e);
    rd(c, kind_of(dt), 2 * e + u(cols) + (accumulate_dx ? e : 0));
    rd(c, ZT_PROF_FP32, 2 * u(rows) + (accumulate_params ? 2 * u(cols) : 0));
    wr(c, kind_of(dt), e);
    wr(c, ZT_PROF_FP32, 2 * u(cols));
    inner_of(be)->layernorm_backward(inner_of(be), dt, dx, dw, db, dy, x, mean, rstd, w, rows,
                                     cols, accumulate_dx, accumulate_params);
    op_end(be);
}
static void p_gelu_forward(const zt_backend *be, float *y, const float *x, int64_t n)
{
    zt_profile_counts *c = count(be, OP_gelu_forward, 8 * u(n));
    rd(c, ZT_PROF_FP32, u(n));
    wr(c, ZT_PROF_FP32, u(n));
    inner_of(be)->gelu_forward(inner_of(be), y, x, n);
    op_end(be);
}
static void p_gelu_backward(const zt_backend *be, float *dx, const float *dy, const float *x,
                            int64_t n)
{
    zt_profile_counts *c = count(be, OP_gelu_backward, 12 * u(n));
    rd(c, ZT_PROF_FP32, 2 * u(n));
    wr(c, ZT_PROF_FP32, u(n));
    inner_of(be)->gelu_backward(inner_of(be), dx, dy, x, n);
    op_end(be);
}
/* x1 = x + branch, then layernorm's counts on x1 (which stays on chip). */
static void p_residual_layernorm_forward(const zt_backend *be, zt_dtype dt, void *x1, void *y,
                                         float *mean, float *rstd, const void *x,
                                         const void *branch, const void *w, const void *b,
                                         int64_t rows, int64_t cols, float eps)
{
    const uint64_t e = u(rows) * u(cols);
    zt_profile_counts *c = count(be, OP_residual_layernorm_forward, 9 * e);
    rd(c, kind_of(dt), 2 * e + 2 * u(cols));
    wr(c, kind_of(dt), 2 * e);
    wr(c, ZT_PROF_FP32, 2 * u(rows));
    inner_of(be)->residual_layernorm_forward(inner_of(be), dt, x1, y, mean, rstd, x, branch, w, b,
                                             rows, cols, eps);
    op_end(be);
}
/* The GEMM as gemm counts it, then the epilogue pass the CUDA backend runs
 * over its output: v and the bias read, y (and pre, where kept) written. */
static void p_linear_act_forward(const zt_backend *be, zt_dtype dt, void *y, void *pre,
                                 const void *x, const void *w, const void *bias, int64_t rows,
                                 int64_t in, int64_t out, zt_act act)
{
    const uint64_t e = u(rows) * u(out);
    const uint64_t per = (bias ? 1 : 0) + (act == ZT_ACT_GELU ? 8 : act == ZT_ACT_RELU ? 1 : 0);
    count_gemm(be, OP_linear_act_forward, dt, dt, rows, out, in, 0.0f, 1); /* counts the call */
    prof_impl *p = prof_of(be);
    if (__atomic_load_n(&p->on, __ATOMIC_RELAXED)) {
        zt_profile_counts *c = &p->c[OP_linear_act_forward];
        add(&c->flops, per * e);
        rd(c, kind_of(dt), e + (bias ? u(out) : 0));
        wr(c, kind_of(dt), e + (pre && bias ? e : 0));
    }
    inner_of(be)->linear_act_forward(inner_of(be), dt, y, pre, x, w, bias, rows, in, out, act);
    op_end(be);
}
static void p_act_bias_grad(const zt_backend *be, zt_dtype dt, void *dpre, float *dbias,
                            const void *dy, const void *pre, int64_t rows, int64_t cols,
                            zt_act act, bool accumulate)
{
    const uint64_t e = u(rows) * u(cols);
    zt_profile_counts *c = count(
        be, OP_act_bias_grad, (act == ZT_ACT_GELU ? 13 : act == ZT_ACT_RELU ? 2 : 1) * e);
    rd(c, kind_of(dt), e + (act != ZT_ACT_NONE ? e : 0));
    rd(c, ZT_PROF_FP32, accumulate ? u(cols) : 0);
    wr(c, kind_of(dt), e);
    wr(c, ZT_PROF_FP32, u(cols));
    inner_of(be)->act_bias_grad(inner_of(be), dt, dpre, dbias, dy, pre, rows, cols, act,
                                accumulate);
    op_end(be);
}
/* Run and counted as its unfused sequence (gemm, bias_grad, gemm), what a
 * backend without the op calls, so the counts do not depend on the device
 * and --profile-time times each product alone. */
static void p_linear_backward(const zt_backend *be, zt_dtype dt, void *dx, float *dw,
                              float *dbias, const void *dy, int64_t ldy, const void *x,
                              const void *w, int64_t rows, int64_t in, int64_t out,
                              bool accumulate, bool dx_accumulate)
{
    p_gemm(be, dt, ZT_F32, true, false, out, in, rows, 1.0f, dy, ldy, x, in,
           accumulate ? 1.0f : 0.0f, dw, in);
    if (dbias)
        p_bias_grad(be, dt, dbias, dy, rows, out, accumulate);
    if (dx)
        p_gemm(be, dt, dt, false, false, rows, in, out, 1.0f, dy, ldy, w, in,
               dx_accumulate ? 1.0f : 0.0f, dx, in);
}
static void p_attn_softmax_forward(const zt_backend *be, float *att, int64_t n, int64_t h,
                                   int64_t t, float scale, bool causal, const int32_t *lengths)
{
    const uint64_t e = u(n) * u(h) * u(t) * u(t);
    zt_profile_counts *c = count(be, OP_attn_softmax_forward, 5 * e);
    rd(c, ZT_PROF_FP32, e);
    if (lengths)
        rd(c, ZT_PROF_INT32, u(n));
    wr(c, ZT_PROF_FP32, e);
    inner_of(be)->attn_softmax_forward(inner_of(be), att, n, h, t, scale, causal, lengths);
    op_end(be);
}
static void p_attn_softmax_backward(const zt_backend *be, float *datt, const float *p,
                                    int64_t rows, int64_t t, float scale)
{
    const uint64_t e = u(rows) * u(t);
    zt_profile_counts *c = count(be, OP_attn_softmax_backward, 4 * e);
    rd(c, ZT_PROF_FP32, 2 * e);
    wr(c, ZT_PROF_FP32, e);
    inner_of(be)->attn_softmax_backward(inner_of(be), datt, p, rows, t, scale);
    op_end(be);
}
static void attn_side_reads(zt_profile_counts *c, int64_t n, const int32_t *lengths,
                            const zt_dropout_desc *drop)
{
    if (lengths)
        rd(c, ZT_PROF_INT32, u(n));
    if (drop && drop->p > 0.0f)
        rd(c, ZT_PROF_UINT64, u(n));
}
static void p_attn_flash_forward(const zt_backend *be, zt_dtype dt, void *y, float *lse,
                                 float *work, const void *qkv, int64_t n, int64_t h, int64_t t,
                                 int64_t c, float scale, bool causal, const int32_t *lengths,
                                 const zt_dropout_desc *drop)
{
    /* The tiles live in on-chip memory on a GPU: only the operands and the
     * results are traffic. */
    zt_attn_flops f = zt_attn_flops_forward(dt, n, h, t, c, scale, causal);
    zt_profile_counts *k = count(be, OP_attn_flash_forward, f.flops);
    attn_kind(k, f.tensor_flops, h > 0 ? c / h : 0, drop);
    rd(k, kind_of(dt), 3 * u(n) * u(t) * u(c));
    attn_side_reads(k, n, lengths, drop);
    wr(k, kind_of(dt), u(n) * u(t) * u(c));
    wr(k, ZT_PROF_FP32, u(n) * u(h) * u(t));
    inner_of(be)->attn_flash_forward(inner_of(be), dt, y, lse, work, qkv, n, h, t, c, scale,
                                     causal, lengths, drop);
    op_end(be);
}
static void p_attn_flash_backward(const zt_backend *be, zt_dtype dt, void *dqkv, const void *dy,
                                  const void *y, const float *lse, const void *qkv, float *work,
                                  int64_t n, int64_t h, int64_t t, int64_t c, float scale,
                                  bool causal, const int32_t *lengths,
                                  const zt_dropout_desc *drop)
{
    zt_attn_flops f = zt_attn_flops_backward(dt, n, h, t, c, scale, causal);
    zt_profile_counts *k = count(be, OP_attn_flash_backward, f.flops);
    attn_kind(k, f.tensor_flops, h > 0 ? c / h : 0, drop);
    rd(k, kind_of(dt), 5 * u(n) * u(t) * u(c));
    rd(k, ZT_PROF_FP32, u(n) * u(h) * u(t));
    attn_side_reads(k, n, lengths, drop);
    wr(k, kind_of(dt), 3 * u(n) * u(t) * u(c));
    if (f.tensor_flops) { /* dQ's fp32 accumulator: cleared, then rounded */
        wr(k, ZT_PROF_FP32, u(n) * u(t) * u(c));
        rd(k, ZT_PROF_FP32, u(n) * u(t) * u(c));
    }
    inner_of(be)->attn_flash_backward(inner_of(be), dt, dqkv, dy, y, lse, qkv, work, n, h, t, c,
                                      scale, causal, lengths, drop);
    op_end(be);
}
static void p_dropout(const zt_backend *be, zt_dtype dt, void *y, const void *x,
                      const zt_dropout_desc *d)
{
    const uint64_t e = u(d->n) * u(d->a) * u(d->b) * u(d->c);
    zt_profile_counts *c = count(be, OP_dropout, e);
    rd(c, kind_of(dt), e);
    rd(c, ZT_PROF_UINT64, u(d->n));
    wr(c, kind_of(dt), e);
    inner_of(be)->dropout(inner_of(be), dt, y, x, d);
    op_end(be);
}
static void p_mean_pool_forward(const zt_backend *be, zt_dtype dt, void *y, const void *x,
                                const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    zt_profile_counts *c = count(be, OP_mean_pool_forward, u(n) * u(t) * u(cols));
    rd(c, kind_of(dt), u(n) * u(t) * u(cols));
    if (lengths)
        rd(c, ZT_PROF_INT32, u(n));
    wr(c, kind_of(dt), u(n) * u(cols));
    inner_of(be)->mean_pool_forward(inner_of(be), dt, y, x, lengths, n, t, cols);
    op_end(be);
}
static void p_mean_pool_backward(const zt_backend *be, zt_dtype dt, void *dx, const void *dy,
                                 const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    zt_profile_counts *c = count(be, OP_mean_pool_backward, u(n) * u(t) * u(cols));
    rd(c, kind_of(dt), u(n) * u(cols));
    if (lengths)
        rd(c, ZT_PROF_INT32, u(n));
    wr(c, kind_of(dt), u(n) * u(t) * u(cols));
    inner_of(be)->mean_pool_backward(inner_of(be), dt, dx, dy, lengths, n, t, cols);
    op_end(be);
}

/* ---- quantization and optimizers ---- */

static uint64_t packed(int64_t n, int bits) { return bits == 4 ? (u(n) + 1) / 2 : u(n); }
static uint64_t blocks(int64_t n, int64_t block)
{
    return block > 0 ? (u(n) + u(block) - 1) / u(block) : 0;
}

static void p_quantize(const zt_backend *be, void *q, float *scales, const void *x, zt_dtype dt,
                       int64_t n, int64_t block, int bits)
{
    zt_profile_counts *c = count(be, OP_quantize, 3 * u(n));
    rd(c, kind_of(dt), u(n));
    wr(c, ZT_PROF_INT8, packed(n, bits));
    wr(c, ZT_PROF_FP32, blocks(n, block));
    inner_of(be)->quantize(inner_of(be), q, scales, x, dt, n, block, bits);
    op_end(be);
}
static void p_dequantize(const zt_backend *be, void *y, zt_dtype dt, const void *q,
                         const float *scales, int64_t n, int64_t block, int bits, bool accumulate)
{
    zt_profile_counts *c = count(be, OP_dequantize, (accumulate ? 2 : 1) * u(n));
    rd(c, ZT_PROF_INT8, packed(n, bits));
    rd(c, ZT_PROF_FP32, blocks(n, block));
    if (accumulate)
        rd(c, kind_of(dt), u(n));
    wr(c, kind_of(dt), u(n));
    inner_of(be)->dequantize(inner_of(be), y, dt, q, scales, n, block, bits, accumulate);
    op_end(be);
}
static void p_adam(const zt_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
                   const zt_adam_hparams *hp)
{
    zt_profile_counts *c = count(be, OP_adam, 12 * u(n));
    rd(c, ZT_PROF_FP32, 4 * u(n));
    wr(c, ZT_PROF_FP32, 3 * u(n));
    inner_of(be)->adam(inner_of(be), p, g, m, v, n, hp);
    op_end(be);
}
static void p_sgd(const zt_backend *be, float *p, const float *g, float *buf, int64_t n,
                  const zt_sgd_hparams *hp)
{
    const bool mom = hp->momentum != 0.0f;
    zt_profile_counts *c = count(be, OP_sgd, (mom ? 5 : 2) * u(n));
    rd(c, ZT_PROF_FP32, (mom && !hp->first_step ? 3 : 2) * u(n));
    wr(c, ZT_PROF_FP32, (mom ? 2 : 1) * u(n));
    inner_of(be)->sgd(inner_of(be), p, g, buf, n, hp);
    op_end(be);
}

/* ---- the wrapper ---- */

zt_status zt_profile_wrap(zt_backend *wrapper, const zt_backend *inner,
                          const zt_profile_options *opt)
{
    prof_impl *p = calloc(1, sizeof *p);
    if (!p)
        return zt_fail(ZT_ERR_OOM, NULL, "--profile: out of host memory");
    p->inner = inner;
    p->opt = *opt;
    /* A copy first, so fields that are not ops (name, kind, workspace_bytes)
     * read the same; every op is then replaced (tests/unit/test_profile.c
     * fails for one that is not). */
    *wrapper = *inner;
    wrapper->impl = p;
    wrapper->destroy = p_destroy;
    wrapper->alloc = p_alloc;
    wrapper->free = p_free;
    /* optional ops stay absent where the wrapped backend has none */
    wrapper->host_alloc = inner->host_alloc ? p_host_alloc : NULL;
    wrapper->host_free = inner->host_free ? p_host_free : NULL;
    wrapper->mem_info = inner->mem_info ? p_mem_info : NULL;
    wrapper->set_workspace = p_set_workspace;
    wrapper->check = p_check;
    wrapper->copy_h2d = p_copy_h2d;
    wrapper->copy_d2h = p_copy_d2h;
    wrapper->copy_d2d = p_copy_d2d;
    wrapper->memset_zero = p_memset_zero;
    wrapper->sync = p_sync;
    wrapper->gemm = p_gemm;
    wrapper->bias_add = p_bias_add;
    wrapper->bias_grad = p_bias_grad;
    wrapper->relu_forward = p_relu_forward;
    wrapper->relu_backward = p_relu_backward;
    wrapper->xent_forward_backward = p_xent;
    wrapper->scale = p_scale;
    wrapper->axpy = p_axpy;
    wrapper->sum_squares = p_sum_squares;
    wrapper->has_inf_nan = p_has_inf_nan;
    wrapper->convert = p_convert;
    wrapper->embedding_forward = p_embedding_forward;
    wrapper->embedding_backward = p_embedding_backward;
    wrapper->sinusoid_add = p_sinusoid_add;
    wrapper->layernorm_forward = p_layernorm_forward;
    wrapper->layernorm_backward = p_layernorm_backward;
    wrapper->gelu_forward = p_gelu_forward;
    wrapper->gelu_backward = p_gelu_backward;
    /* absent where the wrapped backend runs them op by op (--fused-ops off) */
    wrapper->residual_layernorm_forward =
        inner->residual_layernorm_forward ? p_residual_layernorm_forward : NULL;
    wrapper->linear_act_forward = inner->linear_act_forward ? p_linear_act_forward : NULL;
    wrapper->act_bias_grad = inner->act_bias_grad ? p_act_bias_grad : NULL;
    wrapper->linear_backward = inner->linear_backward ? p_linear_backward : NULL;
    wrapper->gemm_batched = p_gemm_batched;
    wrapper->attn_softmax_forward = p_attn_softmax_forward;
    wrapper->attn_softmax_backward = p_attn_softmax_backward;
    wrapper->attn_flash_forward = p_attn_flash_forward;
    wrapper->attn_flash_backward = p_attn_flash_backward;
    wrapper->dropout = p_dropout;
    wrapper->mean_pool_forward = p_mean_pool_forward;
    wrapper->mean_pool_backward = p_mean_pool_backward;
    wrapper->quantize = p_quantize;
    wrapper->dequantize = p_dequantize;
    wrapper->adam = p_adam;
    wrapper->sgd = p_sgd;
    return ZT_OK;
}

bool zt_profile_is(const zt_backend *be) { return be && be->destroy == p_destroy; }

/* Bytes per kind over t's distinct communicators (the world's, the ZeRO
 * groups', the pipeline's). */
static void prof_comm_bytes(const zt_trainer *t, uint64_t out[ZT_COMM_NKINDS])
{
    zt_trainer_stats s;
    zt_trainer_stats_get(t, &s);
    const zt_comm *seen[ZT_STAGE_GROUP_N + 1];
    int n = 0;
    for (int g = 0; g <= ZT_STAGE_GROUP_N; g++) {
        const zt_comm *c = g < ZT_STAGE_GROUP_N ? s.groups[g] : s.pipe_group;
        bool dup = !c;
        for (int i = 0; i < n && !dup; i++)
            dup = seen[i] == c;
        if (!dup)
            seen[n++] = c;
    }
    memset(out, 0, ZT_COMM_NKINDS * sizeof *out);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < ZT_COMM_NKINDS; k++)
            out[k] += seen[i]->bytes[k];
}

static int64_t prof_steps_done(const zt_trainer *t)
{
    zt_trainer_counters c;
    zt_trainer_counters_get(t, &c);
    return c.global_steps;
}

void zt_profile_begin(const zt_backend *be, const zt_trainer *t)
{
    prof_impl *p = prof_of(be);
    memset(p->c, 0, sizeof p->c);
    p->steps_start = t ? prof_steps_done(t) : 0;
    p->steps = 0;
    memset(p->comm_start, 0, sizeof p->comm_start);
    p->host_blocks_outside = 0;
    if (t)
        prof_comm_bytes(t, p->comm_start);
    __atomic_store_n(&p->on, true, __ATOMIC_RELAXED);
    __atomic_store_n(&g_counting, p, __ATOMIC_RELEASE);
}

void zt_profile_end(const zt_backend *be, const zt_trainer *t)
{
    prof_impl *p = prof_of(be);
    __atomic_store_n(&p->on, false, __ATOMIC_RELAXED);
    __atomic_store_n(&g_counting, NULL, __ATOMIC_RELEASE);
    if (!t)
        return;
    p->steps = prof_steps_done(t) - p->steps_start;
    uint64_t now[ZT_COMM_NKINDS];
    prof_comm_bytes(t, now);
    for (int k = 0; k < ZT_COMM_NKINDS; k++)
        p->comm_bytes[k] = now[k] - p->comm_start[k];
}

int zt_profile_n_ops(void) { return OP_N; }
const char *zt_profile_op_name(int op) { return op >= 0 && op < OP_N ? prof_names[op] : NULL; }
zt_profile_class zt_profile_op_class(int op) { return prof_classes[op]; }
const char *zt_profile_kind_name(zt_profile_kind k) { return prof_kind_names[k]; }

void zt_profile_get(const zt_backend *be, int op, zt_profile_counts *out)
{
    *out = prof_of(be)->c[op];
}

static json_t *prof_kinds_json(const uint64_t *bytes)
{
    json_t *o = json_object();
    for (int k = 0; k < ZT_PROF_NKINDS; k++)
        if (bytes[k])
            json_object_set_new(o, prof_kind_names[k], json_integer((json_int_t)bytes[k]));
    return o;
}

json_t *zt_profile_json(const zt_backend *be)
{
    static const char *const class_names[] = {"matmul", "memory", "transfer", "fma"};
    const prof_impl *p = prof_of(be);
    const zt_profile_options *o = &p->opt;
    json_t *ops = json_object();
    for (int op = 0; op < OP_N; op++) {
        const zt_profile_counts *c = &p->c[op];
        if (!c->calls)
            continue;
        json_t *row = json_pack("{s:s, s:I, s:I, s:o, s:o}", "class",
                                class_names[prof_classes[op]], "calls", (json_int_t)c->calls,
                                "flops", (json_int_t)c->flops, "bytes_read",
                                prof_kinds_json(c->read), "bytes_written",
                                prof_kinds_json(c->written));
        if (c->tensor_flops) {
            json_object_set_new(row, "tensor_flops", json_integer((json_int_t)c->tensor_flops));
            json_object_set_new(row, "tensor_width", json_integer((json_int_t)c->tensor_width));
        }
        if (op == OP_attn_flash_forward || op == OP_attn_flash_backward)
            json_object_set_new(row, "dropout_calls", json_integer((json_int_t)c->dropout_calls));
        if (o->timing && op != OP_gemm_operand_cast)
            json_object_set_new(row, "time_ms", json_real((double)c->ns / 1e6));
#ifdef ZT_CUDASIM
        json_object_set_new(row, "host_blocking_calls", json_integer((json_int_t)c->host_blocks));
        json_t *dev = c->device[ZT_PROF_DEV_LAUNCHES] ? json_object() : NULL;
        for (int d = 0; dev && d < ZT_PROF_NDEV; d++)
            json_object_set_new(dev, prof_device_names[d], json_integer((json_int_t)c->device[d]));
        if (dev)
            json_object_set_new(row, "device", dev);
#endif
        json_object_set_new(ops, prof_names[op], row);
    }
    json_t *comm = json_object();
    for (int k = 0; k < ZT_COMM_NKINDS; k++)
        json_object_set_new(comm, zt_comm_kind_name((zt_comm_kind)k),
                            json_integer(p->steps > 0 ? (json_int_t)(p->comm_bytes[k] /
                                                                     (uint64_t)p->steps)
                                                      : 0));
    json_t *host_blocks = json_null();
#ifdef ZT_CUDASIM
    uint64_t in_ops = 0;
    for (int op = 0; op < OP_N; op++)
        in_ops += p->c[op].host_blocks;
    host_blocks = json_pack("{s:s, s:I, s:I, s:f}", "counted_by", "cudasim", "in_ops",
                            (json_int_t)in_ops, "outside_ops", (json_int_t)p->host_blocks_outside,
                            "per_step",
                            p->steps > 0 ? (double)(in_ops + p->host_blocks_outside) /
                                               (double)p->steps
                                         : 0.0);
#endif
    return json_pack("{s:I, s:b, s:s, s:b, s:s, s:{s:s, s:I, s:I, s:I, s:I, s:I, s:I}, s:I, s:I, "
                     "s:i, s:i, s:o, s:o, s:o}",
                     "steps", (json_int_t)p->steps, "timed", o->timing, "gemm_dtype",
                     zt_dtype_name(o->gemm_dtype), "tf32", o->tf32, "counts_model", "cuda",
                     "model", "name", o->model ? o->model : "", "n_layer",
                     (json_int_t)o->n_layer, "n_embd", (json_int_t)o->n_embd, "n_head",
                     (json_int_t)o->n_head, "block_size", (json_int_t)o->block_size, "vocab_size", (json_int_t)o->vocab_size,
                     "params", (json_int_t)o->params, "micro_batch_size",
                     (json_int_t)o->micro_batch_size, "gradient_accumulation_steps",
                     (json_int_t)o->gradient_accumulation_steps, "stage", o->stage,
                     "world_size", o->world_size, "comm_bytes_per_step", comm, "ops", ops,
                     "host_blocking_calls", host_blocks);
}
