/*
 * backend_cpu_nn: the transformer-layer ops of the CPU backend (see
 * backend_cpu_nn.h). Elementwise and per-row ops run OpenMP loops over rows;
 * column reductions (embedding and layernorm parameter gradients) run over
 * column blocks, each block summing rows in increasing order. Row sums that
 * can vectorise (layernorm statistics and gradients, the softmax-backward dot)
 * use eight interleaved partial sums combined in a fixed tree: the compiler
 * gets vector lanes without reassociating anything, and the order is the same
 * on every thread count. The softmax-forward sum follows expf, which does not
 * vectorise, so it is a plain left-to-right sum.
 */
#include "engine/cpu/backend_cpu_nn.h"
#include "engine/rng.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Columns per task of a column reduction: one cache line, so that the few
 * hundred columns of a transformer's width still split into a task per thread. */
#define ZT_CPU_NN_COL_BLOCK 16

/* Elements per tile of act_bias_grad (256 KB of dpre): a tile is summed
 * into dbias while it is still in L2. */
#define ZT_CPU_ACT_TILE 65536

/* Positional-encoding values computed per pass; they are then added to every
 * sample, so the float64 sin/cos run once per (position, column). */
#define ZT_CPU_NN_PE_BLOCK 64

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

static double tree_sum8_f64(const double acc[8])
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static float tree_sum8_f32(const float acc[8])
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum of x, in float64 */
static double sum_f64(const float *x, int64_t n)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += (double)x[i + l];
    for (; i < n; i++)
        acc[0] += (double)x[i];
    return tree_sum8_f64(acc);
}

/* sum of (x - m)^2, in float64: the two-pass variance does not cancel the way
 * E[x^2] - m^2 does when |mean| >> std. */
static double sum_sq_dev_f64(const float *x, int64_t n, double m)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) {
            double d = (double)x[i + l] - m;
            acc[l] += d * d;
        }
    for (; i < n; i++) {
        double d = (double)x[i] - m;
        acc[0] += d * d;
    }
    return tree_sum8_f64(acc);
}

void zt_cpu_embedding_forward_f32(const zt_backend *be, float *y, const int32_t *ids,
                                  const float *table, int64_t rows, int64_t cols, bool accumulate)
{
    (void)be;
#pragma omp parallel for schedule(static) if (rows * cols > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * cols;                          // (cols)
        const float *tr = table + (int64_t)ids[r] * cols; // (cols)
        if (accumulate)
            for (int64_t j = 0; j < cols; j++)
                yr[j] += tr[j];
        else
            memcpy(yr, tr, (size_t)cols * sizeof *yr);
    }
}

void zt_cpu_embedding_backward_f32(const zt_backend *be, float *dtable, const int32_t *ids,
                                   const float *dy, int64_t rows, int64_t cols, int64_t vocab,
                                   bool accumulate)
{
    (void)be;
    if (!accumulate) {
        /* Whole rows here; clearing inside the column blocks below would
         * touch one cache line per table row per task. */
#pragma omp parallel for schedule(static) if (vocab * cols > ZT_CPU_PAR_MIN)
        for (int64_t v = 0; v < vocab; v++)
            memset(dtable + v * cols, 0, (size_t)cols * sizeof *dtable);
    }
    /* A task owns a column block of the whole table and walks the rows in
     * increasing r, so each element receives its additions in that order
     * whatever the thread count, and no two threads write one element. */
    int64_t nblocks = (cols + ZT_CPU_NN_COL_BLOCK - 1) / ZT_CPU_NN_COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * cols > ZT_CPU_PAR_MIN)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t j0 = blk * ZT_CPU_NN_COL_BLOCK;
        int64_t w = min_i64(cols - j0, ZT_CPU_NN_COL_BLOCK);
        for (int64_t r = 0; r < rows; r++) {
            float *restrict dst = dtable + (int64_t)ids[r] * cols + j0; // (w)
            const float *restrict src = dy + r * cols + j0;             // (w)
            for (int64_t j = 0; j < w; j++)
                dst[j] += src[j];
        }
    }
}

