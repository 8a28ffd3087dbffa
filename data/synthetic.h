/*
 * synthetic: the benchmark MLP's data (models.md §1), reproducible by anyone:
 *
 *   x[i][j] = -10 + 20 * zt_rng_uniform(seed, ZT_RNG_STREAM_DATA, i * in + j)
 *             (float32 arithmetic; see engine/rng.h for the generator)
 *   y[i]    = floor(sum_j (double)x[i][j]^2) mod out   (sum in order of j)
 *
 * Memory: none beyond the zt_dataset value. Collective: none.
 */
#ifndef ZT_SYNTHETIC_H
#define ZT_SYNTHETIC_H

#include "data/dataset.h"

#define ZT_SYNTHETIC_DEFAULT_SAMPLES 65536

void zt_synthetic_init(zt_dataset *ds, int64_t n_samples, int64_t in_size, int64_t n_classes,
                       uint64_t seed);

#endif
