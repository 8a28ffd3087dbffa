/*
 * backend_cpu_typed: the CPU backend's typed ops (engine/backend.h, "Typed
 * tensors"). At dt = ZT_F32 each is its fp32 kernel, called as it is, with
 * nothing added. With a 16-bit dt the CPU, which has no 16-bit arithmetic,
 * gives exactly what the fp32 kernel gives on the inputs widened, each
 * output rounded once (round to nearest even, zt_convert_host), and the
 * intermediates the contract names rounded where it stores them. Three
 * shapes of op:
 *
 *  - axpy and embedding_forward, a sum rounded once, are zt_convert_host on
 *    the 16-bit tensors themselves (an accumulating conversion), no scratch;
 *  - ops over rows (bias_add, bias_grad, xent, embedding_backward, the
 *    layernorms, act_bias_grad, dropout) and those over samples
 *    (sinusoid_add, the mean pooling, the fused attention) stream blocks of
 *    about ZT_CPU_TYPED_BLOCK elements a tensor through fp32 scratch: widen
 *    the block, run the fp32 kernel on it, round its outputs. Rows and
 *    samples are independent, and a column sum carried from one block to the
 *    next is stored and reloaded as the float it is, so every element gets
 *    the fp32 kernel's additions in its order;
 *  - the GEMM ops (gemm, linear_act_forward, linear_backward) widen whole
 *    operands: OpenBLAS is not promised to give a product's elements the same
 *    bits when it is split into pieces, and the 16-bit results must be the
 *    fp32 product's.
 *
 * Results never depend on the thread count: the conversions are element by
 * element and the fp32 kernels do not.
 *
 * Memory: one fp32 scratch buffer in the backend's impl, grown on demand to
 * the largest 16-bit op's need (a streamed op's blocks, or a GEMM op's
 * operands) and freed by destroy; fp32 ops never touch it. A failed growth
 * makes the op do nothing and `check` report ZT_ERR_OOM.
 * Collective: none.
 */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu/backend_cpu_nn.h"
#include "engine/dtype.h"

/* Elements per tensor of one block of a streamed op (256 KB in fp32): a
 * block's two to four tensors stay in L2 from their widening to their
 * rounding, and each stage still has work for every thread. */
#define ZT_CPU_TYPED_BLOCK 65536

/* At most this many rows of cross-entropy per block: their losses wait on
 * the stack to be added in row order. */
#define ZT_CPU_TYPED_XENT_ROWS 512

typedef struct {
    /* One scratch serves every 16-bit op, and a backend's ops may be called
     * from any thread: the lock keeps two ops out of it at once. */
    pthread_mutex_t lock;
    float *scratch; // (cap)
    int64_t cap;
    bool oom; /* a growth failed: check reports it */
} cpu_impl;

/* Locks the scratch and makes it hold at least n floats. NULL, unlocked and
 * the failure recorded, when it cannot grow. */
static float *scratch_take(const zt_backend *be, int64_t n)
{
    cpu_impl *im = be->impl;
    pthread_mutex_lock(&im->lock);
    n = n > 0 ? n : 1;
    if (n > im->cap) {
        /* The old contents are dead: free first, so the peak is the new size. */
        free(im->scratch);
        void *p = NULL;
        bool ok = posix_memalign(&p, 64, (size_t)n * sizeof(float)) == 0;
        im->scratch = ok ? p : NULL;
        im->cap = ok ? n : 0;
        if (!ok) {
            im->oom = true;
            pthread_mutex_unlock(&im->lock);
            return NULL;
        }
    }
    return im->scratch;
}

static void scratch_give(const zt_backend *be)
{
    cpu_impl *im = be->impl;
    pthread_mutex_unlock(&im->lock);
}

/* Floats a piece of scratch takes: whole cache lines, so every piece starts
 * 64-byte aligned like the base. */
static int64_t piece(int64_t n) { return (n + 15) / 16 * 16; }

/* The next n floats of the scratch at *at. */
static float *carve(float **at, int64_t n)
{
    float *p = *at;
    *at += piece(n);
    return p;
}

static void widen(float *dst, const void *src, zt_dtype dt, int64_t n)
{
    zt_convert_host(dst, ZT_F32, src, dt, n, 1.0f, false);
}

