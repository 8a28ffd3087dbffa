/*
 * test_backend_nn: the CPU backend's transformer-layer ops along the residual
 * stream (embedding, sinusoidal positions, layernorm, GELU) against
 * independent references written here in double precision (naive loops),
 * gradients against central finite differences of those references, and
 * identical bits across thread counts (also for the attention softmax); the
 * typed embedding, sinusoid and layernorm ops on bf16 and fp16 bit for bit against
 * their fp32 ops (test_nn.h).
 * Batched gemm and attention are in test_backend_nn_attn.c, dropout and mean
 * pooling in test_backend_nn_dropout.c; tolerances are stated in test_nn.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "tests/unit/test_nn.h"
#include "tests/unit/test_rng.h"

/* ---- embedding ---- */

/* Ids drawn from [0, vocab - 1) so the last table row is never used. */
static int32_t *draw_ids(int64_t rows, int64_t vocab)
{
    int32_t *ids = malloc((size_t)rows * sizeof *ids);
    assert_non_null(ids);
    for (int64_t r = 0; r < rows; r++)
        ids[r] = (int32_t)(rng_uniform(0, 1) * (double)(vocab - 1));
    ids[rows - 1] = ids[0]; /* at least one repeat, however few rows */
    return ids;
}

static void test_embedding_forward(void **state)
{
    const zt_backend *be = *state;
    rng_seed(11);
    const int64_t shapes[][3] = {{9, 5, 4}, {3000, 48, 37}}; /* rows, cols, vocab; 2nd parallel */
    for (size_t sh = 0; sh < 2; sh++) {
        int64_t rows = shapes[sh][0], cols = shapes[sh][1], vocab = shapes[sh][2];
        int32_t *ids = draw_ids(rows, vocab);
        float *table = xmalloc_floats(vocab * cols); // (vocab, cols)
        float *y0 = xmalloc_floats(rows * cols);     // (rows, cols)
        float *y = xmalloc_floats(rows * cols);      // (rows, cols)
        fill_uniform(table, vocab * cols, -1, 1);
        fill_uniform(y0, rows * cols, -1, 1);

        fill_value(y, rows * cols, NAN); /* assigning must not read y */
        be->embedding_forward(be, ZT_F32, y, ids, table, rows, cols, false);
        for (int64_t r = 0; r < rows; r++)
            assert_memory_equal(y + r * cols, table + ids[r] * cols, (size_t)cols * sizeof *y);

        /* One float add per element: the double sum rounded once is exact. */
        memcpy(y, y0, (size_t)(rows * cols) * sizeof *y);
        be->embedding_forward(be, ZT_F32, y, ids, table, rows, cols, true);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++)
                assert_true(y[r * cols + j] ==
                            (float)((double)y0[r * cols + j] + (double)table[ids[r] * cols + j]));
        free(ids);
        free(table);
        free(y0);
        free(y);
    }
}

static void test_embedding_backward(void **state)
{
    const zt_backend *be = *state;
    rng_seed(12);
    /* 21 and 70 columns are not whole column blocks; the last is parallel. */
    const int64_t shapes[][3] = {{40, 21, 6}, {3, 1, 2}, {4000, 70, 50}};
    for (size_t sh = 0; sh < 3; sh++) {
        int64_t rows = shapes[sh][0], cols = shapes[sh][1], vocab = shapes[sh][2];
        int32_t *ids = draw_ids(rows, vocab);
        float *dy = xmalloc_floats(rows * cols);      // (rows, cols)
        float *init = xmalloc_floats(vocab * cols);   // (vocab, cols)
        float *dtable = xmalloc_floats(vocab * cols); // (vocab, cols)
        fill_uniform(dy, rows * cols, -1, 1);
        fill_uniform(init, vocab * cols, -1, 1);
        for (int accumulate = 0; accumulate < 2; accumulate++) {
            if (accumulate)
                memcpy(dtable, init, (size_t)(vocab * cols) * sizeof *dtable);
            else
                fill_value(dtable, vocab * cols, NAN);
            be->embedding_backward(be, ZT_F32, dtable, ids, dy, rows, cols, vocab, accumulate);
            for (int64_t v = 0; v < vocab; v++)
                for (int64_t j = 0; j < cols; j++) {
                    double ref = accumulate ? init[v * cols + j] : 0.0, mag = fabs(ref);
                    /* The contract fixes the order: start value, then rows in
                     * increasing r, each a float add. */
                    float ordered = accumulate ? init[v * cols + j] : 0.0f;
                    for (int64_t r = 0; r < rows; r++)
                        if (ids[r] == v) {
                            ref += dy[r * cols + j];
                            mag += fabs(dy[r * cols + j]);
                            ordered += dy[r * cols + j];
                        }
                    float got = dtable[v * cols + j];
                    if (fabs(got - ref) > 1e-6 * mag || got != ordered)
                        fail_msg("dtable[%ld,%ld] = %.9g, ref %.9g, ordered %.9g", (long)v,
                                 (long)j, got, ref, ordered);
                }
            /* The unused last row: zero, or untouched when accumulating. */
            for (int64_t j = 0; j < cols; j++)
                assert_true(dtable[(vocab - 1) * cols + j] ==
                            (accumulate ? init[(vocab - 1) * cols + j] : 0.0f));
        }
        free(ids);
        free(dy);
        free(init);
        free(dtable);
    }
}


