/*
 * test_backend_fused: the CPU backend's fused epilogues (residual +
 * layernorm, linear + bias + activation, activation gradient + bias gradient)
 * and its linear backward (both products at once on two threads)
 * against independent float64 references written here (naive loops), against
 * the op-by-op sequences they replace (the --fused-ops off path, which must
 * give the same bits when it makes the same BLAS calls on as many threads),
 * and across thread counts (identical bits, except where OpenBLAS itself
 * splits a product differently: see linear_backward_case). Their typed
 * forms on bf16 and fp16 bit for bit against the fp32 ops, with the
 * intermediates the contract rounds rounded (test_nn.h). tests/run.sh runs
 * this test under every OPENBLAS_CORETYPE of Haswell, SkylakeX, Zen and
 * Sandybridge that the machine can execute.
 *
 * Tolerances: x1 = x + branch is one correctly rounded add, so exact;
 * layernorm outputs within 1e-5 of the reference (|y| ~ 1); linear outputs
 * within 1e-5 of the sum of |x w| terms plus |b|; dpre within 1e-5 relative
 * (one product and a tanh); dbias within 1e-5 of the column's sum of |dpre|;
 * a linear backward's dw and dx within 1e-5 of their sums of |terms|, and
 * its products on one thread each within 2 gamma_k of the same products on
 * two threads (two orders of a k-term fp32 sum).
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

#define EPS 1e-5f

static double gelu_ref(double v)
{
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

static double gelu_grad_ref(double v)
{
    double k = sqrt(2.0 / M_PI), th = tanh(k * (v + 0.044715 * v * v * v));
    return 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * v * v);
}

static double act_ref(double v, zt_act act)
{
    return act == ZT_ACT_GELU ? gelu_ref(v) : act == ZT_ACT_RELU ? (v < 0 ? 0.0 : v) : v;
}

static void assert_floats_equal(const float *a, const float *b, int64_t n, const char *what)
{
    if (memcmp(a, b, (size_t)n * sizeof *a) != 0)
        fail_msg("%s: the fused op's bits differ from the op-by-op sequence", what);
}

/* ---- residual + layernorm ---- */

static void test_residual_layernorm(void **state)
{
    const zt_backend *be = *state;
    rng_seed(31);
    const int64_t shapes[][2] = {{5, 33}, {3, 1}, {600, 130}}; /* the last runs in parallel */
    for (size_t sh = 0; sh < 3; sh++) {
        int64_t rows = shapes[sh][0], cols = shapes[sh][1], n = rows * cols;
        float *x = xmalloc_floats(n), *br = xmalloc_floats(n), *w = xmalloc_floats(cols),
              *b = xmalloc_floats(cols);
        fill_uniform(x, n, 1.0, 3.0); /* a mean far from 0 */
        fill_uniform(br, n, -1, 1);
        fill_uniform(w, cols, 0.5, 1.5);
        fill_uniform(b, cols, -0.5, 0.5);
        float *x1 = xmalloc_floats(n), *y = xmalloc_floats(n), *mean = xmalloc_floats(rows),
              *rstd = xmalloc_floats(rows);
        fill_value(x1, n, NAN);
        fill_value(y, n, NAN);
        be->residual_layernorm_forward(be, ZT_F32, x1, y, mean, rstd, x, br, w, b, rows, cols, EPS);
        for (int64_t r = 0; r < rows; r++) {
            double m = 0, var = 0;
            for (int64_t j = 0; j < cols; j++) {
                float s = x1[r * cols + j];
                assert_true(s == (float)((double)x[r * cols + j] + (double)br[r * cols + j]));
                m += s;
            }
            m /= (double)cols;
            for (int64_t j = 0; j < cols; j++)
                var += ((double)x1[r * cols + j] - m) * ((double)x1[r * cols + j] - m);
            var /= (double)cols;
            double rs = 1.0 / sqrt(var + (double)EPS);
            assert_true(fabs(mean[r] - m) <= 1e-6 * fabs(m) + 1e-7);
            assert_true(fabs(rstd[r] - rs) <= 1e-6 * rs);
            for (int64_t j = 0; j < cols; j++) {
                double ref = ((double)x1[r * cols + j] - m) * rs * w[j] + b[j];
                if (fabs(y[r * cols + j] - ref) > 1e-5)
                    fail_msg("y[%ld][%ld] = %.9g, reference %.9g", (long)r, (long)j,
                             y[r * cols + j], ref);
            }
        }
        /* The op-by-op sequence: copy, axpy, layernorm. */
        float *x1u = dup_floats(x, n), *yu = xmalloc_floats(n), *mu = xmalloc_floats(rows),
              *ru = xmalloc_floats(rows);
        be->axpy(be, ZT_F32, x1u, 1.0f, br, n);
        be->layernorm_forward(be, ZT_F32, yu, mu, ru, x1u, w, b, rows, cols, EPS);
        assert_floats_equal(x1, x1u, n, "x1");
        assert_floats_equal(y, yu, n, "y");
        assert_floats_equal(mean, mu, rows, "mean");
        assert_floats_equal(rstd, ru, rows, "rstd");
        /* In place on the branch (what a post-norm layer may do). */
        float *inplace = dup_floats(br, n);
        be->residual_layernorm_forward(be, ZT_F32, inplace, y, mean, rstd, x, inplace, w, b, rows, cols,
                                       EPS);
        assert_floats_equal(inplace, x1u, n, "x1 in place of branch");
        assert_floats_equal(y, yu, n, "y (x1 in place of branch)");
        free(inplace);
        free(x1u), free(yu), free(mu), free(ru);
        free(x), free(br), free(w), free(b), free(x1), free(y), free(mean), free(rstd);
    }
}

