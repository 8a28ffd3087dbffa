/*
 * backend_cpu: the CPU backend, the reference every other backend is tested
 * against. gemm is OpenBLAS; everything else is OpenMP loops written so the
 * compiler vectorises the inner loop. Reductions (sum_squares, cross-entropy
 * loss, bias_grad) use a fixed summation order, so results are bit-identical
 * for any OMP_NUM_THREADS.
 *
 * Memory: alloc/free are posix_memalign/free; ops allocate nothing.
 * Collective: none.
 */
#include "backend.h"
#include "backend_cpu_nn.h"
#include "optim.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Fixed reduction geometry: partial sums are taken over ZT_CPU_CHUNK elements
 * and combined in index order, ZT_CPU_ROUND chunks at a time through a stack
 * buffer, so the order of additions never depends on the thread count. */
#define ZT_CPU_CHUNK 4096
#define ZT_CPU_ROUND 256

/* Columns per bias_grad task: 64 floats are four cache lines, wide enough for
 * full-line reads down a column block, narrow enough to give threads work. */
#define ZT_CPU_COL_BLOCK 64

/* Rows per cross-entropy round; each row's loss lands in a stack slot. */
#define ZT_CPU_XENT_ROWS 512

static zt_status cpu_alloc(const zt_backend *be, size_t bytes, void **out)
{
    (void)be;
    void *p = NULL;
    int rc = posix_memalign(&p, 64, bytes);
    if (rc != 0)
        return zt_fail(ZT_ERR_OOM,
                       "lower the micro-batch size, use a higher ZeRO stage, or run on "
                       "a machine with more memory",
                       "cpu backend: cannot allocate %zu bytes: %s", bytes, strerror(rc));
    *out = p;
    return ZT_OK;
}

static void cpu_free(const zt_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static void cpu_copy(const zt_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(dst, src, bytes);
}

static void cpu_memset_zero(const zt_backend *be, void *dst, size_t bytes)
{
    (void)be;
    memset(dst, 0, bytes);
}

static void cpu_sync(const zt_backend *be) { (void)be; }

static void cpu_gemm(const zt_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc)
{
    (void)be;
    /* OpenBLAS rejects (and prints about) leading dimensions of 0 even when
     * there is nothing to compute. */
    if (m == 0 || n == 0)
        return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda,
                b, (int)ldb, beta, c, (int)ldc);
}

static void cpu_bias_add(const zt_backend *be, float *y, const float *bias, int64_t rows,
                         int64_t cols)
{
    (void)be;
#pragma omp parallel for schedule(static) if (rows * cols > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * cols; // (cols)
        for (int64_t j = 0; j < cols; j++)
            yr[j] += bias[j];
    }
}

static void cpu_bias_grad(const zt_backend *be, float *dbias, const float *dy, int64_t rows,
                          int64_t cols, bool accumulate)
{
    (void)be;
    int64_t nblocks = (cols + ZT_CPU_COL_BLOCK - 1) / ZT_CPU_COL_BLOCK;
    /* Each column is summed by one thread in row order: deterministic. */
#pragma omp parallel for schedule(static) if (rows * cols > ZT_CPU_PAR_MIN)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t j0 = blk * ZT_CPU_COL_BLOCK;
        int64_t w = cols - j0 < ZT_CPU_COL_BLOCK ? cols - j0 : ZT_CPU_COL_BLOCK;
        float acc[ZT_CPU_COL_BLOCK];
        for (int64_t j = 0; j < w; j++)
            acc[j] = accumulate ? dbias[j0 + j] : 0.0f;
        for (int64_t r = 0; r < rows; r++) {
            const float *dyr = dy + r * cols + j0; // (w)
            for (int64_t j = 0; j < w; j++)
                acc[j] += dyr[j];
        }
        for (int64_t j = 0; j < w; j++)
            dbias[j0 + j] = acc[j];
    }
}

