/*
 * test_backend_nn: the CPU backend's transformer-layer ops against independent
 * references written here in double precision (naive loops), gradients against
 * central finite differences of those references, dropout masks against
 * engine/rng.h's definition, and identical bits across thread counts.
 *
 * Tolerances, stated per check: float32 forward values within ~1e-5 relative
 * to the scale of the terms; gradients within 1e-5 of the largest finite
 * difference of the tensor plus 1e-4 relative; ops whose result is one
 * correctly rounded float operation (copies, adds, dy / len, x * scale) exact.
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
#include "engine/cpu/cpu.h"
#include "tests/unit/test_rng.h"
#include "engine/rng.h"


static void fill_value(float *x, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
}

static float *xmalloc_floats(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

static double *xmalloc_doubles(int64_t n)
{
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

static float *dup_floats(const float *x, int64_t n)
{
    float *p = xmalloc_floats(n);
    memcpy(p, x, (size_t)n * sizeof *p);
    return p;
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* Gradient check: analytic float values against finite differences. */
static void check_grad(const char *what, const float *analytic, const double *fd, int64_t n)
{
    double scale = max_abs(fd, n);
    for (int64_t i = 0; i < n; i++)
        if (fabs(analytic[i] - fd[i]) > 1e-5 * scale + 1e-4 * fabs(fd[i]) + 1e-12)
            fail_msg("%s[%ld]: analytic %.9g, finite difference %.9g", what, (long)i,
                     analytic[i], fd[i]);
}

/* OMP_NUM_THREADS at start, restored after tests that vary the thread count. */
static int default_threads;

static int setup(void **state)
{
    default_threads = omp_get_max_threads();
    zt_backend *be = calloc(1, sizeof *be);
    if (!be || zt_backend_cpu_init(be) != ZT_OK)
        return -1;
    *state = be;
    return 0;
}

static int teardown(void **state)
{
    zt_backend_free(*state);
    free(*state);
    return 0;
}

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
        be->embedding_forward(be, y, ids, table, rows, cols, false);
        for (int64_t r = 0; r < rows; r++)
            assert_memory_equal(y + r * cols, table + ids[r] * cols, (size_t)cols * sizeof *y);

        /* One float add per element: the double sum rounded once is exact. */
        memcpy(y, y0, (size_t)(rows * cols) * sizeof *y);
        be->embedding_forward(be, y, ids, table, rows, cols, true);
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
            be->embedding_backward(be, dtable, ids, dy, rows, cols, vocab, accumulate);
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
    be->sinusoid_add(be, y6, N, T, 6);
    be->sinusoid_add(be, y5, N, T, 5);
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
        be->sinusoid_add(be, y, n, t, cols);
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

