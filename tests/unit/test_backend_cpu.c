/*
 * test_backend_cpu: every CPU backend op against an independent reference
 * (naive loops in double unless stated), plus finite-difference checks of the
 * cross-entropy gradient and of a Linear+ReLU+cross-entropy backward composed
 * only of backend ops. Sizes include ones above the OpenMP threshold, and the
 * reductions are checked for identical bits across thread counts. The typed
 * forms of gemm, bias_add, bias_grad, axpy and the cross-entropy on bf16 and
 * fp16 tensors are checked bit for bit against their fp32 ops (test_nn.h).
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

static void test_identity_and_memory(void **state)
{
    const zt_backend *be = *state;
    assert_string_equal(be->name, "cpu");
    assert_int_equal(be->kind, ZT_DEVICE_CPU);

    void *p = NULL;
    assert_int_equal(be->alloc(be, 1000 * sizeof(float), &p), ZT_OK);
    assert_int_equal((uintptr_t)p % 64, 0);
    float src[1000], back[1000];
    for (int i = 0; i < 1000; i++)
        src[i] = (float)i - 0.5f;
    be->copy_h2d(be, p, src, sizeof src);
    void *q = NULL;
    assert_int_equal(be->alloc(be, sizeof src, &q), ZT_OK);
    be->copy_d2d(be, q, p, sizeof src);
    be->memset_zero(be, p, 10 * sizeof(float)); /* only the first 10 */
    be->sync(be);
    be->copy_d2h(be, back, q, sizeof back);
    assert_memory_equal(back, src, sizeof src);
    be->copy_d2h(be, back, p, sizeof back);
    for (int i = 0; i < 1000; i++)
        assert_true(back[i] == (i < 10 ? 0.0f : src[i]));
    be->free(be, p);
    be->free(be, q);
}

static void test_alloc_failure(void **state)
{
    const zt_backend *be = *state;
    void *p = NULL;
    zt_status_clear();
    assert_int_equal(be->alloc(be, SIZE_MAX / 2, &p), ZT_ERR_OOM);
    assert_non_null(strstr(zt_status_message(), "bytes"));
    assert_true(strlen(zt_status_hint()) > 0);
}

/* C = alpha op(A) op(B) + beta C on strided storage, in double. Returns the
 * scale sum |alpha a b| + |beta c| per element in `mag` for the tolerance. */
static void gemm_ref(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, double beta,
                     const float *c, int64_t ldc, double *out, double *mag)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0, sa = 0.0;
            for (int64_t p = 0; p < k; p++) {
                double av = ta ? a[p * lda + i] : a[i * lda + p];
                double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += av * bv;
                sa += fabs(av * bv);
            }
            double cv = c[i * ldc + j];
            out[i * n + j] = alpha * s + beta * cv;
            mag[i * n + j] = fabs(alpha) * sa + fabs(beta * cv);
        }
}

static void check_gemm(const zt_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                       float alpha, float beta, int64_t pad)
{
    /* Stored shapes: A is (m,k) or (k,m), B is (k,n) or (n,k); every row is
     * `pad` wider than the matrix so the op must honour the strides. */
    int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
    int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
    int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
    float *a = xmalloc_floats(a_rows * lda);
    float *b = xmalloc_floats(b_rows * ldb);
    float *c = xmalloc_floats(m * ldc);
    float *c0 = xmalloc_floats(m * ldc);
    double *ref = malloc((size_t)(m * n) * sizeof *ref);
    double *mag = malloc((size_t)(m * n) * sizeof *mag);
    assert_non_null(ref);
    assert_non_null(mag);
    fill_uniform(a, a_rows * lda, -1, 1);
    fill_uniform(b, b_rows * ldb, -1, 1);
    fill_uniform(c0, m * ldc, -1, 1);
    memcpy(c, c0, (size_t)(m * ldc) * sizeof *c);

    gemm_ref(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, ref, mag);
    be->gemm(be, ZT_F32, ZT_F32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);

    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double err = fabs(c[i * ldc + j] - ref[i * n + j]);
            if (err > 1e-5 * mag[i * n + j] + 1e-30)
                fail_msg("gemm ta=%d tb=%d (%ld,%ld,%ld) C[%ld,%ld]=%.9g ref %.9g", ta, tb,
                         (long)m, (long)n, (long)k, (long)i, (long)j, c[i * ldc + j],
                         ref[i * n + j]);
        }
        /* The padding is not part of C and must stay untouched. */
        for (int64_t j = n; j < ldc; j++)
            assert_true(c[i * ldc + j] == c0[i * ldc + j]);
    }
    free(a);
    free(b);
    free(c);
    free(c0);
    free(ref);
    free(mag);
}

static void test_gemm(void **state)
{
    const zt_backend *be = *state;
    rng_seed(1);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm(be, ta, tb, 5, 7, 3, 0.7f, -0.3f, 3);
            check_gemm(be, ta, tb, 13, 4, 9, 1.0f, 0.0f, 0);
            check_gemm(be, ta, tb, 1, 1, 17, -2.0f, 1.0f, 1);
            /* Large enough for OpenBLAS's blocked, threaded kernels. */
            check_gemm(be, ta, tb, 131, 97, 263, 0.25f, 0.5f, 5);
        }
}