static void narrow(void *dst, zt_dtype dt, const float *src, int64_t n)
{
    zt_convert_host(dst, dt, src, ZT_F32, n, 1.0f, false);
}

/* x (numel of dt) as fp32: x itself at fp32, else widened into the next
 * piece of scratch. */
static const float *widen_piece(float **at, const void *x, zt_dtype dt, int64_t numel)
{
    if (dt == ZT_F32)
        return x;
    float *w = carve(at, numel);
    widen(w, x, dt, numel);
    return w;
}

/* Rows of `cols` elements per block of a streamed op. */
static int64_t block_rows(int64_t cols)
{
    return cols > 0 && ZT_CPU_TYPED_BLOCK / cols > 1 ? ZT_CPU_TYPED_BLOCK / cols : 1;
}

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Elements a (rows, cols) matrix with row stride ld spans. */
static int64_t span(int64_t rows, int64_t cols, int64_t ld)
{
    return rows > 0 && cols > 0 ? (rows - 1) * ld + cols : 0;
}

static void t_gemm(const zt_backend *be, zt_dtype dt, zt_dtype c_dt, bool trans_a, bool trans_b,
                   int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                   const void *b, int64_t ldb, float beta, void *c, int64_t ldc)
{
    if (dt == ZT_F32 && c_dt == ZT_F32) {
        zt_cpu_gemm_f32(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    if (m == 0 || n == 0)
        return;
    int64_t na = span(trans_a ? k : m, trans_a ? m : k, lda);
    int64_t nb = span(trans_b ? n : k, trans_b ? k : n, ldb);
    int64_t nc = span(m, n, ldc);
    int64_t need = (dt == ZT_F32 ? 0 : piece(na) + piece(nb)) + (c_dt == ZT_F32 ? 0 : nc);
    float *at = scratch_take(be, need);
    if (!at)
        return;
    const float *fa = widen_piece(&at, a, dt, na);
    const float *fb = widen_piece(&at, b, dt, nb);
    float *fc = c;
    if (c_dt != ZT_F32) {
        fc = carve(&at, nc);
        /* beta == 0 never reads C (BLAS), so there is nothing to widen */
        if (beta != 0.0f)
            widen(fc, c, c_dt, nc);
    }
    zt_cpu_gemm_f32(be, trans_a, trans_b, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc);
    /* C's rows only: the columns between n and ldc are not C's */
    if (c_dt != ZT_F32)
        for (int64_t i = 0; i < m; i++)
            narrow(zt_dtype_at(c, c_dt, i * ldc), c_dt, fc + i * ldc, n);
    scratch_give(be);
}

static void t_bias_add(const zt_backend *be, zt_dtype dt, void *y, const void *bias,
                       int64_t rows, int64_t cols)
{
    if (dt == ZT_F32) {
        zt_cpu_bias_add_f32(be, y, bias, rows, cols);
        return;
    }
    int64_t br = block_rows(cols), e = min_i64(br, rows) * cols;
    float *at = scratch_take(be, piece(cols) + e);
    if (!at)
        return;
    const float *fb = widen_piece(&at, bias, dt, cols);
    float *f = carve(&at, e);
    for (int64_t r0 = 0; r0 < rows; r0 += br) {
        int64_t nr = min_i64(br, rows - r0);
        widen(f, zt_dtype_at(y, dt, r0 * cols), dt, nr * cols);
        zt_cpu_bias_add_f32(be, f, fb, nr, cols);
        narrow(zt_dtype_at(y, dt, r0 * cols), dt, f, nr * cols);
    }
    scratch_give(be);
}

static void t_bias_grad(const zt_backend *be, zt_dtype dt, float *dbias, const void *dy,
                        int64_t rows, int64_t cols, bool accumulate)
{
    if (dt == ZT_F32) {
        zt_cpu_bias_grad_f32(be, dbias, dy, rows, cols, accumulate);
        return;
    }
    int64_t br = block_rows(cols);
    float *f = scratch_take(be, min_i64(br, rows) * cols);
    if (!f)
        return;
    /* At least one pass, so rows == 0 still assigns dbias. */
    int64_t r0 = 0;
    do {
        int64_t nr = min_i64(br, rows - r0);
        widen(f, zt_dtype_at(dy, dt, r0 * cols), dt, nr * cols);
        zt_cpu_bias_grad_f32(be, dbias, f, nr, cols, r0 == 0 ? accumulate : true);
        r0 += nr;
    } while (r0 < rows);
    scratch_give(be);
}

/* Blocks of whole rows, the gradient written over the block's widened
 * logits (as the fp32 op may write over its logits) and rounded from there;
 * the row losses are added in row order, as the fp32 op adds them. */
static double t_xent(const zt_backend *be, zt_dtype dt, const void *logits,
                     const int32_t *labels, int64_t rows, int64_t classes, int64_t ld,
                     int32_t ignore_index, float dscale, void *dlogits)
{
    if (dt == ZT_F32)
        return zt_cpu_xent_forward_backward_f32(be, logits, labels, rows, classes, ld,
                                                ignore_index, dscale, dlogits);
    int64_t br = min_i64(block_rows(ld), ZT_CPU_TYPED_XENT_ROWS);
    float *f = scratch_take(be, min_i64(br, rows) * ld);
    if (!f)
        return 0.0;
    double total = 0.0;
    for (int64_t r0 = 0; r0 < rows; r0 += br) {
        int64_t nr = min_i64(br, rows - r0);
        double row_loss[ZT_CPU_TYPED_XENT_ROWS];
        widen(f, zt_dtype_at(logits, dt, r0 * ld), dt, nr * ld);
        zt_cpu_xent_rows_f32(f, labels + r0, nr, classes, ld, ignore_index, dscale,
                             dlogits ? f : NULL, row_loss);
        if (dlogits)
            narrow(zt_dtype_at(dlogits, dt, r0 * ld), dt, f, nr * ld);
        for (int64_t i = 0; i < nr; i++)
            total += row_loss[i];
    }
    scratch_give(be);
    return total;
}

/* y + a * x in fp32 (product, then sum), rounded once: zt_convert_host's
 * accumulate, which also takes x == y. */
static void t_axpy(const zt_backend *be, zt_dtype dt, void *y, float a, const void *x,
                   int64_t n)
{
    if (dt == ZT_F32) {
        zt_cpu_axpy_f32(be, y, a, x, n);
        return;
    }
    zt_convert_host(y, dt, x, dt, n, a, true);
}

/* Only the rows looked up are read: the table can be a whole vocabulary. */
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
    if (dt == ZT_F32) {
        zt_cpu_embedding_backward_f32(be, dtable, ids, dy, rows, cols, vocab, accumulate);
        return;
    }
    int64_t br = block_rows(cols);
    float *f = scratch_take(be, min_i64(br, rows) * cols);
    if (!f)
        return;
    /* At least one pass, so rows == 0 still clears dtable. */
    int64_t r0 = 0;
    do {
        int64_t nr = min_i64(br, rows - r0);
        widen(f, zt_dtype_at(dy, dt, r0 * cols), dt, nr * cols);
        zt_cpu_embedding_backward_f32(be, dtable, ids + r0, f, nr, cols, vocab,
                                      r0 == 0 ? accumulate : true);
        r0 += nr;
    } while (r0 < rows);
    scratch_give(be);
}

static void t_layernorm_forward(const zt_backend *be, zt_dtype dt, void *y, float *mean,
                                float *rstd, const void *x, const void *w, const void *b,
                                int64_t rows, int64_t cols, float eps)
{
    if (dt == ZT_F32) {
        zt_cpu_layernorm_forward_f32(be, y, mean, rstd, x, w, b, rows, cols, eps);
        return;
    }
    int64_t br = block_rows(cols), e = min_i64(br, rows) * cols;
    float *at = scratch_take(be, 2 * piece(cols) + 2 * piece(e));
    if (!at)
        return;
    const float *fw = widen_piece(&at, w, dt, cols), *fb = widen_piece(&at, b, dt, cols);
    float *fx = carve(&at, e), *fy = carve(&at, e);
    for (int64_t r0 = 0; r0 < rows; r0 += br) {
        int64_t nr = min_i64(br, rows - r0);
        widen(fx, zt_dtype_at(x, dt, r0 * cols), dt, nr * cols);
        zt_cpu_layernorm_forward_f32(be, fy, mean + r0, rstd + r0, fx, fw, fb, nr, cols, eps);
        narrow(zt_dtype_at(y, dt, r0 * cols), dt, fy, nr * cols);
    }
    scratch_give(be);
}

/* x1 = x + branch rounded into x1, then layernorm of x1 read back as stored.
 * A block reads its rows of x and branch before it writes x1's, so x1 may
 * be either of them. */
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
    int64_t br = block_rows(cols), e = min_i64(br, rows) * cols;
    float *at = scratch_take(be, 2 * piece(cols) + 3 * piece(e));
    if (!at)
        return;
    const float *fw = widen_piece(&at, w, dt, cols), *fb = widen_piece(&at, b, dt, cols);
    float *fx = carve(&at, e), *fbr = carve(&at, e), *fy = carve(&at, e);
    for (int64_t r0 = 0; r0 < rows; r0 += br) {
        int64_t nr = min_i64(br, rows - r0), off = r0 * cols;
        widen(fx, zt_dtype_at(x, dt, off), dt, nr * cols);
        widen(fbr, zt_dtype_at(branch, dt, off), dt, nr * cols);
        zt_cpu_axpy_f32(be, fx, 1.0f, fbr, nr * cols); /* x + branch: 1.0f * branch is exact */
        narrow(zt_dtype_at(x1, dt, off), dt, fx, nr * cols);
        widen(fx, zt_dtype_at(x1, dt, off), dt, nr * cols);
        zt_cpu_layernorm_forward_f32(be, fy, mean + r0, rstd + r0, fx, fw, fb, nr, cols, eps);
        narrow(zt_dtype_at(y, dt, off), dt, fy, nr * cols);
    }
    scratch_give(be);
}