static double *to_double(const float *x, int64_t n)
{
    double *d = xmalloc_doubles(n);
    for (int64_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
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
        be->layernorm_forward(be, y, mean, rstd, x, w, b, rows, cols, eps);

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
    be->layernorm_forward(be, y, mean, rstd, x, w, b, 3, 1, 1e-5f);
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
        be->layernorm_forward(be, y, mean, rstd, x, w, b, rows, cols, eps);

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
        be->layernorm_backward(be, dx, dw, db, dy, x, mean, rstd, w, rows, cols, false, false);
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
                be->layernorm_backward(be, dx2, dw2, db2, dy, x, mean, rstd, w, rows, cols,
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
        be->layernorm_backward(be, inplace, dw3, db3, inplace, x, mean, rstd, w, rows, cols,
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

/* ---- batched gemm ---- */

static void check_gemm_batched(const zt_backend *be, bool ta, bool tb, int64_t m, int64_t n,
                               int64_t k, float alpha, float beta, int64_t pad, int64_t gap,
                               int64_t batch)
{
    /* Stored shapes: A_i is (m,k) or (k,m), B_i is (k,n) or (n,k); rows are
     * `pad` wider than the matrix and consecutive matrices `gap` floats apart
     * beyond their storage, so the op must honour strides and leave the
     * padding alone. */
    int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
    int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
    int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
    int64_t sa = a_rows * lda + gap, sb = b_rows * ldb + gap, sc = m * ldc + gap;
    float *a = xmalloc_floats(batch * sa), *b = xmalloc_floats(batch * sb);
    float *c0 = xmalloc_floats(batch * sc);
    fill_uniform(a, batch * sa, -1, 1);
    fill_uniform(b, batch * sb, -1, 1);
    fill_uniform(c0, batch * sc, -1, 1);
    float *c = dup_floats(c0, batch * sc);
    be->gemm_batched(be, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);

    for (int64_t q = 0; q < batch; q++) {
        const float *aq = a + q * sa, *bq = b + q * sb, *c0q = c0 + q * sc, *cq = c + q * sc;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ldc; j++) {
                if (j >= n) {
                    assert_true(cq[i * ldc + j] == c0q[i * ldc + j]);
                    continue;
                }
                double s = 0.0, mag = 0.0;
                for (int64_t p = 0; p < k; p++) {
                    double av = ta ? aq[p * lda + i] : aq[i * lda + p];
                    double bv = tb ? bq[j * ldb + p] : bq[p * ldb + j];
                    s += av * bv;
                    mag += fabs(av * bv);
                }
                double ref = alpha * s + beta * (double)c0q[i * ldc + j];
                mag = fabs(alpha) * mag + fabs(beta * c0q[i * ldc + j]);
                if (fabs(cq[i * ldc + j] - ref) > 1e-5 * mag + 1e-30)
                    fail_msg("gemm_batched ta=%d tb=%d (%ld,%ld,%ld) C%ld[%ld,%ld]=%.9g ref %.9g",
                             ta, tb, (long)m, (long)n, (long)k, (long)q, (long)i, (long)j,
                             cq[i * ldc + j], ref);
            }
        for (int64_t g = m * ldc; g < sc; g++)
            assert_true(cq[g] == c0q[g]);
    }
    free(a);
    free(b);
    free(c0);
    free(c);
}

static void test_gemm_batched(void **state)
{
    const zt_backend *be = *state;
    rng_seed(17);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm_batched(be, ta, tb, 5, 7, 3, 0.7f, -0.3f, 3, 5, 3);
            check_gemm_batched(be, ta, tb, 1, 1, 17, -2.0f, 1.0f, 1, 0, 2);
            check_gemm_batched(be, ta, tb, 13, 4, 9, 1.0f, 0.0f, 0, 0, 1);
            check_gemm_batched(be, ta, tb, 64, 48, 80, 0.25f, 0.5f, 2, 7, 4);
        }
}

static void test_gemm_batched_empty(void **state)
{
    const zt_backend *be = *state;
    /* k == 0: C_i = beta C_i, strides honoured, and lda = ldb = 0 (which
     * OpenBLAS would reject) are accepted since A and B are never read. */
    float c[5] = {1.0f, 2.0f, 99.0f, 3.0f, 4.0f}; /* two (1, 2) matrices, stride 3 */
    be->gemm_batched(be, false, false, 1, 2, 0, 1.0f, c, 0, 0, c, 0, 0, 2.0f, c, 2, 3, 2);
    assert_true(c[0] == 2.0f && c[1] == 4.0f && c[2] == 99.0f && c[3] == 6.0f && c[4] == 8.0f);
    /* beta == 0 assigns zeros, even over NaN. */
    c[0] = NAN;
    be->gemm_batched(be, true, true, 1, 2, 0, 1.0f, c, 0, 0, c, 0, 0, 0.0f, c, 2, 3, 2);
    assert_true(c[0] == 0.0f && c[1] == 0.0f && c[2] == 99.0f && c[3] == 0.0f && c[4] == 0.0f);
    /* m == 0 or batch == 0: nothing touched. */
    c[0] = 5.0f;
    be->gemm_batched(be, false, false, 0, 2, 3, 1.0f, c, 3, 0, c, 2, 0, 0.0f, c, 2, 3, 2);
    be->gemm_batched(be, false, false, 1, 2, 1, 1.0f, c, 1, 0, c, 2, 0, 0.0f, c, 2, 3, 0);
    assert_true(c[0] == 5.0f && c[1] == 0.0f && c[2] == 99.0f);
}

/* ---- attention softmax ---- */

static int64_t allowed_keys(int64_t i, int64_t t, bool causal, const int32_t *lengths, int64_t s)
{
    int64_t allowed = causal ? i + 1 : t;
    if (lengths && lengths[s] < allowed)
        allowed = lengths[s];
    return allowed;
}

/* Softmax of scale * scores over the allowed keys of every row, in double. */
static void attn_softmax_ref(double *p, const double *att, int64_t n, int64_t h, int64_t t,
                             double scale, bool causal, const int32_t *lengths)
{
    for (int64_t r = 0; r < n * h * t; r++) {
        int64_t allowed = allowed_keys(r % t, t, causal, lengths, r / (h * t));
        const double *ar = att + r * t;
        double *pr = p + r * t;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < allowed; j++)
            mx = fmax(mx, scale * ar[j]);
        for (int64_t j = 0; j < allowed; j++)
            sum += exp(scale * ar[j] - mx);
        for (int64_t j = 0; j < t; j++)
            pr[j] = j < allowed ? exp(scale * ar[j] - mx) / sum : 0.0;
    }
}

static void check_attn_softmax_forward(const zt_backend *be, int64_t n, int64_t h, int64_t t,
                                       float scale, double spread, bool causal,
                                       const int32_t *lengths)
{
    int64_t total = n * h * t * t;
    float *att0 = xmalloc_floats(total); // (n, h, t, t)
    fill_uniform(att0, total, -spread, spread);
    float *att = dup_floats(att0, total);
    be->attn_softmax_forward(be, att, n, h, t, scale, causal, lengths);
    double *ad = to_double(att0, total), *ref = xmalloc_doubles(total);
    attn_softmax_ref(ref, ad, n, h, t, scale, causal, lengths);
    for (int64_t r = 0; r < n * h * t; r++) {
        int64_t allowed = allowed_keys(r % t, t, causal, lengths, r / (h * t));
        double sum = 0.0;
        for (int64_t j = 0; j < t; j++) {
            float p = att[r * t + j];
            if (j >= allowed) {
                /* Masked: exactly +0.0. */
                if (p != 0.0f || signbit(p))
                    fail_msg("row %ld key %ld masked but %.9g", (long)r, (long)j, p);
                continue;
            }
            if (fabs(p - ref[r * t + j]) > 1e-5 * ref[r * t + j] + 1e-30)
                fail_msg("row %ld key %ld: %.9g, ref %.9g", (long)r, (long)j, p, ref[r * t + j]);
            sum += p;
        }
        if (allowed > 0 && fabs(sum - 1.0) > 1e-5)
            fail_msg("row %ld sums to %.9g", (long)r, sum);
    }
    free(att0);
    free(att);
    free(ad);
    free(ref);
}

static void test_attn_softmax_forward(void **state)
{
    const zt_backend *be = *state;
    rng_seed(18);
    /* The third sample has no valid key: its rows are all zeros. */
    const int32_t lengths[3] = {5, 7, 0};
    for (int causal = 0; causal < 2; causal++)
        for (int with_len = 0; with_len < 2; with_len++) {
            const int32_t *len = with_len ? lengths : NULL;
            check_attn_softmax_forward(be, 3, 2, 7, 0.35f, 3.0, causal, len);
            /* Scores far beyond expf's range: needs the max subtraction. */
            check_attn_softmax_forward(be, 3, 2, 7, 1.0f, 1000.0, causal, len);
        }
    /* Parallel. */
    const int32_t long_lengths[4] = {64, 1, 33, 50};
    check_attn_softmax_forward(be, 4, 4, 64, 0.125f, 4.0, true, long_lengths);
    check_attn_softmax_forward(be, 4, 4, 64, 0.125f, 4.0, false, NULL);
}

/* sum over entries of dP * softmax(scores), in double. */
static double attn_loss(const double *att, const double *dp, int64_t n, int64_t h, int64_t t,
                        double scale, bool causal, const int32_t *lengths, double *scratch)
{
    attn_softmax_ref(scratch, att, n, h, t, scale, causal, lengths);
    double loss = 0.0;
    for (int64_t i = 0; i < n * h * t * t; i++)
        loss += dp[i] * scratch[i];
    return loss;
}

static void test_attn_softmax_backward(void **state)
{
    const zt_backend *be = *state;
    rng_seed(19);
    enum { N = 3, H = 2, T = 5 };
    const int64_t total = N * H * T * T;
    const int32_t lengths[N] = {3, 5, 0};
    const float scale = 0.6f;
    for (int causal = 0; causal < 2; causal++) {
        float att[N * H * T * T], dp[N * H * T * T]; // (n, h, t, t)
        fill_uniform(att, total, -2, 2);
        fill_uniform(dp, total, -1, 1);
        float p[N * H * T * T];
        memcpy(p, att, sizeof p);
        be->attn_softmax_forward(be, p, N, H, T, scale, causal, lengths);
        float datt[N * H * T * T];
        memcpy(datt, dp, sizeof datt);
        be->attn_softmax_backward(be, datt, p, N * H * T, T, scale);

        double *ad = to_double(att, total), *dpd = to_double(dp, total);
        double *scratch = xmalloc_doubles(total), *fd = xmalloc_doubles(total);
        const double hh = 1e-5;
        for (int64_t i = 0; i < total; i++) {
            double keep = ad[i];
            ad[i] = keep + hh;
            double lp = attn_loss(ad, dpd, N, H, T, scale, causal, lengths, scratch);
            ad[i] = keep - hh;
            double lm = attn_loss(ad, dpd, N, H, T, scale, causal, lengths, scratch);
            ad[i] = keep;
            fd[i] = (lp - lm) / (2 * hh);
        }
        check_grad("dscores", datt, fd, total);
        /* Masked keys (p = 0) get exactly zero gradient. */
        for (int64_t i = 0; i < total; i++)
            if (p[i] == 0.0f)
                assert_true(datt[i] == 0.0f);
        free(ad);
        free(dpd);
        free(scratch);
        free(fd);
    }
}

/* ---- dropout ---- */

/* The contract's definition, straight from engine/rng.h. */
static bool ref_keep(const zt_dropout_desc *d, int64_t s, int64_t i, int64_t j, int64_t k)
{
    uint64_t row_seed = zt_dropout_row_seed(d->seed, d->site, d->step, d->row_keys[s]);
    uint64_t ctr = (uint64_t)((i * d->key_b + j) * d->key_c + k);
    return zt_rng_uniform(row_seed, 0, ctr) >= d->p;
}

static int64_t desc_numel(const zt_dropout_desc *d) { return d->n * d->a * d->b * d->c; }

static void test_dropout_zero_p(void **state)
{
    const zt_backend *be = *state;
    rng_seed(20);
    const uint64_t keys[2] = {3, 4};
    zt_dropout_desc d = {.seed = 1, .site = 2, .step = 3, .row_keys = keys, .n = 2, .a = 3,
                         .b = 100, .c = 70, .key_b = 100, .key_c = 70, .p = 0.0f};
    int64_t total = desc_numel(&d);
    float *x = xmalloc_floats(total), *y = xmalloc_floats(total);
    fill_uniform(x, total, -1, 1);
    x[0] = -0.0f;
    x[1] = INFINITY;
    x[2] = NAN;
    fill_value(y, total, 7.0f);
    be->dropout(be, y, x, &d);
    assert_memory_equal(y, x, (size_t)total * sizeof *x);
    be->dropout(be, y, y, &d);
    assert_memory_equal(y, x, (size_t)total * sizeof *x);
    free(x);
    free(y);
}

static void test_dropout_mask(void **state)
{
    const zt_backend *be = *state;
    rng_seed(21);
    const uint64_t keys[4] = {1000, 1001, 57, 1ull << 40};
    /* 100000 elements, key extents beyond the tensor's. */
    zt_dropout_desc d = {.seed = 42, .site = 17, .step = 9, .row_keys = keys, .n = 4, .a = 10,
                         .b = 50, .c = 50, .key_b = 64, .key_c = 60, .p = 0.3f};
    int64_t total = desc_numel(&d);
    float *x = xmalloc_floats(total), *y = xmalloc_floats(total);
    fill_uniform(x, total, -1, 1);
    be->dropout(be, y, x, &d);

    /* The same float32 formula as the op: x * (1 / (1 - p)), the factor
     * rounded once. */
    const float scale = 1.0f / (1.0f - d.p);
    int64_t kept = 0, at = 0;
    for (int64_t s = 0; s < d.n; s++)
        for (int64_t i = 0; i < d.a; i++)
            for (int64_t j = 0; j < d.b; j++)
                for (int64_t k = 0; k < d.c; k++, at++) {
                    bool keep = ref_keep(&d, s, i, j, k);
                    kept += keep;
                    if (y[at] != (keep ? x[at] * scale : 0.0f))
                        fail_msg("(%ld,%ld,%ld,%ld) keep=%d: y %.9g, x %.9g", (long)s, (long)i,
                                 (long)j, (long)k, keep, y[at], x[at]);
                }
    double frac = (double)kept / (double)total, q = 1.0 - d.p;
    assert_true(fabs(frac - q) <= 4.0 * sqrt(q * (1.0 - q) / (double)total));

    /* Deterministic: same call, same bits; in place; any thread count. */
    float *y2 = xmalloc_floats(total);
    be->dropout(be, y2, x, &d);
    assert_memory_equal(y2, y, (size_t)total * sizeof *y);
    memcpy(y2, x, (size_t)total * sizeof *y2);
    be->dropout(be, y2, y2, &d);
    assert_memory_equal(y2, y, (size_t)total * sizeof *y);
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        be->dropout(be, y2, x, &d);
        assert_memory_equal(y2, y, (size_t)total * sizeof *y);
    }
    omp_set_num_threads(default_threads);
    free(x);
    free(y);
    free(y2);
}