/* ---- sinusoidal positions ---- */

static void test_sinusoid_hand_values(void **state)
{
    const zt_backend *be = *state;
    /* y = 0 + PE, so y holds PE rounded to float. cols = 6: w_0 = 1,
     * w_1 = 10000^(-1/3), w_2 = 10000^(-2/3). cols = 5: w_1 = 10^(-1.6) and
     * the last column is a sin with w_2 = 10^(-3.2). */
    enum { N = 2, T = 4 };
    float y6[N * T * 6], y5[N * T * 5]; // (n, t, cols)
    memset(y6, 0, sizeof y6);
    memset(y5, 0, sizeof y5);
    be->sinusoid_add(be, ZT_F32, y6, N, T, 6);
    be->sinusoid_add(be, ZT_F32, y5, N, T, 5);
    const double w1_6 = 0.046415888336127789, w2_6 = 0.0021544346900318837;
    const double w1_5 = 0.025118864315095801, w2_5 = 0.00063095734448019325;
    const struct {
        const float *y;
        int64_t cols, i, j;
        double ref;
    } pts[] = {
        {y6, 6, 0, 0, 0.0},           {y6, 6, 0, 1, 1.0},           {y6, 6, 0, 4, 0.0},
        {y6, 6, 0, 5, 1.0},           {y6, 6, 1, 0, sin(1.0)},      {y6, 6, 1, 1, cos(1.0)},
        {y6, 6, 3, 0, sin(3.0)},      {y6, 6, 2, 2, sin(2 * w1_6)}, {y6, 6, 2, 3, cos(2 * w1_6)},
        {y6, 6, 3, 4, sin(3 * w2_6)}, {y6, 6, 3, 5, cos(3 * w2_6)}, {y5, 5, 2, 3, cos(2 * w1_5)},
        {y5, 5, 3, 4, sin(3 * w2_5)}, {y5, 5, 0, 4, 0.0},
    };
    for (size_t q = 0; q < sizeof pts / sizeof pts[0]; q++)
        for (int64_t s = 0; s < N; s++) {
            float got = pts[q].y[(s * T + pts[q].i) * pts[q].cols + pts[q].j];
            /* One rounding to float: within half an ulp, 2^-24 relative. */
            if (fabs(got - pts[q].ref) > 0x1p-24 * fabs(pts[q].ref))
                fail_msg("cols %ld PE[%ld][%ld] = %.9g, ref %.9g", (long)pts[q].cols,
                         (long)pts[q].i, (long)pts[q].j, got, pts[q].ref);
        }
}

/* PE in double, written from pow rather than exp so it is an independent form. */
static double pe_ref(int64_t i, int64_t j, int64_t cols)
{
    double w = pow(10000.0, -(double)(j - j % 2) / (double)cols);
    return j % 2 == 0 ? sin((double)i * w) : cos((double)i * w);
}