/* ---- linear + bias + activation ---- */

static void test_linear_act_forward(void **state)
{
    const zt_backend *be = *state;
    rng_seed(32);
    const int64_t shapes[][3] = {{7, 5, 9}, {300, 48, 130}}; /* rows, in, out */
    for (size_t sh = 0; sh < 2; sh++) {
        int64_t rows = shapes[sh][0], in = shapes[sh][1], out = shapes[sh][2], n = rows * out;
        float *x = xmalloc_floats(rows * in), *w = xmalloc_floats(out * in),
              *b = xmalloc_floats(out);
        fill_uniform(x, rows * in, -1, 1);
        fill_uniform(w, out * in, -1, 1);
        fill_uniform(b, out, -1, 1);
        for (zt_act act = ZT_ACT_NONE; act <= ZT_ACT_GELU; act++) {
            for (int keep = 0; keep < 2; keep++) {
                float *y = xmalloc_floats(n), *pre = keep ? xmalloc_floats(n) : NULL;
                fill_value(y, n, NAN);
                be->linear_act_forward(be, ZT_F32, y, pre, x, w, b, rows, in, out, act);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t o = 0; o < out; o++) {
                        double v = b[o], mag = fabs(b[o]);
                        for (int64_t k = 0; k < in; k++) {
                            v += (double)x[r * in + k] * w[o * in + k];
                            mag += fabs((double)x[r * in + k] * w[o * in + k]);
                        }
                        double tol = 1e-5 * mag + 1e-6;
                        if (pre && fabs(pre[r * out + o] - v) > tol)
                            fail_msg("pre[%ld][%ld] = %.9g, reference %.9g", (long)r, (long)o,
                                     pre[r * out + o], v);
                        if (fabs(y[r * out + o] - act_ref(v, act)) > tol)
                            fail_msg("act %d: y[%ld][%ld] = %.9g, reference %.9g", act, (long)r,
                                     (long)o, y[r * out + o], act_ref(v, act));
                    }
                /* The op-by-op sequence: gemm, bias_add, activation. */
                float *v = xmalloc_floats(n), *yu = xmalloc_floats(n);
                be->gemm(be, ZT_F32, ZT_F32, false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, v, out);
                be->bias_add(be, ZT_F32, v, b, rows, out);
                if (act == ZT_ACT_GELU)
                    be->gelu_forward(be, yu, v, n);
                else if (act == ZT_ACT_RELU)
                    be->relu_forward(be, yu, v, n);
                else
                    memcpy(yu, v, (size_t)n * sizeof *yu);
                assert_floats_equal(y, yu, n, "y");
                if (pre)
                    assert_floats_equal(pre, v, n, "pre");
                free(v), free(yu), free(y), free(pre);
            }
        }
        free(x), free(w), free(b);
    }
}