/* Blocks of rows: dw and db carry from block to block as floats, and with
 * dx == dy the fp32 kernel works in place on the block's widened dy, which
 * is read before dx's rows are written. */
static void t_layernorm_backward(const zt_backend *be, zt_dtype dt, void *dx, float *dw,
                                 float *db, const void *dy, const void *x, const float *mean,
                                 const float *rstd, const void *w, int64_t rows, int64_t cols,
                                 bool accumulate_dx, bool accumulate_params)
{
    if (dt == ZT_F32) {
        zt_cpu_layernorm_backward_f32(be, dx, dw, db, dy, x, mean, rstd, w, rows, cols,
                                      accumulate_dx, accumulate_params);
        return;
    }
    bool in_place = dx == dy;
    int64_t br = block_rows(cols), e = min_i64(br, rows) * cols;
    float *at = scratch_take(be, piece(cols) + (in_place ? 2 : 3) * piece(e));
    if (!at)
        return;
    const float *fw = widen_piece(&at, w, dt, cols);
    float *fdy = carve(&at, e), *fx = carve(&at, e);
    float *fdx = in_place ? fdy : carve(&at, e);
    /* At least one pass, so rows == 0 still assigns dw and db. */
    int64_t r0 = 0;
    do {
        int64_t nr = min_i64(br, rows - r0), off = r0 * cols;
        widen(fdy, zt_dtype_at(dy, dt, off), dt, nr * cols);
        widen(fx, zt_dtype_at(x, dt, off), dt, nr * cols);
        if (accumulate_dx && !in_place)
            widen(fdx, zt_dtype_at(dx, dt, off), dt, nr * cols);
        zt_cpu_layernorm_backward_f32(be, fdx, dw, db, fdy, fx, mean + r0, rstd + r0, fw, nr,
                                      cols, accumulate_dx, r0 == 0 ? accumulate_params : true);
        narrow(zt_dtype_at(dx, dt, off), dt, fdx, nr * cols);
        r0 += nr;
    } while (r0 < rows);
    scratch_give(be);
}

