/*
 * backend_cpu: the CPU backend (engine/cpu/cpu.h) and its row of the backend
 * table, the reference every other backend is tested against. gemm is
 * OpenBLAS; everything else is OpenMP loops written so the compiler vectorises
 * the inner loop; convert, sum_squares and has_inf_nan are engine/dtype.c's
 * host loops. Reductions (sum_squares, cross-entropy loss, bias_grad) use a
 * fixed summation order, so results are bit-identical for any OMP_NUM_THREADS.
 *
 * Memory: alloc/free are posix_memalign/free; impl holds the typed ops' fp32
 * scratch (backend_cpu_typed.c), freed by destroy; other ops allocate nothing.
 * Collective: none.
 */
#include "engine/backend.h"
#include "engine/cpu/backend_cpu_nn.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/quant_cpu.h"
#include "engine/dtype.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

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

/* Host memory cannot fail late: every failure was returned when it happened,
 * but for a 16-bit op's scratch, which an op has no way to return. */
static zt_status cpu_check(const zt_backend *be) { return zt_cpu_typed_status(be); }

static void cpu_memset_zero(const zt_backend *be, void *dst, size_t bytes)
{
    (void)be;
    memset(dst, 0, bytes);
}

static void cpu_sync(const zt_backend *be) { (void)be; }