/* ---- activation gradient + bias gradient ---- */

static void act_bias_grad_case(const zt_backend *be, int64_t rows, int64_t cols, zt_act act,
                               bool accumulate)
{
    int64_t n = rows * cols;
    float *dy = xmalloc_floats(n), *pre = xmalloc_floats(n), *db0 = xmalloc_floats(cols);
    fill_uniform(dy, n, -1, 1);
    fill_uniform(pre, n, -3, 3);
    if (act == ZT_ACT_RELU) /* ReLU reads its output y >= 0 */
        for (int64_t i = 0; i < n; i++)
            pre[i] = pre[i] < 0 ? 0.0f : pre[i];
    fill_uniform(db0, cols, -1, 1);
    float *dpre = xmalloc_floats(n), *db = dup_floats(db0, cols);
    fill_value(dpre, n, NAN);
    be->act_bias_grad(be, ZT_F32, dpre, db, dy, pre, rows, cols, act, accumulate);
    for (int64_t j = 0; j < cols; j++) {
        double sum = accumulate ? db0[j] : 0.0, mag = fabs(sum);
        for (int64_t r = 0; r < rows; r++) {
            int64_t i = r * cols + j;
            double d = act == ZT_ACT_GELU   ? dy[i] * gelu_grad_ref(pre[i])
                       : act == ZT_ACT_RELU ? (pre[i] > 0 ? dy[i] : 0.0)
                                            : dy[i];
            if (fabs(dpre[i] - d) > 1e-5 * fabs(d) + 1e-7)
                fail_msg("act %d: dpre[%ld] = %.9g, reference %.9g", act, (long)i, dpre[i], d);
            sum += d;
            mag += fabs(d);
        }
        if (fabs(db[j] - sum) > 1e-5 * mag + 1e-7)
            fail_msg("act %d: dbias[%ld] = %.9g, reference %.9g", act, (long)j, db[j], sum);
    }
    /* The op-by-op sequence: activation backward, then bias_grad. */
    float *du = xmalloc_floats(n), *dbu = dup_floats(db0, cols);
    if (act == ZT_ACT_GELU)
        be->gelu_backward(be, du, dy, pre, n);
    else if (act == ZT_ACT_RELU)
        be->relu_backward(be, du, dy, pre, n);
    else
        memcpy(du, dy, (size_t)n * sizeof *du);
    be->bias_grad(be, ZT_F32, dbu, du, rows, cols, accumulate);
    assert_floats_equal(dpre, du, n, "dpre");
    assert_floats_equal(db, dbu, cols, "dbias");
    /* In place (dpre == dy), on one thread: the same bits again. */
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    float *inplace = dup_floats(dy, n), *db1 = dup_floats(db0, cols);
    be->act_bias_grad(be, ZT_F32, inplace, db1, inplace, pre, rows, cols, act, accumulate);
    omp_set_num_threads(threads);
    assert_floats_equal(inplace, du, n, "dpre in place, one thread");
    assert_floats_equal(db1, dbu, cols, "dbias, one thread");
    free(inplace), free(db1), free(du), free(dbu);
    free(dy), free(pre), free(db0), free(dpre), free(db);
}

static void test_act_bias_grad(void **state)
{
    const zt_backend *be = *state;
    rng_seed(33);
    /* 130 columns are not whole column blocks; 600 x 130 runs in parallel. */
    const int64_t shapes[][2] = {{9, 5}, {600, 130}};
    for (size_t sh = 0; sh < 2; sh++)
        for (zt_act act = ZT_ACT_NONE; act <= ZT_ACT_GELU; act++)
            for (int acc = 0; acc < 2; acc++)
                act_bias_grad_case(be, shapes[sh][0], shapes[sh][1], act, acc);
}

