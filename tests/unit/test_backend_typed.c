/*
 * test_backend_typed: the CPU backend's typed ops on bf16 and fp16 tensors
 * (engine/backend.h, "Typed tensors") against float64 references written
 * here from the same 16-bit inputs, with the rounding the contract states:
 * each (dt) output rounded once, and the intermediates it names (gemm's
 * beta C + AB, linear_act_forward's pre-activation, residual + layernorm's
 * x1, act_bias_grad's dpre that dbias sums) rounded where they are stored.
 *
 * Tolerance: a (dt) output is within one spacing of dt at the reference
 * (2^-7 relative for bf16, 2^-10 for fp16, plus 1e-6 absolute near zero):
 * half a spacing for the rounding, the rest for fp32 against float64. An
 * output whose contract is exact (x1, an embedding row, dropout's copies,
 * mean pooling's dy / len) is compared bit for bit with the rounding of its
 * fp32 value; fp32 outputs (weight and bias gradients) within 1e-5 relative
 * of their sums of |terms|.
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
#include "engine/cpu/cpu.h"
#include "engine/dtype.h"
#include "tests/unit/test_rng.h"

static const zt_dtype DTS[] = {ZT_BF16, ZT_F16};

static float round_to(zt_dtype dt, float x)
{
    return dt == ZT_BF16 ? zt_bf16_to_f32(zt_f32_to_bf16(x)) : zt_f16_to_f32(zt_f32_to_f16(x));
}

static double spacing(zt_dtype dt) { return dt == ZT_BF16 ? 0x1p-7 : 0x1p-10; }

/* n random values in [lo, hi), representable in dt: as floats (f) and as
 * 16-bit storage (h). */
static void fill16(zt_dtype dt, float *f, uint16_t *h, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++)
        f[i] = round_to(dt, (float)rng_uniform(lo, hi));
    zt_convert_host(h, dt, f, ZT_F32, n, 1.0f, false);
}

static float get16(zt_dtype dt, const uint16_t *h, int64_t i)
{
    return dt == ZT_BF16 ? zt_bf16_to_f32(h[i]) : zt_f16_to_f32(h[i]);
}

static void near16(zt_dtype dt, const uint16_t *got, const double *ref, int64_t n,
                   const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        double g = get16(dt, got, i);
        if (fabs(g - ref[i]) > spacing(dt) * fabs(ref[i]) + 1e-6)
            fail_msg("%s %s[%lld]: %.8g, reference %.8g", zt_dtype_name(dt), what, (long long)i,
                     g, ref[i]);
    }
}

static double gelu_ref(double v)
{
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

static double gelu_grad_ref(double v)
{
    double k = sqrt(2.0 / M_PI), th = tanh(k * (v + 0.044715 * v * v * v));
    return 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * v * v);
}

static int setup(void **state)
{
    zt_backend *be = calloc(1, sizeof *be);
    assert_int_equal(zt_backend_cpu_init(be), ZT_OK);
    assert_true(be->typed_dtypes & (1u << ZT_BF16));
    assert_true(be->typed_dtypes & (1u << ZT_F16));
    *state = be;
    return 0;
}

static int teardown(void **state)
{
    zt_backend_free(*state);
    free(*state);
    return 0;
}

/* C (m, n) of a (m, k) x b (n, k)^T, C's row stride ldc > n: fp32 C and
 * beta-accumulated 16-bit C; the padding columns are never written. */
