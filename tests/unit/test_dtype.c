/*
 * test_dtype: the fp32/fp16/bf16 conversions and host reductions of
 * engine/dtype.c against references computed another way: values decoded and
 * rounded with double arithmetic (nearest representable, ties to even), and
 * gcc's own _Float16 conversion where the compiler has it. Rounding and
 * decoding must match bit for bit; the float64 sums of squares to 1e-12
 * relative; everything must be identical for 1 and 3 OpenMP threads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dtype.h"
#include "tests/unit/test_rng.h"

/* Above the library's one-thread threshold and not a multiple of its chunk. */
#define BIG_N ((int64_t)(1 << 20) + 4099)

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t rng_u32(void) { return (uint32_t)rng_uniform(0, 4294967296.0); }

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* ---- Double-based references ---- */

/* The fp16 value of bit pattern h, decoded from its fields. */
static double ref_f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0x1f)
        return m ? NAN : s * INFINITY;
    return e == 0 ? s * ldexp(m, -24) : s * ldexp(1024 + m, e - 25);
}

/* Nearest value with `bits` significant bits and exponent at least emin
 * (subnormals below), ties to even; +-inf from `overflow` on. v is finite. */
static double ref_round(double v, int bits, int emin, double overflow)
{
    if (v == 0)
        return v;
    int e;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    if (e - 1 < emin)
        e = emin + 1;
    double ulp = ldexp(1.0, e - bits);
    double q = v / ulp; /* exact: a power-of-two scaling */
    double r = floor(q), frac = q - r;
    if (frac > 0.5 || (frac == 0.5 && fmod(r, 2.0) != 0))
        r += 1;
    double out = copysign(r * ulp, v); /* keeps the sign of a zero result */
    return fabs(out) >= overflow ? copysign(INFINITY, v) : out;
}

/* fp16: 11 significant bits, min normal 2^-14, everything from the midpoint
 * between 65504 and 2^16 (65520) rounds to inf. */
static double ref_f16_round(float x) { return ref_round(x, 11, -14, 65520.0); }

/* bf16: 8 significant bits and fp32's exponent range; overflow at the
 * midpoint between the largest bf16 (2^128 - 2^120) and 2^128. */
static double ref_bf16_round(float x) { return ref_round(x, 8, -126, ldexp(1.0, 128) - ldexp(1.0, 119)); }

/* A double known to be exactly representable as float, compared bit for bit
 * (so -0 and +0 differ). */
static void assert_same_float(float got, double want)
{
    if (isnan(want)) {
        assert_true(isnan(got));
        return;
    }
    assert_int_equal(bits_of(got), bits_of((float)want));
}

/* ---- Tests ---- */

static void test_names_sizes(void **state)
{
    (void)state;
    assert_int_equal(zt_dtype_size(ZT_F32), 4);
    assert_int_equal(zt_dtype_size(ZT_F16), 2);
    assert_int_equal(zt_dtype_size(ZT_BF16), 2);
    assert_string_equal(zt_dtype_name(ZT_F32), "fp32");
    assert_string_equal(zt_dtype_name(ZT_F16), "fp16");
    assert_string_equal(zt_dtype_name(ZT_BF16), "bf16");
}

/* Every fp16 pattern widens to its value and narrows back unchanged; a NaN
 * stays a NaN with its sign and payload, quiet. */
static void test_f16_every_pattern(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = zt_f16_to_f32(h);
        uint16_t back = zt_f32_to_f16(f);
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan) {
            assert_true(isnan(f));
            assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
            assert_true(bits_of(f) & 0x00400000u); /* quiet */
            assert_int_equal(back, h | 0x0200);
        } else {
            assert_same_float(f, ref_f16_value(h));
            assert_int_equal(back, h);
        }
#ifdef __FLT16_MAX__
        _Float16 g;
        memcpy(&g, &h, sizeof g);
        if (nan)
            assert_true(isnan((float)g));
        else
            assert_int_equal(bits_of(f), bits_of((float)g));
#endif
    }
}

/* The same for bf16, whose widening is a shift. */
static void test_bf16_every_pattern(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = zt_bf16_to_f32(h);
        bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (nan) {
            assert_true(isnan(f));
            assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
            assert_int_equal(zt_f32_to_bf16(f), h | 0x0040);
        } else {
            assert_int_equal(bits_of(f), (uint32_t)h << 16);
            assert_int_equal(zt_f32_to_bf16(f), h);
        }
    }
}

