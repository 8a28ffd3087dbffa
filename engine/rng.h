/*
 * rng: the counter-based random numbers behind every draw in zerotrain.
 *
 * A draw is a pure function of (seed, stream, counter): no state, no rank. That
 * is what lets a run at N ranks, any stage and any accumulation split see the
 * same data and the same initial weights as a run at 1 rank. Other tools can
 * reproduce every draw from this definition:
 *
 *   mix(z):  z += 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
 *            z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31)
 *            (splitmix64's finaliser, all arithmetic mod 2^64)
 *   zt_rng_u64(seed, stream, i) = mix(mix(mix(seed) ^ stream) ^ i)
 *   zt_rng_uniform(seed, stream, i) = (zt_rng_u64(...) >> 40) * 2^-24, in [0, 1),
 *            exactly representable as float32.
 *
 * The functions are also device functions under nvcc (ZT_RNG_HD), so CUDA
 * kernels draw exactly the bits the host does.
 *
 * Memory: none. Collective: none.
 */
#ifndef ZT_RNG_H
#define ZT_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define ZT_RNG_HD __host__ __device__
#else
#define ZT_RNG_HD
#endif

/* Streams keep independent uses of one seed apart. */
enum {
    ZT_RNG_STREAM_INIT = 1,    /* parameter init, counter = global parameter index */
    ZT_RNG_STREAM_DATA = 2,    /* synthetic data, counter = sample * in_size + j */
    ZT_RNG_STREAM_SHUFFLE = 3, /* sampler permutation keys, counter = epoch */
    ZT_RNG_STREAM_DROPOUT = 4, /* dropout masks: zt_dropout_row_seed */
    ZT_RNG_STREAM_WINDOW = 5,  /* text window offsets, counter = sample index */
    ZT_RNG_STREAM_SAMPLE = 6   /* text generation, counter = generated token index */
};

static inline ZT_RNG_HD uint64_t zt_rng_mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline ZT_RNG_HD uint64_t zt_rng_u64(uint64_t seed, uint64_t stream, uint64_t i)
{
    return zt_rng_mix(zt_rng_mix(zt_rng_mix(seed) ^ stream) ^ i);
}

static inline ZT_RNG_HD float zt_rng_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    return (float)(zt_rng_u64(seed, stream, i) >> 40) * (1.0f / 16777216.0f);
}

/* Dropout (backend.h, zt_dropout_desc): the seed of one sample's mask at one
 * dropout site in one optimizer step. row_key is the sample's global position
 * in the training stream (step * train_batch + position in the batch). */
static inline ZT_RNG_HD uint64_t zt_dropout_row_seed(uint64_t seed, uint64_t site,
                                                     int64_t step, uint64_t row_key)
{
    return zt_rng_u64(seed, ZT_RNG_STREAM_DROPOUT,
                      zt_rng_mix(zt_rng_mix((uint64_t)step) ^ site) ^ row_key);
}

#endif
