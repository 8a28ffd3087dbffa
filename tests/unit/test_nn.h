/*
 * test_nn: what the tests of the CPU backend's transformer-layer ops
 * (test_backend_nn*.c) share: allocation and fill helpers, the gradient check
 * against finite differences, and the cmocka group setup that makes the
 * backend. Header-only (static inline), like test_rng.h: each test program
 * gets its own copy.
 *
 * Tolerances, stated per check: float32 forward values within ~1e-5 relative
 * to the scale of the terms; gradients within 1e-5 of the largest finite
 * difference of the tensor plus 1e-4 relative; ops whose result is one
 * correctly rounded float operation (copies, adds, dy / len, x * scale) exact.
 *
 * Memory: the xmalloc_* and dup_* buffers are the caller's to free; setup
 * makes the backend (*state) and teardown frees it.
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

#endif
