/*
 * test_backend_flash: the CPU backend's fused attention (attn_flash_forward and
 * attn_flash_backward) against a float64 reference of softmax attention
 * written here from the definitions: scores, masks (causal, key padding with a
 * zero-length sample), the keyed dropout mask drawn with zt_rng_uniform, the
 * output and log-sum-exp, and the analytic gradients of Q, K and V. t = 70
 * spans two query tiles (64 + 6), and the dropout key extent (80) is larger
 * than t, as for a short batch. Tolerance: |got - ref| <= 1e-5 (1 + |ref|),
 * fp32 sums of at most 70 terms of magnitude ~1. The op is also run at 1 and
 * 2 threads and on every ISA path this CPU runs (engine/cpu/cpu.h): results
 * must be bit-identical. The typed forms on bf16 and fp16 are compared bit
 * for bit with the fp32 op (test_nn.h).
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
#include "engine/rng.h"
#include "tests/unit/test_nn.h"
#include "tests/unit/test_rng.h"

enum { N = 3, H = 2, HS = 8, C = H * HS, T = 70, KEY = 80 };

typedef struct {
    bool causal;
    const int32_t *lengths;
    zt_dropout_desc drop;
} flash_case;

static int64_t allowed_of(const flash_case *fc, int64_t s, int64_t i)
{
    int64_t a = fc->causal ? i + 1 : T;
    if (fc->lengths && fc->lengths[s] < a)
        a = fc->lengths[s];
    return a;
}

/* The dropout factor of element (s, hh, i, j): 0 or 1 / (1 - p). */
static double drop_factor(const zt_dropout_desc *d, int64_t s, int64_t hh, int64_t i, int64_t j)
{
    if (d->p == 0.0f)
        return 1.0;
    uint64_t seed = zt_dropout_row_seed(d->seed, d->site, d->step, d->row_keys[s]);
    float u = zt_rng_uniform(seed, 0, (uint64_t)((hh * d->key_b + i) * d->key_c + j));
    return u >= d->p ? (double)(1.0f / (1.0f - d->p)) : 0.0;
}

static void check_close(const char *what, const float *got, const double *ref, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i]))))
            fail_msg("%s[%ld] = %.9g, reference %.9g", what, (long)i, got[i], ref[i]);
}

/* Reference forward and backward of one case; fills y, lse (n, h, t) and dqkv. */
static void reference(const flash_case *fc, const float *qkv, const float *dy, double *y,
                      double *lse, double *dqkv)
{
    const double scale = 1.0 / sqrt((double)HS);
    memset(y, 0, sizeof(double) * N * T * C);
    memset(lse, 0, sizeof(double) * N * H * T);
    memset(dqkv, 0, sizeof(double) * N * T * 3 * C);
    double p[T], dp[T];
    for (int64_t s = 0; s < N; s++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t i = 0; i < T; i++) {
                int64_t a = allowed_of(fc, s, i);
                if (a <= 0)
                    continue;
                const float *q = qkv + (s * T + i) * 3 * C + hh * HS;
                double mx = -INFINITY;
                for (int64_t j = 0; j < a; j++) {
                    const float *k = qkv + (s * T + j) * 3 * C + C + hh * HS;
                    double z = 0.0;
                    for (int64_t d = 0; d < HS; d++)
                        z += (double)q[d] * k[d];
                    p[j] = scale * z;
                    mx = p[j] > mx ? p[j] : mx;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < a; j++)
                    sum += exp(p[j] - mx);
                lse[(s * H + hh) * T + i] = mx + log(sum);
                for (int64_t j = 0; j < a; j++)
                    p[j] = exp(p[j] - mx) / sum;
                /* y = sum_j drop(p)_j v_j; dP_j = drop'(dy . v_j). */
                double *yi = y + (s * T + i) * C + hh * HS;
                const float *dyi = dy + (s * T + i) * C + hh * HS;
                double dot = 0.0;
                for (int64_t j = 0; j < a; j++) {
                    const float *v = qkv + (s * T + j) * 3 * C + 2 * C + hh * HS;
                    double f = drop_factor(&fc->drop, s, hh, i, j), g = 0.0;
                    for (int64_t d = 0; d < HS; d++) {
                        yi[d] += f * p[j] * v[d];
                        g += (double)dyi[d] * v[d];
                        dqkv[(s * T + j) * 3 * C + 2 * C + hh * HS + d] += f * p[j] * dyi[d];
                    }
                    dp[j] = f * g;
                    dot += dp[j] * p[j];
                }
                for (int64_t j = 0; j < a; j++) {
                    double ds = scale * p[j] * (dp[j] - dot);
                    const float *k = qkv + (s * T + j) * 3 * C + C + hh * HS;
                    for (int64_t d = 0; d < HS; d++) {
                        dqkv[(s * T + i) * 3 * C + hh * HS + d] += ds * k[d];
                        dqkv[(s * T + j) * 3 * C + C + hh * HS + d] += ds * q[d];
                    }
                }
            }
}