/* ---- linear backward: both products at once ---- */

/* The op-by-op sequence a linear backward replaces (the --fused-ops off
 * path), each product on `threads` threads, into copies of dw0, db0, dx0. */
static void linear_backward_sequence(const zt_backend *be, int threads, const float *dy,
                                     int64_t ldy, const float *x, const float *w, int64_t rows,
                                     int64_t in, int64_t out, bool with_db, bool with_dx, bool acc,
                                     bool dx_acc, float *dw, float *db, float *dx)
{
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    be->gemm(be, ZT_F32, ZT_F32, true, false, out, in, rows, 1.0f, dy, ldy, x, in,
             acc ? 1.0f : 0.0f, dw, in);
    if (with_db)
        be->bias_grad(be, ZT_F32, db, dy, rows, out, acc);
    if (with_dx)
        be->gemm(be, ZT_F32, ZT_F32, false, false, rows, in, out, 1.0f, dy, ldy, w, in,
                 dx_acc ? 1.0f : 0.0f, dx, in);
    omp_set_num_threads(saved);
}

/* |a - b| within twice the bound of one fp32 sum of k terms whose |terms|
 * add up to mag[i]: gamma_k = k u / (1 - k u), u = 2^-24 (Higham 3.1). Two
 * orders of the same sum differ by at most that. */
static void assert_sum_orders_close(const float *a, const float *b, const double *mag,
                                    int64_t n, int64_t k, const char *what)
{
    double u = ldexp(1.0, -24), gamma = (double)k * u / (1.0 - (double)k * u);
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > 2.0 * gamma * mag[i])
            fail_msg("%s[%ld] = %.9g and %.9g differ by more than two orders of one sum may "
                     "(%.3g)",
                     what, (long)i, a[i], b[i], 2.0 * gamma * mag[i]);
}