static void test_gemm_empty(void **state)
{
    const zt_backend *be = *state;
    float c[2] = {3.0f, 4.0f};
    /* k == 0: C = beta C. */
    be->gemm(be, ZT_F32, ZT_F32, false, false, 1, 2, 0, 1.0f, c, 1, c, 2, 2.0f, c, 2);
    assert_true(c[0] == 6.0f && c[1] == 8.0f);
    /* m == 0: nothing to do, nothing touched. */
    be->gemm(be, ZT_F32, ZT_F32, false, false, 0, 2, 3, 1.0f, c, 3, c, 2, 0.0f, c, 2);
    assert_true(c[0] == 6.0f && c[1] == 8.0f);
}

static void test_bias_add(void **state)
{
    const zt_backend *be = *state;
    rng_seed(2);
    const int64_t shapes[][2] = {{3, 5}, {1, 1}, {300, 211}}; /* the last is parallel */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        float *y = xmalloc_floats(rows * cols), *y0 = xmalloc_floats(rows * cols); // (rows, cols)
        float *bias = xmalloc_floats(cols);                                          // (cols)
        fill_uniform(y0, rows * cols, -1, 1);
        fill_uniform(bias, cols, -1, 1);
        memcpy(y, y0, (size_t)(rows * cols) * sizeof *y);
        be->bias_add(be, ZT_F32, y, bias, rows, cols);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++)
                assert_true(y[r * cols + j] == y0[r * cols + j] + bias[j]);
        free(y);
        free(y0);
        free(bias);
    }
}

static void test_bias_grad(void **state)
{
    const zt_backend *be = *state;
    rng_seed(3);
    /* Widths below, at and across the column block, and a parallel case. */
    const int64_t shapes[][2] = {{4, 3}, {7, 64}, {5, 130}, {700, 97}, {1000, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        float *dy = xmalloc_floats(rows * cols); // (rows, cols)
        float *init = xmalloc_floats(cols), *db = xmalloc_floats(cols);
        fill_uniform(dy, rows * cols, -1, 1);
        fill_uniform(init, cols, -1, 1);
        for (int accumulate = 0; accumulate < 2; accumulate++) {
            memcpy(db, init, (size_t)cols * sizeof *db);
            be->bias_grad(be, ZT_F32, db, dy, rows, cols, accumulate);
            for (int64_t j = 0; j < cols; j++) {
                double ref = accumulate ? init[j] : 0.0, mag = fabs(ref);
                for (int64_t r = 0; r < rows; r++) {
                    ref += dy[r * cols + j];
                    mag += fabs(dy[r * cols + j]);
                }
                assert_true(fabs(db[j] - ref) <= 1e-5 * mag);
            }
        }
        /* Column sums run in row order whatever the thread count. */
        float *db1 = xmalloc_floats(cols);
        omp_set_num_threads(1);
        be->bias_grad(be, ZT_F32, db1, dy, rows, cols, false);
        omp_set_num_threads(3);
        be->bias_grad(be, ZT_F32, db, dy, rows, cols, false);
        omp_set_num_threads(default_threads);
        assert_memory_equal(db, db1, (size_t)cols * sizeof *db);
        free(db1);
        free(dy);
        free(init);
        free(db);
    }
}

static void test_relu(void **state)
{
    const zt_backend *be = *state;
    rng_seed(4);
    const int64_t sizes[] = {1, 17, 100003}; /* the last is parallel */
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *x = xmalloc_floats(n), *y = xmalloc_floats(n), *dy = xmalloc_floats(n);
        float *dx = xmalloc_floats(n), *tmp = xmalloc_floats(n);
        fill_uniform(x, n, -1, 1);
        fill_uniform(dy, n, -1, 1);
        x[n / 2] = 0.0f; /* the kink: relu(0) = 0 and no gradient flows */

        be->relu_forward(be, y, x, n);
        for (int64_t i = 0; i < n; i++)
            assert_true(y[i] == (x[i] > 0.0f ? x[i] : 0.0f));
        memcpy(tmp, x, (size_t)n * sizeof *tmp);
        be->relu_forward(be, tmp, tmp, n);
        assert_memory_equal(tmp, y, (size_t)n * sizeof *y);

        be->relu_backward(be, dx, dy, y, n);
        for (int64_t i = 0; i < n; i++)
            assert_true(dx[i] == (y[i] > 0.0f ? dy[i] : 0.0f));
        memcpy(tmp, dy, (size_t)n * sizeof *tmp);
        be->relu_backward(be, tmp, tmp, y, n);
        assert_memory_equal(tmp, dx, (size_t)n * sizeof *dx);
        free(x);
        free(y);
        free(dy);
        free(dx);
        free(tmp);
    }
}

static void test_relu_nonfinite(void **state)
{
    const zt_backend *be = *state;
    /* NaN input stays visible to the overflow check; an infinite upstream
     * gradient at an inactive unit does not become NaN. */
    float x[3] = {NAN, -1.0f, 2.0f}, y[3];
    be->relu_forward(be, y, x, 3);
    assert_true(isnan(y[0]) && y[1] == 0.0f && y[2] == 2.0f);
    float dy[3] = {1.0f, INFINITY, 3.0f}, dx[3];
    be->relu_backward(be, dx, dy, y, 3);
    assert_true(dx[1] == 0.0f && dx[2] == 3.0f);
}