/* Keep decisions of the op on an all-ones tensor. */
static bool *op_mask(const zt_backend *be, const zt_dropout_desc *d)
{
    int64_t total = desc_numel(d);
    float *x = xmalloc_floats(total), *y = xmalloc_floats(total);
    fill_value(x, total, 1.0f);
    be->dropout(be, y, x, d);
    bool *keep = malloc((size_t)total * sizeof *keep);
    assert_non_null(keep);
    for (int64_t i = 0; i < total; i++)
        keep[i] = y[i] != 0.0f;
    free(x);
    free(y);
    return keep;
}

static void test_dropout_padding_and_rank(void **state)
{
    const zt_backend *be = *state;
    /* Full-size batch: b = key_b, c = key_c, samples keyed 70 and 71. */
    const uint64_t keys_full[2] = {70, 71};
    zt_dropout_desc full = {.seed = 5, .site = 33, .step = 2, .row_keys = keys_full, .n = 2,
                            .a = 3, .b = 12, .c = 9, .key_b = 12, .key_c = 9, .p = 0.5f};
    /* A padded-less batch: shorter b and c, sample 71 alone at position 0 (as
     * on another rank). */
    const uint64_t keys_short[1] = {71};
    zt_dropout_desc part = full;
    part.row_keys = keys_short;
    part.n = 1;
    part.b = 5;
    part.c = 4;
    bool *mf = op_mask(be, &full), *mp = op_mask(be, &part);
    int64_t kept = 0, n_cmp = 0;
    for (int64_t i = 0; i < part.a; i++)
        for (int64_t j = 0; j < part.b; j++)
            for (int64_t k = 0; k < part.c; k++) {
                bool a = mf[((1 * full.a + i) * full.b + j) * full.c + k];
                bool b = mp[(i * part.b + j) * part.c + k];
                assert_true(a == b);
                kept += a;
                n_cmp++;
            }
    assert_true(kept > 0 && kept < n_cmp); /* the comparison saw both kinds */
    free(mf);
    free(mp);
}