static void test_sinusoid_add(void **state)
{
    const zt_backend *be = *state;
    rng_seed(13);
    const int64_t shapes[][3] = {{3, 50, 33}, {1, 1, 1}, {4, 128, 96}}; /* n, t, cols */
    for (size_t sh = 0; sh < 3; sh++) {
        int64_t n = shapes[sh][0], t = shapes[sh][1], cols = shapes[sh][2];
        float *y0 = xmalloc_floats(n * t * cols); // (n, t, cols)
        fill_uniform(y0, n * t * cols, -1, 1);
        float *y = dup_floats(y0, n * t * cols);
        be->sinusoid_add(be, ZT_F32, y, n, t, cols);
        for (int64_t s = 0; s < n; s++)
            for (int64_t i = 0; i < t; i++)
                for (int64_t j = 0; j < cols; j++) {
                    int64_t at = (s * t + i) * cols + j;
                    double pe = pe_ref(i, j, cols), ref = (double)y0[at] + pe;
                    /* Two roundings: PE to float, then the add. */
                    if (fabs(y[at] - ref) > 1.2e-7 * (fabs(y0[at]) + fabs(pe) + fabs(ref)))
                        fail_msg("y[%ld,%ld,%ld] = %.9g, ref %.9g", (long)s, (long)i, (long)j,
                                 y[at], ref);
                }
        free(y0);
        free(y);
    }
}


/* ---- layernorm ---- */

/* y = (x - mean) * rstd * w + b in double; mean and rstd per row when non-NULL. */
static void layernorm_ref(double *y, double *mean, double *rstd, const double *x,
                          const double *w, const double *b, int64_t rows, int64_t cols,
                          double eps)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double m = 0.0, var = 0.0;
        for (int64_t j = 0; j < cols; j++)
            m += xr[j];
        m /= (double)cols;
        for (int64_t j = 0; j < cols; j++)
            var += (xr[j] - m) * (xr[j] - m);
        var /= (double)cols;
        double rs = 1.0 / sqrt(var + eps);
        if (mean) {
            mean[r] = m;
            rstd[r] = rs;
        }
        for (int64_t j = 0; j < cols; j++)
            y[r * cols + j] = (xr[j] - m) * rs * w[j] + b[j];
    }
}

static void test_layernorm_forward(void **state)
{
    const zt_backend *be = *state;
    rng_seed(14);
    /* rows, cols, offset: an offset far from zero needs the two-pass variance;
     * 300 x 130 is parallel. */
    const struct {
        int64_t rows, cols;
        double offset;
    } cases[] = {{4, 7, 0.0}, {3, 33, 3.0}, {2, 16, -100.0}, {300, 130, 0.5}};
    const float eps = 1e-5f;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t rows = cases[c].rows, cols = cases[c].cols;
        float *x = xmalloc_floats(rows * cols); // (rows, cols)
        float *w = xmalloc_floats(cols), *b = xmalloc_floats(cols);
        float *y = xmalloc_floats(rows * cols);
        float *mean = xmalloc_floats(rows), *rstd = xmalloc_floats(rows);
        fill_uniform(x, rows * cols, cases[c].offset - 1.0, cases[c].offset + 1.0);
        fill_uniform(w, cols, 0.5, 1.5);
        fill_uniform(b, cols, -0.5, 0.5);
        be->layernorm_forward(be, ZT_F32, y, mean, rstd, x, w, b, rows, cols, eps);

        double *xd = to_double(x, rows * cols), *wd = to_double(w, cols), *bd = to_double(b, cols);
        double *yd = xmalloc_doubles(rows * cols), *md = xmalloc_doubles(rows);
        double *rd = xmalloc_doubles(rows);
        layernorm_ref(yd, md, rd, xd, wd, bd, rows, cols, eps);
        for (int64_t r = 0; r < rows; r++) {
            /* Stored statistics: the float64 values rounded once. */
            assert_true(fabs(mean[r] - md[r]) <= 1.2e-7 * fabs(md[r]));
            assert_true(fabs(rstd[r] - rd[r]) <= 1.2e-7 * rd[r]);
            for (int64_t j = 0; j < cols; j++) {
                int64_t at = r * cols + j;
                double xhat = (xd[at] - md[r]) * rd[r];
                /* y is computed from the stored float mean, whose rounding
                 * (at most 2^-24 |mean|) shifts xhat by up to 2^-24 |mean| rstd. */
                double tol = 1e-5 * (fabs(xhat * wd[j]) + fabs(bd[j])) +
                             (0x1p-23 * fabs(md[r]) * rd[r] + 1e-6) * fabs(wd[j]);
                if (fabs(y[at] - yd[at]) > tol)
                    fail_msg("case %zu y[%ld,%ld] = %.9g, ref %.9g", c, (long)r, (long)j, y[at],
                             yd[at]);
            }
        }
        free(x);
        free(w);
        free(b);
        free(y);
        free(mean);
        free(rstd);
        free(xd);
        free(wd);
        free(bd);
        free(yd);
        free(md);
        free(rd);
    }
}