static void test_scale_axpy(void **state)
{
    const zt_backend *be = *state;
    rng_seed(5);
    const int64_t sizes[] = {0, 5, 100003};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *x = xmalloc_floats(n), *x0 = xmalloc_floats(n), *y = xmalloc_floats(n);
        float *y0 = xmalloc_floats(n);
        fill_uniform(x0, n, -2, 2);
        fill_uniform(y0, n, -2, 2);
        memcpy(x, x0, (size_t)n * sizeof *x);
        memcpy(y, y0, (size_t)n * sizeof *y);

        be->scale(be, x, -0.375f, n);
        for (int64_t i = 0; i < n; i++)
            assert_true(x[i] == x0[i] * -0.375f);
        be->axpy(be, ZT_F32, y, 1.5f, x0, n);
        for (int64_t i = 0; i < n; i++) {
            double ref = (double)y0[i] + 1.5 * (double)x0[i];
            assert_true(fabs(y[i] - ref) <= 1e-6 * (fabs(y0[i]) + fabs(1.5 * x0[i])));
        }
        free(x);
        free(x0);
        free(y);
        free(y0);
    }
}

static void test_sum_squares(void **state)
{
    const zt_backend *be = *state;
    rng_seed(6);
    /* Around the chunk size, and several rounds of chunks. */
    const int64_t sizes[] = {0, 1, 4095, 4096, 4097, 3 * 4096 * 256 + 17};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *x = xmalloc_floats(n);
        fill_uniform(x, n, -3, 3);
        double ref = 0.0;
        for (int64_t i = 0; i < n; i++)
            ref += (double)x[i] * (double)x[i];
        double got = be->sum_squares(be, x, ZT_F32, n);
        assert_true(fabs(got - ref) <= 1e-12 * ref);

        omp_set_num_threads(1);
        double one = be->sum_squares(be, x, ZT_F32, n);
        omp_set_num_threads(3);
        double three = be->sum_squares(be, x, ZT_F32, n);
        omp_set_num_threads(default_threads);
        assert_memory_equal(&one, &three, sizeof one);
        assert_memory_equal(&one, &got, sizeof one);
        free(x);
    }
    /* Values whose float squares would overflow still sum finitely. */
    float big[2] = {0x1p100f, -0x1p101f};
    assert_true(be->sum_squares(be, big, ZT_F32, 2) == ldexp(5.0, 200));
    /* 16-bit input is widened: fp16 1.5 and bf16 -2.5 square exactly. */
    uint16_t h[3] = {0x3e00, 0x3e00, 0x3e00}, b[2] = {0xc020, 0xc020};
    assert_true(be->sum_squares(be, h, ZT_F16, 3) == 3 * 2.25);
    assert_true(be->sum_squares(be, b, ZT_BF16, 2) == 2 * 6.25);
}

static void test_has_inf_nan(void **state)
{
    const zt_backend *be = *state;
    rng_seed(7);
    const int64_t sizes[] = {1, 9, 100003};
    const float bad[] = {INFINITY, -INFINITY, NAN};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *x = xmalloc_floats(n);
        fill_uniform(x, n, -1e30, 1e30);
        x[0] = 3.4e38f; /* large but finite */
        assert_false(be->has_inf_nan(be, x, ZT_F32, n));
        const int64_t where[] = {0, n / 2, n - 1};
        for (size_t b = 0; b < 3; b++)
            for (size_t w = 0; w < 3; w++) {
                float keep = x[where[w]];
                x[where[w]] = bad[b];
                assert_true(be->has_inf_nan(be, x, ZT_F32, n));
                x[where[w]] = keep;
            }
        assert_false(be->has_inf_nan(be, x, ZT_F32, n));
        free(x);
    }
    assert_false(be->has_inf_nan(be, NULL, ZT_F32, 0));
    /* 16-bit: fp16 65504 is finite, its inf is not; bf16 likewise. */
    uint16_t h[2] = {0x7bff, 0x3c00};
    assert_false(be->has_inf_nan(be, h, ZT_F16, 2));
    h[1] = 0x7c00;
    assert_true(be->has_inf_nan(be, h, ZT_F16, 2));
    uint16_t b[2] = {0x7f7f, 0x7fc0};
    assert_false(be->has_inf_nan(be, b, ZT_BF16, 1));
    assert_true(be->has_inf_nan(be, b, ZT_BF16, 2));
}

/* convert against a naive loop in double: the fp32 result of dst + alpha * src
 * rounded to the destination type, for every pair of types, with and without
 * accumulation, sizes above the OpenMP threshold; and one value where
 * rounding once matters. */