/* Fraction of positions where two descriptors' masks disagree. */
static double mask_disagreement(const zt_backend *be, const zt_dropout_desc *d1,
                                const zt_dropout_desc *d2)
{
    bool *m1 = op_mask(be, d1), *m2 = op_mask(be, d2);
    int64_t total = desc_numel(d1), diff = 0;
    for (int64_t i = 0; i < total; i++)
        diff += m1[i] != m2[i];
    free(m1);
    free(m2);
    return (double)diff / (double)total;
}

static void test_dropout_keys_differ(void **state)
{
    const zt_backend *be = *state;
    const uint64_t keys[2] = {10, 11}, other_keys[2] = {12, 13};
    zt_dropout_desc base = {.seed = 7, .site = 1, .step = 4, .row_keys = keys, .n = 2, .a = 4,
                            .b = 50, .c = 50, .key_b = 50, .key_c = 50, .p = 0.5f};
    zt_dropout_desc v[4] = {base, base, base, base};
    v[0].row_keys = other_keys;
    v[1].site = 2;
    v[2].step = 5;
    v[3].seed = 8;
    /* Independent masks disagree at 2 p (1 - p) = 1/2 of 20000 positions;
     * +-0.05 is 14 sigma. */
    for (int i = 0; i < 4; i++) {
        double f = mask_disagreement(be, &base, &v[i]);
        if (fabs(f - 0.5) > 0.05)
            fail_msg("variant %d: masks disagree at %.4f of positions", i, f);
    }
}

