/*
 * test_nn: what the tests of the CPU backend's ops (test_backend_*.c) share:
 * allocation and fill helpers, the gradient check against finite
 * differences, the typed (16-bit) checks, and the cmocka group setup that
 * makes the backend. Header-only (static inline), like test_rng.h: each test
 * program gets its own copy.
 *
 * Tolerances, stated per check: float32 forward values within ~1e-5 relative
 * to the scale of the terms; gradients within 1e-5 of the largest finite
 * difference of the tensor plus 1e-4 relative; ops whose result is one
 * correctly rounded float operation (copies, adds, dy / len, x * scale) exact.
 *
 * Typed ops (engine/backend.h, "Typed tensors") on bf16 and fp16 tensors are
 * compared bit for bit: the reference is the fp32 op run on the 16-bit
 * inputs widened (exactly), with its (dt) outputs, and the intermediates
 * the contract rounds, rounded to dt with engine/dtype.h's conversions; fp32
 * outputs (parameter gradients, statistics, the loss) must equal the fp32
 * op's. The 16-bit ops promise exactly that computation, so no tolerance.
 *
 * Memory: the xmalloc_*, dup_* and to_dt buffers are the caller's to free;
 * setup makes the backend (*state) and teardown frees it.
 */
#ifndef ZT_TEST_NN_H
#define ZT_TEST_NN_H

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
#include "engine/dtype.h"

static inline void fill_value(float *x, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
}

static inline float *xmalloc_floats(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

static inline double *xmalloc_doubles(int64_t n)
{
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

static inline float *dup_floats(const float *x, int64_t n)
{
    float *p = xmalloc_floats(n);
    memcpy(p, x, (size_t)n * sizeof *p);
    return p;
}

static inline double max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* Gradient check: analytic float values against finite differences. */
static inline void check_grad(const char *what, const float *analytic, const double *fd, int64_t n)
{
    double scale = max_abs(fd, n);
    for (int64_t i = 0; i < n; i++)
        if (fabs(analytic[i] - fd[i]) > 1e-5 * scale + 1e-4 * fabs(fd[i]) + 1e-12)
            fail_msg("%s[%ld]: analytic %.9g, finite difference %.9g", what, (long)i,
                     analytic[i], fd[i]);
}

/* OMP_NUM_THREADS at start, restored after tests that vary the thread count. */
static int default_threads;

static inline int setup(void **state)
{
    default_threads = omp_get_max_threads();
    zt_backend *be = calloc(1, sizeof *be);
    if (!be || zt_backend_cpu_init(be) != ZT_OK)
        return -1;
    *state = be;
    return 0;
}

static inline int teardown(void **state)
{
    zt_backend_free(*state);
    free(*state);
    return 0;
}

static inline double *to_double(const float *x, int64_t n)
{
    double *d = xmalloc_doubles(n);
    for (int64_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

/* The 16-bit dtypes every typed op is tested on. */
static const zt_dtype TYPED_DTS[] = {ZT_BF16, ZT_F16};
#define N_TYPED_DTS 2

static inline uint16_t dt_from_f32(zt_dtype dt, float x)
{
    return dt == ZT_BF16 ? zt_f32_to_bf16(x) : zt_f32_to_f16(x);
}

static inline float dt_to_f32(zt_dtype dt, uint16_t h)
{
    return dt == ZT_BF16 ? zt_bf16_to_f32(h) : zt_f16_to_f32(h);
}

static inline uint16_t *xmalloc_halves(int64_t n)
{
    uint16_t *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

/* x(n) rounded to dt in place: an fp32 reference's output or intermediate,
 * rounded where the typed op rounds it. */
static inline void round_dt(zt_dtype dt, float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = dt_to_f32(dt, dt_from_f32(dt, x[i]));
}

/* x(n) rounded to dt in place, returned as a new dt tensor: the typed op's
 * input, while x holds what it reads (the fp32 reference's input). */
static inline uint16_t *to_dt(zt_dtype dt, float *x, int64_t n)
{
    uint16_t *h = xmalloc_halves(n);
    for (int64_t i = 0; i < n; i++) {
        h[i] = dt_from_f32(dt, x[i]);
        x[i] = dt_to_f32(dt, h[i]);
    }
    return h;
}

/* The dt tensor got(n) holds ref(n) rounded to dt, bit for bit. */
static inline void assert_dt_equal(zt_dtype dt, const uint16_t *got, const float *ref, int64_t n,
                                   const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        uint16_t want = dt_from_f32(dt, ref[i]);
        if (got[i] != want)
            fail_msg("%s %s[%ld]: 0x%04x (%.9g), the fp32 op's %.9g rounds to 0x%04x",
                     zt_dtype_name(dt), what, (long)i, got[i], dt_to_f32(dt, got[i]), ref[i],
                     want);
    }
}

/* fp32 outputs of a typed op equal the fp32 op's, bit for bit. */
static inline void assert_f32_equal(const float *got, const float *ref, int64_t n,
                                    const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], sizeof got[i]) != 0)
            fail_msg("%s[%ld]: %.9g, the fp32 op's %.9g", what, (long)i, got[i], ref[i]);
}

#endif