static void test_layernorm_single_column(void **state)
{
    const zt_backend *be = *state;
    /* var = 0: rstd = 1/sqrt(eps), xhat = 0 exactly, so y = b. */
    float x[3] = {2.5f, -7.0f, 0.0f}, w[1] = {3.0f}, b[1] = {0.25f}, y[3], mean[3], rstd[3];
    be->layernorm_forward(be, ZT_F32, y, mean, rstd, x, w, b, 3, 1, 1e-5f);
    for (int r = 0; r < 3; r++) {
        assert_true(mean[r] == x[r]);
        assert_true(rstd[r] == (float)(1.0 / sqrt((double)1e-5f)));
        assert_true(y[r] == 0.25f);
    }
}

/* sum of g * layernorm(x; w, b) in double: the loss whose gradients the
 * backward pass returns when dy = g. */
static double layernorm_loss(const double *x, const double *w, const double *b, const double *g,
                             int64_t rows, int64_t cols, double eps, double *scratch)
{
    layernorm_ref(scratch, NULL, NULL, x, w, b, rows, cols, eps);
    double loss = 0.0;
    for (int64_t i = 0; i < rows * cols; i++)
        loss += g[i] * scratch[i];
    return loss;
}

/* Central differences of layernorm_loss with respect to every element of p. */
static void layernorm_fd(double *fd, double *p, int64_t np, const double *x, const double *w,
                         const double *b, const double *g, int64_t rows, int64_t cols,
                         double eps, double *scratch)
{
    const double h = 1e-5;
    for (int64_t i = 0; i < np; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double lp = layernorm_loss(x, w, b, g, rows, cols, eps, scratch);
        p[i] = keep - h;
        double lm = layernorm_loss(x, w, b, g, rows, cols, eps, scratch);
        p[i] = keep;
        fd[i] = (lp - lm) / (2 * h);
    }
}