void zt_cpu_sinusoid_add_f32(const zt_backend *be, float *y, int64_t n, int64_t t, int64_t cols)
{
    (void)be;
    const double log_base = log(10000.0);
#pragma omp parallel for schedule(static) if (n * t * cols > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < t; i++) {
        for (int64_t j0 = 0; j0 < cols; j0 += ZT_CPU_NN_PE_BLOCK) {
            int64_t w = min_i64(cols - j0, ZT_CPU_NN_PE_BLOCK);
            float pe[ZT_CPU_NN_PE_BLOCK]; // (w) PE[i][j0:j0+w]
            for (int64_t jj = 0; jj < w; jj++) {
                int64_t j = j0 + jj, two_k = j - j % 2;
                double wk = exp(-(double)two_k * log_base / (double)cols);
                double angle = (double)i * wk;
                pe[jj] = (float)(j % 2 == 0 ? sin(angle) : cos(angle));
            }
            for (int64_t s = 0; s < n; s++) {
                float *yr = y + (s * t + i) * cols + j0; // (w)
                for (int64_t jj = 0; jj < w; jj++)
                    yr[jj] += pe[jj];
            }
        }
    }
}

/* Layernorm of one row xr (cols) into yr; its statistics into *mean, *rstd. */
static void layernorm_row(float *yr, float *mean, float *rstd, const float *xr, const float *w,
                          const float *b, int64_t cols, float eps)
{
    double m = sum_f64(xr, cols) / (double)cols;
    double var = sum_sq_dev_f64(xr, cols, m) / (double)cols;
    /* y uses the rounded statistics that are stored, so the backward pass
     * recomputes exactly the xhat the forward pass used. */
    float mf = (float)m, rs = (float)(1.0 / sqrt(var + (double)eps));
    *mean = mf;
    *rstd = rs;
    for (int64_t j = 0; j < cols; j++)
        yr[j] = (xr[j] - mf) * rs * w[j] + b[j];
}

void zt_cpu_layernorm_forward_f32(const zt_backend *be, float *y, float *mean, float *rstd,
                                  const float *x, const float *w, const float *b, int64_t rows,
                                  int64_t cols, float eps)
{
    (void)be;
#pragma omp parallel for schedule(static) if (rows * cols > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        layernorm_row(y + r * cols, mean + r, rstd + r, x + r * cols, w, b, cols, eps);
}

/* The sum lands in x1's row and is normalised while that row is still in L1:
 * one read of x and branch, one write of x1 and y, instead of the copy, the
 * axpy and the layernorm's own read of x1. */
void zt_cpu_residual_layernorm_forward_f32(const zt_backend *be, float *x1, float *y,
                                           float *mean, float *rstd, const float *x,
                                           const float *branch, const float *w, const float *b,
                                           int64_t rows, int64_t cols, float eps)
{
    (void)be;
#pragma omp parallel for schedule(static) if (rows * cols > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        float *x1r = x1 + r * cols;           // (cols)
        const float *xr = x + r * cols;       // (cols)
        const float *br = branch + r * cols;  // (cols)
        for (int64_t j = 0; j < cols; j++)
            x1r[j] = xr[j] + br[j];
        layernorm_row(y + r * cols, mean + r, rstd + r, x1r, w, b, cols, eps);
    }
}

/* dw, db over one column block [j0, j0 + width), rows in increasing order. */
static void layernorm_param_grads(float *dw, float *db, const float *dy, const float *x,
                                  const float *mean, const float *rstd, int64_t rows,
                                  int64_t cols, int64_t j0, int64_t width, bool accumulate)
{
    float dw_acc[ZT_CPU_NN_COL_BLOCK], db_acc[ZT_CPU_NN_COL_BLOCK];
    for (int64_t j = 0; j < width; j++) {
        dw_acc[j] = accumulate ? dw[j0 + j] : 0.0f;
        db_acc[j] = accumulate ? db[j0 + j] : 0.0f;
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *dyr = dy + r * cols + j0; // (width)
        const float *xr = x + r * cols + j0;   // (width)
        float m = mean[r], rs = rstd[r];
        for (int64_t j = 0; j < width; j++) {
            dw_acc[j] += dyr[j] * ((xr[j] - m) * rs);
            db_acc[j] += dyr[j];
        }
    }
    for (int64_t j = 0; j < width; j++) {
        dw[j0 + j] = dw_acc[j];
        db[j0 + j] = db_acc[j];
    }
}