static void test_gemm(void **state)
{
    const zt_backend *be = *state;
    enum { M = 5, N = 7, K = 9, LDC = 8 };
    for (size_t d = 0; d < 2; d++) {
        zt_dtype dt = DTS[d];
        rng_seed(11 + d);
        float af[M * K], bf[N * K], cf[M * LDC], c32[M * LDC];
        uint16_t a[M * K], b[N * K], c[M * LDC];
        fill16(dt, af, a, M * K, -1, 1);
        fill16(dt, bf, b, N * K, -1, 1);
        fill16(dt, cf, c, M * LDC, -1, 1);
        const uint16_t pad = c[LDC - 1];
        for (int i = 0; i < M * LDC; i++)
            c32[i] = -7.0f;
        be->gemm(be, dt, ZT_F32, false, true, M, N, K, 1.0f, a, K, b, K, 0.0f, c32, LDC);
        be->gemm(be, dt, dt, false, true, M, N, K, 1.0f, a, K, b, K, 0.5f, c, LDC);
        double ref[M * N];
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0.0, abs_sum = 0.0;
                for (int q = 0; q < K; q++) {
                    s += (double)af[i * K + q] * bf[j * K + q];
                    abs_sum += fabs((double)af[i * K + q] * bf[j * K + q]);
                }
                assert_true(fabs(c32[i * LDC + j] - s) <= 1e-5 * abs_sum);
                ref[i * N + j] = 0.5 * cf[i * LDC + j] + s;
            }
        for (int i = 0; i < M; i++) {
            near16(dt, c + i * LDC, ref + i * N, N, "gemm C");
            assert_true(c32[i * LDC + N] == -7.0f);
        }
        assert_int_equal(c[LDC - 1], pad);
    }
}

/* Residual + layernorm: x1 = round(x + branch) exactly; y normalises the
 * stored x1 (mean and var in float64 here). */
static void test_residual_layernorm(void **state)
{
    const zt_backend *be = *state;
    enum { R = 4, C = 24 };
    for (size_t d = 0; d < 2; d++) {
        zt_dtype dt = DTS[d];
        rng_seed(21 + d);
        float xf[R * C], bf[R * C], wf[C], bbf[C], mean[R], rstd[R];
        uint16_t x[R * C], br[R * C], w[C], bb[C], x1[R * C], y[R * C];
        fill16(dt, xf, x, R * C, -2, 2);
        fill16(dt, bf, br, R * C, -2, 2);
        fill16(dt, wf, w, C, 0.5, 1.5);
        fill16(dt, bbf, bb, C, -0.5, 0.5);
        be->residual_layernorm_forward(be, dt, x1, y, mean, rstd, x, br, w, bb, R, C, 1e-5f);
        double ref[R * C];
        for (int r = 0; r < R; r++) {
            double m = 0.0, v = 0.0, s[C];
            for (int j = 0; j < C; j++) {
                float sum = round_to(dt, xf[r * C + j] + bf[r * C + j]);
                assert_true(get16(dt, x1, r * C + j) == sum);
                s[j] = sum;
                m += s[j] / C;
            }
            for (int j = 0; j < C; j++)
                v += (s[j] - m) * (s[j] - m) / C;
            double rs = 1.0 / sqrt(v + 1e-5);
            assert_true(fabs(mean[r] - m) <= 1e-5 && fabs(rstd[r] - rs) <= 1e-5 * rs);
            for (int j = 0; j < C; j++)
                ref[r * C + j] = (s[j] - m) * rs * wf[j] + bbf[j];
        }
        near16(dt, y, ref, R * C, "residual_layernorm y");
    }
}

/* Linear + bias + GELU: pre = round(x w^T + b); y = round(gelu(pre as
 * stored)). Then its backward epilogue: dpre = round(dy gelu'(pre)), dbias
 * the column sums of the stored dpre. */
