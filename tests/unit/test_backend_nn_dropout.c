/*
 * test_backend_nn_dropout: the CPU backend's keyed dropout, its masks against
 * engine/rng.h's definition (independent of padding, rank and thread count),
 * its typed form on bf16 and fp16 bit for bit against the fp32 op, and mean
 * pooling against a double-precision reference, its typed forms bit for bit
 * against the fp32 ops. Tolerances: test_nn.h.
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
#include "engine/rng.h"

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
    be->dropout(be, ZT_F32, y, x, &d);
    assert_memory_equal(y, x, (size_t)total * sizeof *x);
    be->dropout(be, ZT_F32, y, y, &d);
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
    be->dropout(be, ZT_F32, y, x, &d);

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
    be->dropout(be, ZT_F32, y2, x, &d);
    assert_memory_equal(y2, y, (size_t)total * sizeof *y);
    memcpy(y2, x, (size_t)total * sizeof *y2);
    be->dropout(be, ZT_F32, y2, y2, &d);
    assert_memory_equal(y2, y, (size_t)total * sizeof *y);
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        be->dropout(be, ZT_F32, y2, x, &d);
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
    be->dropout(be, ZT_F32, y, x, d);
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
    be->dropout(be, ZT_F32, y, x, &d);
    be->dropout(be, ZT_F32, dx, dy, &d);
    const float scale = 1.0f / (1.0f - d.p);
    for (int64_t i = 0; i < total; i++) {
        assert_true((y[i] == 0.0f) == (dx[i] == 0.0f));
        assert_true(dx[i] == (y[i] == 0.0f ? 0.0f : dy[i] * scale));
    }
    /* In place on the gradient, as the layers call it. */
    be->dropout(be, ZT_F32, dy, dy, &d);
    assert_memory_equal(dy, dx, (size_t)total * sizeof *dx);

    /* A non-finite value at a dropped position stays visible (x * 0 = NaN,
     * as in torch), so the overflow check still sees it. */
    int64_t dropped = 0;
    while (dropped < total && y[dropped] != 0.0f)
        dropped++;
    assert_true(dropped < total);
    x[dropped] = INFINITY;
    be->dropout(be, ZT_F32, y, x, &d);
    assert_true(isnan(y[dropped]));
    free(x);
    free(y);
    free(dy);
    free(dx);
}


/* Typed dropout on bf16 and fp16 (test_nn.h): the fp32 op on the widened x,
 * rounded, into its own tensor and in place (y == x), at 1 and 3 threads;
 * p == 0 a copy. 2 x 3 x 40 rows of 300 span two of the op's row blocks,
 * and inf and NaN inputs must come out as the fp32 op's do, rounded. */
static void test_dropout_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(26);
    const uint64_t keys[2] = {77, 1ull << 33};
    for (int dti = 0; dti < N_TYPED_DTS; dti++)
        for (int zero_p = 0; zero_p < 2; zero_p++) {
            zt_dtype dt = TYPED_DTS[dti];
            zt_dropout_desc d = {.seed = 8, .site = 5, .step = 11, .row_keys = keys, .n = 2,
                                 .a = 3, .b = 40, .c = 300, .key_b = 50, .key_c = 320,
                                 .p = zero_p ? 0.0f : 0.3f};
            int64_t total = desc_numel(&d);
            float *x = xmalloc_floats(total), *y = xmalloc_floats(total);
            fill_uniform(x, total, -2, 2);
            x[1] = INFINITY;
            x[2] = -NAN;
            x[total - 1] = -0.0f;
            uint16_t *x16 = to_dt(dt, x, total), *y16 = xmalloc_halves(total);
            be->dropout(be, ZT_F32, y, x, &d);
            for (int threads = 1; threads <= 3; threads += 2) {
                omp_set_num_threads(threads);
                be->dropout(be, dt, y16, x16, &d);
                assert_dt_equal(dt, y16, y, total, "dropout y");
                memcpy(y16, x16, (size_t)total * sizeof *y16);
                be->dropout(be, dt, y16, y16, &d);
                assert_dt_equal(dt, y16, y, total, "dropout y (y == x)");
            }
            omp_set_num_threads(default_threads);
            free(x);
            free(y);
            free(x16);
            free(y16);
        }
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
    be->mean_pool_forward(be, ZT_F32, y, x, lengths, n, t, cols);
    be->mean_pool_backward(be, ZT_F32, dx, dy, lengths, n, t, cols);
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