static void test_dropout_backward(void **state)
{
    const zt_backend *be = *state;
    rng_seed(22);
    const uint64_t keys[3] = {5, 6, 7};
    zt_dropout_desc d = {.seed = 3, .site = 9, .step = 1, .row_keys = keys, .n = 3, .a = 2,
                         .b = 30, .c = 20, .key_b = 32, .key_c = 32, .p = 0.25f};
    int64_t total = desc_numel(&d);
    float *x = xmalloc_floats(total), *y = xmalloc_floats(total);
    float *dy = xmalloc_floats(total), *dx = xmalloc_floats(total);
    fill_uniform(x, total, 0.5, 1.5); /* nonzero, so y == 0 means dropped */
    fill_uniform(dy, total, -1.5, -0.5);
    be->dropout(be, y, x, &d);
    be->dropout(be, dx, dy, &d);
    const float scale = 1.0f / (1.0f - d.p);
    for (int64_t i = 0; i < total; i++) {
        assert_true((y[i] == 0.0f) == (dx[i] == 0.0f));
        assert_true(dx[i] == (y[i] == 0.0f ? 0.0f : dy[i] * scale));
    }
    /* In place on the gradient, as the layers call it. */
    be->dropout(be, dy, dy, &d);
    assert_memory_equal(dy, dx, (size_t)total * sizeof *dx);

    /* A non-finite value at a dropped position stays visible (x * 0 = NaN,
     * as in torch), so the overflow check still sees it. */
    int64_t dropped = 0;
    while (dropped < total && y[dropped] != 0.0f)
        dropped++;
    assert_true(dropped < total);
    x[dropped] = INFINITY;
    be->dropout(be, y, x, &d);
    assert_true(isnan(y[dropped]));
    free(x);
    free(y);
    free(dy);
    free(dx);
}