static void check_f16_round(float x)
{
    uint16_t got = zt_f32_to_f16(x);
    if (isnan(x)) {
        /* NaN, quiet, sign and top payload bits kept */
        assert_int_equal(got & 0x7e00, 0x7e00);
        assert_int_equal(got & 0x01ff, (bits_of(x) >> 13) & 0x01ff);
        assert_int_equal((got & 0x8000) != 0, signbit(x) != 0);
        return;
    }
    assert_same_float(zt_f16_to_f32(got), ref_f16_round(x));
#ifdef __FLT16_MAX__
    _Float16 g = (_Float16)x;
    uint16_t want;
    memcpy(&want, &g, sizeof want);
    if (got != want)
        fail_msg("fp16(%a): got 0x%04x, _Float16 gives 0x%04x", (double)x, got, want);
#endif
}

static void check_bf16_round(float x)
{
    uint16_t got = zt_f32_to_bf16(x);
    if (isnan(x)) {
        assert_int_equal(got & 0x7fc0, 0x7fc0);
        assert_int_equal((got & 0x8000) != 0, signbit(x) != 0);
        return;
    }
    float back = zt_bf16_to_f32(got);
    double want = ref_bf16_round(x);
    if (bits_of(back) != bits_of((float)want))
        fail_msg("bf16(%a): got %a, want %a", (double)x, (double)back, want);
}

/* Values where rounding decides: ties both ways, the overflow threshold, the
 * subnormal range and its edges, signed zeros, inf and nan. */
static const float edge_values[] = {
    0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, -65504.0f, 65519.99f, 65520.0f, -65520.0f, 65536.0f,
    1e10f, FLT_MAX, -FLT_MAX, FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN, INFINITY, -INFINITY, NAN,
    -NAN,
    0x1p-24f,                  /* smallest fp16 subnormal */
    0x1p-25f,                  /* tie between 0 and it: 0 */
    0x1.000002p-25f,           /* just above the tie: rounds up */
    0x3p-25f,                  /* tie between 1 and 2 units: 2 */
    0x5p-25f,                  /* tie between 2 and 3 units: 2 */
    0x1p-14f,                  /* smallest normal */
    0x1p-14f - 0x1p-25f,       /* tie between the largest subnormal and it: it */
    0x1p-14f - 0x1p-24f,       /* largest subnormal */
    0x1.002p0f,                /* 1 + half an fp16 ulp: tie, to 1 */
    0x1.006p0f,                /* 1 + 1.5 ulp: tie, to 1 + 2 ulp */
    0x1.0020001p0f,            /* just above a tie */
    0x1.01p0f, 0x1.03p0f,      /* bf16 ties: to 1 and to 1 + 2 ulp */
    0x1.fffffep127f,           /* bf16: above the last midpoint, inf */
    0x1.fefffep127f,           /* bf16: just below it, the largest finite */
    0x1.ffp127f,               /* bf16: the midpoint itself: to even, inf */
    3.14159265f, -2.71828f, 1e-8f, 6e-8f, 3e-5f,
};