/* Typed mean pooling on bf16 and fp16 (test_nn.h): y and dx are the fp32
 * ops' on the widened x and dy, rounded (dx's zeros stay zeros), at 1 and 3
 * threads. 8 x 64 x 300 spans several of the forward's blocks at 1 thread,
 * 3 x 40 x 1000 several of the backward's (a sample a block). */
static void check_mean_pool_typed(const zt_backend *be, zt_dtype dt, int64_t n, int64_t t,
                                  int64_t cols, const int32_t *lengths)
{
    int64_t nx = n * t * cols, ny = n * cols;
    float *x = xmalloc_floats(nx), *y = xmalloc_floats(ny);
    float *dy = xmalloc_floats(ny), *dx = xmalloc_floats(nx);
    fill_uniform(x, nx, -1, 3);
    fill_uniform(dy, ny, -1, 1);
    uint16_t *x16 = to_dt(dt, x, nx), *dy16 = to_dt(dt, dy, ny);
    uint16_t *y16 = xmalloc_halves(ny), *dx16 = xmalloc_halves(nx);
    be->mean_pool_forward(be, ZT_F32, y, x, lengths, n, t, cols);
    be->mean_pool_backward(be, ZT_F32, dx, dy, lengths, n, t, cols);
    for (int threads = 1; threads <= 3; threads += 2) {
        omp_set_num_threads(threads);
        memset(y16, 0xff, (size_t)ny * sizeof *y16); /* NaN: every element assigned */
        memset(dx16, 0xff, (size_t)nx * sizeof *dx16);
        be->mean_pool_forward(be, dt, y16, x16, lengths, n, t, cols);
        be->mean_pool_backward(be, dt, dx16, dy16, lengths, n, t, cols);
        assert_dt_equal(dt, y16, y, ny, "mean_pool_forward y");
        assert_dt_equal(dt, dx16, dx, nx, "mean_pool_backward dx");
    }
    omp_set_num_threads(default_threads);
    free(x);
    free(y);
    free(dy);
    free(dx);
    free(x16);
    free(dy16);
    free(y16);
    free(dx16);
}

static void test_mean_pool_typed(void **state)
{
    const zt_backend *be = *state;
    rng_seed(24);
    const int32_t lengths[3] = {6, 1, 3}, long_lengths[8] = {64, 1, 2, 63, 32, 17, 64, 5};
    const int32_t wide_lengths[3] = {40, 1, 22};
    for (int d = 0; d < N_TYPED_DTS; d++) {
        zt_dtype dt = TYPED_DTS[d];
        check_mean_pool_typed(be, dt, 3, 6, 10, lengths);
        check_mean_pool_typed(be, dt, 3, 6, 10, NULL);
        check_mean_pool_typed(be, dt, 8, 64, 300, long_lengths);
        check_mean_pool_typed(be, dt, 8, 64, 300, NULL);
        check_mean_pool_typed(be, dt, 3, 40, 1000, wide_lengths);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropout_zero_p),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_dropout_padding_and_rank),
        cmocka_unit_test(test_dropout_keys_differ),
        cmocka_unit_test(test_dropout_backward),
        cmocka_unit_test(test_dropout_typed),
        cmocka_unit_test(test_mean_pool),
        cmocka_unit_test(test_mean_pool_typed),
    };
    return cmocka_run_group_tests_name("backend_nn_dropout", tests, setup, teardown);
}
