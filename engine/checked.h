/*
 * checked: element and byte counts that cannot wrap. Sizes come from user
 * flags and configs, so a product of them may exceed what int64_t or size_t
 * holds; every count of elements or bytes is computed through these, and an
 * overflow is refused with a message instead of allocating a wrapped size.
 *
 * Memory: none. Collective: none.
 */
#ifndef ZT_CHECKED_H
#define ZT_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* *out = a * b; false (out unspecified) when it does not fit in int64_t or a
 * factor is negative. */
static inline bool zt_checked_mul(int64_t a, int64_t b, int64_t *out)
{
    return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, out);
}

/* *out = a + b for counts >= 0; false when it does not fit. */
static inline bool zt_checked_add(int64_t a, int64_t b, int64_t *out)
{
    return a >= 0 && b >= 0 && !__builtin_add_overflow(a, b, out);
}

/* *out = n * m * elem bytes; false when any step overflows size_t or int64_t. */
static inline bool zt_checked_bytes(int64_t n, int64_t m, size_t elem, size_t *out)
{
    int64_t nm;
    size_t bytes;
    if (!zt_checked_mul(n, m, &nm) || __builtin_mul_overflow((size_t)nm, elem, &bytes))
        return false;
    *out = bytes;
    return true;
}

/* a + b, or INT64_MAX when that overflows: for limits where "more than
 * anything" is the answer. */
static inline int64_t zt_saturating_add(int64_t a, int64_t b)
{
    int64_t s;
    return __builtin_add_overflow(a, b, &s) ? INT64_MAX : s;
}

#endif