/* v = x w^T + bias by the fp32 kernel (activation NONE), rounded into pre
 * (or, without pre, into y) and read back from there: the activation reads
 * v as stored. */
static void t_linear_act_forward(const zt_backend *be, zt_dtype dt, void *y, void *pre,
                                 const void *x, const void *w, const void *bias, int64_t rows,
                                 int64_t in, int64_t out, zt_act act)
{
    if (dt == ZT_F32) {
        zt_cpu_linear_act_forward_f32(be, y, pre, x, w, bias, rows, in, out, act);
        return;
    }
    int64_t e = rows * out;
    float *at = scratch_take(be, piece(rows * in) + piece(out * in) + piece(out) + e);
    if (!at)
        return;
    const float *fx = widen_piece(&at, x, dt, rows * in);
    const float *fw = widen_piece(&at, w, dt, out * in);
    const float *fb = bias ? widen_piece(&at, bias, dt, out) : NULL;
    float *v = carve(&at, e);
    zt_cpu_linear_act_forward_f32(be, v, NULL, fx, fw, fb, rows, in, out, ZT_ACT_NONE);
    void *stored = pre ? pre : y;
    narrow(stored, dt, v, e);
    if (act == ZT_ACT_NONE) {
        if (pre)
            narrow(y, dt, v, e);
    } else {
        widen(v, stored, dt, e);
        if (act == ZT_ACT_GELU)
            zt_cpu_gelu_forward(be, v, v, e);
        else
            zt_cpu_relu_forward(be, v, v, e);
        narrow(y, dt, v, e);
    }
    scratch_give(be);
}