static void test_layernorm_backward(void **state)
{
    const zt_backend *be = *state;
    rng_seed(15);
    /* 19 columns: an 8-lane remainder and a partial column block. */
    const int64_t shapes[][2] = {{3, 10}, {5, 19}, {2, 40}};
    const float eps = 1e-5f;
    for (size_t sh = 0; sh < 3; sh++) {
        int64_t rows = shapes[sh][0], cols = shapes[sh][1], nx = rows * cols;
        float *x = xmalloc_floats(nx), *dy = xmalloc_floats(nx); // (rows, cols)
        float *w = xmalloc_floats(cols), *b = xmalloc_floats(cols);
        float *y = xmalloc_floats(nx), *mean = xmalloc_floats(rows), *rstd = xmalloc_floats(rows);
        fill_uniform(x, nx, -2, 2);
        fill_uniform(dy, nx, -1, 1);
        fill_uniform(w, cols, 0.5, 1.5);
        fill_uniform(b, cols, -0.5, 0.5);
        be->layernorm_forward(be, ZT_F32, y, mean, rstd, x, w, b, rows, cols, eps);

        double *xd = to_double(x, nx), *wd = to_double(w, cols), *bd = to_double(b, cols);
        double *gd = to_double(dy, nx), *scratch = xmalloc_doubles(nx);
        double *fdx = xmalloc_doubles(nx), *fdw = xmalloc_doubles(cols);
        double *fdb = xmalloc_doubles(cols);
        layernorm_fd(fdx, xd, nx, xd, wd, bd, gd, rows, cols, eps, scratch);
        layernorm_fd(fdw, wd, cols, xd, wd, bd, gd, rows, cols, eps, scratch);
        layernorm_fd(fdb, bd, cols, xd, wd, bd, gd, rows, cols, eps, scratch);

        /* Assigning: outputs start as NaN, which must not be read. */
        float *dx = xmalloc_floats(nx), *dw = xmalloc_floats(cols), *db = xmalloc_floats(cols);
        fill_value(dx, nx, NAN);
        fill_value(dw, cols, NAN);
        fill_value(db, cols, NAN);
        be->layernorm_backward(be, ZT_F32, dx, dw, db, dy, x, mean, rstd, w, rows, cols, false, false);
        check_grad("dx", dx, fdx, nx);
        check_grad("dw", dw, fdw, cols);
        check_grad("db", db, fdb, cols);

        /* Each flag governs only its own outputs. dx accumulates as dx0 + the
         * assigned value (one float add); dw, db against dw0 + finite difference. */
        float *dx0 = xmalloc_floats(nx), *dw0 = xmalloc_floats(cols), *db0 = xmalloc_floats(cols);
        fill_uniform(dx0, nx, -1, 1);
        fill_uniform(dw0, cols, -1, 1);
        fill_uniform(db0, cols, -1, 1);
        double *fdw_acc = xmalloc_doubles(cols), *fdb_acc = xmalloc_doubles(cols);
        for (int64_t j = 0; j < cols; j++) {
            fdw_acc[j] = dw0[j] + fdw[j];
            fdb_acc[j] = db0[j] + fdb[j];
        }
        for (int acc_dx = 0; acc_dx < 2; acc_dx++)
            for (int acc_p = 0; acc_p < 2; acc_p++) {
                float *dx2 = dup_floats(dx0, nx), *dw2 = dup_floats(dw0, cols);
                float *db2 = dup_floats(db0, cols);
                be->layernorm_backward(be, ZT_F32, dx2, dw2, db2, dy, x, mean, rstd, w, rows, cols,
                                       acc_dx, acc_p);
                for (int64_t i = 0; i < nx; i++)
                    assert_true(dx2[i] == (acc_dx ? dx0[i] + dx[i] : dx[i]));
                check_grad("dw", dw2, acc_p ? fdw_acc : fdw, cols);
                check_grad("db", db2, acc_p ? fdb_acc : fdb, cols);
                free(dx2);
                free(dw2);
                free(db2);
            }

        /* dx == dy in place gives the same bits. */
        float *inplace = dup_floats(dy, nx);
        float *dw3 = xmalloc_floats(cols), *db3 = xmalloc_floats(cols);
        be->layernorm_backward(be, ZT_F32, inplace, dw3, db3, inplace, x, mean, rstd, w, rows, cols,
                               false, false);
        assert_memory_equal(inplace, dx, (size_t)nx * sizeof *dx);
        assert_memory_equal(dw3, dw, (size_t)cols * sizeof *dw);
        assert_memory_equal(db3, db, (size_t)cols * sizeof *db);

        free(x);
        free(dy);
        free(w);
        free(b);
        free(y);
        free(mean);
        free(rstd);
        free(xd);
        free(wd);
        free(bd);
        free(gd);
        free(scratch);
        free(fdx);
        free(fdw);
        free(fdb);
        free(dx);
        free(dw);
        free(db);
        free(dx0);
        free(dw0);
        free(db0);
        free(fdw_acc);
        free(fdb_acc);
        free(inplace);
        free(dw3);
        free(db3);
    }
}


/* ---- GELU ---- */

static double gelu_ref(double x)
{
    const double k0 = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(k0 * (x + 0.044715 * x * x * x)));
}