/* dx of one row. The two row means are float32 sums (eight lanes, fixed
 * tree), as the contract's "float32 unless stated" asks. The sums are taken
 * before any write and the last loop reads dy[j] before writing dx[j], so
 * dx == dy works in place. */
static void layernorm_row_dx(float *dx, const float *dy, const float *x, const float *w, float m,
                             float rs, int64_t cols, bool accumulate)
{
    float acc_g[8] = {0}, acc_gx[8] = {0}; // sums of dy*w and dy*w*xhat
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8)
        for (int l = 0; l < 8; l++) {
            float g = dy[j + l] * w[j + l];
            acc_g[l] += g;
            acc_gx[l] += g * ((x[j + l] - m) * rs);
        }
    for (; j < cols; j++) {
        float g = dy[j] * w[j];
        acc_g[0] += g;
        acc_gx[0] += g * ((x[j] - m) * rs);
    }
    float mean_g = tree_sum8_f32(acc_g) / (float)cols;
    float mean_gx = tree_sum8_f32(acc_gx) / (float)cols;
    for (j = 0; j < cols; j++) {
        float xhat = (x[j] - m) * rs;
        float d = rs * (dy[j] * w[j] - mean_g - xhat * mean_gx);
        dx[j] = accumulate ? dx[j] + d : d;
    }
}

void zt_cpu_layernorm_backward_f32(const zt_backend *be, float *dx, float *dw, float *db,
                                   const float *dy, const float *x, const float *mean,
                                   const float *rstd, const float *w, int64_t rows, int64_t cols,
                                   bool accumulate_dx, bool accumulate_params)
{
    (void)be;
    bool par = rows * cols > ZT_CPU_PAR_MIN;
    /* Parameter gradients first: they read dy, which dx may overwrite. */
    int64_t nblocks = (cols + ZT_CPU_NN_COL_BLOCK - 1) / ZT_CPU_NN_COL_BLOCK;
#pragma omp parallel for schedule(static) if (par)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t j0 = blk * ZT_CPU_NN_COL_BLOCK;
        layernorm_param_grads(dw, db, dy, x, mean, rstd, rows, cols, j0,
                              min_i64(cols - j0, ZT_CPU_NN_COL_BLOCK), accumulate_params);
    }
#pragma omp parallel for schedule(static) if (par)
    for (int64_t r = 0; r < rows; r++)
        layernorm_row_dx(dx + r * cols, dy + r * cols, x + r * cols, w, mean[r], rstd[r], cols,
                         accumulate_dx);
}

/* sqrt(2/pi) and the cubic coefficient of the tanh approximation. */
#define ZT_GELU_K0 0.7978845608028654f
#define ZT_GELU_K1 0.044715f

/* One expression each, shared by the plain and the fused ops so they round
 * alike. */
static inline float gelu_f32(float v)
{
    float u = ZT_GELU_K0 * (v + ZT_GELU_K1 * v * v * v);
    return 0.5f * v * (1.0f + tanhf(u));
}

static inline float gelu_grad_f32(float dy, float v)
{
    float th = tanhf(ZT_GELU_K0 * (v + ZT_GELU_K1 * v * v * v));
    float du = ZT_GELU_K0 * (1.0f + 3.0f * ZT_GELU_K1 * v * v);
    float d = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
    return dy * d;
}

void zt_cpu_gelu_forward(const zt_backend *be, float *y, const float *x, int64_t n)
{
    (void)be;
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = gelu_f32(x[i]);
}