static void test_f32_to_f16_rounding(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof edge_values / sizeof edge_values[0]; i++)
        check_f16_round(edge_values[i]);
    assert_int_equal(zt_f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(zt_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(zt_f32_to_f16(-65520.0f), 0xfc00);
    assert_int_equal(zt_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(zt_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(zt_f32_to_f16(INFINITY), 0x7c00);

    rng_seed(11);
    for (int i = 0; i < 1000000; i++) {
        /* Any pattern at all, then exponents around fp16's range. */
        check_f16_round(float_of(rng_u32()));
        uint32_t near = (rng_u32() & 0x807fffffu) | ((uint32_t)(100 + rng_u32() % 46) << 23);
        check_f16_round(float_of(near));
    }
    /* Exact midpoints between neighbouring fp16 values, and one fp32 ulp
     * either side of each. */
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float mid = (float)((ref_f16_value((uint16_t)h) + ref_f16_value((uint16_t)(h + 1))) / 2);
        check_f16_round(mid);
        check_f16_round(-mid);
        check_f16_round(nextafterf(mid, 0.0f));
        check_f16_round(nextafterf(mid, INFINITY));
    }
}

static void test_f32_to_bf16_rounding(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof edge_values / sizeof edge_values[0]; i++)
        check_bf16_round(edge_values[i]);
    assert_int_equal(zt_f32_to_bf16(0x1.01p0f), 0x3f80);
    assert_int_equal(zt_f32_to_bf16(0x1.03p0f), 0x3f82);
    assert_int_equal(zt_f32_to_bf16(FLT_MAX), 0x7f80);
    assert_int_equal(zt_f32_to_bf16(0x1.fefffep127f), 0x7f7f);
    assert_int_equal(zt_f32_to_bf16(0x1.ffp127f), 0x7f80);
    assert_int_equal(zt_f32_to_bf16(-0.0f), 0x8000);

    rng_seed(12);
    for (int i = 0; i < 2000000; i++)
        check_bf16_round(float_of(rng_u32()));
    /* Midpoints: the low 16 bits exactly 0x8000, both parities. */
    for (int i = 0; i < 100000; i++) {
        uint32_t u = (rng_u32() & 0xffff0000u) | 0x8000u;
        check_bf16_round(float_of(u));
        check_bf16_round(float_of(u - 1));
        check_bf16_round(float_of(u + 1));
    }
}

/* ---- zt_convert_host ---- */

static float widen(const void *p, zt_dtype dt, int64_t i)
{
    if (dt == ZT_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == ZT_F16 ? zt_f16_to_f32(h) : zt_bf16_to_f32(h);
}

static void narrow(void *p, zt_dtype dt, int64_t i, float x)
{
    if (dt == ZT_F32)
        ((float *)p)[i] = x;
    else
        ((uint16_t *)p)[i] = dt == ZT_F16 ? zt_f32_to_f16(x) : zt_f32_to_bf16(x);
}

/* Random values of every magnitude the type holds, with a few signed zeros,
 * infinities and NaNs. */
static void fill(void *p, zt_dtype dt, int64_t n, double range)
{
    for (int64_t i = 0; i < n; i++) {
        double v = rng_uniform(-range, range) * ldexp(1.0, (int)rng_uniform(-20, 4));
        uint32_t pick = rng_u32() % 1000;
        if (pick == 0)
            v = -0.0;
        else if (pick == 1)
            v = INFINITY;
        else if (pick == 2)
            v = NAN;
        narrow(p, dt, i, (float)v);
    }
}

/* The elements must be identical, except that any NaN matches any NaN (which
 * NaN an addition of two NaNs returns depends on operand order). */
static void assert_same_elements(const void *got, const void *want, zt_dtype dt, int64_t n)
{
    size_t sz = zt_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        float g = widen(got, dt, i), w = widen(want, dt, i);
        if (isnan(g) && isnan(w))
            continue;
        if (memcmp((const char *)got + i * (int64_t)sz, (const char *)want + i * (int64_t)sz, sz))
            fail_msg("element %lld: got %a, want %a", (long long)i, (double)g, (double)w);
    }
}

/* Element by element: widen, scale, add in fp32, round once. */
static void convert_ref(void *dst, zt_dtype ddt, const void *src, zt_dtype sdt, int64_t n,
                        float alpha, bool accumulate)
{
    for (int64_t i = 0; i < n; i++) {
        float scaled = alpha * widen(src, sdt, i);
        float sum = scaled;
        if (accumulate)
            sum = widen(dst, ddt, i) + scaled;
        narrow(dst, ddt, i, sum);
    }
}

static void test_convert_pairs(void **state)
{
    (void)state;
    rng_seed(13);
    const int64_t sizes[] = {1, 7, 4095, 4097, 40000 + 13};
    const float alphas[] = {1.0f, -0.75f, 1.0f / 3.0f, 4096.0f};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        void *src = xmalloc((size_t)n * 4), *dst0 = xmalloc((size_t)n * 4);
        void *got = xmalloc((size_t)n * 4), *want = xmalloc((size_t)n * 4);
        for (int sdt = 0; sdt < ZT_NDTYPES; sdt++)
            for (int ddt = 0; ddt < ZT_NDTYPES; ddt++)
                for (int acc = 0; acc < 2; acc++)
                    for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++) {
                        /* 4096 * 70 overflows fp16 now and then. */
                        fill(src, sdt, n, 70.0);
                        fill(dst0, ddt, n, 70.0);
                        size_t bytes = (size_t)n * zt_dtype_size(ddt);
                        memcpy(got, dst0, bytes);
                        memcpy(want, dst0, bytes);
                        zt_convert_host(got, ddt, src, sdt, n, alphas[a], acc);
                        convert_ref(want, ddt, src, sdt, n, alphas[a], acc);
                        assert_same_elements(got, want, ddt, n);

                        if (sdt != ddt)
                            continue;
                        /* In place: dst == src. */
                        memcpy(got, src, bytes);
                        memcpy(want, src, bytes);
                        zt_convert_host(got, ddt, got, ddt, n, alphas[a], acc);
                        convert_ref(want, ddt, src, sdt, n, alphas[a], acc);
                        assert_same_elements(got, want, ddt, n);
                    }
        free(src);
        free(dst0);
        free(got);
        free(want);
    }
    /* n == 0 touches nothing. */
    zt_convert_host(NULL, ZT_F16, NULL, ZT_F32, 0, 2.0f, true);
}