/* Blocks of rows: dpre by the activation's backward kernel, rounded into
 * dpre, read back, and summed into dbias by bias_grad's kernel (dbias
 * carries from block to block as floats). A block reads its rows of dy
 * before it writes dpre's, so dpre may be dy. */
static void t_act_bias_grad(const zt_backend *be, zt_dtype dt, void *dpre, float *dbias,
                            const void *dy, const void *pre, int64_t rows, int64_t cols,
                            zt_act act, bool accumulate)
{
    if (dt == ZT_F32) {
        zt_cpu_act_bias_grad_f32(be, dpre, dbias, dy, pre, rows, cols, act, accumulate);
        return;
    }
    int64_t br = block_rows(cols), e = min_i64(br, rows) * cols;
    float *at = scratch_take(be, 2 * piece(e));
    if (!at)
        return;
    float *d = carve(&at, e), *p = carve(&at, e);
    /* At least one pass, so rows == 0 still assigns dbias. */
    int64_t r0 = 0;
    do {
        int64_t nr = min_i64(br, rows - r0), ne = nr * cols, off = r0 * cols;
        widen(d, zt_dtype_at(dy, dt, off), dt, ne);
        if (act != ZT_ACT_NONE)
            widen(p, zt_dtype_at(pre, dt, off), dt, ne);
        if (act == ZT_ACT_GELU)
            zt_cpu_gelu_backward(be, d, d, p, ne);
        else if (act == ZT_ACT_RELU)
            zt_cpu_relu_backward(be, d, d, p, ne);
        narrow(zt_dtype_at(dpre, dt, off), dt, d, ne);
        widen(d, zt_dtype_at(dpre, dt, off), dt, ne);
        zt_cpu_bias_grad_f32(be, dbias, d, nr, cols, r0 == 0 ? accumulate : true);
        r0 += nr;
    } while (r0 < rows);
    scratch_give(be);
}

static void t_linear_backward(const zt_backend *be, zt_dtype dt, void *dx, float *dw,
                              float *dbias, const void *dy, int64_t ldy, const void *x,
                              const void *w, int64_t rows, int64_t in, int64_t out,
                              bool accumulate, bool dx_accumulate)
{
    if (dt == ZT_F32) {
        zt_cpu_linear_backward_f32(be, dx, dw, dbias, dy, ldy, x, w, rows, in, out, accumulate,
                                   dx_accumulate);
        return;
    }
    int64_t ndy = span(rows, out, ldy), nx = rows * in, nw = dx ? out * in : 0;
    float *at = scratch_take(be, piece(ndy) + piece(nx) + piece(nw) + (dx ? nx : 0));
    if (!at)
        return;
    const float *fdy = widen_piece(&at, dy, dt, ndy);
    const float *fx = widen_piece(&at, x, dt, nx);
    const float *fw = dx ? widen_piece(&at, w, dt, nw) : NULL;
    float *fdx = NULL;
    if (dx) {
        fdx = carve(&at, nx);
        if (dx_accumulate)
            widen(fdx, dx, dt, nx);
    }
    zt_cpu_linear_backward_f32(be, fdx, dw, dbias, fdy, ldy, fx, fw, rows, in, out, accumulate,
                               dx_accumulate);
    if (dx)
        narrow(dx, dt, fdx, nx);
    scratch_give(be);
}