static void test_gelu(void **state)
{
    const zt_backend *be = *state;
    rng_seed(16);
    const int64_t n = 100003; /* parallel */
    float *x = xmalloc_floats(n), *y = xmalloc_floats(n), *dy = xmalloc_floats(n);
    float *dx = xmalloc_floats(n);
    fill_uniform(x, n, -6, 6);
    fill_uniform(dy, n, -1, 1);
    const float special[] = {0.0f, 1e-3f, -1e-3f, 1.0f, -1.0f, 10.0f, -10.0f, 20.0f, -20.0f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        x[i] = special[i];

    be->gelu_forward(be, y, x, n);
    be->gelu_backward(be, dx, dy, x, n);
    const double h = 1e-4;
    for (int64_t i = 0; i < n; i++) {
        double xv = x[i], ref = gelu_ref(xv);
        /* 0.5 x (1 + tanh) cancels for x << 0: the rounding of tanhf near -1
         * is an absolute error of a few 1e-8 |x|. */
        if (fabs(y[i] - ref) > 1e-5 * fabs(ref) + 2e-7 * fabs(xv))
            fail_msg("gelu(%.9g) = %.9g, ref %.9g", xv, y[i], ref);
        double fd = (gelu_ref(xv + h) - gelu_ref(xv - h)) / (2 * h);
        double dref = dy[i] * fd;
        /* The (1 - tanh^2) term likewise cancels where |x| is large. */
        if (fabs(dx[i] - dref) > 1e-5 * fabs(dref) + 2e-7 * fabs(dy[i]) * (1.0 + xv * xv))
            fail_msg("gelu'(%.9g) * %.9g = %.9g, ref %.9g", xv, dy[i], dx[i], dref);
    }

    /* In place: the same bits. */
    float *tmp = dup_floats(x, n);
    be->gelu_forward(be, tmp, tmp, n);
    assert_memory_equal(tmp, y, (size_t)n * sizeof *y);
    memcpy(tmp, dy, (size_t)n * sizeof *tmp);
    be->gelu_backward(be, tmp, tmp, x, n);
    assert_memory_equal(tmp, dx, (size_t)n * sizeof *dx);
    free(x);
    free(y);
    free(dy);
    free(dx);
    free(tmp);
}


/* ---- determinism across thread counts ---- */

static void test_thread_determinism(void **state)
{
    const zt_backend *be = *state;
    rng_seed(24);
    /* All well above ZT_CPU_PAR_MIN. */
    enum { ROWS = 3000, COLS = 100, VOCAB = 40 };
    float *x = xmalloc_floats(ROWS * COLS), *dy = xmalloc_floats(ROWS * COLS); // (rows, cols)
    float *w = xmalloc_floats(COLS), *b = xmalloc_floats(COLS);
    fill_uniform(x, ROWS * COLS, -2, 2);
    fill_uniform(dy, ROWS * COLS, -1, 1);
    fill_uniform(w, COLS, 0.5, 1.5);
    fill_uniform(b, COLS, -0.5, 0.5);
    int32_t *ids = draw_ids(ROWS, VOCAB);
    const int32_t lengths[6] = {50, 3, 17, 50, 1, 40};
    enum { AN = 6, AH = 4, AT = 50 }; /* 60000 scores */

    /* Per thread count: y, mean, rstd, dx, dw, db, dtable, p, dscores. */
    const int64_t sizes[9] = {ROWS * COLS, ROWS, ROWS, ROWS * COLS, COLS, COLS, VOCAB * COLS,
                              AN * AH * AT * AT, AN * AH * AT * AT};
    float *out[3][9];
    for (int th = 0; th < 3; th++) {
        for (int o = 0; o < 9; o++)
            out[th][o] = xmalloc_floats(sizes[o]);
        float **q = out[th];
        omp_set_num_threads(th + 1);
        be->layernorm_forward(be, ZT_F32, q[0], q[1], q[2], x, w, b, ROWS, COLS, 1e-5f);
        be->layernorm_backward(be, ZT_F32, q[3], q[4], q[5], dy, x, q[1], q[2], w, ROWS, COLS, false,
                               false);
        be->embedding_backward(be, ZT_F32, q[6], ids, dy, ROWS, COLS, VOCAB, false);
        memcpy(q[7], x, (size_t)sizes[7] * sizeof *x);
        be->attn_softmax_forward(be, q[7], AN, AH, AT, 0.3f, true, lengths);
        memcpy(q[8], dy, (size_t)sizes[8] * sizeof *dy);
        be->attn_softmax_backward(be, q[8], q[7], AN * AH * AT, AT, 0.3f);
    }
    omp_set_num_threads(default_threads);
    for (int th = 1; th < 3; th++)
        for (int o = 0; o < 9; o++)
            if (memcmp(out[th][o], out[0][o], (size_t)sizes[o] * sizeof(float)) != 0)
                fail_msg("output %d differs between 1 and %d threads", o, th + 1);
    for (int th = 0; th < 3; th++)
        for (int o = 0; o < 9; o++)
            free(out[th][o]);
    free(x);
    free(dy);
    free(w);
    free(b);
    free(ids);
}

/* ---- typed ops on bf16 and fp16 (bit for bit, test_nn.h) ---- */

/* Embedding rows assigned (over NaN, which must not be read) and added,
 * then the table gradient (assigned and accumulated) at 1 and 3 threads.
 * 300 x 256 spans two of the backward's row blocks. */
static void test_embedding_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(17);
    const int64_t shapes[][3] = {{9, 5, 4}, {300, 256, 37}}; /* rows, cols, vocab */
    for (int d = 0; d < N_TYPED_DTS; d++)
        for (size_t sh = 0; sh < 2; sh++) {
            zt_dtype dt = TYPED_DTS[d];
            int64_t rows = shapes[sh][0], cols = shapes[sh][1], vocab = shapes[sh][2];
            int64_t ny = rows * cols, nt = vocab * cols;
            int32_t *ids = draw_ids(rows, vocab);
            float *table = xmalloc_floats(nt), *y = xmalloc_floats(ny);
            float *init = xmalloc_floats(nt), *ref = xmalloc_floats(nt), *got = xmalloc_floats(nt);
            fill_uniform(table, nt, -1, 1);
            fill_uniform(init, nt, -1, 1);
            fill_value(y, ny, NAN);
            uint16_t *t16 = to_dt(dt, table, nt), *y16 = to_dt(dt, y, ny);
            be->embedding_forward(be, dt, y16, ids, t16, rows, cols, false);
            be->embedding_forward(be, ZT_F32, y, ids, table, rows, cols, false);
            assert_dt_equal(dt, y16, y, ny, "embedding_forward y");
            be->embedding_forward(be, dt, y16, ids, t16, rows, cols, true);
            be->embedding_forward(be, ZT_F32, y, ids, table, rows, cols, true);
            assert_dt_equal(dt, y16, y, ny, "embedding_forward y (accumulated)");
            round_dt(dt, y, ny); /* y16 is the backward's dy */
            for (int acc = 0; acc < 2; acc++) {
                memcpy(ref, init, (size_t)nt * sizeof *ref);
                be->embedding_backward(be, ZT_F32, ref, ids, y, rows, cols, vocab, acc);
                for (int threads = 1; threads <= 3; threads += 2) {
                    omp_set_num_threads(threads);
                    memcpy(got, init, (size_t)nt * sizeof *got);
                    be->embedding_backward(be, dt, got, ids, y16, rows, cols, vocab, acc);
                    assert_f32_equal(got, ref, nt, "embedding_backward dtable");
                }
                omp_set_num_threads(default_threads);
            }
            free(ids);
            free(table);
            free(y);
            free(init);
            free(ref);
            free(got);
            free(t16);
            free(y16);
        }
}

