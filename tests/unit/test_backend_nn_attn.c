/*
 * test_backend_nn_attn: the CPU backend's batched gemm and attention softmax
 * (forward with causal and length masks, backward) against independent
 * references in double precision, gradients against central finite
 * differences. Tolerances: test_nn.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "tests/unit/test_nn.h"
#include "tests/unit/test_rng.h"

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


int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_batched),
        cmocka_unit_test(test_gemm_batched_empty),
        cmocka_unit_test(test_attn_softmax_forward),
        cmocka_unit_test(test_attn_softmax_backward),
    };
    return cmocka_run_group_tests_name("backend_nn_attn", tests, setup, teardown);
}