/* Samples per block of the fused attention: about a block of qkv, and at
 * least enough (sample, head) pairs for every thread. */
static int64_t flash_block_samples(int64_t n, int64_t h, int64_t t, int64_t c)
{
    int64_t per = t * 3 * c, ns = per > 0 && ZT_CPU_TYPED_BLOCK / per > 1
                                     ? ZT_CPU_TYPED_BLOCK / per : 1;
    int64_t busy = h > 0 ? (omp_get_max_threads() + h - 1) / h : 1;
    ns = ns > busy ? ns : busy;
    return min_i64(ns, n);
}

/* The fused attention's arguments for the samples from s0 on: each (sample,
 * head) pair is computed on its own, so a block of samples gives the
 * whole's values for its rows. */
static zt_dropout_desc flash_block_drop(const zt_dropout_desc *drop, int64_t s0, int64_t ns)
{
    zt_dropout_desc d = *drop;
    d.n = ns;
    d.row_keys = drop->row_keys ? drop->row_keys + s0 : NULL;
    return d;
}

static void t_attn_flash_forward(const zt_backend *be, zt_dtype dt, void *y, float *lse,
                                 float *work, const void *qkv, int64_t n, int64_t h, int64_t t,
                                 int64_t c, float scale, bool causal, const int32_t *lengths,
                                 const zt_dropout_desc *drop)
{
    if (dt == ZT_F32) {
        zt_cpu_attn_flash_forward_f32(be, y, lse, work, qkv, n, h, t, c, scale, causal, lengths,
                                      drop);
        return;
    }
    if (n == 0 || t == 0)
        return;
    int64_t bs = flash_block_samples(n, h, t, c), tc = t * c;
    float *at = scratch_take(be, piece(bs * 3 * tc) + bs * tc);
    if (!at)
        return;
    float *fqkv = carve(&at, bs * 3 * tc), *fy = carve(&at, bs * tc);
    for (int64_t s0 = 0; s0 < n; s0 += bs) {
        int64_t ns = min_i64(bs, n - s0);
        zt_dropout_desc d = flash_block_drop(drop, s0, ns);
        widen(fqkv, zt_dtype_at(qkv, dt, s0 * 3 * tc), dt, ns * 3 * tc);
        zt_cpu_attn_flash_forward_f32(be, fy, lse + s0 * h * t, work, fqkv, ns, h, t, c, scale,
                                      causal, lengths ? lengths + s0 : NULL, &d);
        narrow(zt_dtype_at(y, dt, s0 * tc), dt, fy, ns * tc);
    }
    scratch_give(be);
}

static void t_attn_flash_backward(const zt_backend *be, zt_dtype dt, void *dqkv, const void *dy,
                                  const void *y, const float *lse, const void *qkv, float *work,
                                  int64_t n, int64_t h, int64_t t, int64_t c, float scale,
                                  bool causal, const int32_t *lengths,
                                  const zt_dropout_desc *drop)
{
    if (dt == ZT_F32) {
        zt_cpu_attn_flash_backward_f32(be, dqkv, dy, y, lse, qkv, work, n, h, t, c, scale, causal,
                                       lengths, drop);
        return;
    }
    if (n == 0 || t == 0)
        return;
    int64_t bs = flash_block_samples(n, h, t, c), tc = t * c;
    float *at = scratch_take(be, 2 * piece(bs * tc) + 2 * piece(bs * 3 * tc));
    if (!at)
        return;
    float *fdy = carve(&at, bs * tc), *fy = carve(&at, bs * tc);
    float *fqkv = carve(&at, bs * 3 * tc), *fdqkv = carve(&at, bs * 3 * tc);
    for (int64_t s0 = 0; s0 < n; s0 += bs) {
        int64_t ns = min_i64(bs, n - s0);
        zt_dropout_desc d = flash_block_drop(drop, s0, ns);
        widen(fdy, zt_dtype_at(dy, dt, s0 * tc), dt, ns * tc);
        widen(fy, zt_dtype_at(y, dt, s0 * tc), dt, ns * tc);
        widen(fqkv, zt_dtype_at(qkv, dt, s0 * 3 * tc), dt, ns * 3 * tc);
        zt_cpu_attn_flash_backward_f32(be, fdqkv, fdy, fy, lse + s0 * h * t, fqkv, work, ns, h, t,
                                       c, scale, causal, lengths ? lengths + s0 : NULL, &d);
        narrow(zt_dtype_at(dqkv, dt, s0 * 3 * tc), dt, fdqkv, ns * 3 * tc);
    }
    scratch_give(be);
}