static void linear_backward_case(const zt_backend *be, int64_t rows, int64_t in, int64_t out,
                                 int64_t ldy, bool with_db, bool with_dx, bool acc, bool dx_acc)
{
    float *dy = xmalloc_floats(rows * ldy), *x = xmalloc_floats(rows * in),
          *w = xmalloc_floats(out * in), *dw0 = xmalloc_floats(out * in),
          *db0 = xmalloc_floats(out), *dx0 = xmalloc_floats(rows * in);
    fill_uniform(dy, rows * ldy, -1, 1);
    fill_uniform(x, rows * in, -1, 1);
    fill_uniform(w, out * in, -1, 1);
    fill_uniform(dw0, out * in, -1, 1);
    fill_uniform(db0, out, -1, 1);
    fill_uniform(dx0, rows * in, -1, 1);
    /* The sequence with each product on one thread and on two: whether
     * OpenBLAS gives a product the same bits on one thread as on two depends
     * on its kernel (Haswell's and Zen's sgemm do not; SkylakeX's and
     * Sandybridge's do), so the two are kept apart. */
    float *dw1 = dup_floats(dw0, out * in), *db1 = dup_floats(db0, out),
          *dx1 = dup_floats(dx0, rows * in), *dw2 = dup_floats(dw0, out * in),
          *db2 = dup_floats(db0, out), *dx2 = dup_floats(dx0, rows * in);
    linear_backward_sequence(be, 1, dy, ldy, x, w, rows, in, out, with_db, with_dx, acc, dx_acc,
                             dw1, db1, dx1);
    linear_backward_sequence(be, 2, dy, ldy, x, w, rows, in, out, with_db, with_dx, acc, dx_acc,
                             dw2, db2, dx2);
    /* The float64 sums and their magnitudes (dbias is bias_grad's, tested
     * with act_bias_grad). */
    double *dw_ref = xmalloc_doubles(out * in), *dw_mag = xmalloc_doubles(out * in);
    double *dx_ref = xmalloc_doubles(rows * in), *dx_mag = xmalloc_doubles(rows * in);
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double v = acc ? dw0[o * in + i] : 0.0, mag = fabs(v);
            for (int64_t r = 0; r < rows; r++) {
                v += (double)dy[r * ldy + o] * x[r * in + i];
                mag += fabs((double)dy[r * ldy + o] * x[r * in + i]);
            }
            dw_ref[o * in + i] = v, dw_mag[o * in + i] = mag;
        }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < in; i++) {
            double v = dx_acc ? dx0[r * in + i] : 0.0, mag = fabs(v);
            for (int64_t o = 0; o < out; o++) {
                v += (double)dy[r * ldy + o] * w[o * in + i];
                mag += fabs((double)dy[r * ldy + o] * w[o * in + i]);
            }
            dx_ref[r * in + i] = v, dx_mag[r * in + i] = mag;
        }
    for (int64_t i = 0; i < out * in; i++)
        if (fabs(dw1[i] - dw_ref[i]) > 1e-5 * dw_mag[i] + 1e-6)
            fail_msg("dw[%ld] = %.9g, reference %.9g", (long)i, dw1[i], dw_ref[i]);
    for (int64_t i = 0; with_dx && i < rows * in; i++)
        if (fabs(dx1[i] - dx_ref[i]) > 1e-5 * dx_mag[i] + 1e-6)
            fail_msg("dx[%ld] = %.9g, reference %.9g", (long)i, dx1[i], dx_ref[i]);
    /* One thread: the sequence's calls, so its bits. Two threads with dx:
     * the products at once, each on one thread, so the bits of the
     * one-thread sequence, and within two sum orders of the two-thread one
     * (what --fused-ops off computes there). Two threads without dx: the
     * two-thread sequence's calls. */
    int threads = omp_get_max_threads();
    for (int t = 2; t >= 1; t--) {
        omp_set_num_threads(t);
        float *dw = dup_floats(dw0, out * in), *db = dup_floats(db0, out),
              *dx = dup_floats(dx0, rows * in);
        be->linear_backward(be, ZT_F32, with_dx ? dx : NULL, dw, with_db ? db : NULL, dy, ldy, x,
                            w, rows, in, out, acc, dx_acc);
        bool one_each = t == 1 || with_dx;
        assert_floats_equal(dw, one_each ? dw1 : dw2, out * in, "dw");
        assert_floats_equal(db, one_each ? db1 : db2, out, "dbias");
        assert_floats_equal(dx, one_each ? dx1 : dx2, rows * in, "dx");
        if (t == 2) {
            assert_sum_orders_close(dw, dw2, dw_mag, out * in, rows + acc, "dw");
            assert_sum_orders_close(dx, dx2, dx_mag, rows * in, out + dx_acc, "dx");
        }
        free(dw), free(db), free(dx);
    }
    omp_set_num_threads(threads);
    free(dw_ref), free(dw_mag), free(dx_ref), free(dx_mag);
    free(dw1), free(db1), free(dx1), free(dw2), free(db2), free(dx2);
    free(dy), free(x), free(w), free(dw0), free(db0), free(dx0);
}

static void test_linear_backward(void **state)
{
    const zt_backend *be = *state;
    rng_seed(34);
    /* rows, in, out, ldy: small; OpenBLAS-threaded sizes; a padded dy (the
     * lm_head's vocabulary, no bias). */
    const int64_t shapes[][4] = {{7, 5, 9, 9}, {300, 96, 130, 130}, {64, 48, 65, 128}};
    for (size_t sh = 0; sh < 3; sh++)
        for (int v = 0; v < 16; v++) {
            bool with_db = v & 1, with_dx = v & 2, acc = v & 4, dx_acc = v & 8;
            if (with_db && shapes[sh][3] != shapes[sh][2])
                continue;
            linear_backward_case(be, shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3],
                                 with_db, with_dx, acc, dx_acc);
        }
}

/* ---- typed ops on bf16 and fp16 (bit for bit, test_nn.h) ---- */

/* x1 = x + branch rounded; y, mean, rstd the fp32 layernorm of x1 as stored.
 * x1 in its own tensor, over x and over branch. 300 x 384 spans two of the
 * op's row blocks. */
