/*
 * test_rng: reproducible test inputs (xorshift64*) without libc rand's global
 * state, shared by the unit tests. Header-only: each test program has its own
 * generator state.
 */
#ifndef ZT_TEST_RNG_H
#define ZT_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state = 1;

static inline void rng_seed(uint64_t seed) { rng_state = seed * 0x9E3779B97F4A7C15ull + 1; }

static inline double rng_uniform(double lo, double hi)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return lo + (hi - lo) * (double)(r >> 11) * 0x1.0p-53;
}

static inline void fill_uniform(float *x, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)rng_uniform(lo, hi);
}

#endif