/* Blocks of whole samples (t rows each): the kernel adds PE(t, cols) to
 * every sample of its block from position 0, so a block must start at a
 * sample; each block computes PE afresh, with the same bits. */
static void t_sinusoid_add(const zt_backend *be, zt_dtype dt, void *y, int64_t n, int64_t t,
                           int64_t cols)
{
    if (dt == ZT_F32) {
        zt_cpu_sinusoid_add_f32(be, y, n, t, cols);
        return;
    }
    if (n <= 0 || t <= 0 || cols <= 0)
        return;
    /* The table once (0 + PE is PE exactly: no PE entry is -0), then each
     * block of samples widened, added to it as the fp32 op adds, narrowed. */
    int64_t tc = t * cols, nb = min_i64(block_rows(tc), n);
    float *pe = scratch_take(be, (1 + nb) * tc); // (t, cols), then (nb, t, cols)
    if (!pe)
        return;
    float *f = pe + tc;
    memset(pe, 0, (size_t)tc * sizeof *pe);
    zt_cpu_sinusoid_add_f32(be, pe, 1, t, cols);
    for (int64_t s0 = 0; s0 < n; s0 += nb) {
        int64_t ns = min_i64(nb, n - s0);
        widen(f, zt_dtype_at(y, dt, s0 * tc), dt, ns * tc);
#pragma omp parallel for schedule(static) if (ns * tc > ZT_CPU_PAR_MIN)
        for (int64_t i = 0; i < ns * tc; i++)
            f[i] += pe[i % tc];
        narrow(zt_dtype_at(y, dt, s0 * tc), dt, f, ns * tc);
    }
    scratch_give(be);
}

/* Samples per block of the mean pooling: about a block of x (t * cols per
 * sample), and at least one sample per thread, since the forward kernel
 * works a sample per thread. */
static int64_t pool_block_samples(int64_t n, int64_t t, int64_t cols)
{
    int64_t ns = block_rows(t * cols), busy = omp_get_max_threads();
    return min_i64(ns > busy ? ns : busy, n);
}

/* Blocks of whole samples: a sample's sum over its positions is the fp32
 * kernel's, in its order, on the sample's widened rows. */
static void t_mean_pool_forward(const zt_backend *be, zt_dtype dt, void *y, const void *x,
                                const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    if (dt == ZT_F32) {
        zt_cpu_mean_pool_forward_f32(be, y, x, lengths, n, t, cols);
        return;
    }
    if (n <= 0 || cols <= 0)
        return;
    int64_t tc = t * cols, bs = pool_block_samples(n, t, cols);
    float *at = scratch_take(be, piece(bs * tc) + bs * cols);
    if (!at)
        return;
    float *fx = carve(&at, bs * tc), *fy = carve(&at, bs * cols);
    for (int64_t s0 = 0; s0 < n; s0 += bs) {
        int64_t ns = min_i64(bs, n - s0);
        widen(fx, zt_dtype_at(x, dt, s0 * tc), dt, ns * tc);
        zt_cpu_mean_pool_forward_f32(be, fy, fx, lengths ? lengths + s0 : NULL, ns, t, cols);
        narrow(zt_dtype_at(y, dt, s0 * cols), dt, fy, ns * cols);
    }
    scratch_give(be);
}

/* Blocks of whole samples: dy's rows of the block widened, dx's (t rows a
 * sample, zeros past the length) rounded. */