static void check_residual_layernorm_typed(const zt_backend *be, zt_dtype dt, int64_t rows,
                                           int64_t cols)
{
    int64_t nx = rows * cols;
    float *x = xmalloc_floats(nx), *br = xmalloc_floats(nx), *w = xmalloc_floats(cols);
    float *b = xmalloc_floats(cols), *y = xmalloc_floats(nx);
    float *mean = xmalloc_floats(rows), *rstd = xmalloc_floats(rows);
    float *mean16 = xmalloc_floats(rows), *rstd16 = xmalloc_floats(rows);
    fill_uniform(x, nx, -2, 2);
    fill_uniform(br, nx, -2, 2);
    fill_uniform(w, cols, 0.5, 1.5);
    fill_uniform(b, cols, -0.5, 0.5);
    uint16_t *x16 = to_dt(dt, x, nx), *br16 = to_dt(dt, br, nx), *w16 = to_dt(dt, w, cols);
    uint16_t *b16 = to_dt(dt, b, cols), *y16 = xmalloc_halves(nx);
    uint16_t *x116 = xmalloc_halves(nx), *xa = xmalloc_halves(nx), *bra = xmalloc_halves(nx);
    float *x1 = dup_floats(x, nx);
    be->axpy(be, ZT_F32, x1, 1.0f, br, nx); /* what copy_d2d + axpy give */
    for (int alias = 0; alias < 3; alias++) {
        memcpy(xa, x16, (size_t)nx * sizeof *xa);
        memcpy(bra, br16, (size_t)nx * sizeof *bra);
        uint16_t *out = alias == 0 ? x116 : alias == 1 ? xa : bra;
        be->residual_layernorm_forward(be, dt, out, y16, mean16, rstd16, xa, bra, w16, b16, rows,
                                       cols, EPS);
        assert_dt_equal(dt, out, x1, nx, alias ? "x1 (over an input)" : "x1");
        float *x1r = dup_floats(x1, nx);
        round_dt(dt, x1r, nx);
        be->layernorm_forward(be, ZT_F32, y, mean, rstd, x1r, w, b, rows, cols, EPS);
        assert_dt_equal(dt, y16, y, nx, "residual_layernorm y");
        assert_f32_equal(mean16, mean, rows, "residual_layernorm mean");
        assert_f32_equal(rstd16, rstd, rows, "residual_layernorm rstd");
        free(x1r);
    }
    free(x), free(br), free(w), free(b), free(y), free(mean), free(rstd), free(mean16);
    free(rstd16), free(x16), free(br16), free(w16), free(b16), free(y16), free(x116), free(xa);
    free(bra), free(x1);
}

static void test_residual_layernorm_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(35);
    for (int d = 0; d < N_TYPED_DTS; d++) {
        check_residual_layernorm_typed(be, TYPED_DTS[d], 5, 19);
        check_residual_layernorm_typed(be, TYPED_DTS[d], 300, 384);
    }
}

/* pre = round(x w^T + bias) by the fp32 op (activation NONE); y =
 * round(act(pre as stored)) by the fp32 activation op. Every activation,
 * with and without pre and bias. */
static void check_linear_act_typed(const zt_backend *be, zt_dtype dt, int64_t rows, int64_t in,
                                   int64_t out)
{
    int64_t ny = rows * out;
    float *x = xmalloc_floats(rows * in), *w = xmalloc_floats(out * in);
    float *bias = xmalloc_floats(out), *v = xmalloc_floats(ny), *y = xmalloc_floats(ny);
    fill_uniform(x, rows * in, -1, 1);
    fill_uniform(w, out * in, -0.5, 0.5);
    fill_uniform(bias, out, -0.5, 0.5);
    uint16_t *x16 = to_dt(dt, x, rows * in), *w16 = to_dt(dt, w, out * in);
    uint16_t *b16 = to_dt(dt, bias, out), *pre16 = xmalloc_halves(ny), *y16 = xmalloc_halves(ny);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        be->linear_act_forward(be, ZT_F32, v, NULL, x, w, with_bias ? bias : NULL, rows, in, out,
                               ZT_ACT_NONE);
        round_dt(dt, v, ny);
        for (int act = ZT_ACT_NONE; act <= ZT_ACT_GELU; act++)
            for (int with_pre = 0; with_pre < 2; with_pre++) {
                memcpy(y, v, (size_t)ny * sizeof *y);
                if (act == ZT_ACT_GELU)
                    be->gelu_forward(be, y, y, ny);
                else if (act == ZT_ACT_RELU)
                    be->relu_forward(be, y, y, ny);
                be->linear_act_forward(be, dt, y16, with_pre ? pre16 : NULL, x16, w16,
                                       with_bias ? b16 : NULL, rows, in, out, (zt_act)act);
                if (with_pre)
                    assert_dt_equal(dt, pre16, v, ny, "linear_act_forward pre");
                assert_dt_equal(dt, y16, y, ny, "linear_act_forward y");
            }
    }
    free(x), free(w), free(bias), free(v), free(y), free(x16), free(w16), free(b16), free(pre16);
    free(y16);
}