/* Fixed values through every path: rounding, overflow to inf, -0 kept. */
static void test_convert_values(void **state)
{
    (void)state;
    const float src[] = {1.0f, -0.0f, 70000.0f, 0x1p-25f, 0x1.006p0f, 3.0f};
    uint16_t h[6];
    zt_convert_host(h, ZT_F16, src, ZT_F32, 6, 1.0f, false);
    const uint16_t want_h[] = {0x3c00, 0x8000, 0x7c00, 0x0000, 0x3c02, 0x4200};
    assert_memory_equal(h, want_h, sizeof h);
    /* 1 + 2^-11 accumulated into fp16 1.0: the fp32 sum is the tie, which
     * rounds to 1.0; six times over still 1.0 (each addition rounds). */
    uint16_t one = 0x3c00;
    float tiny = 0x1p-11f;
    for (int i = 0; i < 6; i++)
        zt_convert_host(&one, ZT_F16, &tiny, ZT_F32, 1, 1.0f, true);
    assert_int_equal(one, 0x3c00);
    /* Scaled down into bf16 and back up into fp32 with accumulate. */
    uint16_t b[6];
    zt_convert_host(b, ZT_BF16, src, ZT_F32, 6, 0.5f, false);
    float f[6] = {1, 1, 1, 1, 1, 1};
    zt_convert_host(f, ZT_F32, b, ZT_BF16, 6, 2.0f, true);
    assert_true(f[0] == 2.0f && f[1] == 1.0f && f[2] == 1.0f + 70144.0f && f[5] == 4.0f);
}

static void test_convert_threads(void **state)
{
    (void)state;
    int threads = omp_get_max_threads();
    rng_seed(14);
    int64_t n = BIG_N;
    void *src = xmalloc((size_t)n * 4), *dst0 = xmalloc((size_t)n * 4);
    void *one = xmalloc((size_t)n * 4), *three = xmalloc((size_t)n * 4);
    for (int sdt = 0; sdt < ZT_NDTYPES; sdt++)
        for (int ddt = 0; ddt < ZT_NDTYPES; ddt++)
            for (int acc = 0; acc < 2; acc++) {
                fill(src, sdt, n, 100.0);
                fill(dst0, ddt, n, 100.0);
                size_t bytes = (size_t)n * zt_dtype_size(ddt);
                memcpy(one, dst0, bytes);
                memcpy(three, dst0, bytes);
                omp_set_num_threads(1);
                zt_convert_host(one, ddt, src, sdt, n, 0.625f, acc);
                omp_set_num_threads(3);
                zt_convert_host(three, ddt, src, sdt, n, 0.625f, acc);
                omp_set_num_threads(threads);
                assert_memory_equal(one, three, bytes);
            }
    free(src);
    free(dst0);
    free(one);
    free(three);
}

/* ---- Reductions ---- */

/* The documented order of zt_sum_squares_host: 4096-element chunks, each
 * summed in eight interleaved float64 accumulators combined pairwise, then
 * the chunk sums in index order. Pinned so sums stay what they were. */