static double convert_ref_read(const void *p, zt_dtype dt, int64_t i)
{
    if (dt == ZT_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (dt == ZT_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static void test_convert(void **state)
{
    const zt_backend *be = *state;
    rng_seed(8);
    const int64_t n = 50001;
    /* Relative half-ulp of each type: the rounding error of one conversion. */
    const double half_ulp[ZT_NDTYPES] = {0x1p-24, 0x1p-11, 0x1p-8};
    /* and half the smallest subnormal, the error bound near zero */
    const double abs_floor[ZT_NDTYPES] = {0x1p-150, 0x1p-25, 0x1p-134};
    float *src32 = xmalloc_floats(n), *dst32 = xmalloc_floats(n);
    void *src = malloc((size_t)n * 4), *dst = malloc((size_t)n * 4), *init = malloc((size_t)n * 4);
    assert_true(src && dst && init);
    fill_uniform(src32, n, -100, 100);
    fill_uniform(dst32, n, -100, 100);
    for (int sdt = 0; sdt < ZT_NDTYPES; sdt++)
        for (int ddt = 0; ddt < ZT_NDTYPES; ddt++)
            for (int acc = 0; acc < 2; acc++) {
                be->convert(be, src, sdt, src32, ZT_F32, n, 1.0f, false);
                be->convert(be, init, ddt, dst32, ZT_F32, n, 1.0f, false);
                memcpy(dst, init, (size_t)n * 4);
                be->convert(be, dst, ddt, src, sdt, n, -0.5f, acc);
                for (int64_t i = 0; i < n; i++) {
                    double want = -0.5 * convert_ref_read(src, sdt, i);
                    if (acc)
                        want += convert_ref_read(init, ddt, i);
                    /* fp32 rounds the sum once more before the final rounding */
                    double tol = (half_ulp[ddt] + 0x1p-24) * fabs(want) + abs_floor[ddt];
                    double got = convert_ref_read(dst, ddt, i);
                    if (fabs(got - want) > tol)
                        fail_msg("%d->%d acc %d [%lld]: got %.9g want %.9g", sdt, ddt, acc,
                                 (long long)i, got, want);
                }
            }
    /* The sum is formed in fp32 first: 1 + (2^-11 + 2^-30) loses 2^-30 there,
     * leaving the fp16 tie 1 + 2^-11, which rounds to even (1.0), whereas
     * 1 + (2^-11 + 2^-20) stays above the tie and rounds up. bf16 the same
     * with its half ulp 2^-8. */
    const float above_fp32[2] = {0x1p-11f + 0x1p-30f, 0x1p-8f + 0x1p-30f};
    const float above_fp16[2] = {0x1p-11f + 0x1p-20f, 0x1p-8f + 0x1p-17f};
    uint16_t h[2] = {0x3c00, 0x3c00}, b[2] = {0x3f80, 0x3f80};
    be->convert(be, &h[0], ZT_F16, &above_fp32[0], ZT_F32, 1, 1.0f, true);
    be->convert(be, &h[1], ZT_F16, &above_fp16[0], ZT_F32, 1, 1.0f, true);
    be->convert(be, &b[0], ZT_BF16, &above_fp32[1], ZT_F32, 1, 1.0f, true);
    be->convert(be, &b[1], ZT_BF16, &above_fp16[1], ZT_F32, 1, 1.0f, true);
    assert_int_equal(h[0], 0x3c00);
    assert_int_equal(h[1], 0x3c01);
    assert_int_equal(b[0], 0x3f80);
    assert_int_equal(b[1], 0x3f81);
    free(src32);
    free(dst32);
    free(src);
    free(dst);
    free(init);
}

/* -log softmax(l)[label] in double, and softmax into p when non-NULL. */
static double xent_row_ref(const float *l, int32_t label, int64_t classes, double *p)
{
    double mx = l[0];
    for (int64_t j = 1; j < classes; j++)
        mx = fmax(mx, l[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < classes; j++)
        sum += exp((double)l[j] - mx);
    if (p)
        for (int64_t j = 0; j < classes; j++)
            p[j] = exp((double)l[j] - mx) / sum;
    return -((double)l[label] - mx - log(sum));
}

/* rows x classes logits in rows of ld floats, the padding columns NaN (the op
 * must never read them). Against the float64 reference: dlogits within
 * 1e-6 |dscale| (a float softmax), the loss within 1e-5 relative; the
 * padding's and ignored rows' dlogits exactly 0; the in-place form (dlogits
 * over the logits), the eval form and other thread counts bit-identical. */
static void check_xent(const zt_backend *be, int64_t rows, int64_t classes, int64_t ld,
                       double spread, float dscale)
{
    const int32_t ignore = -100;
    float *logits = xmalloc_floats(rows * ld); // (rows, ld)
    float *dl = xmalloc_floats(rows * ld);     // (rows, ld)
    float *inplace = xmalloc_floats(rows * ld);
    int32_t *labels = malloc((size_t)rows * sizeof *labels);
    double *p = malloc((size_t)classes * sizeof *p);
    assert_non_null(labels);
    assert_non_null(p);
    for (int64_t r = 0; r < rows; r++) {
        fill_uniform(logits + r * ld, classes, -spread, spread);
        for (int64_t j = classes; j < ld; j++)
            logits[r * ld + j] = NAN;
        labels[r] = r % 5 == 3 ? ignore : (int32_t)(rng_uniform(0, 1) * (double)classes);
    }
    for (int64_t i = 0; i < rows * ld; i++)
        dl[i] = 7.0f; /* ignored rows and padding must be overwritten with zeros */
    memcpy(inplace, logits, (size_t)(rows * ld) * sizeof *inplace);

    double loss =
        be->xent_forward_backward(be, ZT_F32, logits, labels, rows, classes, ld, ignore, dscale, dl);
    double ref = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = classes; j < ld; j++)
            assert_true(dl[r * ld + j] == 0.0f);
        if (labels[r] == ignore) {
            for (int64_t j = 0; j < classes; j++)
                assert_true(dl[r * ld + j] == 0.0f);
            continue;
        }
        ref += xent_row_ref(logits + r * ld, labels[r], classes, p);
        for (int64_t j = 0; j < classes; j++) {
            double g = dscale * (p[j] - (j == labels[r] ? 1.0 : 0.0));
            if (fabs(dl[r * ld + j] - g) > 1e-6 * fabs(dscale))
                fail_msg("dlogits[%ld,%ld] = %.9g, ref %.9g", (long)r, (long)j, dl[r * ld + j],
                         g);
        }
    }
    assert_true(isfinite(loss));
    if (fabs(loss - ref) > 1e-5 * fabs(ref) + 1e-12)
        fail_msg("loss %.12g, float64 reference %.12g", loss, ref);

    /* In place: the same loss and gradient, bit for bit. */
    double loss_in_place = be->xent_forward_backward(be, ZT_F32, inplace, labels, rows, classes, ld,
                                                     ignore, dscale, inplace);
    assert_memory_equal(&loss_in_place, &loss, sizeof loss);
    assert_memory_equal(inplace, dl, (size_t)(rows * ld) * sizeof *dl);

    /* Evaluation form: same loss, no gradient. */
    double eval =
        be->xent_forward_backward(be, ZT_F32, logits, labels, rows, classes, ld, ignore, 1.0f, NULL);
    assert_memory_equal(&eval, &loss, sizeof eval);

    /* Bit-identical for any thread count. */
    omp_set_num_threads(1);
    double one =
        be->xent_forward_backward(be, ZT_F32, logits, labels, rows, classes, ld, ignore, 1.0f, NULL);
    omp_set_num_threads(3);
    double three =
        be->xent_forward_backward(be, ZT_F32, logits, labels, rows, classes, ld, ignore, 1.0f, NULL);
    omp_set_num_threads(default_threads);
    assert_memory_equal(&one, &three, sizeof one);

    free(logits);
    free(dl);
    free(inplace);
    free(labels);
    free(p);
}

static void test_xent(void **state)
{
    const zt_backend *be = *state;
    rng_seed(8);
    check_xent(be, 37, 11, 11, 3.0, 1.0f);
    check_xent(be, 5, 1, 1, 3.0, 0.5f);         /* one class: loss 0, gradient 0 */
    check_xent(be, 1300, 53, 53, 4.0, 0.01f);   /* parallel, several rounds of rows */
    check_xent(be, 9, 7, 7, 1000.0, -2.0f);     /* needs the max subtraction */
    check_xent(be, 37, 11, 128, 3.0, 1.0f);     /* padded rows */
    check_xent(be, 1300, 65, 128, 4.0, 0.01f);  /* GPT-lite's char vocabulary, padded */
    check_xent(be, 7, 5000, 5120, 8.0, 0.5f);   /* chunks of 2048 and a partial one */
    check_xent(be, 6, 4097, 4097, 300.0, 1.0f); /* the max in any chunk: rescaled sums */
}

static void test_xent_all_ignored(void **state)
{
    const zt_backend *be = *state;
    float logits[6] = {1, 2, 3, 4, 5, 6}, dl[6] = {1, 1, 1, 1, 1, 1};
    int32_t labels[2] = {-1, -1};
    assert_true(be->xent_forward_backward(be, ZT_F32, logits, labels, 2, 3, 3, -1, 1.0f, dl) == 0.0);
    for (int i = 0; i < 6; i++)
        assert_true(dl[i] == 0.0f);
}

/* Central differences of the float op's loss against its own gradient. */
static void test_xent_finite_difference(void **state)
{
    const zt_backend *be = *state;
    rng_seed(9);
    enum { ROWS = 4, CLASSES = 6 };
    float logits[ROWS * CLASSES], dl[ROWS * CLASSES]; // (rows, classes)
    int32_t labels[ROWS] = {2, 0, 5, 3};
    fill_uniform(logits, ROWS * CLASSES, -2, 2);
    be->xent_forward_backward(be, ZT_F32, logits, labels, ROWS, CLASSES, CLASSES, -100, 1.0f, dl);
    const float hs[] = {1e-2f, 3e-3f};
    for (size_t k = 0; k < 2; k++)
        for (int i = 0; i < ROWS * CLASSES; i++) {
            float keep = logits[i];
            logits[i] = keep + hs[k];
            double lp = be->xent_forward_backward(be, ZT_F32, logits, labels, ROWS, CLASSES, CLASSES, -100, 1.0f,
                                                  NULL);
            logits[i] = keep - hs[k];
            double lm = be->xent_forward_backward(be, ZT_F32, logits, labels, ROWS, CLASSES, CLASSES, -100, 1.0f,
                                                  NULL);
            logits[i] = keep;
            /* The step actually taken is the float difference of the logits. */
            double step = (double)(keep + hs[k]) - (double)(keep - hs[k]);
            double fd = (lp - lm) / step;
            if (fabs(fd - dl[i]) > 1e-2 * fabs(dl[i]) + 1e-4)
                fail_msg("h=%g logit %d: fd %.7g analytic %.7g", hs[k], i, fd, dl[i]);
        }
}

/* Linear(IN -> OUT) + ReLU + mean cross-entropy, naive double forward. */
enum { FD_B = 6, FD_IN = 5, FD_OUT = 4 };

static double linear_relu_xent_ref(const double *x, const double *w, const double *b,
                                   const int32_t *labels, double *min_abs_z)
{
    double loss = 0.0;
    *min_abs_z = INFINITY;
    for (int r = 0; r < FD_B; r++) {
        double y[FD_OUT], mx = -INFINITY, sum = 0.0;
        for (int o = 0; o < FD_OUT; o++) {
            double z = b[o];
            for (int i = 0; i < FD_IN; i++)
                z += x[r * FD_IN + i] * w[o * FD_IN + i];
            *min_abs_z = fmin(*min_abs_z, fabs(z));
            y[o] = z > 0.0 ? z : 0.0;
            mx = fmax(mx, y[o]);
        }
        for (int o = 0; o < FD_OUT; o++)
            sum += exp(y[o] - mx);
        loss += log(sum) - (y[labels[r]] - mx);
    }
    return loss / FD_B;
}

static void check_fd(const char *what, const float *analytic, double *param, int n,
                     const double *x, const double *w, const double *b, const int32_t *labels)
{
    const double h = 1e-6;
    double unused;
    for (int i = 0; i < n; i++) {
        double keep = param[i];
        param[i] = keep + h;
        double lp = linear_relu_xent_ref(x, w, b, labels, &unused);
        param[i] = keep - h;
        double lm = linear_relu_xent_ref(x, w, b, labels, &unused);
        param[i] = keep;
        double fd = (lp - lm) / (2 * h);
        if (fabs(analytic[i] - fd) > 1e-3 * fabs(fd) + 1e-6)
            fail_msg("%s[%d]: analytic %.9g, finite difference %.9g", what, i, analytic[i], fd);
    }
}

static void test_linear_relu_xent_gradients(void **state)
{
    const zt_backend *be = *state;
    float x[FD_B * FD_IN], w[FD_OUT * FD_IN], b[FD_OUT]; // (B, IN), (OUT, IN), (OUT)
    double xd[FD_B * FD_IN], wd[FD_OUT * FD_IN], bd[FD_OUT];
    int32_t labels[FD_B] = {0, 3, 1, 2, 3, 0};

    /* Draw until every pre-activation is clear of the ReLU kink (so finite
     * differences see a smooth function), with both active and inactive units. */
    double min_abs_z = 0.0;
    for (uint64_t seed = 100; min_abs_z < 0.05; seed++) {
        assert_true(seed < 1100);
        rng_seed(seed);
        fill_uniform(x, FD_B * FD_IN, -1, 1);
        fill_uniform(w, FD_OUT * FD_IN, -1, 1);
        fill_uniform(b, FD_OUT, -0.5, 0.5);
        for (int i = 0; i < FD_B * FD_IN; i++)
            xd[i] = x[i];
        for (int i = 0; i < FD_OUT * FD_IN; i++)
            wd[i] = w[i];
        for (int i = 0; i < FD_OUT; i++)
            bd[i] = b[i];
        linear_relu_xent_ref(xd, wd, bd, labels, &min_abs_z);
    }

    /* Forward with backend ops. */
    float y[FD_B * FD_OUT], dy[FD_B * FD_OUT]; // (B, OUT)
    be->gemm(be, ZT_F32, ZT_F32, false, true, FD_B, FD_OUT, FD_IN, 1.0f, x, FD_IN, w, FD_IN, 0.0f, y, FD_OUT);
    be->bias_add(be, ZT_F32, y, b, FD_B, FD_OUT);
    be->relu_forward(be, y, y, FD_B * FD_OUT);
    int active = 0;
    for (int i = 0; i < FD_B * FD_OUT; i++)
        active += y[i] > 0.0f;
    assert_true(active > 0 && active < FD_B * FD_OUT);
    double loss = be->xent_forward_backward(be, ZT_F32, y, labels, FD_B, FD_OUT, FD_OUT, -100, 1.0f / FD_B, dy) /
                  FD_B;
    double ref = linear_relu_xent_ref(xd, wd, bd, labels, &min_abs_z);
    assert_true(fabs(loss - ref) <= 1e-5 * fabs(ref));

    /* Backward with backend ops. */
    float dw[FD_OUT * FD_IN], db[FD_OUT], dx[FD_B * FD_IN];
    be->relu_backward(be, dy, dy, y, FD_B * FD_OUT); /* dz, in place */
    be->gemm(be, ZT_F32, ZT_F32, true, false, FD_OUT, FD_IN, FD_B, 1.0f, dy, FD_OUT, x, FD_IN, 0.0f, dw, FD_IN);
    be->bias_grad(be, ZT_F32, db, dy, FD_B, FD_OUT, false);
    be->gemm(be, ZT_F32, ZT_F32, false, false, FD_B, FD_IN, FD_OUT, 1.0f, dy, FD_OUT, w, FD_IN, 0.0f, dx, FD_IN);

    check_fd("dW", dw, wd, FD_OUT * FD_IN, xd, wd, bd, labels);
    check_fd("db", db, bd, FD_OUT, xd, wd, bd, labels);
    check_fd("dx", dx, xd, FD_B * FD_IN, xd, wd, bd, labels);
}

/* ---- Typed ops on bf16 and fp16 (bit for bit against the fp32 op on the
 * widened inputs, test_nn.h) ---- */

/* One typed gemm: A and B of a_dt, C of c_dt (at least one 16-bit), every
 * row `pad` wider than its matrix. The whole of C's storage is compared, so
 * the padding columns must keep their bits. beta == 0 starts C as NaN: it
 * must not be read. */
static void check_gemm_typed(const zt_backend *be, zt_dtype a_dt, zt_dtype c_dt, bool ta,
                             bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                             int64_t pad)
{
    int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    int64_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb, nc = m * ldc;
    float *a = xmalloc_floats(na), *b = xmalloc_floats(nb), *c = xmalloc_floats(nc);
    fill_uniform(a, na, -1, 1);
    fill_uniform(b, nb, -1, 1);
    if (beta == 0.0f)
        fill_value(c, nc, NAN);
    else
        fill_uniform(c, nc, -1, 1);
    uint16_t *a16 = a_dt == ZT_F32 ? NULL : to_dt(a_dt, a, na);
    uint16_t *b16 = a_dt == ZT_F32 ? NULL : to_dt(a_dt, b, nb);
    uint16_t *c16 = c_dt == ZT_F32 ? NULL : to_dt(c_dt, c, nc);
    float *c32 = c_dt == ZT_F32 ? dup_floats(c, nc) : NULL;
    be->gemm(be, a_dt, c_dt, ta, tb, m, n, k, alpha, a16 ? (void *)a16 : a, lda,
             b16 ? (void *)b16 : b, ldb, beta, c16 ? (void *)c16 : c32, ldc);
    be->gemm(be, ZT_F32, ZT_F32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (c16)
        assert_dt_equal(c_dt, c16, c, nc, "gemm C");
    else
        assert_f32_equal(c32, c, nc, "gemm C (fp32 from 16-bit operands)");
    free(a), free(b), free(c), free(a16), free(b16), free(c16), free(c32);
}

/* fp32 C from 16-bit A and B (a weight gradient), 16-bit C from 16-bit A
 * and B (rounded once with beta C), and 16-bit C from fp32 A and B. */
static void test_gemm_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(41);
    for (int d = 0; d < N_TYPED_DTS; d++) {
        zt_dtype dt = TYPED_DTS[d];
        const zt_dtype pairs[3][2] = {{dt, ZT_F32}, {dt, dt}, {ZT_F32, dt}};
        for (int p = 0; p < 3; p++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) {
                    zt_dtype a_dt = pairs[p][0], c_dt = pairs[p][1];
                    check_gemm_typed(be, a_dt, c_dt, ta, tb, 5, 7, 3, 0.7f, -0.3f, 3);
                    check_gemm_typed(be, a_dt, c_dt, ta, tb, 13, 4, 9, 1.0f, 0.0f, 2);
                    check_gemm_typed(be, a_dt, c_dt, ta, tb, 131, 97, 263, 0.25f, 0.5f, 5);
                }
    }
}

/* bias_add, then bias_grad of its result (accumulating or not), at 1 and 3
 * threads. 700 x 97 spans two of the op's row blocks. */
static void test_bias_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(42);
    const int64_t shapes[][2] = {{3, 5}, {0, 4}, {700, 97}, {1000, 1}};
    for (int d = 0; d < N_TYPED_DTS; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            zt_dtype dt = TYPED_DTS[d];
            int64_t rows = shapes[s][0], cols = shapes[s][1];
            float *y = xmalloc_floats(rows * cols), *bias = xmalloc_floats(cols);
            float *init = xmalloc_floats(cols), *ref = xmalloc_floats(cols);
            float *got = xmalloc_floats(cols);
            fill_uniform(y, rows * cols, -1, 1);
            fill_uniform(bias, cols, -1, 1);
            fill_uniform(init, cols, -1, 1);
            uint16_t *y16 = to_dt(dt, y, rows * cols), *b16 = to_dt(dt, bias, cols);
            be->bias_add(be, dt, y16, b16, rows, cols);
            be->bias_add(be, ZT_F32, y, bias, rows, cols);
            assert_dt_equal(dt, y16, y, rows * cols, "bias_add y");
            round_dt(dt, y, rows * cols); /* what y16 holds */
            for (int acc = 0; acc < 2; acc++) {
                memcpy(ref, init, (size_t)cols * sizeof *ref);
                be->bias_grad(be, ZT_F32, ref, y, rows, cols, acc);
                for (int threads = 1; threads <= 3; threads += 2) {
                    omp_set_num_threads(threads);
                    memcpy(got, init, (size_t)cols * sizeof *got);
                    be->bias_grad(be, dt, got, y16, rows, cols, acc);
                    assert_f32_equal(got, ref, cols, "bias_grad dbias");
                }
                omp_set_num_threads(default_threads);
            }
            free(y), free(bias), free(init), free(ref), free(got), free(y16), free(b16);
        }
}

/* y += a x, and in place (x == y): y += a y. */
static void test_axpy_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(43);
    const int64_t sizes[] = {0, 5, 100003};
    for (int d = 0; d < N_TYPED_DTS; d++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            zt_dtype dt = TYPED_DTS[d];
            int64_t n = sizes[s];
            float *x = xmalloc_floats(n), *y = xmalloc_floats(n);
            fill_uniform(x, n, -2, 2);
            fill_uniform(y, n, -2, 2);
            uint16_t *x16 = to_dt(dt, x, n), *y16 = to_dt(dt, y, n);
            be->axpy(be, dt, y16, 1.5f, x16, n);
            be->axpy(be, ZT_F32, y, 1.5f, x, n);
            assert_dt_equal(dt, y16, y, n, "axpy y");
            round_dt(dt, y, n);
            be->axpy(be, dt, y16, -0.375f, y16, n);
            be->axpy(be, ZT_F32, y, -0.375f, y, n);
            assert_dt_equal(dt, y16, y, n, "axpy y (x == y)");
            free(x), free(y), free(x16), free(y16);
        }
}