/* ---- mean pooling ---- */

static void check_mean_pool(const zt_backend *be, int64_t n, int64_t t, int64_t cols,
                            const int32_t *lengths)
{
    float *x = xmalloc_floats(n * t * cols);  // (n, t, cols)
    float *y = xmalloc_floats(n * cols);      // (n, cols)
    float *dy = xmalloc_floats(n * cols);     // (n, cols)
    float *dx = xmalloc_floats(n * t * cols); // (n, t, cols)
    fill_uniform(x, n * t * cols, -1, 3);
    fill_uniform(dy, n * cols, -1, 1);
    fill_value(y, n * cols, NAN);
    fill_value(dx, n * t * cols, NAN); /* every element must be assigned */
    be->mean_pool_forward(be, y, x, lengths, n, t, cols);
    be->mean_pool_backward(be, dx, dy, lengths, n, t, cols);
    for (int64_t s = 0; s < n; s++) {
        int64_t len = lengths ? lengths[s] : t;
        for (int64_t j = 0; j < cols; j++) {
            double ref = 0.0, mag = 0.0;
            float ordered = 0.0f; /* the contract's order: float32, increasing i */
            for (int64_t i = 0; i < len; i++) {
                float v = x[(s * t + i) * cols + j];
                ref += v;
                mag += fabs(v);
                ordered += v;
            }
            ref /= (double)len;
            mag /= (double)len;
            float got = y[s * cols + j];
            if (fabs(got - ref) > 1e-5 * mag || got != ordered / (float)len)
                fail_msg("y[%ld,%ld] = %.9g, ref %.9g", (long)s, (long)j, got, ref);
            /* dy / len, one correctly rounded division; zeros past len. */
            for (int64_t i = 0; i < t; i++) {
                float g = dx[(s * t + i) * cols + j];
                float want = i < len ? (float)((double)dy[s * cols + j] / (double)len) : 0.0f;
                if (g != want)
                    fail_msg("dx[%ld,%ld,%ld] = %.9g, want %.9g", (long)s, (long)i, (long)j, g,
                             want);
            }
        }
    }
    free(x);
    free(y);
    free(dy);
    free(dx);
}