void zt_cpu_gelu_backward(const zt_backend *be, float *dx, const float *dy, const float *x,
                              int64_t n)
{
    (void)be;
#pragma omp parallel for schedule(static) if (n > ZT_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dx[i] = gelu_grad_f32(dy[i], x[i]);
}

/* Bias and activation of one row v (cols), the GEMM's output, in place; y
 * gets act(v) (y == v for ReLU and NONE). */
static void bias_act_row(float *y, float *v, const float *bias, int64_t cols, zt_act act)
{
    if (bias)
        for (int64_t j = 0; j < cols; j++)
            v[j] += bias[j];
    if (act == ZT_ACT_GELU)
        for (int64_t j = 0; j < cols; j++)
            y[j] = gelu_f32(v[j]);
    else if (act == ZT_ACT_RELU) /* NaN passes, as relu_forward */
        for (int64_t j = 0; j < cols; j++)
            y[j] = v[j] < 0.0f ? 0.0f : v[j];
    else if (y != v)
        memcpy(y, v, (size_t)cols * sizeof *y);
}

void zt_cpu_linear_act_forward_f32(const zt_backend *be, float *y, float *pre, const float *x,
                                   const float *w, const float *bias, int64_t rows, int64_t in,
                                   int64_t out, zt_act act)
{
    (void)be;
    if (rows == 0 || out == 0)
        return;
    float *v = pre ? pre : y; // (rows, out)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)out, (int)in, 1.0f, x,
                (int)in, w, (int)in, 0.0f, v, (int)out);
    /* The epilogue is one pass per row over what the GEMM just wrote, instead
     * of bias_add's pass and the activation's. */
#pragma omp parallel for schedule(static) if (rows * out > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        bias_act_row(y + r * out, v + r * out, bias, out, act);
}

/* dpre of one row (cols): the loops of gelu_backward and relu_backward. */
static void act_grad_row(float *dpre, const float *dy, const float *pre, int64_t cols, zt_act act)
{
    if (act == ZT_ACT_GELU) {
        for (int64_t j = 0; j < cols; j++)
            dpre[j] = gelu_grad_f32(dy[j], pre[j]);
    } else if (act == ZT_ACT_RELU) {
        for (int64_t j = 0; j < cols; j++) {
            float g = dy[j]; /* a select, as relu_backward */
            dpre[j] = pre[j] > 0.0f ? g : 0.0f;
        }
    } else if (dpre != dy) {
        memcpy(dpre, dy, (size_t)cols * sizeof *dpre);
    }
}

void zt_cpu_act_bias_grad_f32(const zt_backend *be, float *dpre, float *dbias, const float *dy,
                              const float *pre, int64_t rows, int64_t cols, zt_act act,
                              bool accumulate)
{
    (void)be;
    /* Tiles of rows: the tile's dpre is computed row by row (the activation
     * backward's own contiguous loop), then summed into dbias while it is
     * still in cache, by bias_grad's column-block tasks. Tiles go in
     * increasing row order, so each dbias element receives bias_grad's
     * additions in its order (from 0, or the old value, then row by row). */
    if (!accumulate)
        memset(dbias, 0, (size_t)cols * sizeof *dbias);
    int64_t nblocks = (cols + ZT_CPU_BIAS_COL_BLOCK - 1) / ZT_CPU_BIAS_COL_BLOCK;
    int64_t tile = cols > 0 && ZT_CPU_ACT_TILE / cols > 16 ? ZT_CPU_ACT_TILE / cols : 16;
#pragma omp parallel if (rows * cols > ZT_CPU_PAR_MIN)
    for (int64_t r0 = 0; r0 < rows; r0 += tile) {
        int64_t r1 = min_i64(rows, r0 + tile);
#pragma omp for schedule(static)
        for (int64_t r = r0; r < r1; r++)
            act_grad_row(dpre + r * cols, dy + r * cols, pre + r * cols, cols, act);
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            int64_t j0 = blk * ZT_CPU_BIAS_COL_BLOCK;
            int64_t w = min_i64(cols - j0, ZT_CPU_BIAS_COL_BLOCK);
            float acc[ZT_CPU_BIAS_COL_BLOCK];
            for (int64_t j = 0; j < w; j++)
                acc[j] = dbias[j0 + j];
            for (int64_t r = r0; r < r1; r++) {
                const float *dr = dpre + r * cols + j0; // (w)
                for (int64_t j = 0; j < w; j++)
                    acc[j] += dr[j];
            }
            for (int64_t j = 0; j < w; j++)
                dbias[j0 + j] = acc[j];
        }
    }
}