/* Padded rows, every seventh label ignored: the loss (a float64 sum, in row
 * order) and the gradient into its own tensor, over the logits (in place)
 * and not at all (eval), at 1 and 3 threads. 200 rows of 1024 span four of
 * the op's row blocks. */
static void check_xent_typed(const zt_backend *be, zt_dtype dt, int64_t rows, int64_t classes,
                             int64_t ld)
{
    const int32_t ignore = -100;
    const float dscale = 0.01f;
    float *l = xmalloc_floats(rows * ld), *ref = xmalloc_floats(rows * ld);
    int32_t *labels = malloc((size_t)rows * sizeof *labels);
    assert_non_null(labels);
    fill_uniform(l, rows * ld, -4, 4);
    fill_value(ref, rows * ld, 7.0f); /* ignored rows and padding must become 0 */
    for (int64_t r = 0; r < rows; r++)
        labels[r] = r % 7 == 3 ? ignore : (int32_t)(rng_uniform(0, 1) * (double)classes);
    uint16_t *l16 = to_dt(dt, l, rows * ld), *d16 = to_dt(dt, ref, rows * ld);
    uint16_t *in_place = malloc((size_t)(rows * ld) * sizeof *in_place);
    assert_non_null(in_place);
    double want =
        be->xent_forward_backward(be, ZT_F32, l, labels, rows, classes, ld, ignore, dscale, ref);
    for (int threads = 1; threads <= 3; threads += 2) {
        omp_set_num_threads(threads);
        double got =
            be->xent_forward_backward(be, dt, l16, labels, rows, classes, ld, ignore, dscale, d16);
        assert_memory_equal(&got, &want, sizeof got);
        assert_dt_equal(dt, d16, ref, rows * ld, "xent dlogits");
        memcpy(in_place, l16, (size_t)(rows * ld) * sizeof *in_place);
        got = be->xent_forward_backward(be, dt, in_place, labels, rows, classes, ld, ignore,
                                        dscale, in_place);
        assert_memory_equal(&got, &want, sizeof got);
        assert_dt_equal(dt, in_place, ref, rows * ld, "xent dlogits (over the logits)");
        got = be->xent_forward_backward(be, dt, l16, labels, rows, classes, ld, ignore, dscale,
                                        NULL);
        assert_memory_equal(&got, &want, sizeof got);
    }
    omp_set_num_threads(default_threads);
    free(l), free(ref), free(labels), free(l16), free(d16), free(in_place);
}