/* Forward (y, mean, rstd), then backward with every pair of accumulate
 * flags, in its own dx and in place (dx == dy, assigning and accumulating),
 * at 1 and 3 threads. */
static void check_layernorm_typed(const zt_backend *be, zt_dtype dt, int64_t rows, int64_t cols)
{
    int64_t nx = rows * cols;
    float *x = xmalloc_floats(nx), *y = xmalloc_floats(nx), *dy = xmalloc_floats(nx);
    float *dx0 = xmalloc_floats(nx), *w = xmalloc_floats(cols), *b = xmalloc_floats(cols);
    float *mean = xmalloc_floats(rows), *rstd = xmalloc_floats(rows);
    float *mean16 = xmalloc_floats(rows), *rstd16 = xmalloc_floats(rows);
    float *p0 = xmalloc_floats(2 * cols), *pr = xmalloc_floats(2 * cols);
    float *pg = xmalloc_floats(2 * cols); /* dw then db */
    fill_uniform(x, nx, -2, 2);
    fill_uniform(dy, nx, -1, 1);
    fill_uniform(dx0, nx, -1, 1);
    fill_uniform(w, cols, 0.5, 1.5);
    fill_uniform(b, cols, -0.5, 0.5);
    fill_uniform(p0, 2 * cols, -1, 1);
    uint16_t *x16 = to_dt(dt, x, nx), *dy16 = to_dt(dt, dy, nx), *dx016 = to_dt(dt, dx0, nx);
    uint16_t *w16 = to_dt(dt, w, cols), *b16 = to_dt(dt, b, cols);
    uint16_t *y16 = xmalloc_halves(nx), *dx16 = xmalloc_halves(nx);
    be->layernorm_forward(be, dt, y16, mean16, rstd16, x16, w16, b16, rows, cols, 1e-5f);
    be->layernorm_forward(be, ZT_F32, y, mean, rstd, x, w, b, rows, cols, 1e-5f);
    assert_dt_equal(dt, y16, y, nx, "layernorm_forward y");
    assert_f32_equal(mean16, mean, rows, "layernorm_forward mean");
    assert_f32_equal(rstd16, rstd, rows, "layernorm_forward rstd");
    for (int in_place = 0; in_place < 2; in_place++)
        for (int acc_dx = 0; acc_dx < 2; acc_dx++)
            for (int acc_p = 0; acc_p < 2; acc_p++) {
                /* in place, dx starts as dy */
                float *dxr = dup_floats(in_place ? dy : dx0, nx);
                memcpy(pr, p0, 2 * (size_t)cols * sizeof *pr);
                be->layernorm_backward(be, ZT_F32, dxr, pr, pr + cols, dy, x, mean, rstd, w, rows,
                                       cols, acc_dx, acc_p);
                for (int threads = 1; threads <= 3; threads += 2) {
                    omp_set_num_threads(threads);
                    memcpy(dx16, in_place ? dy16 : dx016, (size_t)nx * sizeof *dx16);
                    memcpy(pg, p0, 2 * (size_t)cols * sizeof *pg);
                    be->layernorm_backward(be, dt, dx16, pg, pg + cols, in_place ? dx16 : dy16,
                                           x16, mean, rstd, w16, rows, cols, acc_dx, acc_p);
                    assert_dt_equal(dt, dx16, dxr, nx, in_place ? "dx (== dy)" : "dx");
                    assert_f32_equal(pg, pr, 2 * cols, "layernorm_backward dw, db");
                }
                omp_set_num_threads(default_threads);
                free(dxr);
            }
    free(x);
    free(y);
    free(dy);
    free(dx0);
    free(w);
    free(b);
    free(mean);
    free(rstd);
    free(mean16);
    free(rstd16);
    free(p0);
    free(pr);
    free(pg);
    free(x16);
    free(dy16);
    free(dx016);
    free(w16);
    free(b16);
    free(y16);
    free(dx16);
}