/* C(m, n) = beta C over a strided matrix; beta == 0 assigns zeros, as BLAS
 * does, so stale NaNs in C do not survive. */
static void scale_matrix(float *c, int64_t m, int64_t n, int64_t ldc, float beta)
{
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc; // (n)
        for (int64_t j = 0; j < n; j++)
            ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
    }
}

static void cpu_gemm_batched(const zt_backend *be, bool trans_a, bool trans_b, int64_t m,
                             int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                             int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                             float beta, float *c, int64_t ldc, int64_t stride_c, int64_t batch)
{
    (void)be;
    /* OpenBLAS rejects (and prints about) leading dimensions below max(1, k)
     * even when there is nothing to multiply, so empty products stay out of it. */
    if (m == 0 || n == 0)
        return;
    for (int64_t i = 0; i < batch; i++) {
        float *ci = c + i * stride_c; // (m, n) with row stride ldc
        if (k == 0) {
            scale_matrix(ci, m, n, ldc, beta);
            continue;
        }
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha,
                    a + i * stride_a, (int)lda, b + i * stride_b, (int)ldb, beta, ci, (int)ldc);
    }
}

/* softmax of scale * row over its first `allowed` entries, zeros after. */
static void softmax_row(float *row, int64_t t, int64_t allowed, float scale)
{
    if (allowed <= 0) {
        memset(row, 0, (size_t)t * sizeof *row);
        return;
    }
    float mx = scale * row[0];
    for (int64_t j = 1; j < allowed; j++) {
        float z = scale * row[j];
        mx = z > mx ? z : mx;
    }
    /* The maximum contributes exp(0) = 1, so sum >= 1 and inv is finite. */
    float sum = 0.0f;
    for (int64_t j = 0; j < allowed; j++) {
        float e = expf(scale * row[j] - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < allowed; j++)
        row[j] *= inv;
    for (int64_t j = allowed; j < t; j++)
        row[j] = 0.0f;
}

static void cpu_attn_softmax_forward(const zt_backend *be, float *att, int64_t n, int64_t h,
                                     int64_t t, float scale, bool causal, const int32_t *lengths)
{
    (void)be;
    int64_t rows = n * h * t;
#pragma omp parallel for schedule(static) if (rows * t > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t s = r / (h * t), i = r % t;
        int64_t allowed = causal ? i + 1 : t;
        if (lengths)
            allowed = min_i64(allowed, lengths[s]);
        softmax_row(att + r * t, t, allowed, scale);
    }
}

static void cpu_attn_softmax_backward(const zt_backend *be, float *datt, const float *p,
                                      int64_t rows, int64_t t, float scale)
{
    (void)be;
#pragma omp parallel for schedule(static) if (rows * t > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        float *dr = datt + r * t;      // (t) dL/dP, becomes dL/dscores
        const float *pr = p + r * t;   // (t)
        float dot = zt_cpu_dot_f32(dr, pr, t);
        for (int64_t j = 0; j < t; j++)
            dr[j] = scale * pr[j] * (dr[j] - dot);
    }
}

void zt_cpu_dropout_f32(const zt_backend *be, float *y, const float *x, const zt_dropout_desc *d)
{
    (void)be;
    int64_t total = d->n * d->a * d->b * d->c;
    if (d->p == 0.0f) {
        /* Exact copy: x * 1.0f would already be, but this skips the draws. */
        if (y != x)
            memcpy(y, x, (size_t)total * sizeof *y);
        return;
    }
    zt_cpu_dropout_rows_f32(y, x, d, 0, d->n * d->a * d->b);
}