static void test_linear_act_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(36);
    for (int d = 0; d < N_TYPED_DTS; d++) {
        check_linear_act_typed(be, TYPED_DTS[d], 7, 5, 9);
        check_linear_act_typed(be, TYPED_DTS[d], 300, 96, 130);
    }
}

/* dpre = round(dy act'(pre)) by the fp32 activation backward; dbias the
 * fp32 bias_grad of dpre as stored. Every activation, accumulating or not,
 * dpre in its own tensor and over dy, at 1 and 3 threads. */
static void check_act_bias_grad_typed(const zt_backend *be, zt_dtype dt, int64_t rows,
                                      int64_t cols)
{
    int64_t n = rows * cols;
    float *dy = xmalloc_floats(n), *pre = xmalloc_floats(n), *d = xmalloc_floats(n);
    float *init = xmalloc_floats(cols), *ref = xmalloc_floats(cols), *got = xmalloc_floats(cols);
    fill_uniform(dy, n, -1, 1);
    fill_uniform(pre, n, -3, 3);
    fill_uniform(init, cols, -1, 1);
    uint16_t *dy16 = to_dt(dt, dy, n), *pre16 = to_dt(dt, pre, n), *dpre16 = xmalloc_halves(n);
    for (int act = ZT_ACT_NONE; act <= ZT_ACT_GELU; act++) {
        memcpy(d, dy, (size_t)n * sizeof *d);
        if (act == ZT_ACT_GELU)
            be->gelu_backward(be, d, d, pre, n);
        else if (act == ZT_ACT_RELU)
            be->relu_backward(be, d, d, pre, n);
        float *stored = dup_floats(d, n);
        round_dt(dt, stored, n);
        for (int acc = 0; acc < 2; acc++) {
            memcpy(ref, init, (size_t)cols * sizeof *ref);
            be->bias_grad(be, ZT_F32, ref, stored, rows, cols, acc);
            for (int in_place = 0; in_place < 2; in_place++)
                for (int threads = 1; threads <= 3; threads += 2) {
                    omp_set_num_threads(threads);
                    if (in_place)
                        memcpy(dpre16, dy16, (size_t)n * sizeof *dpre16);
                    memcpy(got, init, (size_t)cols * sizeof *got);
                    be->act_bias_grad(be, dt, dpre16, got, in_place ? dpre16 : dy16, pre16, rows,
                                      cols, (zt_act)act, acc);
                    assert_dt_equal(dt, dpre16, d, n, in_place ? "dpre (over dy)" : "dpre");
                    assert_f32_equal(got, ref, cols, "act_bias_grad dbias");
                }
            omp_set_num_threads(default_threads);
        }
        free(stored);
    }
    free(dy), free(pre), free(d), free(init), free(ref), free(got), free(dy16), free(pre16);
    free(dpre16);
}

static void test_act_bias_grad_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(37);
    for (int dti = 0; dti < N_TYPED_DTS; dti++) {
        check_act_bias_grad_typed(be, TYPED_DTS[dti], 7, 5);
        check_act_bias_grad_typed(be, TYPED_DTS[dti], 300, 256); /* two row blocks */
    }
}