static void cpu_relu_forward(const zt_backend *be, float *y, const float *x, int64_t n)
{
    (void)be;
    /* `x < 0 ? 0 : x` rather than fmaxf: NaN passes through (as in torch) so
     * the overflow check downstream still sees it. */
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

static void cpu_relu_backward(const zt_backend *be, float *dx, const float *dy, const float *y,
                              int64_t n)
{
    (void)be;
    /* A select, not dy * (y > 0): a non-finite dy where the unit is off must
     * not turn into NaN (torch's threshold_backward does the same). */
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float g = dy[i]; /* an unconditional load lets the loop vectorise */
        dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
}

/* Loss of one row, in float64; writes dlogits for the row when non-NULL. */
static double xent_row(const float *logits, int32_t label, int64_t classes, float dscale,
                       float *dlogits)
{
    float mx = logits[0];
    for (int64_t j = 1; j < classes; j++)
        mx = logits[j] > mx ? logits[j] : mx;
    double sum = 0.0;
    if (dlogits) {
        /* Keep exp(l - max) in dlogits so the second pass does not recompute it. */
        for (int64_t j = 0; j < classes; j++) {
            float e = expf(logits[j] - mx);
            dlogits[j] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        float p_label = dlogits[label] * inv;
        for (int64_t j = 0; j < classes; j++)
            dlogits[j] = dscale * (dlogits[j] * inv);
        dlogits[label] = dscale * (p_label - 1.0f);
    } else {
        for (int64_t j = 0; j < classes; j++)
            sum += expf(logits[j] - mx);
    }
    return log(sum) - ((double)logits[label] - (double)mx);
}

static double cpu_xent_forward_backward(const zt_backend *be, const float *logits,
                                        const int32_t *labels, int64_t rows, int64_t classes,
                                        int32_t ignore_index, float dscale, float *dlogits)
{
    (void)be;
    double total = 0.0;
    for (int64_t r0 = 0; r0 < rows; r0 += ZT_CPU_XENT_ROWS) {
        int64_t nr = rows - r0 < ZT_CPU_XENT_ROWS ? rows - r0 : ZT_CPU_XENT_ROWS;
        double row_loss[ZT_CPU_XENT_ROWS];
#pragma omp parallel for schedule(static) if (nr * classes > ZT_CPU_PAR_MIN)
        for (int64_t i = 0; i < nr; i++) {
            int64_t r = r0 + i;
            float *dl = dlogits ? dlogits + r * classes : NULL; // (classes)
            if (labels[r] == ignore_index) {
                if (dl)
                    memset(dl, 0, (size_t)classes * sizeof *dl);
                row_loss[i] = 0.0;
            } else {
                row_loss[i] = xent_row(logits + r * classes, labels[r], classes, dscale, dl);
            }
        }
        for (int64_t i = 0; i < nr; i++)
            total += row_loss[i];
    }
    return total;
}

static void cpu_scale(const zt_backend *be, float *x, float a, int64_t n)
{
    (void)be;
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        x[i] *= a;
}

static void cpu_axpy(const zt_backend *be, float *y, float a, const float *x, int64_t n)
{
    (void)be;
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* Sum of squares of one chunk. Eight independent accumulators give the
 * compiler vector lanes without reassociating anything, and squares of floats
 * are exact in double, so only the additions round. */
static double chunk_sum_squares(const float *x, int64_t n)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += (double)x[i + j] * (double)x[i + j];
    for (; i < n; i++)
        acc[0] += (double)x[i] * (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static double cpu_sum_squares(const zt_backend *be, const float *x, int64_t n)
{
    (void)be;
    double total = 0.0;
    int64_t nchunks = (n + ZT_CPU_CHUNK - 1) / ZT_CPU_CHUNK;
    for (int64_t c0 = 0; c0 < nchunks; c0 += ZT_CPU_ROUND) {
        int64_t nc = nchunks - c0 < ZT_CPU_ROUND ? nchunks - c0 : ZT_CPU_ROUND;
        double part[ZT_CPU_ROUND];
#pragma omp parallel for schedule(static) if (nc * ZT_CPU_CHUNK > ZT_CPU_PAR_MIN)
        for (int64_t c = 0; c < nc; c++) {
            int64_t lo = (c0 + c) * ZT_CPU_CHUNK;
            int64_t len = n - lo < ZT_CPU_CHUNK ? n - lo : ZT_CPU_CHUNK;
            part[c] = chunk_sum_squares(x + lo, len);
        }
        for (int64_t c = 0; c < nc; c++)
            total += part[c];
    }
    return total;
}

static bool cpu_has_inf_nan(const zt_backend *be, const float *x, int64_t n)
{
    (void)be;
    /* No early exit: a branch-free scan vectorises and the common answer is
     * "none", which needs the whole scan anyway. */
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        bad |= !isfinite(x[i]);
    return bad != 0;
}

static void cpu_adam(const zt_backend *be, float *p, const float *g, float *m, float *v,
                     int64_t n, const zt_adam_hparams *hp)
{
    (void)be;
    zt_adam_cpu(p, g, m, v, n, hp);
}

static void cpu_sgd(const zt_backend *be, float *p, const float *g, float *buf, int64_t n,
                    const zt_sgd_hparams *hp)
{
    (void)be;
    zt_sgd_cpu(p, g, buf, n, hp);
}

zt_status zt_backend_cpu_init(zt_backend *be)
{
    /* One knob, OMP_NUM_THREADS, for OpenBLAS and our loops alike. */
    openblas_set_num_threads(omp_get_max_threads());
    *be = (zt_backend){
        .name = "cpu",
        .kind = ZT_DEVICE_CPU,
        .impl = NULL,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .copy_h2d = cpu_copy,
        .copy_d2h = cpu_copy,
        .copy_d2d = cpu_copy,
        .memset_zero = cpu_memset_zero,
        .sync = cpu_sync,
        .gemm = cpu_gemm,
        .bias_add = cpu_bias_add,
        .bias_grad = cpu_bias_grad,
        .relu_forward = cpu_relu_forward,
        .relu_backward = cpu_relu_backward,
        .xent_forward_backward = cpu_xent_forward_backward,
        .scale = cpu_scale,
        .axpy = cpu_axpy,
        .sum_squares = cpu_sum_squares,
        .has_inf_nan = cpu_has_inf_nan,
        .adam = cpu_adam,
        .sgd = cpu_sgd,
    };
    zt_backend_cpu_nn_ops(be);
    return ZT_OK;
}

void zt_backend_cpu_free(zt_backend *be)
{
    /* Nothing is held; clearing makes use after free fail loudly. */
    *be = (zt_backend){0};
}