/* 300 x 384 spans two of the ops' row blocks; a row of 70000 is longer than
 * a block. */
static void test_layernorm_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(18);
    for (int d = 0; d < N_TYPED_DTS; d++) {
        check_layernorm_typed(be, TYPED_DTS[d], 5, 19);
        check_layernorm_typed(be, TYPED_DTS[d], 300, 384);
        check_layernorm_typed(be, TYPED_DTS[d], 3, 70000);
    }
}

/* y + PE on bf16 and fp16: the fp32 op on the widened y, rounded, at 1 and 3
 * threads. 5 x 128 x 384 is a sample a block, so five blocks. */
static void test_sinusoid_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(19);
    const int64_t shapes[][3] = {{3, 50, 33}, {1, 1, 1}, {5, 128, 384}, {40, 16, 130}};
    for (int d = 0; d < N_TYPED_DTS; d++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
            zt_dtype dt = TYPED_DTS[d];
            int64_t n = shapes[sh][0], t = shapes[sh][1], cols = shapes[sh][2], ny = n * t * cols;
            float *y = xmalloc_floats(ny);
            fill_uniform(y, ny, -3, 3);
            uint16_t *y0 = to_dt(dt, y, ny), *y16 = xmalloc_halves(ny);
            be->sinusoid_add(be, ZT_F32, y, n, t, cols);
            for (int threads = 1; threads <= 3; threads += 2) {
                omp_set_num_threads(threads);
                memcpy(y16, y0, (size_t)ny * sizeof *y16);
                be->sinusoid_add(be, dt, y16, n, t, cols);
                assert_dt_equal(dt, y16, y, ny, "sinusoid_add y");
            }
            omp_set_num_threads(default_threads);
            free(y);
            free(y0);
            free(y16);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_forward),
        cmocka_unit_test(test_embedding_backward),
        cmocka_unit_test(test_sinusoid_hand_values),
        cmocka_unit_test(test_sinusoid_add),
        cmocka_unit_test(test_layernorm_forward),
        cmocka_unit_test(test_layernorm_single_column),
        cmocka_unit_test(test_layernorm_backward),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_thread_determinism),
        cmocka_unit_test(test_embedding_typed),
        cmocka_unit_test(test_layernorm_typed),
        cmocka_unit_test(test_sinusoid_typed),
    };
    return cmocka_run_group_tests_name("backend_nn", tests, setup, teardown);
}