static void run_case(const zt_backend *be, const flash_case *fc)
{
    const float scale = 1.0f / sqrtf((float)HS);
    float *qkv = xmalloc_floats(N * T * 3 * C), *dy = xmalloc_floats(N * T * C);
    fill_uniform(qkv, N * T * 3 * C, -1.5f, 1.5f);
    fill_uniform(dy, N * T * C, -1, 1);
    int64_t wn = zt_attn_flash_work_numel(N, H, T, HS);
    float *work = xmalloc_floats(wn), *y = xmalloc_floats(N * T * C);
    float *lse = xmalloc_floats(N * H * T), *dqkv = xmalloc_floats(N * T * 3 * C);
    /* Stale values everywhere: the ops must assign every output. */
    fill_value(y, N * T * C, NAN);
    fill_value(lse, N * H * T, NAN);
    fill_value(dqkv, N * T * 3 * C, NAN);
    fill_value(work, wn, NAN);
    be->attn_flash_forward(be, ZT_F32, y, lse, work, qkv, N, H, T, C, scale, fc->causal, fc->lengths,
                           &fc->drop);
    be->attn_flash_backward(be, ZT_F32, dqkv, dy, y, lse, qkv, work, N, H, T, C, scale, fc->causal,
                            fc->lengths, &fc->drop);

    double *ry = xmalloc_doubles(N * T * C), *rl = xmalloc_doubles(N * H * T);
    double *rd = xmalloc_doubles(N * T * 3 * C);
    reference(fc, qkv, dy, ry, rl, rd);
    check_close("y", y, ry, N * T * C);
    check_close("lse", lse, rl, N * H * T);
    check_close("dqkv", dqkv, rd, N * T * 3 * C);

    /* Thread-count independence: one thread gives the same bits. */
    float *y1 = xmalloc_floats(N * T * C), *l1 = xmalloc_floats(N * H * T);
    float *d1 = xmalloc_floats(N * T * 3 * C);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    be->attn_flash_forward(be, ZT_F32, y1, l1, work, qkv, N, H, T, C, scale, fc->causal, fc->lengths,
                           &fc->drop);
    be->attn_flash_backward(be, ZT_F32, d1, dy, y1, l1, qkv, work, N, H, T, C, scale, fc->causal,
                            fc->lengths, &fc->drop);
    omp_set_num_threads(threads);
    assert_memory_equal(y1, y, sizeof(float) * N * T * C);
    assert_memory_equal(l1, lse, sizeof(float) * N * H * T);
    assert_memory_equal(d1, dqkv, sizeof(float) * N * T * 3 * C);

    /* ISA independence: every path this CPU runs gives the same bits. */
    const zt_cpu_isa in_use = zt_cpu_isa_get();
    for (int isa = 0; isa < ZT_CPU_ISA_COUNT; isa++) {
        if (!zt_cpu_isa_supported((zt_cpu_isa)isa))
            continue;
        assert_int_equal(zt_cpu_isa_set((zt_cpu_isa)isa), ZT_OK);
        be->attn_flash_forward(be, ZT_F32, y1, l1, work, qkv, N, H, T, C, scale, fc->causal,
                               fc->lengths, &fc->drop);
        be->attn_flash_backward(be, ZT_F32, d1, dy, y1, l1, qkv, work, N, H, T, C, scale, fc->causal,
                                fc->lengths, &fc->drop);
        assert_memory_equal(y1, y, sizeof(float) * N * T * C);
        assert_memory_equal(l1, lse, sizeof(float) * N * H * T);
        assert_memory_equal(d1, dqkv, sizeof(float) * N * T * 3 * C);
    }
    assert_int_equal(zt_cpu_isa_set(in_use), ZT_OK);
    free(y1);
    free(l1);
    free(d1);
    free(ry);
    free(rl);
    free(rd);
    free(qkv);
    free(dy);
    free(work);
    free(y);
    free(lse);
    free(dqkv);
}