static double sum_squares_order_ref(const float *x, int64_t n)
{
    double total = 0.0;
    for (int64_t lo = 0; lo < n; lo += 4096) {
        int64_t len = n - lo < 4096 ? n - lo : 4096;
        double acc[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= len; i += 8)
            for (int j = 0; j < 8; j++)
                acc[j] += (double)x[lo + i + j] * (double)x[lo + i + j];
        for (; i < len; i++)
            acc[0] += (double)x[lo + i] * (double)x[lo + i];
        total += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    return total;
}

static void test_sum_squares(void **state)
{
    (void)state;
    int threads = omp_get_max_threads();
    rng_seed(15);
    const int64_t sizes[] = {0, 1, 7, 4095, 4096, 4097, 3 * 4096 * 256 + 17};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *wide = xmalloc((size_t)n * sizeof *wide);
        void *x = xmalloc((size_t)n * 4);
        for (int dt = 0; dt < ZT_NDTYPES; dt++) {
            for (int64_t i = 0; i < n; i++)
                narrow(x, dt, i, (float)rng_uniform(-3, 3));
            double ref = 0.0;
            for (int64_t i = 0; i < n; i++) {
                wide[i] = widen(x, dt, i);
                ref += (double)wide[i] * wide[i];
            }
            double got = zt_sum_squares_host(x, dt, n);
            assert_true(fabs(got - ref) <= 1e-12 * ref);
            double ordered = sum_squares_order_ref(wide, n);
            assert_memory_equal(&got, &ordered, sizeof got);
            omp_set_num_threads(1);
            double one = zt_sum_squares_host(x, dt, n);
            omp_set_num_threads(3);
            double three = zt_sum_squares_host(x, dt, n);
            omp_set_num_threads(threads);
            assert_memory_equal(&one, &got, sizeof got);
            assert_memory_equal(&three, &got, sizeof got);
        }
        free(wide);
        free(x);
    }
    /* Squares that overflow fp32 still sum finitely. */
    float big[2] = {0x1p100f, -0x1p101f};
    assert_true(zt_sum_squares_host(big, ZT_F32, 2) == ldexp(5.0, 200));
    /* fp16 65504^2 exceeds fp16 and fp32 would not: the sum is in float64. */
    uint16_t h[2] = {0x7bff, 0xfbff};
    assert_true(zt_sum_squares_host(h, ZT_F16, 2) == 2.0 * 65504.0 * 65504.0);
}

static void test_has_inf_nan(void **state)
{
    (void)state;
    rng_seed(16);
    /* The largest finite value of each type stays "finite". */
    const float largest[ZT_NDTYPES] = {FLT_MAX, 65504.0f, 0x1.fep127f};
    const float bad[] = {INFINITY, -INFINITY, NAN, -NAN};
    const int64_t sizes[] = {1, 9, 100003};
    for (int dt = 0; dt < ZT_NDTYPES; dt++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t n = sizes[s];
            void *x = xmalloc((size_t)n * 4);
            for (int64_t i = 0; i < n; i++)
                narrow(x, dt, i, (float)rng_uniform(-60000, 60000));
            narrow(x, dt, 0, -largest[dt]);
            narrow(x, dt, n - 1, 0x1p-24f); /* a subnormal in fp16 */
            assert_false(zt_has_inf_nan_host(x, dt, n));
            const int64_t where[] = {0, n / 2, n - 1};
            for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
                for (size_t w = 0; w < 3; w++) {
                    float keep = widen(x, dt, where[w]);
                    narrow(x, dt, where[w], bad[b]);
                    assert_true(zt_has_inf_nan_host(x, dt, n));
                    narrow(x, dt, where[w], keep);
                }
            assert_false(zt_has_inf_nan_host(x, dt, n));
            free(x);
        }
    /* fp16 overflow shows up only once narrowed. */
    uint16_t h = zt_f32_to_f16(70000.0f);
    assert_true(zt_has_inf_nan_host(&h, ZT_F16, 1));
    assert_false(zt_has_inf_nan_host(NULL, ZT_BF16, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_sizes),
        cmocka_unit_test(test_f16_every_pattern),
        cmocka_unit_test(test_bf16_every_pattern),
        cmocka_unit_test(test_f32_to_f16_rounding),
        cmocka_unit_test(test_f32_to_bf16_rounding),
        cmocka_unit_test(test_convert_pairs),
        cmocka_unit_test(test_convert_values),
        cmocka_unit_test(test_convert_threads),
        cmocka_unit_test(test_sum_squares),
        cmocka_unit_test(test_has_inf_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