void zt_cpu_dropout_rows_f32(float *y, const float *x, const zt_dropout_desc *d, int64_t r0,
                             int64_t r1)
{
    /* y = x * (keep ? scale : 0) with scale = 1 / (1 - p) rounded once to
     * float32, torch's formula: a kept element is x * scale, not x / (1 - p),
     * and a non-finite x at a dropped position gives NaN, so an overflow still
     * reaches the inf/nan check. The reference tests and the CUDA kernel use
     * this same float32 formula. */
    const float p = d->p, scale = 1.0f / (1.0f - p);
    int64_t a = d->a, b = d->b, c = d->c;
#pragma omp parallel for schedule(static) if ((r1 - r0) * c > ZT_CPU_PAR_MIN)
    for (int64_t r = r0; r < r1; r++) {
        int64_t s = r / (a * b), i = r / b % a, j = r % b;
        uint64_t row_seed = zt_dropout_row_seed(d->seed, d->site, d->step, d->row_keys[s]);
        /* zt_rng_uniform(row_seed, 0, ctr) is mix(mix(mix(row_seed) ^ 0) ^ ctr)
         * >> 40 scaled by 2^-24 (rng.h); the two mixes that do not depend on
         * ctr are hoisted out of the loop. The tests compare against
         * zt_rng_uniform bit for bit. */
        uint64_t key = zt_rng_mix(zt_rng_mix(row_seed));
        uint64_t ctr0 = (uint64_t)((i * d->key_b + j) * d->key_c);
        const float *xr = x + (r - r0) * c; // (c)
        float *yr = y + (r - r0) * c;       // (c)
        for (int64_t k = 0; k < c; k++) {
            float u = (float)(zt_rng_mix(key ^ (ctr0 + (uint64_t)k)) >> 40) *
                      (1.0f / 16777216.0f);
            yr[k] = xr[k] * (u >= p ? scale : 0.0f);
        }
    }
}

void zt_cpu_mean_pool_forward_f32(const zt_backend *be, float *y, const float *x,
                                  const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    (void)be;
#pragma omp parallel for schedule(static) if (n * t * cols > ZT_CPU_PAR_MIN)
    for (int64_t s = 0; s < n; s++) {
        int64_t len = lengths ? lengths[s] : t;
        float *ys = y + s * cols; // (cols)
        for (int64_t j = 0; j < cols; j++)
            ys[j] = 0.0f;
        for (int64_t i = 0; i < len; i++) {
            const float *xr = x + (s * t + i) * cols; // (cols)
            for (int64_t j = 0; j < cols; j++)
                ys[j] += xr[j];
        }
        /* A division, like the backward's dy / len: correctly rounded on
         * every backend. */
        float fl = (float)len;
        for (int64_t j = 0; j < cols; j++)
            ys[j] /= fl;
    }
}

void zt_cpu_mean_pool_backward_f32(const zt_backend *be, float *dx, const float *dy,
                                   const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    (void)be;
#pragma omp parallel for schedule(static) if (n * t * cols > ZT_CPU_PAR_MIN)
    for (int64_t r = 0; r < n * t; r++) {
        int64_t s = r / t, i = r % t;
        int64_t len = lengths ? lengths[s] : t;
        float *dxr = dx + r * cols;       // (cols)
        const float *dys = dy + s * cols; // (cols)
        if (i < len) {
            float fl = (float)len;
            for (int64_t j = 0; j < cols; j++)
                dxr[j] = dys[j] / fl;
        } else {
            memset(dxr, 0, (size_t)cols * sizeof *dxr);
        }
    }
}

void zt_backend_cpu_nn_ops(zt_backend *be)
{
    be->gelu_forward = zt_cpu_gelu_forward;
    be->gelu_backward = zt_cpu_gelu_backward;
    be->gemm_batched = cpu_gemm_batched;
    be->attn_softmax_forward = cpu_attn_softmax_forward;
    be->attn_softmax_backward = cpu_attn_softmax_backward;
}