/* dw (and dbias) fp32 and dx rounded, against the fp32 op on the widened
 * dy, x, w (and dx when accumulating), for every combination of outputs and
 * flags, dy padded where there is no dbias. */
static void linear_backward_typed_case(const zt_backend *be, zt_dtype dt, int64_t rows,
                                       int64_t in, int64_t out, int64_t ldy, int v)
{
    bool with_db = v & 1, with_dx = v & 2, acc = v & 4, dx_acc = v & 8;
    float *dy = xmalloc_floats(rows * ldy), *x = xmalloc_floats(rows * in);
    float *w = xmalloc_floats(out * in), *dx = xmalloc_floats(rows * in);
    float *dw = xmalloc_floats(out * in), *db = xmalloc_floats(out);
    fill_uniform(dy, rows * ldy, -1, 1);
    fill_uniform(x, rows * in, -1, 1);
    fill_uniform(w, out * in, -1, 1);
    fill_uniform(dx, rows * in, -1, 1);
    fill_uniform(dw, out * in, -1, 1);
    fill_uniform(db, out, -1, 1);
    uint16_t *dy16 = to_dt(dt, dy, rows * ldy), *x16 = to_dt(dt, x, rows * in);
    uint16_t *w16 = to_dt(dt, w, out * in), *dx16 = to_dt(dt, dx, rows * in);
    float *dwg = dup_floats(dw, out * in), *dbg = dup_floats(db, out);
    be->linear_backward(be, ZT_F32, with_dx ? dx : NULL, dw, with_db ? db : NULL, dy, ldy, x, w,
                        rows, in, out, acc, dx_acc);
    be->linear_backward(be, dt, with_dx ? dx16 : NULL, dwg, with_db ? dbg : NULL, dy16, ldy, x16,
                        w16, rows, in, out, acc, dx_acc);
    assert_dt_equal(dt, dx16, dx, rows * in, "linear_backward dx");
    assert_f32_equal(dwg, dw, out * in, "linear_backward dw");
    assert_f32_equal(dbg, db, out, "linear_backward dbias");
    free(dy), free(x), free(w), free(dx), free(dw), free(db), free(dy16), free(x16), free(w16);
    free(dx16), free(dwg), free(dbg);
}

static void test_linear_backward_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(38);
    const int64_t shapes[][4] = {{7, 5, 9, 9}, {300, 96, 130, 130}, {64, 48, 65, 128}};
    for (int d = 0; d < N_TYPED_DTS; d++)
        for (size_t sh = 0; sh < 3; sh++)
            for (int v = 0; v < 16; v++)
                if (!(v & 1) || shapes[sh][3] == shapes[sh][2]) /* dbias needs ldy == out */
                    linear_backward_typed_case(be, TYPED_DTS[d], shapes[sh][0], shapes[sh][1],
                                               shapes[sh][2], shapes[sh][3], v);
}

/* --fused-ops off clears exactly the four fused ops. */
static void test_unfuse(void **state)
{
    zt_backend be = *(const zt_backend *)*state;
    assert_non_null(be.residual_layernorm_forward);
    assert_non_null(be.linear_act_forward);
    assert_non_null(be.act_bias_grad);
    assert_non_null(be.linear_backward);
    zt_backend_unfuse(&be);
    assert_null(be.residual_layernorm_forward);
    assert_null(be.linear_act_forward);
    assert_null(be.act_bias_grad);
    assert_null(be.linear_backward);
    assert_non_null(be.layernorm_forward);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_residual_layernorm),
        cmocka_unit_test(test_linear_act_forward),
        cmocka_unit_test(test_act_bias_grad),
        cmocka_unit_test(test_linear_backward),
        cmocka_unit_test(test_residual_layernorm_typed),
        cmocka_unit_test(test_linear_act_typed),
        cmocka_unit_test(test_act_bias_grad_typed),
        cmocka_unit_test(test_linear_backward_typed),
        cmocka_unit_test(test_unfuse),
    };
    return cmocka_run_group_tests_name("backend_fused", tests, setup, teardown);
}