void zt_cpu_gemm_f32(const zt_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
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

void zt_cpu_bias_add_f32(const zt_backend *be, float *y, const float *bias, int64_t rows,
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

void zt_cpu_bias_grad_f32(const zt_backend *be, float *dbias, const float *dy, int64_t rows,
                          int64_t cols, bool accumulate)
{
    (void)be;
    int64_t nblocks = (cols + ZT_CPU_BIAS_COL_BLOCK - 1) / ZT_CPU_BIAS_COL_BLOCK;
    /* Each column is summed by one thread in row order: deterministic. */
#pragma omp parallel for schedule(static) if (rows * cols > ZT_CPU_PAR_MIN)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t j0 = blk * ZT_CPU_BIAS_COL_BLOCK;
        int64_t w = cols - j0 < ZT_CPU_BIAS_COL_BLOCK ? cols - j0 : ZT_CPU_BIAS_COL_BLOCK;
        float acc[ZT_CPU_BIAS_COL_BLOCK];
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

/* The two products of a linear backward are independent and equal in
 * FLOPs. With two threads each runs whole on one of them, both at once,
 * rather than one after the other split across both: OpenBLAS shares one
 * product between threads less well than two products share the cores
 * (GPT-lite small and the classifier small at np 1: 4% and 2% more samples/s
 * in medians of interleaved runs, docs/benchmarks.md). OpenBLAS
 * runs single-threaded inside a parallel region, so with more threads the
 * pair would leave all but two idle: the products then take turns, each on
 * every thread. Each product then makes the same OpenBLAS call as the
 * op-by-op sequence (bias_grad's order does not depend on threads), but on
 * one thread where the sequence has two: OpenBLAS's Haswell and Zen sgemm
 * kernels give a product other bits on two threads than on one (the split
 * moves the edges of its register tiles), SkylakeX's and Sandybridge's do
 * not. So the fused op equals the sequence bit for bit at one thread per
 * rank, and within two orders of one sum of each other on two threads
 * (tests/unit/test_backend_fused.c, tests/mpi/test_fused_ops.sh). */
void zt_cpu_linear_backward_f32(const zt_backend *be, float *dx, float *dw, float *dbias,
                                const float *dy, int64_t ldy, const float *x, const float *w,
                                int64_t rows, int64_t in, int64_t out, bool accumulate,
                                bool dx_accumulate)
{
    bool together = dx && omp_get_max_threads() == 2 && !omp_in_parallel();
#pragma omp parallel sections num_threads(2) if (together)
    {
#pragma omp section
        {
            zt_cpu_gemm_f32(be, true, false, out, in, rows, 1.0f, dy, ldy, x, in,
                     accumulate ? 1.0f : 0.0f, dw, in); // (out, in)
            if (dbias)
                zt_cpu_bias_grad_f32(be, dbias, dy, rows, out, accumulate);
        }
#pragma omp section
        if (dx)
            zt_cpu_gemm_f32(be, false, false, rows, in, out, 1.0f, dy, ldy, w, in,
                     dx_accumulate ? 1.0f : 0.0f, dx, in); // (rows, in)
    }
}

void zt_cpu_relu_forward(const zt_backend *be, float *y, const float *x, int64_t n)
{
    (void)be;
    /* `x < 0 ? 0 : x` rather than fmaxf: NaN passes through (as in torch) so
     * the overflow check downstream still sees it. */
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

void zt_cpu_relu_backward(const zt_backend *be, float *dx, const float *dy, const float *y,
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

/* Columns per online-softmax chunk: 8 KB of a row stays in L1 between the
 * chunk's max and its exponentials. */
#define ZT_CPU_XENT_CHUNK 2048

/* Loss of one row (classes of l), in float64. One read pass over the row in
 * chunks keeps a running max mx and sum = sum of exp(l - mx), rescaled when a
 * chunk raises mx; a row of one chunk gets exactly the two-pass values. With
 * dl, a second pass writes the gradient: dl may be l itself, since every
 * element is read before it is written and the label's logit is read first. */
static double xent_row(const float *l, int32_t label, int64_t classes, float dscale, float *dl)
{
    const float target = l[label];
    float mx = -INFINITY;
    double sum = 0.0;
    for (int64_t j0 = 0; j0 < classes; j0 += ZT_CPU_XENT_CHUNK) {
        int64_t j1 = classes - j0 < ZT_CPU_XENT_CHUNK ? classes : j0 + ZT_CPU_XENT_CHUNK;
        float cm = l[j0];
        for (int64_t j = j0 + 1; j < j1; j++)
            cm = l[j] > cm ? l[j] : cm;
        double cs = 0.0;
        for (int64_t j = j0; j < j1; j++)
            cs += expf(l[j] - cm);
        if (cm > mx) {
            sum = sum * exp((double)mx - (double)cm) + cs;
            mx = cm;
        } else {
            sum += cs * exp((double)cm - (double)mx);
        }
    }
    if (dl) {
        float inv = (float)(1.0 / sum);
        float p_label = expf(target - mx) * inv;
        for (int64_t j = 0; j < classes; j++)
            dl[j] = dscale * (expf(l[j] - mx) * inv);
        dl[label] = dscale * (p_label - 1.0f);
    }
    return log(sum) - ((double)target - (double)mx);
}

void zt_cpu_xent_rows_f32(const float *logits, const int32_t *labels, int64_t nr,
                          int64_t classes, int64_t ld, int32_t ignore_index, float dscale,
                          float *dlogits, double *row_loss)
{
#pragma omp parallel for schedule(static) if (nr * classes > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < nr; r++) {
        float *dl = dlogits ? dlogits + r * ld : NULL; // (ld)
        if (labels[r] == ignore_index) {
            if (dl)
                memset(dl, 0, (size_t)ld * sizeof *dl);
            row_loss[r] = 0.0;
            continue;
        }
        row_loss[r] = xent_row(logits + r * ld, labels[r], classes, dscale, dl);
        if (dl && ld > classes)
            memset(dl + classes, 0, (size_t)(ld - classes) * sizeof *dl);
    }
}

double zt_cpu_xent_forward_backward_f32(const zt_backend *be, const float *logits,
                                        const int32_t *labels, int64_t rows, int64_t classes,
                                        int64_t ld, int32_t ignore_index, float dscale,
                                        float *dlogits)
{
    (void)be;
    double total = 0.0;
    for (int64_t r0 = 0; r0 < rows; r0 += ZT_CPU_XENT_ROWS) {
        int64_t nr = rows - r0 < ZT_CPU_XENT_ROWS ? rows - r0 : ZT_CPU_XENT_ROWS;
        double row_loss[ZT_CPU_XENT_ROWS];
        zt_cpu_xent_rows_f32(logits + r0 * ld, labels + r0, nr, classes, ld, ignore_index,
                             dscale, dlogits ? dlogits + r0 * ld : NULL, row_loss);
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

void zt_cpu_axpy_f32(const zt_backend *be, float *y, float a, const float *x, int64_t n)
{
    (void)be;
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* One copy of the conversion and reduction loops, shared with the offloaded
 * optimizer, which runs them on host memory outside any backend. */
static double cpu_sum_squares(const zt_backend *be, const void *x, zt_dtype dt, int64_t n)
{
    (void)be;
    return zt_sum_squares_host(x, dt, n);
}

static bool cpu_has_inf_nan(const zt_backend *be, const void *x, zt_dtype dt, int64_t n)
{
    (void)be;
    return zt_has_inf_nan_host(x, dt, n);
}

static void cpu_convert(const zt_backend *be, void *dst, zt_dtype dst_dt, const void *src,
                        zt_dtype src_dt, int64_t n, float alpha, bool accumulate)
{
    (void)be;
    zt_convert_host(dst, dst_dt, src, src_dt, n, alpha, accumulate);
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

static void cpu_destroy(zt_backend *be)
{
    zt_cpu_typed_free(be);
    /* Clearing makes use after free fail loudly. */
    *be = (zt_backend){0};
}

zt_status zt_backend_cpu_init(zt_backend *be)
{
    /* One knob, OMP_NUM_THREADS, for OpenBLAS and our loops alike. */
    openblas_set_num_threads(omp_get_max_threads());
    *be = (zt_backend){
        .name = "cpu",
        .kind = ZT_DEVICE_CPU,
        .impl = NULL,
        .destroy = cpu_destroy,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .check = cpu_check,
        .copy_h2d = cpu_copy,
        .copy_d2h = cpu_copy,
        .copy_d2d = cpu_copy,
        .memset_zero = cpu_memset_zero,
        .sync = cpu_sync,
        .relu_forward = zt_cpu_relu_forward,
        .relu_backward = zt_cpu_relu_backward,
        .scale = cpu_scale,
        .sum_squares = cpu_sum_squares,
        .has_inf_nan = cpu_has_inf_nan,
        .convert = cpu_convert,
        .adam = cpu_adam,
        .sgd = cpu_sgd,
    };
    zt_backend_cpu_nn_ops(be);
    zt_backend_cpu_quant_ops(be);
    zt_status st = zt_backend_cpu_typed_ops(be);
    if (st != ZT_OK)
        *be = (zt_backend){0}; /* nothing was allocated: *be needs no freeing */
    return st;
}

static bool cpu_built(void) { return true; }

/* The host is the one device. */
static int cpu_device_count(const char **why)
{
    (void)why;
    return 1;
}

static zt_status cpu_entry_init(zt_backend *be, const zt_backend_options *opt)
{
    (void)opt;
    return zt_backend_cpu_init(be);
}

const zt_backend_entry zt_backend_cpu_entry = {
    .name = "cpu",
    .kind = ZT_DEVICE_CPU,
    .built = cpu_built,
    .device_count = cpu_device_count,
    .init = cpu_entry_init,
};