static void test_linear_gelu(void **state)
{
    const zt_backend *be = *state;
    enum { R = 6, IN = 10, OUT = 12 };
    for (size_t d = 0; d < 2; d++) {
        zt_dtype dt = DTS[d];
        rng_seed(31 + d);
        float xf[R * IN], wf[OUT * IN], bf[OUT], dyf[R * OUT], dbias[OUT];
        uint16_t x[R * IN], w[OUT * IN], b[OUT], pre[R * OUT], y[R * OUT], dy[R * OUT],
            dpre[R * OUT];
        fill16(dt, xf, x, R * IN, -1, 1);
        fill16(dt, wf, w, OUT * IN, -0.5, 0.5);
        fill16(dt, bf, b, OUT, -0.5, 0.5);
        fill16(dt, dyf, dy, R * OUT, -1, 1);
        be->linear_act_forward(be, dt, y, pre, x, w, b, R, IN, OUT, ZT_ACT_GELU);
        double vref[R * OUT], yref[R * OUT], dref[R * OUT];
        for (int r = 0; r < R; r++)
            for (int o = 0; o < OUT; o++) {
                double s = bf[o];
                for (int q = 0; q < IN; q++)
                    s += (double)xf[r * IN + q] * wf[o * IN + q];
                vref[r * OUT + o] = s;
                yref[r * OUT + o] = gelu_ref(get16(dt, pre, r * OUT + o));
                dref[r * OUT + o] = dyf[r * OUT + o] * gelu_grad_ref(get16(dt, pre, r * OUT + o));
            }
        near16(dt, pre, vref, R * OUT, "linear_act_forward pre");
        near16(dt, y, yref, R * OUT, "linear_act_forward y (from the stored pre)");
        be->act_bias_grad(be, dt, dpre, dbias, dy, pre, R, OUT, ZT_ACT_GELU, false);
        near16(dt, dpre, dref, R * OUT, "act_bias_grad dpre");
        for (int o = 0; o < OUT; o++) {
            double s = 0.0, abs_sum = 0.0;
            for (int r = 0; r < R; r++) {
                s += get16(dt, dpre, r * OUT + o);
                abs_sum += fabs(get16(dt, dpre, r * OUT + o));
            }
            assert_true(fabs(dbias[o] - s) <= 1e-5 * abs_sum);
        }
    }
}

/* Cross-entropy in place over a padded row: the loss against float64, the
 * gradient rounded, the padding exactly 0 and an ignored row all 0. */
static void test_xent(void **state)
{
    const zt_backend *be = *state;
    enum { R = 3, V = 11, LD = 16 };
    const int32_t labels[R] = {4, -100, 10};
    for (size_t d = 0; d < 2; d++) {
        zt_dtype dt = DTS[d];
        rng_seed(41 + d);
        float lf[R * LD];
        uint16_t l[R * LD];
        fill16(dt, lf, l, R * LD, -3, 3);
        const float dscale = 0.25f;
        double loss = be->xent_forward_backward(be, dt, l, labels, R, V, LD, -100, dscale, l);
        double want = 0.0;
        for (int r = 0; r < R; r++) {
            double mx = -INFINITY, sum = 0.0, ref[V];
            for (int j = 0; j < V; j++)
                mx = fmax(mx, lf[r * LD + j]);
            for (int j = 0; j < V; j++)
                sum += exp(lf[r * LD + j] - mx);
            for (int j = 0; j < V; j++)
                ref[j] = labels[r] < 0 ? 0.0
                                       : dscale * (exp(lf[r * LD + j] - mx) / sum -
                                                   (j == labels[r] ? 1.0 : 0.0));
            if (labels[r] >= 0)
                want += log(sum) - (lf[r * LD + labels[r]] - mx);
            near16(dt, l + r * LD, ref, V, "xent dlogits");
            for (int j = V; j < LD; j++)
                assert_true(get16(dt, l, r * LD + j) == 0.0f);
        }
        assert_true(fabs(loss - want) <= 1e-5 * want);
    }
}

/* Embedding rows added to y (accumulate) with one rounding, and keyed
 * dropout on 16-bit tensors: kept elements round(x * scale), dropped 0, at
 * the positions the fp32 op keeps. */