static void test_mean_pool(void **state)
{
    const zt_backend *be = *state;
    rng_seed(23);
    const int32_t lengths[3] = {6, 1, 3};
    check_mean_pool(be, 3, 6, 10, lengths);
    check_mean_pool(be, 3, 6, 10, NULL);
    const int32_t long_lengths[8] = {64, 1, 2, 63, 32, 17, 64, 5}; /* parallel */
    check_mean_pool(be, 8, 64, 80, long_lengths);
    check_mean_pool(be, 8, 64, 80, NULL);
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
        be->layernorm_forward(be, q[0], q[1], q[2], x, w, b, ROWS, COLS, 1e-5f);
        be->layernorm_backward(be, q[3], q[4], q[5], dy, x, q[1], q[2], w, ROWS, COLS, false,
                               false);
        be->embedding_backward(be, q[6], ids, dy, ROWS, COLS, VOCAB, false);
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
        cmocka_unit_test(test_gemm_batched),
        cmocka_unit_test(test_gemm_batched_empty),
        cmocka_unit_test(test_attn_softmax_forward),
        cmocka_unit_test(test_attn_softmax_backward),
        cmocka_unit_test(test_dropout_zero_p),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_dropout_padding_and_rank),
        cmocka_unit_test(test_dropout_keys_differ),
        cmocka_unit_test(test_dropout_backward),
        cmocka_unit_test(test_mean_pool),
        cmocka_unit_test(test_thread_determinism),
    };
    return cmocka_run_group_tests_name("backend_nn", tests, setup, teardown);
}