static void test_xent_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(44);
    for (int d = 0; d < N_TYPED_DTS; d++) {
        check_xent_typed(be, TYPED_DTS[d], 3, 11, 16);
        check_xent_typed(be, TYPED_DTS[d], 200, 1000, 1024);
        check_xent_typed(be, TYPED_DTS[d], 2, 5000, 5120); /* rows longer than a block */
    }
    assert_int_equal(be->check(be), ZT_OK);
}

/* A 16-bit op that cannot have its fp32 scratch does nothing, and check
 * says so until the backend is freed: A's row stride of 2^45 asks for more
 * than the address space (A is never read). Its own backend, since the
 * failure sticks. */
static void test_typed_scratch_oom(void **state)
{
    (void)state;
    zt_backend be;
    assert_int_equal(zt_backend_cpu_init(&be), ZT_OK);
    uint16_t a[2] = {0}, b[1] = {0};
    float c[2] = {5.0f, 6.0f};
    zt_status_clear();
    be.gemm(&be, ZT_BF16, ZT_F32, false, false, 2, 1, 1, 1.0f, a, (int64_t)1 << 45, b, 1, 0.0f,
            c, 1);
    assert_true(c[0] == 5.0f && c[1] == 6.0f);
    assert_int_equal(be.check(&be), ZT_ERR_OOM);
    assert_non_null(strstr(zt_status_message(), "scratch"));
    zt_backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_and_memory),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_empty),
        cmocka_unit_test(test_bias_add),
        cmocka_unit_test(test_bias_grad),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_relu_nonfinite),
        cmocka_unit_test(test_scale_axpy),
        cmocka_unit_test(test_sum_squares),
        cmocka_unit_test(test_has_inf_nan),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_xent),
        cmocka_unit_test(test_xent_all_ignored),
        cmocka_unit_test(test_xent_finite_difference),
        cmocka_unit_test(test_linear_relu_xent_gradients),
        cmocka_unit_test(test_gemm_typed),
        cmocka_unit_test(test_bias_typed),
        cmocka_unit_test(test_axpy_typed),
        cmocka_unit_test(test_xent_typed),
        cmocka_unit_test(test_typed_scratch_oom),
    };
    return cmocka_run_group_tests_name("backend_cpu", tests, setup, teardown);
}