static void test_embedding_dropout(void **state)
{
    const zt_backend *be = *state;
    enum { VOC = 5, C = 8, R = 4 };
    const int32_t ids[R] = {3, 0, 3, 4};
    for (size_t d = 0; d < 2; d++) {
        zt_dtype dt = DTS[d];
        rng_seed(51 + d);
        float tf[VOC * C], yf[R * C];
        uint16_t t[VOC * C], y[R * C];
        fill16(dt, tf, t, VOC * C, -1, 1);
        fill16(dt, yf, y, R * C, -1, 1);
        be->embedding_forward(be, dt, y, ids, t, R, C, true);
        for (int r = 0; r < R; r++)
            for (int j = 0; j < C; j++)
                assert_true(get16(dt, y, r * C + j) ==
                            round_to(dt, yf[r * C + j] + tf[ids[r] * C + j]));
        uint64_t keys[1] = {17};
        zt_dropout_desc dd = {.seed = 3, .site = 1, .step = 2, .row_keys = keys, .n = 1, .a = 1,
                              .b = R, .c = C, .key_b = R, .key_c = C, .p = 0.3f};
        float x32[R * C], y32[R * C];
        uint16_t x16[R * C], y16[R * C];
        fill16(dt, x32, x16, R * C, -2, 2);
        be->dropout(be, ZT_F32, y32, x32, &dd);
        be->dropout(be, dt, y16, x16, &dd);
        const float scale = 1.0f / (1.0f - dd.p);
        int dropped = 0;
        for (int i = 0; i < R * C; i++) {
            float want = y32[i] == 0.0f ? 0.0f : round_to(dt, x32[i] * scale);
            dropped += y32[i] == 0.0f;
            assert_true(get16(dt, y16, i) == want);
        }
        assert_true(dropped > 0 && dropped < R * C);
    }
}

/* Positions added to y, PE from pow in float64 (an independent form of the
 * table); mean pooling's y against float64 means of the 16-bit x over each
 * sample's length, and its dx exactly round(dy / len) (one fp32 division,
 * rounded once), +0 past the length. */
static void test_sinusoid_mean_pool(void **state)
{
    const zt_backend *be = *state;
    enum { N = 2, T = 5, C = 6 };
    const int32_t lengths[N] = {5, 2};
    for (size_t d = 0; d < 2; d++) {
        zt_dtype dt = DTS[d];
        rng_seed(61 + d);
        float yf[N * T * C], xf[N * T * C], dyf[N * C];
        uint16_t y[N * T * C], x[N * T * C], dy[N * C], pooled[N * C], dx[N * T * C];
        fill16(dt, yf, y, N * T * C, -2, 2);
        fill16(dt, xf, x, N * T * C, -1, 3);
        fill16(dt, dyf, dy, N * C, -1, 1);
        be->sinusoid_add(be, dt, y, N, T, C);
        double ref[N * T * C];
        for (int s = 0; s < N; s++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j < C; j++) {
                    double w = pow(10000.0, -(double)(j - j % 2) / C);
                    double pe = j % 2 == 0 ? sin(i * w) : cos(i * w);
                    ref[(s * T + i) * C + j] = yf[(s * T + i) * C + j] + pe;
                }
        near16(dt, y, ref, N * T * C, "sinusoid_add y");
        be->mean_pool_forward(be, dt, pooled, x, lengths, N, T, C);
        be->mean_pool_backward(be, dt, dx, dy, lengths, N, T, C);
        double mref[N * C];
        for (int s = 0; s < N; s++)
            for (int j = 0; j < C; j++) {
                double m = 0.0;
                for (int i = 0; i < lengths[s]; i++)
                    m += xf[(s * T + i) * C + j];
                mref[s * C + j] = m / lengths[s];
                for (int i = 0; i < T; i++) {
                    uint16_t got = dx[(s * T + i) * C + j];
                    if (i >= lengths[s]) {
                        assert_int_equal(got, 0);
                        continue;
                    }
                    float q = (float)((double)dyf[s * C + j] / lengths[s]);
                    assert_true(get16(dt, dx, (s * T + i) * C + j) == round_to(dt, q));
                }
            }
        near16(dt, pooled, mref, N * C, "mean_pool_forward y");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_residual_layernorm),
        cmocka_unit_test(test_linear_gelu),
        cmocka_unit_test(test_xent),
        cmocka_unit_test(test_embedding_dropout),
        cmocka_unit_test(test_sinusoid_mean_pool),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