static void t_mean_pool_backward(const zt_backend *be, zt_dtype dt, void *dx, const void *dy,
                                 const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    if (dt == ZT_F32) {
        zt_cpu_mean_pool_backward_f32(be, dx, dy, lengths, n, t, cols);
        return;
    }
    if (n <= 0 || t <= 0 || cols <= 0)
        return;
    int64_t tc = t * cols, bs = min_i64(block_rows(tc), n);
    float *at = scratch_take(be, piece(bs * cols) + bs * tc);
    if (!at)
        return;
    float *fdy = carve(&at, bs * cols), *fdx = carve(&at, bs * tc);
    for (int64_t s0 = 0; s0 < n; s0 += bs) {
        int64_t ns = min_i64(bs, n - s0);
        widen(fdy, zt_dtype_at(dy, dt, s0 * cols), dt, ns * cols);
        zt_cpu_mean_pool_backward_f32(be, fdx, fdy, lengths ? lengths + s0 : NULL, ns, t, cols);
        narrow(zt_dtype_at(dx, dt, s0 * tc), dt, fdx, ns * tc);
    }
    scratch_give(be);
}

/* p == 0 is a copy (rounding a widened value gives it back); otherwise
 * blocks of rows of d->c, in place on the widened block, so y may be x. */
static void t_dropout(const zt_backend *be, zt_dtype dt, void *y, const void *x,
                      const zt_dropout_desc *d)
{
    if (dt == ZT_F32) {
        zt_cpu_dropout_f32(be, y, x, d);
        return;
    }
    int64_t rows = d->n * d->a * d->b, c = d->c;
    if (d->p == 0.0f) {
        zt_convert_host(y, dt, x, dt, rows * c, 1.0f, false);
        return;
    }
    int64_t br = block_rows(c);
    float *f = scratch_take(be, min_i64(br, rows) * c);
    if (!f)
        return;
    for (int64_t r0 = 0; r0 < rows; r0 += br) {
        int64_t nr = min_i64(br, rows - r0);
        widen(f, zt_dtype_at(x, dt, r0 * c), dt, nr * c);
        zt_cpu_dropout_rows_f32(f, f, d, r0, r0 + nr);
        narrow(zt_dtype_at(y, dt, r0 * c), dt, f, nr * c);
    }
    scratch_give(be);
}

zt_status zt_backend_cpu_typed_ops(zt_backend *be)
{
    cpu_impl *im = calloc(1, sizeof *im);
    if (!im)
        return zt_fail(ZT_ERR_OOM, "the host is out of memory",
                       "cpu backend: cannot allocate its state (%zu bytes)", sizeof *im);
    pthread_mutex_init(&im->lock, NULL);
    be->impl = im;
    be->typed_dtypes = 1u << ZT_F32 | 1u << ZT_F16 | 1u << ZT_BF16;
    be->gemm = t_gemm;
    be->bias_add = t_bias_add;
    be->bias_grad = t_bias_grad;
    be->xent_forward_backward = t_xent;
    be->axpy = t_axpy;
    be->embedding_forward = t_embedding_forward;
    be->embedding_backward = t_embedding_backward;
    be->sinusoid_add = t_sinusoid_add;
    be->layernorm_forward = t_layernorm_forward;
    be->residual_layernorm_forward = t_residual_layernorm_forward;
    be->layernorm_backward = t_layernorm_backward;
    be->linear_act_forward = t_linear_act_forward;
    be->act_bias_grad = t_act_bias_grad;
    be->linear_backward = t_linear_backward;
    be->attn_flash_forward = t_attn_flash_forward;
    be->attn_flash_backward = t_attn_flash_backward;
    be->dropout = t_dropout;
    be->mean_pool_forward = t_mean_pool_forward;
    be->mean_pool_backward = t_mean_pool_backward;
    return ZT_OK;
}

void zt_cpu_typed_free(zt_backend *be)
{
    cpu_impl *im = be->impl;
    if (!im)
        return;
    free(im->scratch);
    pthread_mutex_destroy(&im->lock);
    free(im);
    be->impl = NULL;
}

zt_status zt_cpu_typed_status(const zt_backend *be)
{
    cpu_impl *im = be->impl;
    pthread_mutex_lock(&im->lock);
    bool oom = im->oom;
    pthread_mutex_unlock(&im->lock);
    if (!oom)
        return ZT_OK;
    return zt_fail(ZT_ERR_OOM, "lower the micro-batch or the model size",
                   "cpu backend: cannot grow the fp32 scratch of a 16-bit op");
}