static void test_flash(void **state)
{
    const zt_backend *be = *state;
    rng_seed(23);
    const int32_t lengths[N] = {T, 37, 0};
    const uint64_t row_keys[N] = {5, 11, 12};
    for (int causal = 0; causal < 2; causal++)
        for (int padded = 0; padded < 2; padded++)
            for (int dropped = 0; dropped < 2; dropped++) {
                flash_case fc = {
                    .causal = causal,
                    .lengths = padded ? lengths : NULL,
                    .drop = {.seed = 99, .site = 3, .step = 7, .row_keys = row_keys, .n = N,
                             .a = H, .b = T, .c = T, .key_b = KEY, .key_c = KEY,
                             .p = dropped ? 0.3f : 0.0f},
                };
                run_case(be, &fc);
            }
}

/* The fused op drops what the `dropout` op drops on the (n, h, t, t)
 * probabilities: its output equals the three-op path's (scores GEMM,
 * attn_softmax_forward, dropout, GEMM with V) within fp32 rounding. */
static void test_flash_matches_three_ops(void **state)
{
    const zt_backend *be = *state;
    rng_seed(29);
    const float scale = 1.0f / sqrtf((float)HS);
    const uint64_t row_keys[N] = {1, 2, 3};
    zt_dropout_desc d = {.seed = 5, .site = 1, .step = 2, .row_keys = row_keys, .n = N, .a = H,
                         .b = T, .c = T, .key_b = KEY, .key_c = KEY, .p = 0.25f};
    float *qkv = xmalloc_floats(N * T * 3 * C), *y = xmalloc_floats(N * T * C);
    float *y3 = xmalloc_floats(N * T * C), *lse = xmalloc_floats(N * H * T);
    float *work = xmalloc_floats(zt_attn_flash_work_numel(N, H, T, HS));
    float *att = xmalloc_floats(N * H * T * T);
    fill_uniform(qkv, N * T * 3 * C, -1, 1);
    be->attn_flash_forward(be, ZT_F32, y, lse, work, qkv, N, H, T, C, scale, true, NULL, &d);
    for (int64_t s = 0; s < N; s++)
        be->gemm_batched(be, false, true, T, T, HS, 1.0f, qkv + s * T * 3 * C, 3 * C, HS,
                         qkv + s * T * 3 * C + C, 3 * C, HS, 0.0f, att + s * H * T * T, T, T * T,
                         H);
    be->attn_softmax_forward(be, att, N, H, T, scale, true, NULL);
    be->dropout(be, ZT_F32, att, att, &d);
    for (int64_t s = 0; s < N; s++)
        be->gemm_batched(be, false, false, T, HS, T, 1.0f, att + s * H * T * T, T, T * T,
                         qkv + s * T * 3 * C + 2 * C, 3 * C, HS, 0.0f, y3 + s * T * C, C, HS, H);
    for (int64_t i = 0; i < N * T * C; i++)
        if (!(fabsf(y[i] - y3[i]) <= 1e-5f * (1.0f + fabsf(y3[i]))))
            fail_msg("y[%ld] fused %.9g three ops %.9g", (long)i, y[i], y3[i]);
    free(qkv);
    free(y);
    free(y3);
    free(lse);
    free(work);
    free(att);
}

/* Typed forms on bf16 and fp16 (test_nn.h): y rounded and lse equal to the
 * fp32 op's on the widened qkv; dqkv rounded from the fp32 backward on the
 * widened dy, qkv and the stored (rounded) y. t = 128 with c = 96 puts each
 * sample in its own block of the 16-bit path at one thread, two at three
 * threads: the blocks must not show. */
enum { TN = 3, TH = 2, TC = 96, TT = 128, TKEY = 140 };

static void check_flash_typed(const zt_backend *be, zt_dtype dt, const flash_case *fc)
{
    const float scale = 1.0f / sqrtf((float)(TC / TH));
    int64_t nq = TN * TT * 3 * TC, ny = TN * TT * TC, nl = TN * TH * TT;
    float *qkv = xmalloc_floats(nq), *dy = xmalloc_floats(ny), *y = xmalloc_floats(ny);
    float *lse = xmalloc_floats(nl), *lse16 = xmalloc_floats(nl), *dqkv = xmalloc_floats(nq);
    float *work = xmalloc_floats(zt_attn_flash_work_numel(TN, TH, TT, TC / TH));
    fill_uniform(qkv, nq, -1, 1);
    fill_uniform(dy, ny, -1, 1);
    uint16_t *qkv16 = to_dt(dt, qkv, nq), *dy16 = to_dt(dt, dy, ny);
    uint16_t *y16 = xmalloc_halves(ny), *dqkv16 = xmalloc_halves(nq);
    be->attn_flash_forward(be, ZT_F32, y, lse, work, qkv, TN, TH, TT, TC, scale, fc->causal,
                           fc->lengths, &fc->drop);
    float *y_stored = dup_floats(y, ny);
    round_dt(dt, y_stored, ny);
    be->attn_flash_backward(be, ZT_F32, dqkv, dy, y_stored, lse, qkv, work, TN, TH, TT, TC, scale,
                            fc->causal, fc->lengths, &fc->drop);
    for (int threads = 1; threads <= 3; threads += 2) {
        omp_set_num_threads(threads);
        be->attn_flash_forward(be, dt, y16, lse16, work, qkv16, TN, TH, TT, TC, scale,
                               fc->causal, fc->lengths, &fc->drop);
        assert_dt_equal(dt, y16, y, ny, "attn_flash_forward y");
        assert_f32_equal(lse16, lse, nl, "attn_flash_forward lse");
        be->attn_flash_backward(be, dt, dqkv16, dy16, y16, lse16, qkv16, work, TN, TH, TT, TC,
                                scale, fc->causal, fc->lengths, &fc->drop);
        assert_dt_equal(dt, dqkv16, dqkv, nq, "attn_flash_backward dqkv");
    }
    omp_set_num_threads(default_threads);
    free(qkv), free(dy), free(y), free(lse), free(lse16), free(dqkv), free(work), free(qkv16);
    free(dy16), free(y16), free(dqkv16), free(y_stored);
}

static void test_flash_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(31);
    const int32_t lengths[TN] = {TT, 70, 0};
    const uint64_t row_keys[TN] = {8, 3, 21};
    for (int d = 0; d < N_TYPED_DTS; d++)
        for (int v = 0; v < 8; v++) {
            flash_case fc = {
                .causal = v & 1,
                .lengths = v & 2 ? lengths : NULL,
                .drop = {.seed = 4, .site = 2, .step = 9, .row_keys = row_keys, .n = TN, .a = TH,
                         .b = TT, .c = TT, .key_b = TKEY, .key_c = TKEY,
                         .p = v & 4 ? 0.2f : 0.0f},
            };
            check_flash_typed(be, TYPED_DTS[d], &fc);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flash),
        cmocka_unit_test(test_flash_matches_three_ops),
        cmocka_unit_test(test_flash_typed),
    };
    return cmocka_run_group_tests_name("backend_flash", tests, setup, teardown);
}
